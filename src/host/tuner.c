/* The tuner: an alpha-beta(-gamma) cost model per link class picks the algorithm and the
 * pipeline chunk; WEFT_ALGO and WEFT_CHUNK_BYTES override it (tests and benchmarks). The
 * constants are for shared memory and TCP on one host; collbench measures the crossovers. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "dev_comm.h"
#include "dtype.h"
#include "err.h"
#include "param.h"

typedef struct {
  double alpha;     /* seconds per message */
  double beta;      /* seconds per byte moved */
  double gamma;     /* seconds per byte reduced */
  double ring_step; /* extra per ring step: every step waits for the slowest neighbour */
} link_cost_t;

/* Calibrated with scripts/host/tune.sh on a 32-core host (2026-11-30, 4 and 8 ranks):
 * shm moves and reduces about 4 GB/s per rank once the data leaves the cache, and a ring
 * step costs ~50 us of synchronisation, which is why rhd beats ring up to ~8 MiB there. */
static const link_cost_t SHM = {2.0e-6, 0.24e-9, 0.24e-9, 50e-6};
static const link_cost_t TCP = {25e-6, 0.6e-9, 0.24e-9, 60e-6};

static double log2i(int n) { return ceil(log2((double)(n < 2 ? 2 : n))); }

static double cost(weft_coll_t coll, weft_algo_t a, int n, double m, const link_cost_t *L) {
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

/* WEFT_ALGO as the tuners read it: WEFT_ALGO_AUTO when unset, an error naming the valid
 * values when it is not an algorithm's name. */
static weft_result_t algo_forced(const char *value, weft_algo_t *algo) {
  *algo = value && value[0] ? weft_algo_parse(value) : WEFT_ALGO_AUTO;
  if (*algo != WEFT_ALGO_COUNT) return WEFT_SUCCESS;
  char names[160] = "";
  for (int a = 0; a < WEFT_ALGO_COUNT; a++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", a ? ", " : "",
             weft_algo_name((weft_algo_t)a));
  return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_ALGO=%.40s is not an algorithm (valid: %s)",
                        value, names);
}

/* Host buffers. A forced algorithm the collective does not have at all (ring for broadcast)
 * leaves the choice to the cost model, so that one setting can force what it names across a
 * whole run; one it has but that cannot serve this call fails the call instead of being
 * replaced, so that a test or benchmark is never told it ran what did not run. */
static weft_result_t host_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced) {
  int n = c->nranks;
  size_t es = weft_dtype_size(t->dtype);
  double m = (double)t->args.count * (double)es;
  if (t->args.coll == WEFT_COLL_REDUCE_SCATTER || t->args.coll == WEFT_COLL_ALLGATHER ||
      t->args.coll == WEFT_COLL_ALLTOALL)
    m *= n;
  int remote = 0;
  for (int p = 0; p < n; p++)
    remote |= c->peer_tr[p] == WEFT_TR_TCP;
  const link_cost_t *L = remote ? &TCP : &SHM;
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
  int64_t cb = weft_param_int("WEFT_CHUNK_BYTES");
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

weft_result_t weft_tune(struct weft_comm *c, weft_task_t *t) {
  /* getenv itself, not the parameter table: this runs on every call, and on device
   * communicators queueing is what limits small operations. */
  weft_algo_t forced;
  CHECK(algo_forced(getenv("WEFT_ALGO"), &forced));
  if (c->dev)
    weft_dev_tune(c, t, forced);
  else
    CHECK(host_tune(c, t, forced));
  atomic_store(&c->last_algo, (int)t->algo);
  return WEFT_SUCCESS;
}

const char *weft_comm_last_algo(weft_comm_t comm) {
  int a = comm ? atomic_load(&comm->last_algo) : WEFT_ALGO_AUTO;
  return a == WEFT_ALGO_AUTO ? "none" : weft_algo_name((weft_algo_t)a);
}
