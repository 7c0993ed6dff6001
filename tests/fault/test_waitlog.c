/* Waiting out loud (src/util/waitlog.c): with WEFT_WAIT_REPORT_S=1 and WEFT_DEBUG unset, a rank
 * that waits says so on stderr every second until its timeout, naming whom it waits for.
 *   init: rank 0 of 2 alone (env init, it hosts the root): the root names rank 1 as missing
 *         and the rank says it waits at the root; rank 1 of 2 alone: it names the root's
 *         address it cannot reach. Then the init's error.
 *   split: rank 1 of 2 comes 2.5 s late to weft_comm_split: rank 0 names it (a bootstrap
 *         allgather), then both go on.
 *   op:   3 ranks, rank 2 never enters the allreduce: ranks 0 and 1 name it, then time out.
 * Each rank's stderr goes to a file that the parent reads (WEFT_TEST_VERBOSE=1 prints them).
 * usage: test_waitlog init|split|op [shm|tcp] */
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch.h"
#include "weft.h"

enum { N = 3, LATE = 2 };

/* 3.5 s, times WEFT_TEST_TIME_SCALE (the sanitizer runs): room for 2 reports a second apart */
static int timeout_ms;

typedef struct {
  int done[N];
} shared_t;

static shared_t *sh;
static char dir[64];

static void stderr_to(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd >= 0) {
    dup2(fd, 2);
    close(fd);
  }
}

static char *slurp(const char *name) {
  char path[128];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "r");
  if (!f) return calloc(1, 1);
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  return strdup(buf);
}

/* Counts the wait reports: WARN lines holding every one of the words. */
static int reports(const char *text, const char *const *words, int nwords) {
  int count = 0;
  for (const char *line = text; *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char one[1024];
    snprintf(one, sizeof one, "%.*s", (int)len, line);
    int ok = strstr(one, " weft WARN ") && strstr(one, "left before the timeout");
    for (int i = 0; ok && i < nwords; i++)
      ok = strstr(one, words[i]) != NULL;
    count += ok;
    line += len + (end != NULL);
  }
  return count;
}

/* A line after the last wait report holds the words: the error comes after the reports. */
static int error_after_reports(const char *text, const char *words) {
  const char *last = text, *p;
  while ((p = strstr(last, "left before the timeout")))
    last = p + 1;
  return strstr(last, words) != NULL;
}

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 ||
      getsockname(s, (struct sockaddr *)&a, &len) != 0)
    return 29517;
  close(s);
  return ntohs(a.sin_port);
}

/* One rank of 2 started from the environment; the other never comes. */
static void alone(int rank, int port) {
  pid_t pid = fork();
  if (pid != 0) {
    int st;
    waitpid(pid, &st, 0);
    return;
  }
  char name[32], root[64];
  snprintf(name, sizeof name, "alone%d.err", rank);
  stderr_to(name);
  snprintf(root, sizeof root, "127.0.0.1:%d", port);
  snprintf(name, sizeof name, "%d", rank);
  setenv("WEFT_ROOT", root, 1);
  setenv("WEFT_RANK", name, 1);
  setenv("WEFT_NRANKS", "2", 1);
  weft_comm_t c;
  weft_result_t rc = weft_comm_init_env(&c, NULL);
  fprintf(stderr, "init returned %s: %s\n", weft_result_string(rc), weft_get_last_error(NULL));
  _exit(rc == WEFT_SUCCESS);
}

static int check(int ok, const char *what, const char *text) {
  printf("%-60s %s\n", what, ok ? "ok" : "FAILED");
  if (!ok || getenv("WEFT_TEST_VERBOSE")) printf("---- its stderr:\n%s----\n", text);
  return ok ? 0 : 1;
}

static int test_init(void) {
  int failed = 0, port = free_port();
  char addr[64], rank0[96];
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  snprintf(rank0, sizeof rank0, "rendezvous root %s", addr);
  int64_t t0 = launch_now_ms();
  alone(0, port);
  char *e0 = slurp("alone0.err");
  const char *root_words[] = {"rendezvous root (port", "1 of 2 ranks joined", "waiting for rank 1"};
  const char *rank_words[] = {"rank 0 of 2: waiting at the", rank0, "for all 2 ranks to join"};
  failed += check(reports(e0, root_words, 3) >= 2, "rank 0 alone: the root names rank 1", e0);
  failed += check(reports(e0, rank_words, 3) >= 2, "rank 0 alone: it waits at the root", e0);
  /* the root gives up first (it started first) and says so: never a closed connection */
  failed += check(error_after_reports(e0, "init returned timed out: rank 0: the rendezvous root "
                                          "gave up: 1 of 2 ranks joined within 3500 ms, missing "
                                          "rank 1"),
                  "rank 0 alone: then the root's word, naming rank 1", e0);
  alone(1, port); /* nobody listens there any more */
  char *e1 = slurp("alone1.err");
  const char *conn_words[] = {"rank 1 of 2: connecting to the rendezvous root at 127.0.0.1:"};
  failed += check(reports(e1, conn_words, 1) >= 2, "rank 1 alone: it names the root's address", e1);
  failed += check(error_after_reports(e1, "init returned timed out: connect to 127.0.0.1:"),
                  "rank 1 alone: then the init's timeout", e1);
  printf("both in %lld ms\n", (long long)(launch_now_ms() - t0));
  free(e0);
  free(e1);
  return failed;
}

