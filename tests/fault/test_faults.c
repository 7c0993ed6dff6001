/* Fault tests: a rank is SIGKILLed or SIGSTOPped, aborts from another thread, strangers hit
 * the rendezvous port, or (in tests/fault/netns.sh's namespaces) a host's link is cut.
 * Survivors must fail fast (by notices, not timeouts, where there is something to notice: see
 * "Time bounds"), never hang or crash, recover, and get the messages docs/failures.md quotes.
 * Each scenario passes or fails once. usage: test_faults [shm|tcp|auto] */
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap.h"
#include "launch.h"
#include "readme_quotes.h"
#include "weft.h"

enum { N = 4, VICTIM = 2, MAXR = 8, MSG = 512 };

/* Time bounds. Each is the configured times the detection waits for, plus SLACK_MS for
 * scheduling (4 ranks and 2 busy processes on 2 cores). WEFT_TEST_TIME_SCALE (default 1;
 * 3 for the sanitizer builds) scales slack, timeouts and heartbeat alike, so a bound keeps
 * its ratio to the timeout it must not rely on: a bound on notice-based detection must stay
 * below half the operation timeout (checked in bound_ok), else a pass could be a timeout.
 * Two failures leave nothing to notice and are found by a timeout, which the test then
 * requires (WEFT_ERR_TIMEOUT, and not before it): a rank that never joins (the init timeout)
 * and, without shared memory, a stopped rank (the operation timeout). */
static double scale = 1;
static int64_t ms(double base) { return (int64_t)(base * scale); }
#define SLACK_MS      ms(3000)  /* scheduling under load: up to ~2.4 s seen */
#define OP_TIMEOUT_MS ms(20000) /* comm timeout_ms where notices must do the work */
#define SHORT_MS      ms(3000)  /* comm timeout_ms where only a timeout can tell */
#define HEARTBEAT_MS  ms(1000)  /* WEFT_HEARTBEAT_MS: a silent local peer is stopped */
#define BEAT_PERIOD   100       /* the heartbeat thread's period (src/core/comm.c) */
#define LIVENESS_MS   100       /* shm checks local pids and heartbeats this often */
#define HEAD_START    200       /* strangers reach the root before ranks 1-3 join */

typedef struct {
  atomic_int ids_ready; /* rank 0 made both ids (its process hosts their rendezvous) */
  weft_unique_id_t id, id2;
  int rc[MAXR];          /* result of each rank's failing call */
  int64_t t_start[MAXR]; /* when it entered weft_comm_init (ms) */
  int64_t t_err[MAXR];   /* when its failing call returned (ms) */
  int64_t t_death;       /* when the victim died (ms) */
  int recovered[MAXR];   /* the second communicator worked */
  char msg[MAXR][MSG];
} shared_t;

static shared_t *sh;

/* CUT_LINK only in tests/fault/netns.sh's namespaces, last (the link stays down). */
typedef enum {
  KILL_BOOTSTRAP,
  KILL_DURING,
  KILL_BETWEEN,
  STOP_DURING,
  ABORT_THREAD,
  CUT_LINK
} scenario_t;
static const char *NAMES[] = {"SIGKILL during bootstrap",   "SIGKILL during allreduce",
                              "SIGKILL between operations", "SIGSTOP during allreduce",
                              "abort from another thread",  "link cut during allreduce"};
#define DEAD_MS 4000 /* WEFT_TCP_DEAD_MS's default: a host that answers nothing is lost */

/* One scenario's outcome: it fails once, with each failed check listed under it. */
static char why[4096];
static size_t why_len;
static int passed, failed;

