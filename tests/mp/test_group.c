/* Groups at their limit (src/core/group.c, the host engine's submit_group): a group over
 * exactly WEFT_GROUP_MAX_COMMS communicators runs every operation, each comm progressing at
 * once; one more communicator is refused with WEFT_ERR_INVALID_ARG naming the limit, runs
 * nothing, touches no buffer, and leaves every comm working. Run under ASan too: an
 * off-by-one there writes past the arrays of that size. usage: test_group RANKS */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "rank_check.h"
#include "weft.h"

enum { N = WEFT_GROUP_MAX_COMMS + 1, COUNT = 5 };

/* Issues an allreduce of COUNT ints on each comm of [lo, hi), in one group; comm i sums
 * rank * 100 + i + j, in place or not by i's parity. Returns weft_group_end's result. */
static weft_result_t group_of(weft_comm_t *c, int lo, int hi, int rank, int (*buf)[2][COUNT]) {
  for (int i = lo; i < hi; i++)
    for (int j = 0; j < COUNT; j++)
      buf[i][0][j] = rank * 100 + i + j, buf[i][1][j] = -1;
  weft_group_start();
  for (int i = lo; i < hi; i++) {
    int *in = buf[i][0], *out = i % 2 ? buf[i][0] : buf[i][1];
    if (weft_allreduce(in, out, COUNT, WEFT_I32, WEFT_SUM, c[i], NULL) != WEFT_SUCCESS) {
      weft_group_discard();
      return WEFT_ERR_INTERNAL; /* a call inside a group only queues: it must not fail */
    }
  }
  return weft_group_end();
}

/* Whether every comm of [lo, hi) holds its sum (done) or its buffers as group_of left them
 * (rank 0's input to an in-place sum is not the sum: a sum that ran would show). */
static int results_ok(int (*buf)[2][COUNT], int lo, int hi, int rank, int n, int done) {
  for (int i = lo; i < hi; i++)
    for (int j = 0; j < COUNT; j++) {
      int sum = n * (n - 1) / 2 * 100 + n * (i + j), out = buf[i][i % 2 ? 0 : 1][j];
      if (done ? out != sum : out != (i % 2 ? rank * 100 + i + j : -1)) return 0;
    }
  return 1;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  weft_comm_t world, c[N];
  int(*buf)[2][COUNT] = calloc(N, sizeof *buf);
  if (!buf) FAIL("out of memory");
  if (weft_comm_init(&world, n, id, rank, NULL) != WEFT_SUCCESS) FAIL("init");
  for (int i = 0; i < N; i++)
    if (weft_comm_split(world, 0, rank, &c[i], NULL) != WEFT_SUCCESS) FAIL("comm %d of %d", i, N);
  /* at the limit: every comm's result */
  if (group_of(c, 0, N - 1, rank, buf) != WEFT_SUCCESS)
    FAIL("a group over %d communicators (the limit) failed", N - 1);
  if (!results_ok(buf, 0, N - 1, rank, n, 1)) FAIL("the limit: a comm summed wrong");
  /* one past it: refused with a message naming the limit, nothing run or written */
  weft_result_t rc = group_of(c, 0, N, rank, buf);
  const char *msg = weft_get_last_error(NULL);
  if (rc != WEFT_ERR_INVALID_ARG || !strstr(msg, "WEFT_GROUP_MAX_COMMS"))
    FAIL("a group over %d communicators: %s \"%s\", want WEFT_ERR_INVALID_ARG naming "
         "WEFT_GROUP_MAX_COMMS",
         N, weft_result_string(rc), msg);
  if (!results_ok(buf, 0, N, rank, n, 0)) FAIL("the refused group wrote a buffer");
  if (weft_group_end() != WEFT_ERR_INVALID_ARG) FAIL("the refused group is still open");
  /* every comm works on, its sequence unchanged (a queued leftover would mismatch) */
  for (int i = 0; i < N; i++)
    if (group_of(c, i, i + 1, rank, buf) != WEFT_SUCCESS || !results_ok(buf, i, i + 1, rank, n, 1))
      FAIL("comm %d after the refusal", i);
  if (group_of(c, 1, N, rank, buf) != WEFT_SUCCESS || !results_ok(buf, 1, N, rank, n, 1))
    FAIL("the limit again, after the refusal");
  for (int i = 0; i < N; i++)
    weft_comm_destroy(c[i]);
  weft_comm_destroy(world);
  free(buf);
  if (rank == 0)
    printf("test_group: %d ranks: %d communicators in a group ran, %d refused\n", n, N - 1, N);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 1) return 2;
  return launch_local(n, rank_main, NULL, 300) ? 1 : 0;
}
