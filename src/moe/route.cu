/* MoE layout kernels for device buffers: the ids checked, each token's place in every
 * expert's and every destination rank's list (token order: a mask of a tile's tokens per
 * bin, then a scan over tiles), and the send side built from those places; on the
 * receiving side, the row of every choice. No host sync between them: the host reads only
 * the counts (weft_moe_dev_layout). */
#include <stdint.h>

#include "moe_kernels.h"

namespace {

constexpr int THREADS = 256;
constexpr unsigned MAX_BLOCKS = 4096;

unsigned blocks(uint64_t n) { return n < MAX_BLOCKS ? (unsigned)n : MAX_BLOCKS; }
unsigned blocks_of(uint64_t items) { return blocks((items + THREADS - 1) / THREADS); }

constexpr int TILE = WEFT_MOE_K_TILE;
constexpr int MASK_THREADS = 512, SCAN_THREADS = 128, PLACE_THREADS = 256;
constexpr int MAX_K = WEFT_MOE_K_MAX_TOPK, MAX_N = WEFT_DEV_MAX_RANKS;
constexpr size_t SHARED_MAX = 40 * 1024; /* more bins than fit: masks built in global memory */

/* A tile of tokens a block: each bin's mask of the tile's tokens in it (bit i: token
 * tile * TILE + i) and its count into before, and the tile's lowest choice index t * k + j
 * whose id is out of [-1, experts) or repeated in its token into bad_tile (all ones if
 * none). Experts' masks first, a thread a choice (OR is idempotent: the order threads set
 * bits in does not matter); then each rank's, the OR of its experts', a warp a rank. Shared:
 * masks built in shared memory and copied out; else in place in `mask`, zeroed by the
 * caller. */
template <typename I, bool Shared>
__global__ void masks(const I *ids, uint64_t tokens, int k, int experts, int nranks, int local,
                      unsigned long long *mask, uint32_t *before, unsigned long long *bad_tile) {
  extern __shared__ unsigned long long smem[];
  __shared__ unsigned long long low_bad;
  const int bins = experts + nranks, lane = threadIdx.x % 32;
  const uint64_t tile = blockIdx.x, t0 = tile * TILE;
  unsigned long long *m = Shared ? smem : mask + tile * bins;
  if (threadIdx.x == 0) low_bad = ~0ull;
  if (Shared)
    for (int b = threadIdx.x; b < experts; b += blockDim.x)
      m[b] = 0;
  __syncthreads();
  for (int c = threadIdx.x; c < TILE * k; c += blockDim.x) {
    const uint64_t t = t0 + (uint64_t)(c / k);
    const int j = c % k;
    if (t >= tokens) break; /* c rises, so t does */
    const int64_t e = (int64_t)ids[t * k + j];
    bool wrong = e < -1 || e >= experts;
    for (int i = 0; i < j && !wrong && e >= 0; i++)
      wrong = (int64_t)ids[t * k + i] == e;
    if (wrong)
      atomicMin(&low_bad, (unsigned long long)(t * k + j));
    else if (e >= 0)
      atomicOr(&m[e], 1ull << (c / k));
  }
  __syncthreads();
  for (int r = threadIdx.x / 32; r < nranks; r += blockDim.x / 32) {
    unsigned long long v = 0;
    for (int l = lane; l < local; l += 32)
      v |= m[(int64_t)r * local + l];
    for (int d = 16; d; d /= 2)
      v |= __shfl_xor_sync(0xffffffffu, v, d);
    if (lane == 0) m[experts + r] = v;
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x) {
    const unsigned long long v = m[b];
    if (Shared) mask[tile * bins + b] = v;
    before[tile * bins + b] = (uint32_t)__popcll(v);
  }
  if (threadIdx.x == 0) bad_tile[tile] = low_bad;
}

/* Exclusive prefix of v over the block's threads (all of them call it); *total the sum. */
__device__ uint64_t block_scan(uint64_t v, uint64_t *total) {
  __shared__ uint64_t warp_sum[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, nw = (blockDim.x + 31) / 32;
  uint64_t x = v;
  for (int d = 1; d < 32; d *= 2) {
    uint64_t y = __shfl_up_sync(0xffffffffu, x, d);
    if (lane >= d) x += y;
  }
  if (lane == 31) warp_sum[warp] = x;
  __syncthreads();
  uint64_t base = 0, all = 0;
  for (int w = 0; w < nw; w++) {
    base += w < warp ? warp_sum[w] : 0;
    all += warp_sum[w];
  }
  *total = all;
  return base + x - v;
}

/* A block a bin: before[tile][b] from the tile's count to the sum of the earlier tiles'
 * (each thread a run of tiles), and the bin's total into counts[b] (and host[b]). The
 * block after the last bin takes the lowest of the tiles' bad choices into *bad (and
 * host[bins]). host: host-mapped, or NULL. */
__global__ void scan(uint32_t *before, const unsigned long long *bad_tile, uint64_t tiles, int bins,
                     int64_t *counts, unsigned long long *bad, int64_t *host) {
  const int b = blockIdx.x;
  const uint64_t per = (tiles + blockDim.x - 1) / blockDim.x;
  const uint64_t lo = threadIdx.x * per, hi = lo + per < tiles ? lo + per : tiles;
  if (b == bins) {
    __shared__ unsigned long long low;
    if (threadIdx.x == 0) low = ~0ull;
    __syncthreads();
    unsigned long long mine = ~0ull;
    for (uint64_t t = lo; t < hi; t++)
      mine = bad_tile[t] < mine ? bad_tile[t] : mine;
    if (mine != ~0ull) atomicMin(&low, mine);
    __syncthreads();
    if (threadIdx.x == 0) {
      *bad = low;
      if (host) host[bins] = (int64_t)low;
    }
    return;
  }
  uint64_t sum = 0, total;
  for (uint64_t t = lo; t < hi; t++)
    sum += before[t * bins + b];
  uint64_t run = block_scan(sum, &total);
  for (uint64_t t = lo; t < hi; t++) {
    const uint32_t v = before[t * bins + b];
    before[t * bins + b] = (uint32_t)run;
    run += v;
  }
  if (threadIdx.x == 0) {
    counts[b] = (int64_t)total;
    if (host) host[b] = (int64_t)total;
  }
}

/* A tile a block. Each choice's index among its expert's (the earlier tiles' count plus the
 * tile's tokens below it), each token's among a rank's into pos (-1 if it does not go
 * there); then each token's entries (one per destination rank, in rank order) into
 * send_list and entries[t][width]; then each entry's meta: per choice j, the local expert at
 * that rank and its index, or (-1, 0), then the token. The ranks' first entries, off, are the
 * prefix of their counts (block 0 keeps them in send_off). Ids out of range are skipped and a
 * repeated id shares its first one's slot: the layout is refused either way, and nothing is written
 * out of bounds. */
template <typename I>
__global__ void place(const I *ids, uint64_t tokens, int k, int experts, int nranks, int local,
                      int width, const unsigned long long *mask, const uint32_t *before,
                      const int64_t *counts, uint64_t *send_off, int32_t *pos, uint64_t *send_list,
                      uint64_t *entries, int32_t *meta) {
  __shared__ uint64_t off[MAX_N + 1];
  __shared__ int32_t id_s[TILE * MAX_K], slot_s[TILE * MAX_K], rank_s[TILE * MAX_N];
  __shared__ uint64_t entry_s[TILE * MAX_N];
  const int bins = experts + nranks;
  const uint64_t tile = blockIdx.x, t0 = tile * TILE;
  const int here = tokens - t0 < TILE ? (int)(tokens - t0) : TILE; /* tokens in this tile */
  const unsigned long long *m = mask + tile * bins;
  const uint32_t *b0 = before + tile * bins;
  if (threadIdx.x == 0) {
    uint64_t at = 0;
    for (int r = 0; r < nranks; r++)
      off[r] = at, at += (uint64_t)counts[experts + r];
    off[nranks] = at;
  }
  for (int c = threadIdx.x; c < here * k; c += blockDim.x) {
    const int i = c / k, j = c % k;
    const int64_t e = (int64_t)ids[(t0 + i) * k + j];
    const bool ok = e >= 0 && e < experts;
    const int32_t sl = ok ? (int32_t)(b0[e] + __popcll(m[e] & ((1ull << i) - 1ull))) : 0;
    id_s[c] = ok ? (int32_t)e : -1, slot_s[c] = sl;
  }
  for (int c = threadIdx.x; c < here * nranks; c += blockDim.x) {
    const int i = c / nranks, r = c % nranks;
    const unsigned long long mr = m[experts + r];
    pos[(t0 + i) * nranks + r] =
        mr >> i & 1ull ? (int32_t)(b0[experts + r] + __popcll(mr & ((1ull << i) - 1ull))) : -1;
  }
  __syncthreads();
  if (blockIdx.x == 0)
    for (int r = threadIdx.x; r <= nranks; r += blockDim.x)
      send_off[r] = off[r];
  for (int i = threadIdx.x; i < here; i += blockDim.x) { /* a thread a token */
    const uint64_t t = t0 + i;
    int q = 0;
    for (int prev = -1; q < width;) { /* its ranks, smallest first */
      int r = nranks;
      for (int j = 0; j < k; j++) {
        const int e = id_s[i * k + j], re = e >= 0 ? e / local : nranks;
        r = re > prev && re < r ? re : r;
      }
      if (r == nranks) break;
      const unsigned long long mr = m[experts + r];
      const uint64_t e = off[r] + b0[experts + r] + __popcll(mr & ((1ull << i) - 1ull));
      send_list[e] = t;
      entries[t * width + q] = e;
      rank_s[i * MAX_N + q] = r, entry_s[i * MAX_N + q] = e;
      prev = r, q++;
    }
    for (int z = q; z < width; z++)
      entries[t * width + z] = WEFT_MOE_K_NO_ROW, rank_s[i * MAX_N + z] = -1;
  }
  __syncthreads();
  for (int c = threadIdx.x; c < here * width * k;
       c += blockDim.x) { /* a thread a (token, entry, choice) */
    const int i = c / (width * k), q = c / k % width, j = c % k, r = rank_s[i * MAX_N + q];
    if (r < 0) continue;
    const int e = id_s[i * k + j];
    const bool mine = e >= 0 && e / local == r;
    int2 v = mine ? make_int2(e - r * local, slot_s[i * k + j]) : make_int2(-1, 0);
    int2 *em = reinterpret_cast<int2 *>(meta) + entry_s[i * MAX_N + q] * WEFT_MOE_K_META(k);
    em[j] = v;
    if (j == 0) em[k] = make_int2((int32_t)(t0 + i), 0); /* tokens * k fits in int32 */
  }
}

/* Receiving side, a thread a choice: its row, base[s][l] + its index, for the choices of a
 * local expert l (entries from source s lie in [recv_off[s], recv_off[s + 1])), and each
 * entry's source token. The entries in [own_lo, own_hi) are this rank's own: their meta is
 * read where it was made. */
__global__ void rows(const int32_t *meta, const int32_t *own_meta, uint64_t own_lo, uint64_t own_hi,
                     uint64_t choices, int k, const uint64_t *recv_off, int nranks, int local,
                     const uint64_t *base, uint64_t *row_of, uint32_t *tok_of) {
  for (uint64_t c = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; c < choices;
       c += (uint64_t)gridDim.x * blockDim.x) {
    const uint64_t entry = c / k;
    int lo = 0, hi = nranks - 1; /* the last s with recv_off[s] <= entry */
    while (lo < hi) {
      int mid = (lo + hi + 1) / 2;
      if (recv_off[mid] <= entry)
        lo = mid;
      else
        hi = mid - 1;
    }
    const int2 *em =
        entry >= own_lo && entry < own_hi
            ? reinterpret_cast<const int2 *>(own_meta) + (entry - own_lo) * WEFT_MOE_K_META(k)
            : reinterpret_cast<const int2 *>(meta) + entry * WEFT_MOE_K_META(k);
    const int2 v = em[c % k];
    if (c % k == 0) tok_of[entry] = (uint32_t)em[k].x;
    row_of[c] = v.x >= 0 && v.x < local ? base[(uint64_t)lo * local + v.x] + (uint64_t)v.y
                                        : WEFT_MOE_K_NO_ROW;
  }
}

template <typename I> int counts_of(const I *ids, const weft_moe_k_route_t *a, cudaStream_t s) {
  const uint64_t T = a->tokens, tiles = (T + TILE - 1) / TILE;
  const int bins = a->experts + a->nranks;
  const size_t shared = (size_t)bins * sizeof(unsigned long long);
  unsigned long long *bad_tile = a->mask + tiles * bins; /* route's scratch, after the masks */
  if (shared <= SHARED_MAX) {
    if (T)
      masks<I, true><<<tiles, MASK_THREADS, shared, s>>>(ids, T, a->k, a->experts, a->nranks,
                                                         a->local, a->mask, a->before, bad_tile);
  } else if (T) {
    cudaMemsetAsync(a->mask, 0, tiles * bins * sizeof *a->mask, s);
    masks<I, false><<<tiles, MASK_THREADS, 0, s>>>(ids, T, a->k, a->experts, a->nranks, a->local,
                                                   a->mask, a->before, bad_tile);
  }
  /* no tokens: the scan still writes the counts (0) and *bad (none) */
  scan<<<bins + 1, SCAN_THREADS, 0, s>>>(a->before, bad_tile, tiles, bins, a->counts, a->bad,
                                         a->host_counts);
  return (int)cudaGetLastError();
}

template <typename I> int place_all(const I *ids, const weft_moe_k_route_t *a, cudaStream_t s) {
  const uint64_t T = a->tokens, tiles = (T + TILE - 1) / TILE;
  if (T)
    place<<<tiles, PLACE_THREADS, 0, s>>>(ids, T, a->k, a->experts, a->nranks, a->local, a->width,
                                          a->mask, a->before, a->counts, a->send_off, a->pos,
                                          a->send_list, a->entries, a->meta);
  else
    cudaMemsetAsync(a->send_off, 0, (size_t)(a->nranks + 1) * sizeof *a->send_off, s);
  return (int)cudaGetLastError();
}

} // namespace

extern "C" int weft_moe_k_route_counts(const weft_moe_k_route_t *a, void *stream) {
  (void)cudaGetLastError(); /* an earlier, unrelated launch's error is not this one's */
  if (a->nranks > MAX_N || a->k > MAX_K) return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  return a->id_bytes == 4 ? counts_of((const int32_t *)a->ids, a, s)
                          : counts_of((const int64_t *)a->ids, a, s);
}

extern "C" int weft_moe_k_route_place(const weft_moe_k_route_t *a, void *stream) {
  (void)cudaGetLastError();
  if (a->nranks > MAX_N || a->k > MAX_K) return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  return a->id_bytes == 4 ? place_all((const int32_t *)a->ids, a, s)
                          : place_all((const int64_t *)a->ids, a, s);
}

extern "C" int weft_moe_k_route(const weft_moe_k_route_t *a, void *stream) {
  int e = weft_moe_k_route_counts(a, stream);
  return e ? e : weft_moe_k_route_place(a, stream);
}

extern "C" int weft_moe_k_rows(const weft_moe_k_rows_t *a, void *stream) {
  (void)cudaGetLastError();
  if (a->choices)
    rows<<<blocks_of(a->choices), THREADS, 0, (cudaStream_t)stream>>>(
        a->meta, a->own_meta, a->own_lo, a->own_hi, a->choices, a->k, a->recv_off, a->nranks,
        a->local, a->base, a->row_of, a->tok_of);
  return (int)cudaGetLastError();
}
