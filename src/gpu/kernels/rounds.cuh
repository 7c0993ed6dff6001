/* How a staged item cuts its buffers into rounds of one chunk per block, its blocks' roles,
 * the in-place rounds' progress, and the sends and receives every staged algorithm shares.
 * Part of the device kernel's one translation unit (kernels.cu includes it). */
#ifndef WEFT_ROUNDS_CUH
#define WEFT_ROUNDS_CUH

#include "prims.cuh"
#include "reduce.cuh"

namespace weft {

/* Elements per round and channel: the channel's share of len cut into `rounds` rounds (so
 * that its sender and receiver overlap), no shorter than WEFT_DEV_MIN_UNIT_BYTES, no longer
 * than a chunk, in whole 16-byte vectors. Sender and receiver of a pair compute the same. */
__device__ inline uint64_t unit_for(uint64_t len, int nb, uint64_t chunk_elems, int es,
                                    uint32_t rounds) {
  uint64_t v = 16 / es, parts = (uint64_t)nb * (rounds ? rounds : 1);
  uint64_t u = (len + parts - 1) / parts, floor_u = WEFT_DEV_MIN_UNIT_BYTES / es;
  uint64_t share = (len + nb - 1) / nb;
  if (u < floor_u) u = floor_u < share ? floor_u : share;
  u = (u + v - 1) / v * v;
  return u < chunk_elems ? u : chunk_elems;
}

__device__ inline uint64_t clamp_len(uint64_t total, uint64_t off, uint64_t unit) {
  return off >= total ? 0 : (total - off < unit ? total - off : unit);
}

/* Steps of a round; a block runs those of its role (all of them with one role). */
enum { STEP_SEND = 1, STEP_RECV = 2, STEP_GATHER = 4, STEP_ALL = 7 };

__device__ inline int role_steps(int roles, int role) {
  if (roles <= 1) return STEP_ALL;
  return role == 0 ? STEP_SEND | STEP_GATHER : STEP_RECV;
}

/* The peers in the order this rank talks to them: rank+1 first, so that the ranks do not
 * all write into the same peer at once. */
__device__ inline int peer_at(const Chan &c, int i) { return (c.rank + 1 + i) % c.n; }

struct Item {
  const weft_dev_item_t *it;
  int ci, nb, es; /* channel of this block within the item, channels, element size */
  uint64_t chunk_elems;
  int steps;
  uint32_t rounds;    /* reductions only: their receivers have more to do, overlap pays */
  uint64_t *progress; /* in place with split roles: the channel's sender's rounds, else null */
};

/* In place with split roles, a receiver must not overwrite the input of a round before the
 * sender of its channel has read it: the sender counts its rounds in device memory, the
 * receiver waits for the count, and resets it after the last round (the sender is done
 * then, and the next launch of the comm starts from 0). */
__device__ inline void sent_round(const Item &w, uint64_t k) {
  if (w.progress && threadIdx.x == 0) st_release_sys(w.progress, k);
}
__device__ inline bool await_round(const Chan &c, const Item &w, uint64_t k) {
  return !w.progress || c.wait_geq(w.progress, k, peer_at(c, 0));
}
__device__ inline void rounds_done(const Item &w) {
  if (!w.progress || !(w.steps & STEP_RECV)) return;
  __syncthreads();
  if (threadIdx.x == 0) *(volatile uint64_t *)w.progress = 0;
}

/* Sends len elements at in + (p * stride + off) to every peer p (stride 0: the same block to
 * all), then publishes them. False when the channel gave up. */
__device__ bool scatter(const Chan &c, const char *in, uint64_t stride, uint64_t off, uint64_t len,
                        int es) {
  int nd = 0, dsts[WEFT_DEV_MAX_RANKS];
  for (int i = 0; i < c.n - 1; i++) {
    int p = peer_at(c, i);
    char *slot = c.send_slot(p);
    if (!slot) return false;
    copy1(slot, in + ((uint64_t)p * stride + off) * es, len * es);
    dsts[nd++] = p;
  }
  c.publish(dsts, nd, len * es);
  return true;
}

/* The inputs of a reduction in rank order: ours at `mine`, every peer's incoming chunk;
 * srcs lists the peers whose slots the caller releases after reducing. */
__device__ bool collect(const Chan &c, const char *mine, const char **src, int *srcs, int *ns) {
  *ns = 0;
  for (int j = 0; j < c.n; j++) {
    if (j == c.rank) {
      src[j] = mine;
      continue;
    }
    src[j] = c.recv_slot(j);
    if (!src[j]) return false;
    srcs[(*ns)++] = j;
  }
  return true;
}

} // namespace weft

#endif
