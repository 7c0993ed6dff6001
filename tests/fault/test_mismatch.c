/* Mismatched calls: one rank calls a different collective, count, dtype, op or root, or
 * sends a different number of elements than its peer receives. Every rank must get
 * WEFT_ERR_MISMATCH quickly (the timeout is 20 s) with a message naming both calls (the
 * failure notices carry the reporter's words to the ranks that did not see it): from the
 * call itself, or, for a rank whose part was only to send (it can finish before anyone
 * looks at its data), from its next call. With WEFT_CHECK=1 set, each rank must name both
 * calls of a single collective in the check's own words, also for reduce vs broadcast
 * (root 0), which moves no byte that shows it: without the check it surfaces only at the
 * next call, named as broadcast vs barrier.
 * usage: test_mismatch [shm|tcp] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "launch.h"
#include "weft.h"

enum { N = 3, ODD = 1, MAXR = 8 };

typedef struct {
  int rc[MAXR];
  int64_t took_ms[MAXR];
  char msg[MAXR][300];
} shared_t;

static shared_t *sh;

/* Detection comes from fingerprints and notices, not from the 20 s timeout: 3 s, stretched by
 * WEFT_TEST_TIME_SCALE (the sanitizer runs set 3), stays far below it. */
static int64_t bound_ms(void) { return (int64_t)(3000 * launch_time_scale()); }

typedef enum { COLL, COUNT, DTYPE, OP, ROOT, A2AV, SENDRECV, CROSS, NCASES } case_t;
static const char *NAMES[] = {
    "allgather vs allreduce", "count 1000 vs 999", "float vs int32",     "sum vs max",
    "broadcast root 0 vs 2",  "alltoallv counts",  "send 64 vs recv 65", "reduce vs broadcast"};
/* The two calls every rank's message must name (the odd rank's, the others'), where weft
 * describes both (single collectives but alltoallv, whose counts are not compared). */
static const char *CALLS[NCASES][2] = {
    [COLL] = {"allgather(count 1000, float)", "allreduce(count 1000, float, sum)"},
    [COUNT] = {"allreduce(count 999, float, sum)", "allreduce(count 1000, float, sum)"},
    [DTYPE] = {"allreduce(count 1000, int32, sum)", "allreduce(count 1000, float, sum)"},
    [OP] = {"allreduce(count 1000, float, max)", "allreduce(count 1000, float, sum)"},
    [ROOT] = {"broadcast(count 1000, float, root 2)", "broadcast(count 1000, float, root 0)"},
    [CROSS] = {"broadcast(count 1000, float, root 0)", "reduce(count 1000, float, sum, root 0)"}};

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  case_t k = *(case_t *)arg;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 20000;
  weft_comm_t c;
  if (weft_comm_init(&c, n, id, rank, &cfg) != WEFT_SUCCESS) return 1;
  static float x[4096], y[4096 * N];
  int odd = rank == ODD;
  int64_t t0 = launch_now_ms();
  weft_result_t rc = WEFT_SUCCESS;
  switch (k) {
  case COLL:
    rc = odd ? weft_allgather(x, y, 1000, WEFT_F32, c, NULL)
             : weft_allreduce(x, y, 1000, WEFT_F32, WEFT_SUM, c, NULL);
    break;
  case COUNT: rc = weft_allreduce(x, y, odd ? 999 : 1000, WEFT_F32, WEFT_SUM, c, NULL); break;
  case DTYPE: rc = weft_allreduce(x, y, 1000, odd ? WEFT_I32 : WEFT_F32, WEFT_SUM, c, NULL); break;
  case OP: rc = weft_allreduce(x, y, 1000, WEFT_F32, odd ? WEFT_MAX : WEFT_SUM, c, NULL); break;
  case ROOT: rc = weft_broadcast(x, y, 1000, WEFT_F32, odd ? 2 : 0, c, NULL); break;
  case CROSS:
    rc = odd ? weft_broadcast(x, y, 1000, WEFT_F32, 0, c, NULL)
             : weft_reduce(x, y, 1000, WEFT_F32, WEFT_SUM, 0, c, NULL);
    break;
  case A2AV: {
    size_t sc[N], sd[N], rcnt[N], rd[N];
    for (int p = 0; p < N; p++) {
      sc[p] = rcnt[p] = 10;
      sd[p] = rd[p] = (size_t)p * 20;
    }
    if (odd) sc[(rank + 1) % N] = 11; /* sends one more than its peer expects */
    rc = weft_alltoallv(x, sc, sd, y, rcnt, rd, WEFT_F32, c, NULL);
    break;
  }
  case SENDRECV:
    weft_group_start();
    weft_send(x, odd ? 65 : 64, WEFT_F32, (rank + 1) % n, c, NULL);
    weft_recv(y, 64, WEFT_F32, (rank + n - 1) % n, c, NULL);
    rc = weft_group_end();
    break;
  default: break;
  }
  if (rc == WEFT_SUCCESS) rc = weft_barrier(c, NULL); /* the next call must report it */
  sh->rc[rank] = (int)rc;
  sh->took_ms[rank] = launch_now_ms() - t0;
  snprintf(sh->msg[rank], sizeof sh->msg[rank], "%s", weft_get_last_error(c));
  weft_comm_destroy(c);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1) setenv("WEFT_TRANSPORT", argv[1], 1);
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  const char *env = getenv("WEFT_CHECK");
  int full = env && atoi(env) != 0;
  int failed = 0, ncases = full ? NCASES : CROSS;
  for (case_t k = 0; k < (case_t)ncases; k++) {
    memset(sh, 0, sizeof *sh);
    launch_local(N, rank_main, &k, 120);
    int ok = 1;
    int64_t worst = 0;
    for (int r = 0; r < N; r++) {
      /* every rank's message names both calls: "... called X ... which called Y ..." */
      const char *first = strstr(sh->msg[r], "called ");
      ok &= first && strstr(first + 1, "called ") != NULL;
      for (int i = 0; i < 2 && CALLS[k][0]; i++)
        ok &= strstr(sh->msg[r], CALLS[k][i]) != NULL;
      /* the check's words: it ran and found the mismatch before any data moved */
      if (full && CALLS[k][0]) ok &= strstr(sh->msg[r], "WEFT_CHECK: ") != NULL;
      ok &= sh->rc[r] == WEFT_ERR_MISMATCH && sh->took_ms[r] < bound_ms();
      if (sh->took_ms[r] > worst) worst = sh->took_ms[r];
    }
    failed += !ok;
    printf("%-24s %s in %4lld ms: rank 0: %s\n", NAMES[k], ok ? "every rank: mismatch" : "FAILED",
           (long long)worst, sh->msg[0]);
    if (!ok)
      for (int r = 0; r < N; r++)
        printf("    rank %d: %s after %lld ms: %s\n", r,
               weft_result_string((weft_result_t)sh->rc[r]), (long long)sh->took_ms[r], sh->msg[r]);
  }
  printf("%d passed, %d failed%s\n", ncases - failed, failed, full ? " (WEFT_CHECK=1)" : "");
  return failed ? 1 : 0;
}
