/* WEFT_CHECK=1: before each collective, the ranks allgather a description of their call
 * (through the communicator's own channels) and compare all of them, so a mismatch between
 * ranks that exchange no data directly is caught too, and every rank names both calls. A
 * debugging aid: it costs one small allgather per operation. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host.h"
#include "dtype.h"
#include "err.h"

typedef struct {
  uint8_t coll, dtype, op, comparable;
  int32_t root;
  uint64_t count;
  uint64_t reserved[2];
} call_t;

_Static_assert(sizeof(call_t) == 32, "call descriptions are 32 bytes");

static call_t describe(const weft_work_t *op) {
  const weft_task_t *t = &op->tasks[0];
  weft_coll_t k = t->args.coll;
  return (call_t){.coll = (uint8_t)k,
                  .dtype = (uint8_t)t->dtype,
                  .op = (uint8_t)(weft_coll_reduces(k) ? t->op : 0),
                  .comparable = k != WEFT_COLL_ALLTOALLV,
                  .root = weft_coll_rooted(k) ? t->args.root : 0,
                  .count = t->args.count};
}

void weft_call_name(char *buf, size_t len, weft_coll_t coll, uint64_t count, weft_dtype_t dtype,
                    weft_op_t op, int root) {
  int n = snprintf(buf, len, "%s(count %llu, %s", weft_coll_name(coll), (unsigned long long)count,
                   weft_dtype_name(dtype));
  if (n > 0 && (size_t)n < len && weft_coll_reduces(coll))
    n += snprintf(buf + n, len - (size_t)n, ", %s", weft_op_name(op));
  if (n > 0 && (size_t)n < len && weft_coll_rooted(coll))
    n += snprintf(buf + n, len - (size_t)n, ", root %d", root);
  if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ")");
}

static void name_call(char *buf, size_t len, const call_t *c) {
  weft_call_name(buf, len, (weft_coll_t)c->coll, c->count, (weft_dtype_t)c->dtype, (weft_op_t)c->op,
                 (int)c->root);
}

int weft_check_applies(const weft_work_t *op) {
  weft_coll_t k = op->tasks[0].args.coll;
  return op->ntasks == 1 && k != WEFT_COLL_SEND && k != WEFT_COLL_RECV;
}

weft_result_t weft_check_call(weft_comm_t c, const weft_work_t *op) {
  call_t mine = describe(op);
  call_t *all = calloc((size_t)c->nranks, sizeof *all);
  if (!all) return weft_set_error(WEFT_ERR_NO_MEMORY, "WEFT_CHECK: out of memory");
  weft_task_t t = {.args = {.coll = WEFT_COLL_ALLGATHER,
                            .count = sizeof mine,
                            .nranks = c->nranks,
                            .rank = c->rank},
                   .dtype = WEFT_U8,
                   .sendbuf = &mine,
                   .recvbuf = all};
  /* Runs on the executing thread, which must not read the environment (so no weft_tune):
   * a few dozen bytes from every rank is what direct exchange is for. */
  t.algo = WEFT_ALGO_DIRECT;
  t.args.chunk = sizeof mine;
  weft_work_t w = {.tasks = &t, .ntasks = 1, .seq = op->seq};
  weft_result_t rc = weft_exec_op(c, &w);
  for (int p = 0; p < c->nranks && rc == WEFT_SUCCESS; p++) {
    const call_t *o = &all[p];
    int same = o->coll == mine.coll && (!(o->comparable && mine.comparable) ||
                                        (o->dtype == mine.dtype && o->op == mine.op &&
                                         o->root == mine.root && o->count == mine.count));
    if (same) continue;
    char a[160], b[160];
    name_call(a, sizeof a, o);
    name_call(b, sizeof b, &mine);
    rc = weft_set_error(WEFT_ERR_MISMATCH,
                        "WEFT_CHECK: op %llu: rank %d called %s, rank %d called %s",
                        (unsigned long long)op->seq, p, a, c->rank, b);
  }
  free(all);
  return rc;
}
