/* Result strings, the per-thread last error and logging. Logging settings are read once
 * from the environment; after that nothing here is mutable but thread-local text. */
#include "err.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "param.h"

static _Thread_local char thread_error[1024];

static struct {
  int level;
  int subsys;
  int64_t wait_report_ms;
  FILE *out;
  char host[64];
} log_cfg;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static int parse_subsys(const char *s) {
  static const struct {
    const char *name;
    int bit;
  } names[] = {{"INIT", WEFT_SUB_INIT}, {"BOOT", WEFT_SUB_BOOT}, {"NET", WEFT_SUB_NET},
               {"SHM", WEFT_SUB_SHM},   {"COLL", WEFT_SUB_COLL}, {"TUNE", WEFT_SUB_TUNE},
               {"ALL", WEFT_SUB_ALL}};
  int mask = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", s);
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
      if (strcasecmp(tok, names[i].name) == 0) mask |= names[i].bit;
  return mask ? mask : WEFT_SUB_ALL;
}

static void log_init(void) {
  const char *lvl = weft_param_get_str(WEFT_PARAM_DEBUG);
  log_cfg.level = WEFT_LOG_NONE;
  if (strcasecmp(lvl, "WARN") == 0) log_cfg.level = WEFT_LOG_WARN;
  if (strcasecmp(lvl, "INFO") == 0) log_cfg.level = WEFT_LOG_INFO;
  if (strcasecmp(lvl, "TRACE") == 0) log_cfg.level = WEFT_LOG_TRACE;
  log_cfg.subsys = parse_subsys(weft_param_get_str(WEFT_PARAM_DEBUG_SUBSYS));
  log_cfg.wait_report_ms = weft_param_get_int(WEFT_PARAM_WAIT_REPORT_S) * 1000;
  log_cfg.out = stderr;
  const char *path = weft_param_get_str(WEFT_PARAM_DEBUG_FILE);
  if (path[0]) {
    /* %h and %p expand to host and pid, so every rank can get its own file. */
    char name[512];
    size_t o = 0;
    gethostname(log_cfg.host, sizeof log_cfg.host - 1);
    for (const char *p = path; *p && o < sizeof name - 32; p++) {
      if (p[0] == '%' && p[1] == 'p') {
        o += (size_t)snprintf(name + o, sizeof name - o, "%d", (int)getpid());
        p++;
      } else if (p[0] == '%' && p[1] == 'h') {
        o += (size_t)snprintf(name + o, sizeof name - o, "%s", log_cfg.host);
        p++;
      } else {
        name[o++] = *p;
      }
    }
    name[o] = 0;
    FILE *f = fopen(name, "a");
    if (f) log_cfg.out = f;
  }
  gethostname(log_cfg.host, sizeof log_cfg.host - 1);
}

int weft_log_enabled(int level, int subsys) {
  pthread_once(&log_once, log_init);
  return level <= log_cfg.level && (subsys & log_cfg.subsys);
}

int64_t weft_log_wait_report_ms(void) {
  pthread_once(&log_once, log_init);
  return log_cfg.wait_report_ms;
}

void weft_log(int level, int subsys, const char *file, int line, const char *fmt, ...) {
  if (level & WEFT_LOG_FORCE) {
    level &= ~WEFT_LOG_FORCE;
    pthread_once(&log_once, log_init);
    if (!(subsys & log_cfg.subsys)) return;
  } else if (!weft_log_enabled(level, subsys)) {
    return;
  }
  static const char *names[] = {"", "WARN", "INFO", "TRACE"};
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = strrchr(file, '/');
  fprintf(log_cfg.out, "%s:%d weft %s %s:%d %s\n", log_cfg.host, (int)getpid(), names[level],
          base ? base + 1 : file, line, msg);
  fflush(log_cfg.out);
}

weft_result_t weft_set_error(weft_result_t r, const char *fmt, ...) {
  /* formatted aside first: a message often quotes the last one (weft_thread_error()), and
   * printing a buffer into itself is undefined (it garbled such messages) */
  char msg[sizeof thread_error];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  memcpy(thread_error, msg, sizeof msg);
  WEFT_WARN(WEFT_SUB_ALL, "%s: %s", weft_result_string(r), thread_error);
  return r;
}

const char *weft_thread_error(void) { return thread_error; }

const char *weft_result_string(weft_result_t r) {
  switch (r) {
  case WEFT_SUCCESS: return "success";
  case WEFT_ERR_INVALID_ARG: return "invalid argument";
  case WEFT_ERR_NO_MEMORY: return "out of memory";
  case WEFT_ERR_SYSTEM: return "system call failed";
  case WEFT_ERR_TIMEOUT: return "timed out";
  case WEFT_ERR_PEER_LOST: return "peer lost";
  case WEFT_ERR_PROTOCOL: return "protocol violation";
  case WEFT_ERR_MISMATCH: return "mismatched operations";
  case WEFT_ERR_ABORTED: return "aborted";
  case WEFT_ERR_UNSUPPORTED: return "unsupported";
  case WEFT_ERR_INTERNAL: return "internal error";
  case WEFT_ERR_IN_PROGRESS: return "in progress";
  }
  return "unknown result";
}

int weft_get_version(void) { return WEFT_VERSION_CODE; }
