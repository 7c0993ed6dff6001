/* Error reporting for the whole library: a per-thread last-error message, the CHECK
 * macros that log file:line on the way out (a readable pseudo-backtrace at TRACE level),
 * and logging with a level and a subsystem filter (WEFT_DEBUG, WEFT_DEBUG_SUBSYS). */
#ifndef WEFT_ERR_H
#define WEFT_ERR_H

#include "weft.h"

enum weft_log_level { WEFT_LOG_NONE = 0, WEFT_LOG_WARN, WEFT_LOG_INFO, WEFT_LOG_TRACE };
/* Or'ed into a level: the line is written whatever WEFT_DEBUG says (WEFT_DEBUG_SUBSYS still
 * filters it), for what a user must see unasked: a wait that lasts (waitlog.h). */
#define WEFT_LOG_FORCE 0x100
enum weft_subsys {
  WEFT_SUB_INIT = 1 << 0,
  WEFT_SUB_BOOT = 1 << 1,
  WEFT_SUB_NET = 1 << 2,
  WEFT_SUB_SHM = 1 << 3,
  WEFT_SUB_COLL = 1 << 4,
  WEFT_SUB_TUNE = 1 << 5,
  WEFT_SUB_ALL = 0xff
};

void weft_log(int level, int subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
int weft_log_enabled(int level, int subsys);
/* WEFT_WAIT_REPORT_S in ms (0: no wait reports), read once with the other log settings. */
int64_t weft_log_wait_report_ms(void);

#define WEFT_WARN(sub, ...)  weft_log(WEFT_LOG_WARN, sub, __FILE__, __LINE__, __VA_ARGS__)
#define WEFT_INFO(sub, ...)  weft_log(WEFT_LOG_INFO, sub, __FILE__, __LINE__, __VA_ARGS__)
#define WEFT_TRACE(sub, ...) weft_log(WEFT_LOG_TRACE, sub, __FILE__, __LINE__, __VA_ARGS__)

/* Records msg as the calling thread's last error and returns r. */
weft_result_t weft_set_error(weft_result_t r, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
const char *weft_thread_error(void);

#define CHECK(call)                                                                                \
  do {                                                                                             \
    weft_result_t check_rc_ = (call);                                                              \
    if (check_rc_ != WEFT_SUCCESS) {                                                               \
      WEFT_TRACE(WEFT_SUB_ALL, "-> %s", weft_result_string(check_rc_));                            \
      return check_rc_;                                                                            \
    }                                                                                              \
  } while (0)

/* Sets rc and jumps to label on failure, so the caller's cleanup runs. */
#define CHECK_GOTO(call, rc, label)                                                                \
  do {                                                                                             \
    (rc) = (call);                                                                                 \
    if ((rc) != WEFT_SUCCESS) {                                                                    \
      WEFT_TRACE(WEFT_SUB_ALL, "-> %s", weft_result_string(rc));                                   \
      goto label;                                                                                  \
    }                                                                                              \
  } while (0)

#define ERR_GOTO(rc, label, code, ...)                                                             \
  do {                                                                                             \
    (rc) = weft_set_error((code), __VA_ARGS__);                                                    \
    goto label;                                                                                    \
  } while (0)

#endif
