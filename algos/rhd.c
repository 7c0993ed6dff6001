/* Recursive halving (reduce-scatter) then recursive doubling (all-gather): log2(n) steps,
 * the latency-optimal choice for small and medium messages. For a non-power-of-two n the
 * first 2*(n-p) ranks pair up: each even one hands its data to its odd neighbour and gets
 * the result back at the end (allreduce). Reduce-scatter and allgather need n = 2^k. */
#include "schedule.h"

typedef struct {
  const weft_coll_args_t *a;
  weft_sched_t *s;
  int p, nr;           /* power-of-two group size, rank within it */
  uint64_t block;      /* reduce-scatter/allgather: elements per block; 0: split count */
  int32_t rs_send[32]; /* per level, the halving step's send */
} rhd_t;

static int is_pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

static int real_rank(int nr, int rem) { return nr < rem ? 2 * nr + 1 : nr + rem; }

static void block_range(const rhd_t *g, int lo, int hi, uint64_t *off, uint64_t *len) {
  if (g->block) {
    *off = (uint64_t)lo * g->block;
    *len = (uint64_t)(hi - lo) * g->block;
    return;
  }
  uint64_t o1, l1, o2, l2;
  weft_split(g->a->count, g->p, lo, &o1, &l1);
  weft_split(g->a->count, g->p, hi - 1, &o2, &l2);
  *off = o1;
  *len = o2 + l2 - o1;
}

static int level_of(int mask) {
  int l = 0;
  while ((1 << l) < mask)
    l++;
  return l;
}

static int32_t add_keep(int32_t idx, int32_t prev) { return idx >= 0 ? idx : prev; }

/* Halving: returns the step that completes this rank's block. acc is where partial sums
 * live; the last level writes final into RECV (at offset final_off relative to the block). */
static int32_t halving(rhd_t *g, weft_buf_t src, int32_t dep, int rem, weft_buf_t acc,
                       int reduce_scatter) {
  int lo = 0, hi = g->p;
  for (int mask = g->p / 2; mask >= 1; mask /= 2) {
    int partner = real_rank(g->nr ^ mask, rem), mid = lo + (hi - lo) / 2;
    int klo = (g->nr & mask) ? mid : lo, khi = (g->nr & mask) ? hi : mid;
    int slo = (g->nr & mask) ? lo : mid, shi = (g->nr & mask) ? mid : hi;
    uint64_t so, sl, ko, kl;
    block_range(g, slo, shi, &so, &sl);
    block_range(g, klo, khi, &ko, &kl);
    g->rs_send[level_of(mask)] =
        weft_sched_add(g->s, WEFT_STEP_SEND, partner, src, so, 0, 0, sl, dep, -1);
    int last = mask == 1;
    weft_buf_t dst = (last && reduce_scatter) ? WEFT_BUF_RECV : acc;
    uint64_t doff = (last && reduce_scatter) ? 0 : ko;
    dep = add_keep(
        weft_sched_add(g->s, WEFT_STEP_RECV_REDUCE, partner, dst, doff, src, ko, kl, dep, -1), dep);
    src = acc;
    lo = klo;
    hi = khi;
  }
  return dep;
}

/* Doubling: this rank's window of blocks grows from its own block to all p blocks.
 * first_src is where the own block is for the first send. Each receive waits for the one
 * before, so the last one implies the whole window is in place. */