static int op_rank(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  char name[32];
  snprintf(name, sizeof name, "op%d.err", rank);
  stderr_to(name);
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = timeout_ms;
  weft_comm_t c;
  if (weft_comm_init(&c, n, id, rank, &cfg) != WEFT_SUCCESS) return 1;
  static float x[1000], y[1000];
  if (rank == LATE) {
    /* alive (its heartbeat goes on) but elsewhere, until the others gave up */
    int64_t end = launch_now_ms() + 4 * timeout_ms;
    while (launch_now_ms() < end && !(sh->done[0] && sh->done[1]))
      usleep(10000);
  } else {
    weft_result_t rc = weft_allreduce(x, y, 1000, WEFT_F32, WEFT_SUM, c, NULL);
    fprintf(stderr, "allreduce returned %s: %s\n", weft_result_string(rc), weft_get_last_error(c));
    sh->done[rank] = 1;
  }
  weft_comm_destroy(c);
  return 0;
}

static int test_op(void) {
  /* direct: every rank receives from every other, so each one names the late rank */
  setenv("WEFT_ALGO", "direct", 1);
  int64_t t0 = launch_now_ms();
  int rc = launch_local(N, op_rank, NULL, 60);
  int failed = check(rc == 0, "the ranks ran", "");
  for (int r = 0; r < N; r++) {
    if (r == LATE) continue;
    char name[32], what[96];
    snprintf(name, sizeof name, "op%d.err", r);
    char *e = slurp(name);
    char who[32];
    snprintf(who, sizeof who, "rank %d of %d: ", r, N);
    const char *words[] = {who, "allreduce(count 1000, float, sum) (op ",
                           "waits: nothing yet from rank 2 (not in this operation yet?)"};
    snprintf(what, sizeof what, "rank %d names rank 2, which never called", r);
    failed += check(reports(e, words, 3) >= 2, what, e);
    /* fake hosts (WEFT_TEST_HOSTS=K: rank % K): a rank on another host is named with it */
    const char *hosts = getenv("WEFT_TEST_HOSTS");
    int k = hosts ? atoi(hosts) : 0;
    if (k > 1 && r % k != LATE % k) {
      char far[64];
      snprintf(far, sizeof far, "from rank %d (host test-host-%d) (", LATE, LATE % k);
      const char *hw[] = {who, far};
      snprintf(what, sizeof what, "rank %d names rank 2's host", r);
      failed += check(reports(e, hw, 2) >= 2, what, e);
    }
    snprintf(what, sizeof what, "rank %d: then the op's error", r);
    failed += check(error_after_reports(e, "allreduce returned timed out: ") ||
                        error_after_reports(e, "allreduce returned peer lost: "),
                    what, e);
    free(e);
  }
  printf("in %lld ms\n", (long long)(launch_now_ms() - t0));
  return failed;
}

/* Rank 1 comes 2.5 s late to weft_comm_split: rank 0 reports waiting for it in the bootstrap
 * allgather, then both go on. */
static int split_rank(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  char name[32];
  snprintf(name, sizeof name, "split%d.err", rank);
  stderr_to(name);
  weft_comm_t c, sub = NULL;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 4 * timeout_ms; /* late, not lost */
  if (weft_comm_init(&c, n, id, rank, &cfg) != WEFT_SUCCESS) return 1;
  if (rank == 1) usleep(2500 * 1000);
  weft_result_t rc = weft_comm_split(c, 0, rank, &sub, NULL);
  fprintf(stderr, "split returned %s\n", weft_result_string(rc));
  if (sub) weft_comm_destroy(sub);
  weft_comm_destroy(c);
  return rc != WEFT_SUCCESS;
}

static int test_split(void) {
  int rc = launch_local(2, split_rank, NULL, 60);
  int failed = check(rc == 0, "both ranks split", "");
  char *e = slurp("split0.err");
  const char *words[] = {"rank 0 of 2: waiting for rank 1 in a bootstrap allgather of "};
  failed += check(reports(e, words, 1) >= 2, "rank 0 names rank 1, late to split", e);
  failed += check(error_after_reports(e, "split returned success"), "then the split ends", e);
  free(e);
  return failed;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: test_waitlog init|split|op [shm|tcp]\n");
    return 2;
  }
  if (argc > 2) setenv("WEFT_TRANSPORT", argv[2], 1);
  timeout_ms = (int)(3500 * launch_time_scale());
  char ms[32];
  snprintf(ms, sizeof ms, "%d", timeout_ms);
  setenv("WEFT_TIMEOUT_MS", ms, 1);
  setenv("WEFT_WAIT_REPORT_S", "1", 1);
  unsetenv("WEFT_DEBUG"); /* the reports come unasked */
  snprintf(dir, sizeof dir, "/tmp/weft-waitlog-XXXXXX");
  if (!mkdtemp(dir)) return 2;
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int failed = strcmp(argv[1], "init") == 0    ? test_init()
               : strcmp(argv[1], "split") == 0 ? test_split()
                                               : test_op();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) failed++;
  printf("%s\n", failed ? "FAILED" : "passed");
  return failed ? 1 : 0;
}
