/* Double binary tree (allreduce) and pipelined binary tree (broadcast, reduce). Tree A is
 * a heap over ranks in order; tree B is its mirror, so the leaves of one are mostly the
 * inner nodes of the other and each carries half the data: every rank sends and receives
 * about one message size in total, in log2(n) hops of latency. */
#include "schedule.h"

typedef struct {
  int vroot;  /* the real rank with virtual rank 0 */
  int mirror; /* tree B: virtual = n - 1 - real */
  uint64_t base, len;
} tree_t;

static int to_virtual(const tree_t *t, int r, int n) {
  return t->mirror ? n - 1 - r : (r - t->vroot + n) % n;
}
static int to_real(const tree_t *t, int v, int n) {
  return t->mirror ? n - 1 - v : (v + t->vroot) % n;
}

typedef struct {
  const weft_coll_args_t *a;
  weft_sched_t *s;
  int32_t sent_up; /* last up-send of the current chunk, for the down phase's overwrite */
  int32_t reduced; /* last reduction of the current chunk */
} emit_t;

static void chunk_range(const tree_t *t, uint64_t chunk, uint64_t c, uint64_t *off, uint64_t *len) {
  *off = t->base + c * chunk;
  uint64_t end = t->base + t->len;
  *len = *off >= end ? 0 : (end - *off < chunk ? end - *off : chunk);
}

static void emit_up(emit_t *e, const tree_t *t, uint64_t c) {
  const weft_coll_args_t *a = e->a;
  int n = a->nranks, v = to_virtual(t, a->rank, n);
  uint64_t off, len;
  chunk_range(t, a->chunk, c, &off, &len);
  e->sent_up = e->reduced = -1;
  if (len == 0) return;
  /* Allreduce accumulates in recvbuf; reduce's non-roots may have none, so use scratch. */
  weft_buf_t acc = (a->coll == WEFT_COLL_ALLREDUCE || v == 0) ? WEFT_BUF_RECV : WEFT_BUF_SCRATCH;
  weft_buf_t val = WEFT_BUF_SEND;
  for (int k = 1; k <= 2; k++) {
    int cv = 2 * v + k;
    if (cv >= n) break;
    e->reduced = weft_sched_add(e->s, WEFT_STEP_RECV_REDUCE, to_real(t, cv, n), acc, off, val, off,
                                len, e->reduced, -1);
    val = acc;
  }
  if (v != 0)
    e->sent_up = weft_sched_add(e->s, WEFT_STEP_SEND, to_real(t, (v - 1) / 2, n), val, off, 0, 0,
                                len, e->reduced, -1);
}

static void emit_down(emit_t *e, const tree_t *t, uint64_t c) {
  const weft_coll_args_t *a = e->a;
  int n = a->nranks, v = to_virtual(t, a->rank, n);
  uint64_t off, len;
  chunk_range(t, a->chunk, c, &off, &len);
  if (len == 0) return;
  int32_t ready = e->reduced;
  weft_buf_t src = WEFT_BUF_RECV;
  if (v != 0)
    ready = weft_sched_add(e->s, WEFT_STEP_RECV, to_real(t, (v - 1) / 2, n), WEFT_BUF_RECV, off, 0,
                           0, len, e->sent_up, -1);
  else if (a->coll == WEFT_COLL_BROADCAST && !a->in_place)
    src = WEFT_BUF_SEND;
  for (int k = 1; k <= 2; k++) {
    int cv = 2 * v + k;
    if (cv >= n) break;
    weft_sched_add(e->s, WEFT_STEP_SEND, to_real(t, cv, n), src, off, 0, 0, len, ready, -1);
  }
}

weft_result_t weft_tree(const weft_coll_args_t *a, weft_sched_t *s) {
  int n = a->nranks;
  weft_coll_t coll = a->coll;
  if (coll != WEFT_COLL_ALLREDUCE && coll != WEFT_COLL_BROADCAST && coll != WEFT_COLL_REDUCE)
    return WEFT_ERR_UNSUPPORTED;
  int root_here = coll == WEFT_COLL_ALLREDUCE || a->rank == a->root;
  if (n == 1 || (coll == WEFT_COLL_BROADCAST && a->rank == a->root)) {
    if (!a->in_place && root_here)
      weft_sched_add(s, WEFT_STEP_COPY, a->rank, WEFT_BUF_RECV, 0, WEFT_BUF_SEND, 0, a->count, -1,
                     -1);
    if (n == 1) return weft_sched_status(s);
  }
  tree_t trees[2];
  int ntrees = 1;
  trees[0] =
      (tree_t){.vroot = coll == WEFT_COLL_ALLREDUCE ? 0 : a->root, .base = 0, .len = a->count};
  if (coll == WEFT_COLL_ALLREDUCE && n > 2) {
    ntrees = 2;
    weft_split(a->count, 2, 0, &trees[0].base, &trees[0].len);
    trees[1] = (tree_t){.mirror = 1};
    weft_split(a->count, 2, 1, &trees[1].base, &trees[1].len);
  }
  if (coll == WEFT_COLL_REDUCE && a->rank != a->root) s->scratch_count = a->count;
  uint64_t k = (trees[0].len + a->chunk - 1) / a->chunk; /* tree 0's half is the larger */
  emit_t e[2] = {{.a = a, .s = s, .sent_up = -1, .reduced = -1},
                 {.a = a, .s = s, .sent_up = -1, .reduced = -1}};
  /* Per chunk, all up-moves before all down-moves on both trees: every link then carries
   * chunk c's messages in one order on both ends, and no step waits on a later one. */
  for (uint64_t c = 0; c < k; c++) {
    if (coll != WEFT_COLL_BROADCAST)
      for (int t = 0; t < ntrees; t++)
        emit_up(&e[t], &trees[t], c);
    if (coll != WEFT_COLL_REDUCE)
      for (int t = 0; t < ntrees; t++)
        emit_down(&e[t], &trees[t], c);
  }
  return weft_sched_status(s);
}
