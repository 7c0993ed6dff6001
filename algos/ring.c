/* Ring reduce-scatter, all-gather, and all-reduce as the two back to back. Data is cut
 * into nranks segments; each segment into chunks, so that a chunk can move on to the next
 * rank while later chunks of the same segment are still arriving (pipelining). */
#include <stdlib.h>

#include "schedule.h"

typedef struct {
  const weft_coll_args_t *a;
  weft_sched_t *s;
  int n, r, next, prev;
  uint64_t chunk, kmax;
  int32_t *reduced; /* [seg * kmax + c]: step that produced chunk c of seg in its buffer */
  int32_t *sent;    /* [seg * kmax + c]: last step that read chunk c of seg for sending */
} ring_t;

static uint64_t seg_len(const ring_t *g, int seg) {
  if (g->a->coll != WEFT_COLL_ALLREDUCE) return g->a->count;
  uint64_t off, len;
  weft_split(g->a->count, g->n, seg, &off, &len);
  return len;
}

static uint64_t seg_off(const ring_t *g, int seg) {
  if (g->a->coll != WEFT_COLL_ALLREDUCE) return (uint64_t)seg * g->a->count;
  uint64_t off, len;
  weft_split(g->a->count, g->n, seg, &off, &len);
  return off;
}

static uint64_t nchunks(const ring_t *g, int seg) {
  return (seg_len(g, seg) + g->chunk - 1) / g->chunk;
}

static int mod(int x, int n) { return ((x % n) + n) % n; }

/* Reduce-scatter: at step t a rank sends segment r-1-t and reduces segment r-2-t, so the
 * last step (t = n-2) completes its own segment r. */
static void reduce_scatter_phase(ring_t *g) {
  const weft_coll_args_t *a = g->a;
  int allreduce = a->coll == WEFT_COLL_ALLREDUCE;
  /* Partial sums live in recvbuf for allreduce; reduce-scatter's recvbuf holds only its
   * own segment, so partials go to scratch. */
  weft_buf_t part = allreduce ? WEFT_BUF_RECV : WEFT_BUF_SCRATCH;
  for (int t = 0; t < g->n - 1; t++) {
    int sseg = mod(g->r - 1 - t, g->n), rseg = mod(g->r - 2 - t, g->n);
    uint64_t ks = nchunks(g, sseg), kr = nchunks(g, rseg), k = ks > kr ? ks : kr;
    for (uint64_t c = 0; c < k; c++) {
      if (c < ks) {
        uint64_t co = c * g->chunk, cl = seg_len(g, sseg) - co;
        if (cl > g->chunk) cl = g->chunk;
        weft_buf_t b = t == 0 ? WEFT_BUF_SEND : part;
        int32_t dep = t == 0 ? -1 : g->reduced[sseg * g->kmax + c];
        int32_t i = weft_sched_add(g->s, WEFT_STEP_SEND, g->next, b, seg_off(g, sseg) + co, 0, 0,
                                   cl, dep, -1);
        if (b != WEFT_BUF_SEND) g->sent[sseg * g->kmax + c] = i;
      }
      if (c < kr) {
        uint64_t co = c * g->chunk, cl = seg_len(g, rseg) - co;
        if (cl > g->chunk) cl = g->chunk;
        int last = t == g->n - 2;
        weft_buf_t dst = last ? WEFT_BUF_RECV : part;
        uint64_t doff = (last && !allreduce) ? co : seg_off(g, rseg) + co;
        g->reduced[rseg * g->kmax + c] =
            weft_sched_add(g->s, WEFT_STEP_RECV_REDUCE, g->prev, dst, doff, WEFT_BUF_SEND,
                           seg_off(g, rseg) + co, cl, -1, -1);
      }
    }
  }
}

/* All-gather: at step t a rank forwards segment r-t and receives segment r-1-t. */
static void allgather_phase(ring_t *g) {
  const weft_coll_args_t *a = g->a;
  int allgather = a->coll == WEFT_COLL_ALLGATHER;
  if (allgather && !a->in_place)
    weft_sched_add(g->s, WEFT_STEP_COPY, g->r, WEFT_BUF_RECV, seg_off(g, g->r), WEFT_BUF_SEND, 0,
                   a->count, -1, -1);
  for (int t = 0; t < g->n - 1; t++) {
    int sseg = mod(g->r - t, g->n), rseg = mod(g->r - 1 - t, g->n);
    uint64_t ks = nchunks(g, sseg), kr = nchunks(g, rseg), k = ks > kr ? ks : kr;
    for (uint64_t c = 0; c < k; c++) {
      if (c < ks) {
        uint64_t co = c * g->chunk, cl = seg_len(g, sseg) - co;
        if (cl > g->chunk) cl = g->chunk;
        /* allgather's own segment goes straight from sendbuf: no wait for the copy. */
        int from_send = allgather && t == 0 && !a->in_place;
        int32_t dep = (allgather && t == 0) ? -1 : g->reduced[sseg * g->kmax + c];
        weft_sched_add(g->s, WEFT_STEP_SEND, g->next, from_send ? WEFT_BUF_SEND : WEFT_BUF_RECV,
                       from_send ? co : seg_off(g, sseg) + co, 0, 0, cl, dep, -1);
      }
      if (c < kr) {
        uint64_t co = c * g->chunk, cl = seg_len(g, rseg) - co;
        if (cl > g->chunk) cl = g->chunk;
        /* Overwrites the region the reduce-scatter phase may still be sending from. */
        g->reduced[rseg * g->kmax + c] =
            weft_sched_add(g->s, WEFT_STEP_RECV, g->prev, WEFT_BUF_RECV, seg_off(g, rseg) + co, 0,
                           0, cl, g->sent[rseg * g->kmax + c], -1);
      }
    }
  }
}

weft_result_t weft_ring(const weft_coll_args_t *a, weft_sched_t *s) {
  if (a->coll != WEFT_COLL_ALLREDUCE && a->coll != WEFT_COLL_REDUCE_SCATTER &&
      a->coll != WEFT_COLL_ALLGATHER)
    return WEFT_ERR_UNSUPPORTED;
  ring_t g = {.a = a, .s = s, .n = a->nranks, .r = a->rank, .chunk = a->chunk};
  g.next = (g.r + 1) % g.n;
  g.prev = (g.r + g.n - 1) % g.n;
  if (g.n == 1) {
    if (!a->in_place)
      weft_sched_add(s, WEFT_STEP_COPY, 0, WEFT_BUF_RECV, 0, WEFT_BUF_SEND, 0, a->count, -1, -1);
    return weft_sched_status(s);
  }
  g.kmax = (seg_len(&g, 0) + g.chunk - 1) / g.chunk; /* segment 0 is the longest */
  if (g.kmax == 0) return WEFT_SUCCESS;
  size_t cells = (size_t)g.n * g.kmax;
  g.reduced = malloc(cells * sizeof *g.reduced);
  g.sent = malloc(cells * sizeof *g.sent);
  if (!g.reduced || !g.sent) {
    free(g.reduced);
    free(g.sent);
    return WEFT_ERR_NO_MEMORY;
  }
  for (size_t i = 0; i < cells; i++)
    g.reduced[i] = g.sent[i] = -1;
  if (a->coll == WEFT_COLL_REDUCE_SCATTER) s->scratch_count = (uint64_t)g.n * a->count;
  if (a->coll != WEFT_COLL_ALLGATHER) reduce_scatter_phase(&g);
  if (a->coll != WEFT_COLL_REDUCE_SCATTER) allgather_phase(&g);
  free(g.reduced);
  free(g.sent);
  return weft_sched_status(s);
}