static void check(int ok, const char *fmt, ...) {
  if (ok || why_len >= sizeof why - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int w = snprintf(why + why_len, sizeof why - why_len, "    - ");
  w += vsnprintf(why + why_len + w, sizeof why - why_len - w, fmt, ap);
  va_end(ap);
  why_len += (size_t)w;
  if (why_len < sizeof why - 1) why[why_len++] = '\n', why[why_len] = 0;
  if (why_len >= sizeof why) why_len = sizeof why - 1;
}

static void verdict(const char *name, const char *summary) {
  printf("%s %-27s %s\n", why_len ? "FAIL" : "ok  ", name, summary);
  if (why_len) printf("%s", why);
  why_len ? failed++ : passed++;
  why_len = 0;
  why[0] = 0;
}

/* A notice-based bound must stay far below the timeout, or a pass proves nothing. */
static void bound_ok(int64_t bound, int64_t timeout) {
  check(2 * bound <= timeout, "bound %lld ms is not below half the %lld ms timeout",
        (long long)bound, (long long)timeout);
}

static int tcp_only(void) {
  const char *t = getenv("WEFT_TRANSPORT");
  return t && strcmp(t, "tcp") == 0;
}

static weft_config_t cfg(int64_t timeout_ms) {
  weft_config_t c = WEFT_CONFIG_INIT;
  c.timeout_ms = timeout_ms;
  return c;
}

static void *killer(void *arg) {
  int sig = *(int *)arg;
  usleep(300000);
  sh->t_death = launch_now_ms();
  raise(sig);
  return NULL;
}

/* Sets the victim's namespace's end of the veth pair down (tests/fault/netns.sh): every rank
 * is alive, but the hosts no longer reach each other. */
static void *cutter(void *arg) {
  (void)arg;
  usleep(300000);
  sh->t_death = launch_now_ms();
  if (launch_cut_link(VICTIM) != 0) sh->t_death = 0;
  return NULL;
}

static void *aborter(void *arg) {
  usleep(300000);
  sh->t_death = launch_now_ms();
  weft_comm_abort((weft_comm_t)arg);
  return NULL;
}

static void record(int rank, weft_result_t rc, weft_comm_t c) {
  sh->rc[rank] = (int)rc;
  sh->t_err[rank] = launch_now_ms();
  snprintf(sh->msg[rank], sizeof sh->msg[rank], "%s", weft_get_last_error(c));
}

/* Survivors of a failed comm build a new one with the second id and check a sum. */
static void recover(int rank, weft_unique_id_t id2, int n2) {
  int r2 = rank < VICTIM ? rank : rank - 1;
  weft_comm_t c2;
  weft_config_t k = cfg(OP_TIMEOUT_MS);
  if (weft_comm_init(&c2, n2, id2, r2, &k) != WEFT_SUCCESS) return;
  int v = r2 + 1, sum = 0;
  if (weft_allreduce(&v, &sum, 1, WEFT_I32, WEFT_SUM, c2, NULL) == WEFT_SUCCESS &&
      sum == n2 * (n2 + 1) / 2)
    sh->recovered[rank] = 1;
  weft_comm_destroy(c2);
}

/* Rank 0 makes the ids, as in a real job: the parent starts no thread before forking. */
static void get_ids(int rank, weft_unique_id_t *id, weft_unique_id_t *id2) {
  if (rank == 0) {
    weft_get_unique_id(&sh->id);
    weft_get_unique_id(&sh->id2);
    atomic_store(&sh->ids_ready, 1);
  }
  while (!atomic_load(&sh->ids_ready))
    usleep(1000);
  *id = sh->id;
  *id2 = sh->id2;
}

/* Where nothing can be noticed, the short timeout makes the test quick. */
static int by_timeout(scenario_t sc) {
  return sc == KILL_BOOTSTRAP || (sc == STOP_DURING && tcp_only());
}

static void rank_main(scenario_t sc, int rank) {
  int victim = rank == VICTIM;
  weft_unique_id_t id, id2;
  if (launch_join_netns(rank) != 0) _exit(1);
  get_ids(rank, &id, &id2);
  if (sc == KILL_BOOTSTRAP && victim) {
    sh->t_death = launch_now_ms();
    raise(SIGKILL);
  }
  weft_comm_t c;
  weft_config_t k = cfg(by_timeout(sc) ? SHORT_MS : OP_TIMEOUT_MS);
  sh->t_start[rank] = launch_now_ms();
  weft_result_t rc = weft_comm_init(&c, N, id, rank, &k);
  if (rc != WEFT_SUCCESS) {
    record(rank, rc, NULL);
    return;
  }
  size_t count = 1 << 20;
  float *x = calloc(count, sizeof *x), *y = calloc(count, sizeof *y);
  pthread_t t;
  int sig = sc == STOP_DURING ? SIGSTOP : SIGKILL;
  if ((sc == KILL_DURING || sc == STOP_DURING) && victim) pthread_create(&t, NULL, killer, &sig);
  if (sc == CUT_LINK && victim) pthread_create(&t, NULL, cutter, NULL);
  if (sc == ABORT_THREAD && rank == 0) pthread_create(&t, NULL, aborter, c);
  if (sc == ABORT_THREAD) { /* every rank waits for data that never comes */
    rc = weft_recv(y, 16, WEFT_F32, (rank + 1) % N, c, NULL);
  } else {
    for (int i = 0; i < 100000 && rc == WEFT_SUCCESS; i++) {
      if (sc == KILL_BETWEEN && victim && i == 5) {
        sh->t_death = launch_now_ms();
        raise(SIGKILL);
      }
      rc = weft_allreduce(x, y, count, WEFT_F32, WEFT_SUM, c, NULL);
    }
  }
  record(rank, rc, c);
  if (sc == ABORT_THREAD && rank == 0) pthread_join(t, NULL);
  weft_comm_destroy(c);
  free(x);
  free(y);
  if (sc == KILL_DURING || sc == KILL_BETWEEN) recover(rank, id2, N - 1);
}

/* The README row (first cell) whose quotes a scenario's survivors must have got; NULL: none. */
static const char *readme_row(scenario_t sc) {
  if (sc == KILL_BOOTSTRAP) return "a rank never joins";
  if (sc == KILL_DURING || sc == KILL_BETWEEN) return "a rank dies";
  if (sc == STOP_DURING && !tcp_only()) return "a rank on the same host stops";
  return NULL;
}

/* Waits for the ranks; every survivor must exit by itself (a stopped victim is killed). */
static void reap(scenario_t sc, pid_t *pids) {
  /* the longest a survivor may take: its failing op, then a new comm's init and allreduce */
  int64_t start = launch_now_ms(), deadline = start + 3 * OP_TIMEOUT_MS + SLACK_MS;
  for (int left = N; left > 0 && launch_now_ms() < deadline; usleep(5000)) {
    left = 0;
    for (int r = 0; r < N; r++) {
      int st;
      if (pids[r] > 0 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        check(r == VICTIM || !WIFSIGNALED(st), "rank %d crashed (signal %d)", r,
              WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        pids[r] = 0;
      } else if (pids[r] > 0 && !(r == VICTIM && sc == STOP_DURING)) {
        left++;
      }
    }
  }
  for (int r = 0; r < N; r++)
    if (pids[r] > 0) {
      check(r == VICTIM, "rank %d hung (still running after %lld ms)", r,
            (long long)(launch_now_ms() - start));
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
    }
}

static void run(scenario_t sc) {
  int64_t bound = 0; /* notice-based: from t_death; by timeout: from t_start, after timeout */
  if (by_timeout(sc)) bound = SHORT_MS + SLACK_MS;
  if (sc == KILL_BOOTSTRAP) bound += 1200; /* a rank awaits the root's word 1 s, its text 0.2 s */
  if (sc == KILL_DURING || sc == KILL_BETWEEN) bound = LIVENESS_MS + SLACK_MS;
  if (sc == STOP_DURING && !tcp_only()) bound = HEARTBEAT_MS + BEAT_PERIOD + LIVENESS_MS + SLACK_MS;
  if (sc == ABORT_THREAD) bound = SLACK_MS;
  if (sc == CUT_LINK) bound = ms(DEAD_MS) + SLACK_MS; /* TCP keepalive, not the op's timeout */
  if (!by_timeout(sc)) bound_ok(bound, OP_TIMEOUT_MS);
  memset(sh, 0, sizeof *sh);
  pid_t pids[N];
  for (int r = 0; r < N; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      rank_main(sc, r);
      _exit(0);
    }
  }
  reap(sc, pids);
  char quotes[2048] = "";
  const char *row = readme_row(sc);
  int nq = row ? readme_quotes(row, quotes, sizeof quotes) : 0;
  if (row) check(nq > 0, "docs/failures.md: %s", nq < 0 ? quotes : "the row quotes no message");
  int64_t worst = 0, first_start = INT64_MAX;
  for (int r = 0; r < N; r++)
    if (sh->t_start[r] > 0 && sh->t_start[r] < first_start) first_start = sh->t_start[r];
  if (sc == CUT_LINK) check(sh->t_death > 0, "the link could not be cut (ip link set ... down)");
  for (int r = 0; r < N; r++) {
    if (r == VICTIM && sc != ABORT_THREAD && sc != CUT_LINK) continue; /* the cut: all alive */
    check(sh->rc[r] != WEFT_SUCCESS, "rank %d returned success", r);
    /* docs/hosts.md's Errors: a cut link is no dead rank, whoever noticed it (a rank without a
     * connection across is told in the noticing rank's words) */
    if (sc == CUT_LINK)
      check(sh->rc[r] == WEFT_ERR_TIMEOUT && strstr(sh->msg[r], "the link to it is cut") != NULL,
            "rank %d got %s, not the cut link's timeout: %s", r,
            weft_result_string((weft_result_t)sh->rc[r]), sh->msg[r]);
    int64_t d = sh->t_err[r] - (by_timeout(sc) ? sh->t_start[r] : sh->t_death);
    if (d > worst) worst = d;
    check(d <= bound, "rank %d took %lld ms to fail (bound %lld ms)", r, (long long)d,
          (long long)bound);
    if (by_timeout(sc)) {
      /* Here the root (weft_get_unique_id's, in rank 0's process) keeps the default timeout,
       * longer than the ranks' own: rank 0 times out first and its process exits, root and
       * all, so the ranks still waiting on it are told it closed. Either way, none gives up
       * before the first rank's timeout ran out. (With weft_comm_init_env the root shares
       * the ranks' timeout and tells them why: test_waitlog's init case.) */
      int lost_ok = sc == KILL_BOOTSTRAP && sh->rc[r] == WEFT_ERR_PEER_LOST;
      check(sh->rc[r] == WEFT_ERR_TIMEOUT || lost_ok, "rank %d got %s, not the timeout", r,
            weft_result_string((weft_result_t)sh->rc[r]));
      int64_t since = sh->t_err[r] - first_start;
      check(sc != KILL_BOOTSTRAP || since >= SHORT_MS,
            "rank %d gave up %lld ms after the first rank joined, before the %lld ms timeout", r,
            (long long)since, (long long)SHORT_MS);
    }
    if (sc == KILL_DURING || sc == KILL_BETWEEN) {
      check(sh->recovered[r], "rank %d could not use a new communicator", r);
      char who[16];
      snprintf(who, sizeof who, "rank %d ", VICTIM);
      check(strstr(sh->msg[r], who) != NULL, "rank %d's error does not name the dead rank: %s", r,
            sh->msg[r]);
    }
    if (nq > 0)
      check(readme_quoted(quotes, sh->msg[r]),
            "rank %d got a message docs/failures.md does not quote: %s", r, sh->msg[r]);
  }
  char summary[96];
  snprintf(summary, sizeof summary, "survivors failed within %5lld ms (bound %lld ms)",
           (long long)worst, (long long)bound);
  verdict(NAMES[sc], summary);
  for (int r = 0; r < N; r++)
    if (sh->msg[r][0])
      printf("      rank %d: %s: %s\n", r, weft_result_string((weft_result_t)sh->rc[r]),
             sh->msg[r]);
}

/* Strangers at the rendezvous port while 4 ranks join: garbage, a wrong magic, 3 bytes and
 * close, a silent half-open connection. The ranks must not notice. */
static void noise_at_root(void) {
  memset(sh, 0, sizeof *sh);
  pid_t pids[N];
  int64_t start = launch_now_ms();
  for (int r = 0; r < N; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      weft_unique_id_t id, id2;
      if (launch_join_netns(r) != 0) _exit(1);
      get_ids(r, &id, &id2);
      if (r > 0) usleep(HEAD_START * 1000);
      weft_comm_t c;
      weft_config_t k = cfg(OP_TIMEOUT_MS);
      int ok = weft_comm_init(&c, N, id, r, &k) == WEFT_SUCCESS;
      int v = r + 1, sum = 0;
      ok = ok && weft_allreduce(&v, &sum, 1, WEFT_I32, WEFT_SUM, c, NULL) == WEFT_SUCCESS &&
           sum == N * (N + 1) / 2;
      if (ok) weft_comm_destroy(c);
      _exit(ok ? 0 : 1);
    }
  }
  while (!atomic_load(&sh->ids_ready))
    usleep(1000);
  launch_join_netns(0); /* the strangers come from rank 0's host, where the root listens */
  weft_id_body_t body;
  memcpy(&body, sh->id.internal, sizeof body);
  int strangers[4];
  for (int i = 0; i < 4; i++) {
    strangers[i] = socket(weft_sockaddr_family(&body.root), SOCK_STREAM, 0);
    if (connect(strangers[i], &body.root.u.sa, body.root.len) != 0) continue;
    if (i == 0) send(strangers[i], "GET / HTTP/1.0\r\n\r\n GARBAGE GARBAGE GARBAGE GARBAGE", 48, 0);
    if (i == 1) {
      char hello[40] = {0};
      uint64_t wrong = body.magic ^ 1;
      memcpy(hello, &wrong, 8);
      send(strangers[i], hello, sizeof hello, 0);
    }
    if (i == 2) send(strangers[i], "abc", 3, 0), close(strangers[i]), strangers[i] = -1;
  }
  for (int r = 0; r < N; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    check(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d could not join or sum", r);
  }
  for (int i = 0; i < 4; i++)
    if (strangers[i] >= 0) close(strangers[i]);
  /* A rank the strangers held up would wait for its init timeout: the bound is far below. */
  int64_t took = launch_now_ms() - start, bound = HEAD_START + SLACK_MS;
  bound_ok(bound, OP_TIMEOUT_MS);
  check(took <= bound, "joining took %lld ms (bound %lld ms)", (long long)took, (long long)bound);
  char summary[96];
  snprintf(summary, sizeof summary, "4 ranks joined and summed in %lld ms (bound %lld ms)",
           (long long)took, (long long)bound);
  verdict("strangers at the rendezvous", summary);
}

int main(int argc, char **argv) {
  if (argc > 1) setenv("WEFT_TRANSPORT", argv[1], 1);
  scale = launch_time_scale();
  char hb[32];
  snprintf(hb, sizeof hb, "%lld", (long long)HEARTBEAT_MS);
  setenv("WEFT_HEARTBEAT_MS", hb, 1);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  printf("transport %s, %d ranks, rank %d is the victim%s; time scale %g (slack %lld ms)\n",
         argc > 1 ? argv[1] : "auto", N, VICTIM,
         getenv("WEFT_TEST_NETNS") ? ", 2 hosts in network namespaces" : "", scale,
         (long long)SLACK_MS);
  for (scenario_t sc = KILL_BOOTSTRAP; sc <= ABORT_THREAD; sc++)
    run(sc);
  noise_at_root();
  if (getenv("WEFT_TEST_NETNS_LINKS")) run(CUT_LINK); /* last: the link stays down */
  printf("scenarios: %d passed, %d failed (of %d)\n", passed, failed, passed + failed);
  return failed ? 1 : 0;
}
