/* MoE layout kernels for device buffers: the ids checked, each token's place in every
 * expert's and every destination rank's list (token order, by block-wide scans), and the
 * send side built from those places; on the receiving side, the row of every choice. No
 * host sync between them: the host reads only the counts (weft_moe_dev_layout). */
#include <stdint.h>

#include "moe_kernels.h"

namespace {

constexpr int THREADS = 256;
constexpr unsigned MAX_BLOCKS = 4096;

unsigned blocks(uint64_t n) { return n < MAX_BLOCKS ? (unsigned)n : MAX_BLOCKS; }
unsigned blocks_of(uint64_t items) { return blocks((items + THREADS - 1) / THREADS); }

/* The first choice of token t whose id lies in [lo, hi), or -1. */
template <typename I> __device__ int find(const I *ids, uint64_t t, int k, int64_t lo, int64_t hi) {
  for (int j = 0; j < k; j++) {
    int64_t e = (int64_t)ids[t * k + j];
    if (e >= lo && e < hi) return j;
  }
  return -1;
}

/* *bad = the lowest choice index t * k + j whose id is out of [-1, experts) or repeated. */
template <typename I>
__global__ void check(const I *ids, uint64_t tokens, int k, int experts, unsigned long long *bad) {
  for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < tokens;
       t += (uint64_t)gridDim.x * blockDim.x)
    for (int j = 0; j < k; j++) {
      int64_t e = (int64_t)ids[t * k + j];
      bool wrong = e < -1 || e >= experts;
      for (int i = 0; i < j && !wrong && e >= 0; i++)
        wrong = (int64_t)ids[t * k + i] == e;
      if (wrong) {
        atomicMin(bad, (unsigned long long)(t * k + j));
        break;
      }
    }
}

/* Bin b < experts is expert b, then bin experts + r is rank r (ids in r's range). A block a
 * bin: each token's index among the bin's tokens, in token order, into slot[t][j] (experts:
 * the choice j naming it) or pos[t][r] (ranks: -1 when the token does not go there), and
 * the bin's size into counts[b]. */
template <typename I>
__global__ void route(const I *ids, uint64_t tokens, int k, int experts, int nranks, int local,
                      int32_t *slot, int32_t *pos, int64_t *counts) {
  __shared__ int warp_n[THREADS / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int b = blockIdx.x; b < experts + nranks; b += gridDim.x) {
    int64_t lo = b < experts ? b : (int64_t)(b - experts) * local;
    int64_t hi = b < experts ? lo + 1 : lo + local;
    int64_t base = 0;
    for (uint64_t t0 = 0; t0 < tokens; t0 += THREADS) {
      uint64_t t = t0 + threadIdx.x;
      int j = t < tokens ? find(ids, t, k, lo, hi) : -1;
      unsigned ball = __ballot_sync(0xffffffffu, j >= 0);
      if (lane == 0) warp_n[warp] = __popc(ball);
      __syncthreads();
      int before = __popc(ball & ((1u << lane) - 1u)), total = 0;
      for (int q = 0; q < THREADS / 32; q++) {
        before += q < warp ? warp_n[q] : 0;
        total += warp_n[q];
      }
      if (t < tokens && b < experts && j >= 0) slot[t * k + j] = (int32_t)(base + before);
      if (t < tokens && b >= experts)
        pos[t * nranks + (b - experts)] = j >= 0 ? (int32_t)(base + before) : -1;
      base += total;
      __syncthreads(); /* warp_n is rewritten by the next tile */
    }
    if (threadIdx.x == 0) counts[b] = base;
  }
}

/* off[r] = the first entry of rank r's send list (off[nranks] the total). */
__global__ void prefix(const int64_t *rank_counts, int nranks, uint64_t *off) {
  uint64_t at = 0;
  for (int r = 0; r < nranks; r++) {
    off[r] = at;
    at += (uint64_t)rank_counts[r];
  }
  off[nranks] = at;
}

/* The send side, a thread a token: its entries (one per destination rank, in rank order)
 * into send_list and entries[t][width], and each entry's meta: per choice j, the local
 * expert at that rank and the token's index among that expert's tokens, or (-1, 0). */
