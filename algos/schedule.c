/* Schedule building blocks shared by every generator, and the table that maps a
 * (collective, algorithm) pair to its generator. */
#include "schedule.h"

#include <stdlib.h>
#include <strings.h>

void weft_sched_init(weft_sched_t *s) {
  s->steps = NULL;
  s->nsteps = s->cap = 0;
  s->scratch_count = 0;
}

void weft_sched_free(weft_sched_t *s) {
  free(s->steps);
  weft_sched_init(s);
}

/* cap == SIZE_MAX marks a schedule whose growth failed. */
int32_t weft_sched_add(weft_sched_t *s, weft_step_kind_t kind, int peer, weft_buf_t buf,
                       uint64_t off, weft_buf_t src_buf, uint64_t src_off, uint64_t count,
                       int32_t dep0, int32_t dep1) {
  if (count == 0 || s->cap == SIZE_MAX) return -1;
  if (s->nsteps == s->cap) {
    size_t ncap = s->cap ? s->cap * 2 : 64;
    weft_step_t *n = realloc(s->steps, ncap * sizeof *n);
    if (!n || s->nsteps >= INT32_MAX) {
      s->cap = SIZE_MAX;
      return -1;
    }
    s->steps = n;
    s->cap = ncap;
  }
  weft_step_t *st = &s->steps[s->nsteps];
  *st = (weft_step_t){.kind = (uint8_t)kind,
                      .buf = (uint8_t)buf,
                      .src_buf = (uint8_t)src_buf,
                      .peer = peer,
                      .off = off,
                      .src_off = src_off,
                      .count = count,
                      .dep = {dep0, dep1}};
  return (int32_t)s->nsteps++;
}

weft_result_t weft_sched_status(const weft_sched_t *s) {
  return s->cap == SIZE_MAX ? WEFT_ERR_NO_MEMORY : WEFT_SUCCESS;
}

void weft_split(uint64_t count, int parts, int i, uint64_t *off, uint64_t *len) {
  uint64_t base = count / (uint64_t)parts, rem = count % (uint64_t)parts;
  uint64_t ui = (uint64_t)i;
  *off = ui * base + (ui < rem ? ui : rem);
  *len = base + (ui < rem ? 1 : 0);
}

weft_a2a_block_t weft_a2a_block(const weft_coll_args_t *a, int to, int from) {
  if (a->coll == WEFT_COLL_ALLTOALLV)
    return (weft_a2a_block_t){a->sdispls[to], a->sendcounts[to], a->rdispls[from],
                              a->recvcounts[from]};
  return (weft_a2a_block_t){(uint64_t)to * a->count, a->count, (uint64_t)from * a->count, a->count};
}

int32_t weft_alltoall_snapshot(const weft_coll_args_t *a, weft_sched_t *s) {
  if (!a->in_place) return -1;
  uint64_t total = (uint64_t)a->nranks * a->count;
  s->scratch_count = total;
  return weft_sched_add(s, WEFT_STEP_COPY, a->rank, WEFT_BUF_SCRATCH, 0, WEFT_BUF_SEND, 0, total,
                        -1, -1);
}

static const char *algo_names[WEFT_ALGO_COUNT] = {
    "auto", "ring", "rhd", "tree", "direct", "pairwise", "chain", "oneshot", "twoshot"};
static const char *coll_names[WEFT_COLL_COUNT] = {"allreduce", "reduce_scatter", "allgather",
                                                  "broadcast", "reduce",         "alltoall",
                                                  "alltoallv", "send",           "recv"};

const char *weft_algo_name(weft_algo_t a) {
  return (unsigned)a < WEFT_ALGO_COUNT ? algo_names[a] : "invalid";
}
const char *weft_coll_name(weft_coll_t c) {
  return (unsigned)c < WEFT_COLL_COUNT ? coll_names[c] : "invalid";
}

int weft_coll_reduces(weft_coll_t c) {
  return c == WEFT_COLL_ALLREDUCE || c == WEFT_COLL_REDUCE_SCATTER || c == WEFT_COLL_REDUCE;
}

int weft_coll_rooted(weft_coll_t c) { return c == WEFT_COLL_BROADCAST || c == WEFT_COLL_REDUCE; }

weft_algo_t weft_algo_parse(const char *name) {
  for (int i = 0; i < WEFT_ALGO_COUNT; i++)
    if (strcasecmp(name, algo_names[i]) == 0) return (weft_algo_t)i;
  return WEFT_ALGO_COUNT;
}

weft_algo_fn weft_algo_lookup(weft_coll_t coll, weft_algo_t algo) {
  static const weft_algo_fn table[WEFT_COLL_COUNT][WEFT_ALGO_COUNT] = {
      [WEFT_COLL_ALLREDUCE] = {[WEFT_ALGO_RING] = weft_ring,
                               [WEFT_ALGO_RHD] = weft_rhd,
                               [WEFT_ALGO_TREE] = weft_tree,
                               [WEFT_ALGO_DIRECT] = weft_direct},
      [WEFT_COLL_REDUCE_SCATTER] = {[WEFT_ALGO_RING] = weft_ring,
                                    [WEFT_ALGO_RHD] = weft_rhd,
                                    [WEFT_ALGO_DIRECT] = weft_direct},
      [WEFT_COLL_ALLGATHER] = {[WEFT_ALGO_RING] = weft_ring,
                               [WEFT_ALGO_RHD] = weft_rhd,
                               [WEFT_ALGO_DIRECT] = weft_direct},
      [WEFT_COLL_BROADCAST] = {[WEFT_ALGO_CHAIN] = weft_chain, [WEFT_ALGO_TREE] = weft_tree},
      [WEFT_COLL_REDUCE] = {[WEFT_ALGO_CHAIN] = weft_chain, [WEFT_ALGO_TREE] = weft_tree},
      [WEFT_COLL_ALLTOALL] =
          {[WEFT_ALGO_PAIRWISE] = weft_pairwise, [WEFT_ALGO_DIRECT] = weft_direct},
      [WEFT_COLL_ALLTOALLV] =
          {[WEFT_ALGO_PAIRWISE] = weft_pairwise, [WEFT_ALGO_DIRECT] = weft_direct},
      [WEFT_COLL_SEND] = {[WEFT_ALGO_DIRECT] = weft_p2p},
      [WEFT_COLL_RECV] = {[WEFT_ALGO_DIRECT] = weft_p2p},
  };
  if ((unsigned)coll >= WEFT_COLL_COUNT || (unsigned)algo >= WEFT_ALGO_COUNT) return NULL;
  return table[coll][algo];
}