static int32_t doubling(rhd_t *g, weft_buf_t first_src, int32_t dep, int rem, int after_rs) {
  for (int mask = 1; mask < g->p; mask *= 2) {
    int pnr = g->nr ^ mask, partner = real_rank(pnr, rem);
    int mlo = g->nr & ~(mask - 1), plo = pnr & ~(mask - 1);
    uint64_t mo, ml, po, pl;
    block_range(g, mlo, mlo + mask, &mo, &ml);
    block_range(g, plo, plo + mask, &po, &pl);
    weft_buf_t src = mask == 1 ? first_src : WEFT_BUF_RECV;
    uint64_t soff = (mask == 1 && first_src == WEFT_BUF_SEND) ? 0 : mo;
    weft_sched_add(g->s, WEFT_STEP_SEND, partner, src, soff, 0, 0, ml, dep, -1);
    /* The partner's window is what the halving sent from RECV at this level. */
    int32_t sent = after_rs ? g->rs_send[level_of(mask)] : -1;
    dep = add_keep(
        weft_sched_add(g->s, WEFT_STEP_RECV, partner, WEFT_BUF_RECV, po, 0, 0, pl, sent, dep), dep);
  }
  return dep;
}

weft_result_t weft_rhd(const weft_coll_args_t *a, weft_sched_t *s) {
  int n = a->nranks, r = a->rank;
  rhd_t g = {.a = a, .s = s};
  for (int i = 0; i < 32; i++)
    g.rs_send[i] = -1;
  if (a->coll == WEFT_COLL_REDUCE_SCATTER || a->coll == WEFT_COLL_ALLGATHER) {
    if (!is_pow2(n)) return WEFT_ERR_UNSUPPORTED;
    g.p = n;
    g.nr = r;
    g.block = a->count;
    if (n == 1) {
      if (!a->in_place)
        weft_sched_add(s, WEFT_STEP_COPY, r, WEFT_BUF_RECV, 0, WEFT_BUF_SEND, 0, a->count, -1, -1);
      return weft_sched_status(s);
    }
    if (a->coll == WEFT_COLL_REDUCE_SCATTER) {
      s->scratch_count = (uint64_t)n * a->count;
      halving(&g, WEFT_BUF_SEND, -1, 0, WEFT_BUF_SCRATCH, 1);
    } else {
      int32_t cp = -1;
      if (!a->in_place)
        cp = weft_sched_add(s, WEFT_STEP_COPY, r, WEFT_BUF_RECV, (uint64_t)r * a->count,
                            WEFT_BUF_SEND, 0, a->count, -1, -1);
      doubling(&g, a->in_place ? WEFT_BUF_RECV : WEFT_BUF_SEND, cp, 0, 0);
    }
    return weft_sched_status(s);
  }
  if (a->coll != WEFT_COLL_ALLREDUCE) return WEFT_ERR_UNSUPPORTED;
  if (n == 1) {
    if (!a->in_place)
      weft_sched_add(s, WEFT_STEP_COPY, r, WEFT_BUF_RECV, 0, WEFT_BUF_SEND, 0, a->count, -1, -1);
    return weft_sched_status(s);
  }
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  int rem = n - p;
  g.p = p;
  weft_buf_t src = WEFT_BUF_SEND;
  int32_t dep = -1;
  if (r < 2 * rem) {
    if (r % 2 == 0) { /* folded out: hand over the data, get the result back */
      int32_t sent =
          weft_sched_add(s, WEFT_STEP_SEND, r + 1, WEFT_BUF_SEND, 0, 0, 0, a->count, -1, -1);
      weft_sched_add(s, WEFT_STEP_RECV, r + 1, WEFT_BUF_RECV, 0, 0, 0, a->count, sent, -1);
      return weft_sched_status(s);
    }
    dep = weft_sched_add(s, WEFT_STEP_RECV_REDUCE, r - 1, WEFT_BUF_RECV, 0, WEFT_BUF_SEND, 0,
                         a->count, -1, -1);
    src = WEFT_BUF_RECV;
    g.nr = r / 2;
  } else {
    g.nr = r - rem;
  }
  dep = halving(&g, src, dep, rem, WEFT_BUF_RECV, 0);
  dep = doubling(&g, WEFT_BUF_RECV, dep, rem, 1);
  if (r < 2 * rem)
    weft_sched_add(s, WEFT_STEP_SEND, r - 1, WEFT_BUF_RECV, 0, 0, 0, a->count, dep, -1);
  return weft_sched_status(s);
}
