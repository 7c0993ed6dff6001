/* Fault tests: a rank is SIGKILLed (during bootstrap, during an allreduce, between
 * operations) or SIGSTOPped; weft_comm_abort is called from another thread; strangers send
 * garbage to the rendezvous port while ranks join. Each asserts that survivors return an
 * error within a stated bound (far below the 20 s operation timeout, so detection came from
 * the failure notices, not from timeouts), never hang or crash, and that a new communicator
 * works afterwards. usage: test_faults [shm|tcp] */
#include <arpa/inet.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
#include "weft.h"

enum { N = 4, VICTIM = 2, MAXR = 8 };

typedef struct {
  atomic_int ids_ready; /* rank 0 made both ids (its process hosts their rendezvous) */
  weft_unique_id_t id, id2;
  int rc[MAXR];        /* result of each rank's failing call */
  int64_t t_err[MAXR]; /* when it returned (ms) */
  int64_t t_death;     /* when the victim died (ms) */
  int recovered[MAXR]; /* the second communicator worked */
  char msg[MAXR][256];
} shared_t;

static shared_t *sh;
static int failures;

static weft_config_t cfg(int64_t timeout_ms) {
  weft_config_t c = WEFT_CONFIG_INIT;
  c.timeout_ms = timeout_ms;
  return c;
}

typedef enum { KILL_BOOTSTRAP, KILL_DURING, KILL_BETWEEN, STOP_DURING, ABORT_THREAD } scenario_t;
static const char *NAMES[] = {"SIGKILL during bootstrap", "SIGKILL during allreduce",
                              "SIGKILL between operations", "SIGSTOP during allreduce",
                              "abort from another thread"};

static int tcp_only(void) {
  const char *t = getenv("WEFT_TRANSPORT");
  return t && strcmp(t, "tcp") == 0;
}

static void *killer(void *arg) {
  int sig = *(int *)arg;
  usleep(300000);
  sh->t_death = launch_now_ms();
  raise(sig);
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
  weft_config_t k = cfg(20000);
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
  /* A stopped rank is found by the heartbeat where ranks share memory, else by the timeout. */
  weft_config_t k = cfg(sc == KILL_BOOTSTRAP || (sc == STOP_DURING && tcp_only()) ? 3000 : 20000);
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

static void check(int ok, const char *sc, const char *fmt, int rank, int64_t v) {
  if (ok) return;
  failures++;
  fprintf(stderr, "FAIL %s: ", sc);
  fprintf(stderr, fmt, rank, (long long)v);
  fprintf(stderr, "\n");
}

static void run(scenario_t sc, int64_t bound_ms) {
  memset(sh, 0, sizeof *sh);
  pid_t pids[N];
  for (int r = 0; r < N; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      rank_main(sc, r);
      _exit(0);
    }
  }
  int64_t start = launch_now_ms(), deadline = start + 60000;
  int left = N;
  while (left > 0 && launch_now_ms() < deadline) { /* survivors must all exit by themselves */
    left = 0;
    for (int r = 0; r < N; r++) {
      if (pids[r] <= 0) continue;
      int st;
      pid_t p = waitpid(pids[r], &st, WNOHANG);
      if (p == pids[r]) {
        check(r == VICTIM || !WIFSIGNALED(st), NAMES[sc], "rank %d crashed (signal %lld)", r,
              WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        pids[r] = 0;
      } else if (!(r == VICTIM && sc == STOP_DURING)) {
        left++;
      }
    }
    usleep(5000);
  }
  for (int r = 0; r < N; r++)
    if (pids[r] > 0) {
      check(r == VICTIM, NAMES[sc], "rank %d hung (still running after %lld ms)", r,
            launch_now_ms() - start);
      kill(pids[r], SIGKILL);
      waitpid(pids[r], NULL, 0);
    }
  int64_t worst = 0;
  for (int r = 0; r < N; r++) {
    if (r == VICTIM && sc != ABORT_THREAD) continue;
    check(sh->rc[r] != WEFT_SUCCESS, NAMES[sc], "rank %d returned success (%lld)", r, 0);
    int64_t d = sh->t_err[r] - sh->t_death;
    if (d > worst) worst = d;
    check(d <= bound_ms, NAMES[sc], "rank %d took %lld ms to fail", r, d);
    if ((sc == KILL_DURING || sc == KILL_BETWEEN) && r != VICTIM) {
      check(sh->recovered[r], NAMES[sc], "rank %d could not use a new communicator (%lld)", r, 0);
      char who[16];
      snprintf(who, sizeof who, "rank %d ", VICTIM);
      check(strstr(sh->msg[r], who) != NULL, NAMES[sc],
            "rank %d's error does not name the dead rank (%lld)", r, 0);
    }
  }
  printf("%-28s survivors failed within %5lld ms (bound %lld ms): rank 0 got %s: %s\n", NAMES[sc],
         (long long)worst, (long long)bound_ms, weft_result_string((weft_result_t)sh->rc[0]),
         sh->msg[0]);
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
      if (r > 0) usleep(200000); /* the strangers get there first */
      weft_comm_t c;
      weft_config_t k = cfg(20000);
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
    strangers[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(strangers[i], (struct sockaddr *)&body.root, sizeof body.root) != 0) continue;
    if (i == 0) send(strangers[i], "GET / HTTP/1.0\r\n\r\n GARBAGE GARBAGE GARBAGE GARBAGE", 48, 0);
    if (i == 1) {
      char hello[40] = {0};
      uint64_t wrong = body.magic ^ 1;
      memcpy(hello, &wrong, 8);
      send(strangers[i], hello, sizeof hello, 0);
    }
    if (i == 2) send(strangers[i], "abc", 3, 0), close(strangers[i]), strangers[i] = -1;
  }
  int bad = 0;
  for (int r = 0; r < N; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st) != 0;
  }
  for (int i = 0; i < 4; i++)
    if (strangers[i] >= 0) close(strangers[i]);
  int64_t took = launch_now_ms() - start;
  check(!bad && took < 5000, "strangers at the rendezvous", "ranks failed (%d) or took %lld ms",
        bad, took);
  printf("%-28s 4 ranks joined and summed correctly in %lld ms\n", "strangers at the rendezvous",
         (long long)took);
}

int main(int argc, char **argv) {
  if (argc > 1) setenv("WEFT_TRANSPORT", argv[1], 1);
  setenv("WEFT_HEARTBEAT_MS", "1000", 1);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  printf("transport %s, %d ranks, rank %d is the victim%s\n", argc > 1 ? argv[1] : "auto", N,
         VICTIM, getenv("WEFT_TEST_NETNS") ? ", 2 hosts in network namespaces" : "");
  run(KILL_BOOTSTRAP, 3000 + 2000);
  run(KILL_DURING, 2000);
  run(KILL_BETWEEN, 2000);
  run(STOP_DURING, tcp_only() ? 3000 + 2000 : 1000 + 1500);
  run(ABORT_THREAD, 1000);
  noise_at_root();
  printf("%d passed, %d failed\n", 6 - (failures > 0), failures);
  return failures ? 1 : 0;
}
