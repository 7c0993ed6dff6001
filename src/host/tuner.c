/* The host engine's tuner: an alpha-beta(-gamma) cost model over the slowest link (each
 * transport declares its costs) picks the algorithm and the pipeline chunk; WEFT_ALGO and
 * WEFT_CHUNK_BYTES override it (tests and benchmarks); collbench measures the crossovers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "dtype.h"
#include "err.h"
#include "host.h"
#include "param.h"

static double log2i(int n) { return ceil(log2((double)(n < 2 ? 2 : n))); }

static double cost(weft_coll_t coll, weft_algo_t a, int n, double m, const weft_link_cost_t *L) {
  int p = 1;
  while (p * 2 <= n)
    p *= 2;
  double fold = p == n ? 0 : 2 * L->alpha + 2 * m * L->beta + m * L->gamma;
  double frac = (double)(n - 1) / n;
  double ring_lat = L->alpha + L->ring_step;
  switch (coll) {
  case WEFT_COLL_ALLREDUCE:
    switch (a) {
    case WEFT_ALGO_RING:
      return 2 * (n - 1) * ring_lat + 2 * frac * m * L->beta + frac * m * L->gamma;
    case WEFT_ALGO_RHD: return 2 * log2i(p) * L->alpha + 2 * m * L->beta + m * L->gamma + fold;
    case WEFT_ALGO_TREE: return 2 * log2i(n) * L->alpha + 2.5 * m * L->beta + m * L->gamma;
    case WEFT_ALGO_DIRECT: return 2 * L->alpha + (n - 1) * m * (L->beta + L->gamma);
    default: return INFINITY;
    }
  case WEFT_COLL_REDUCE_SCATTER:
  case WEFT_COLL_ALLGATHER: { /* m is the whole buffer (n blocks) */
    double g = coll == WEFT_COLL_REDUCE_SCATTER ? frac * m * L->gamma : 0;
    switch (a) {
    case WEFT_ALGO_RING: return (n - 1) * ring_lat + frac * m * L->beta + g;
    case WEFT_ALGO_RHD: return p == n ? log2i(n) * L->alpha + frac * m * L->beta + g : INFINITY;
    case WEFT_ALGO_DIRECT: return L->alpha + frac * m * L->beta * 1.5 + g;
    default: return INFINITY;
    }
  }
  case WEFT_COLL_BROADCAST:
  case WEFT_COLL_REDUCE: {
    double g = coll == WEFT_COLL_REDUCE ? m * L->gamma : 0;
    switch (a) {
    case WEFT_ALGO_CHAIN: return (n - 1) * L->alpha + m * L->beta + g;
    case WEFT_ALGO_TREE: return log2i(n) * L->alpha + 2 * m * L->beta + g;
    default: return INFINITY;
    }
  }
  case WEFT_COLL_ALLTOALL:
  case WEFT_COLL_ALLTOALLV:
    switch (a) {
    /* all peers at once thrash the cache once blocks are large (measured at 8 ranks) */
    case WEFT_ALGO_DIRECT: return L->alpha + frac * m * L->beta * (1 + 0.06 * (n - 1));
    case WEFT_ALGO_PAIRWISE: return (n - 1) * L->alpha + frac * m * L->beta;
    default: return INFINITY;
    }
  default: return a == WEFT_ALGO_DIRECT ? 0 : INFINITY;
  }
}

/* Why forced algorithm a cannot serve t, or NULL when it can. */
static const char *unusable(const weft_task_t *t, weft_algo_t a) {
  int n = t->args.nranks;
  if (a == WEFT_ALGO_RHD && t->args.coll != WEFT_COLL_ALLREDUCE && (n & (n - 1)))
    return "it needs a power-of-two number of ranks";
  return NULL;
}

/* Host buffers. A forced algorithm the collective does not have at all (ring for broadcast)
 * leaves the choice to the cost model, so that one setting can force what it names across a
 * whole run; one it has but that cannot serve this call fails the call instead of being
 * replaced, so that a test or benchmark is never told it ran what did not run. */
weft_result_t weft_host_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced) {
  int n = c->nranks;
  size_t es = weft_dtype_size(t->dtype);
  double m = (double)t->args.count * (double)es;
  if (t->args.coll == WEFT_COLL_REDUCE_SCATTER || t->args.coll == WEFT_COLL_ALLGATHER ||
      t->args.coll == WEFT_COLL_ALLTOALL)
    m *= n;
  /* the slowest link sets the pace of every algorithm that uses it */
  const weft_link_cost_t *L = NULL;
  for (int p = 0; p < n; p++) {
    const weft_link_cost_t *l = &c->tr[c->peer_tr[p]]->cost;
    if (!L || l->alpha > L->alpha) L = l;
  }
  if (forced != WEFT_ALGO_AUTO && weft_algo_lookup(t->args.coll, forced)) {
    const char *why = unusable(t, forced);
    if (why)
      return weft_set_error(WEFT_ERR_UNSUPPORTED, "WEFT_ALGO=%s cannot run %s on %d ranks: %s",
                            weft_algo_name(forced), weft_coll_name(t->args.coll), n, why);
    t->algo = forced;
  } else {
    double best = INFINITY;
    t->algo = WEFT_ALGO_DIRECT;
    for (int a = WEFT_ALGO_RING; a < WEFT_ALGO_COUNT; a++) {
      if (!weft_algo_lookup(t->args.coll, (weft_algo_t)a) || unusable(t, (weft_algo_t)a)) continue;
      double v = cost(t->args.coll, (weft_algo_t)a, n, m, L);
      if (v < best) {
        best = v;
        t->algo = (weft_algo_t)a;
      }
    }
  }
  /* Chunks: small enough that a ring has several in flight per segment, large enough
   * that per-step overhead stays small. */
  int64_t cb = weft_param_get_int(WEFT_PARAM_CHUNK_BYTES);
  if (cb <= 0) {
    double seg = m / (n > 1 ? n : 1) / 4;
    cb = seg < 32768 ? 32768 : seg > 524288 ? 524288 : (int64_t)seg;
  }
  uint64_t chunk = (uint64_t)cb / es;
  t->args.chunk = chunk ? chunk : 1;
  WEFT_TRACE(WEFT_SUB_TUNE, "%s %.0f bytes on %d ranks: %s, chunk %llu elements",
             weft_coll_name(t->args.coll), m, n, weft_algo_name(t->algo),
             (unsigned long long)t->args.chunk);
  return WEFT_SUCCESS;
}
