/* The device executor: one kernel per launch runs every work item of an operation or a
 * group, each item on its own blocks (one block = one channel). Every collective is a
 * direct exchange through peers' staging slots, cut into rounds of one chunk per block,
 * which is bandwidth-optimal when every GPU reaches every other over NVLink; allreduce,
 * reduce_scatter and allgather can also run as a pipelined ring (WEFT_ALGO=ring). The
 * algorithms live in headers by family (staged.cuh, direct.cuh, ring.cuh), all in this one
 * translation unit, so that the compiler sees the whole kernel at once. */
#include <cuda_runtime.h>

#include "dev.h"
#include "direct.cuh"
#include "prims.cuh"
#include "reduce.cuh"
#include "ring.cuh"
#include "rounds.cuh"
#include "staged.cuh"

namespace weft {

/* A block's counters of one channel, in shared memory; loaded at the start, and at the end
 * only the counts this block moved are stored back: another block of the launch may use the
 * channel's other direction (a send and a receive item, or two roles of one item). */
struct ChanState {
  uint64_t sent[WEFT_DEV_MAX_RANKS], recvd[WEFT_DEV_MAX_RANKS];
  uint64_t sent0[WEFT_DEV_MAX_RANKS], recvd0[WEFT_DEV_MAX_RANKS];
};

__device__ inline Chan open_chan(const weft_dev_launch_t &L, int ch, ChanState *s, int *bail,
                                 uint32_t kind) {
  Chan c = {&L, ch, L.rank, L.nranks, s->sent, s->recvd, bail, kind};
  const uint64_t *ctr = L.counters + (uint64_t)ch * WEFT_DEV_MAX_RANKS * 2;
  /* a direct item's channels past the staged ones have no staging counters (nor use them) */
  if (threadIdx.x < WEFT_DEV_MAX_RANKS && ch < WEFT_DEV_MAX_CHANNELS) {
    s->sent[threadIdx.x] = s->sent0[threadIdx.x] = ctr[threadIdx.x * 2];
    s->recvd[threadIdx.x] = s->recvd0[threadIdx.x] = ctr[threadIdx.x * 2 + 1];
  }
  return c;
}

__device__ inline void close_chan(const weft_dev_launch_t &L, int ch, const ChanState *s) {
  uint64_t *ctr = L.counters + (uint64_t)ch * WEFT_DEV_MAX_RANKS * 2;
  int t = threadIdx.x;
  if (t < WEFT_DEV_MAX_RANKS && ch < WEFT_DEV_MAX_CHANNELS) {
    if (s->sent[t] != s->sent0[t]) ctr[t * 2] = s->sent[t];
    if (s->recvd[t] != s->recvd0[t]) ctr[t * 2 + 1] = s->recvd[t];
  }
}

/* At most 64 registers a thread: two blocks fit on an SM, so two communicators' kernels (or
 * a kernel and the trainer's) can be resident at once. */
__global__ void __launch_bounds__(WEFT_DEV_THREADS, 2)
    kernel(const __grid_constant__ weft_dev_launch_t L) {
  __shared__ ChanState st;
  __shared__ int bail;
  int b = blockIdx.x, i = 0;
  while (i < L.nitems - 1 && b >= L.items[i].block0 + L.items[i].nblocks)
    i++;
  const weft_dev_item_t *it = &L.items[i];
  int roles = it->roles ? it->roles : 1, local = b - it->block0;
  Item w = {it,
            local / roles,
            it->nblocks / roles,
            dtype_size(it->dtype),
            0,
            role_steps(roles, local % roles)};
  w.chunk_elems = L.chunk_bytes / w.es;
  /* a ring overlaps its steps already: one round, as long as a chunk, took 16 MiB allreduce
   * from 113 to 80 us on 2 H200s (bench/results/2026-12-01-h200x2-ring.txt) */
  w.rounds = !it->ring && (it->kind == WEFT_DEV_ALLREDUCE_ONESHOT ||
                           it->kind == WEFT_DEV_ALLREDUCE_TWOSHOT ||
                           it->kind == WEFT_DEV_REDUCE_SCATTER || it->kind == WEFT_DEV_REDUCE)
                 ? L.rounds
                 : 1;
  w.progress = nullptr;
  if (roles > 1 && it->send == it->recv &&
      (it->kind == WEFT_DEV_ALLREDUCE_ONESHOT || it->kind == WEFT_DEV_ALLTOALL))
    w.progress = L.progress + (uint64_t)(it->chan0 + w.ci) * (WEFT_DEV_FLAG_STRIDE / 8);
  int ch = it->chan0 + w.ci;
  Chan c = open_chan(L, ch, &st, &bail,
                     it->kind | (it->direct ? WEFT_DEV_DIRECT_KIND : 0) |
                         (it->ring ? WEFT_DEV_RING_KIND : 0));
  if (threadIdx.x == 0) bail = 0;
  __syncthreads();
  switch (it->kind) {
  case WEFT_DEV_ALLREDUCE_ONESHOT: allreduce(c, w, false); break;
  case WEFT_DEV_ALLREDUCE_TWOSHOT:
    if (it->direct)
      direct_allreduce(c, w);
    else if (it->ring)
      ring(c, w);
    else
      allreduce(c, w, true);
    break;
  case WEFT_DEV_REDUCE_SCATTER:
    if (it->direct)
      direct_reduce_scatter(c, w);
    else if (it->ring)
      ring(c, w);
    else
      reduce_scatter(c, w);
    break;
  case WEFT_DEV_ALLGATHER: {
    bool self =
        (const char *)it->send != (const char *)it->recv + (uint64_t)c.rank * it->count * w.es;
    if (it->direct)
      direct_exchange(c, w, (const char *)it->send, 0, self);
    else if (it->ring)
      ring(c, w);
    else
      exchange(c, w, it->count, (const char *)it->send, 0, (char *)it->recv, it->count, self);
    break;
  }
  case WEFT_DEV_ALLTOALL:
    if (it->direct) /* never in place: peers would overwrite blocks we have yet to send */
      direct_exchange(c, w, (const char *)it->send, it->count, true);
    else
      exchange(c, w, it->count, (const char *)it->send, it->count, (char *)it->recv, it->count,
               it->send != it->recv);
    break;
  case WEFT_DEV_BROADCAST:
  case WEFT_DEV_REDUCE:
    if (it->ring)
      chain(c, w, it->kind == WEFT_DEV_REDUCE);
    else
      rooted(c, w, it->kind == WEFT_DEV_REDUCE);
    break;
  case WEFT_DEV_ALLTOALLV: alltoallv(c, w); break;
  case WEFT_DEV_SEND: sendrecv(c, w, true); break;
  case WEFT_DEV_RECV: sendrecv(c, w, false); break;
  default: break;
  }
  __syncthreads();
  if (bail) return;
  close_chan(L, ch, &st);
}

} // namespace weft

extern "C" int weft_dev_launch(const weft_dev_launch_t *l, int nblocks, void *stream) {
  void *args[] = {(void *)l};
  return (int)cudaLaunchKernel((const void *)weft::kernel, dim3(nblocks), dim3(WEFT_DEV_THREADS),
                               args, 0, (cudaStream_t)stream);
}

extern "C" const char *weft_dev_error_string(int code) {
  return cudaGetErrorString((cudaError_t)code);
}

extern "C" int weft_dev_occupancy(void) { return weft::occupancy(weft::kernel); }