template <typename I>
__global__ void finish(const I *ids, uint64_t tokens, int k, int nranks, int local, int width,
                       const int32_t *slot, const int32_t *pos, const uint64_t *off,
                       uint64_t *send_list, uint64_t *entries, int32_t *meta) {
  for (uint64_t t = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; t < tokens;
       t += (uint64_t)gridDim.x * blockDim.x) {
    int q = 0;
    for (int r = 0; r < nranks && q < width; r++) {
      int32_t p = pos[t * nranks + r];
      if (p < 0) continue;
      uint64_t e = off[r] + (uint64_t)p;
      send_list[e] = t;
      entries[t * width + q++] = e;
      for (int j = 0; j < k; j++) {
        int64_t id = (int64_t)ids[t * k + j], l = id - (int64_t)r * local;
        bool here = id >= 0 && l >= 0 && l < local;
        meta[(e * k + j) * 2] = here ? (int32_t)l : -1;
        meta[(e * k + j) * 2 + 1] = here ? slot[t * k + j] : 0;
      }
    }
    for (; q < width; q++)
      entries[t * width + q] = WEFT_MOE_K_NO_ROW;
  }
}

/* Receiving side, a thread a choice: its row, base[s][l] + its index, for the choices of a
 * local expert l (entries from source s lie in [recv_off[s], recv_off[s + 1])). */
__global__ void rows(const int32_t *meta, uint64_t choices, int k, const uint64_t *recv_off,
                     int nranks, int local, const uint64_t *base, uint64_t *row_of) {
  for (uint64_t c = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; c < choices;
       c += (uint64_t)gridDim.x * blockDim.x) {
    uint64_t entry = c / k;
    int lo = 0, hi = nranks - 1; /* the last s with recv_off[s] <= entry */
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (recv_off[mid] <= entry)
        lo = mid;
      else
        hi = mid - 1;
    }
    int32_t l = meta[c * 2];
    row_of[c] = l >= 0 && l < local ? base[(uint64_t)lo * local + l] + (uint64_t)meta[c * 2 + 1]
                                    : WEFT_MOE_K_NO_ROW;
  }
}

template <typename I> int send_side(const I *ids, const weft_moe_k_route_t *a, cudaStream_t s) {
  uint64_t T = a->tokens;
  if (T) {
    check<<<blocks_of(T), THREADS, 0, s>>>(ids, T, a->k, a->experts, a->bad);
    route<<<blocks((uint64_t)a->experts + a->nranks), THREADS, 0, s>>>(
        ids, T, a->k, a->experts, a->nranks, a->local, a->slot, a->pos, a->counts);
  } else {
    cudaMemsetAsync(a->counts, 0, (size_t)(a->experts + a->nranks) * sizeof *a->counts, s);
  }
  prefix<<<1, 1, 0, s>>>(a->counts + a->experts, a->nranks, a->send_off);
  if (T)
    finish<<<blocks_of(T), THREADS, 0, s>>>(ids, T, a->k, a->nranks, a->local, a->width, a->slot,
                                            a->pos, a->send_off, a->send_list, a->entries, a->meta);
  return (int)cudaGetLastError();
}

} // namespace

extern "C" int weft_moe_k_route(const weft_moe_k_route_t *a, void *stream) {
  (void)cudaGetLastError(); /* an earlier, unrelated launch's error is not this one's */
  cudaStream_t s = (cudaStream_t)stream;
  if (cudaMemsetAsync(a->bad, 0xff, sizeof *a->bad, s) != cudaSuccess)
    return (int)cudaGetLastError();
  return a->id_bytes == 4 ? send_side((const int32_t *)a->ids, a, s)
                          : send_side((const int64_t *)a->ids, a, s);
}

extern "C" int weft_moe_k_rows(const int32_t *meta, uint64_t choices, int k,
                               const uint64_t *recv_off, int nranks, int local,
                               const uint64_t *base, uint64_t *row_of, void *stream) {
  (void)cudaGetLastError();
  if (choices)
    rows<<<blocks_of(choices), THREADS, 0, (cudaStream_t)stream>>>(meta, choices, k, recv_off,
                                                                   nranks, local, base, row_of);
  return (int)cudaGetLastError();
}
