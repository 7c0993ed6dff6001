/* Normal mode's direct path (driven by direct.c): dispatch and combine on windows, in rounds
 * of source tokens. The sender packs each token straight into the window of every rank it goes
 * to (one read of x, its own expert rows written in the same pass), and the receiver copies it
 * into the rows of its experts; combine sums a token's rows there with their weights in f32,
 * writes the partial into its home's window, and the home adds the ranks' partials into y.
 * As in low-latency mode, only one-block kernels wait for flags. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "fp8.cuh"
#include "moe_kernels.h"
#include "prims.cuh"
#include "win.cuh"

namespace {

constexpr int THREADS = 256;
constexpr int OPEN_THREADS = 64 * WEFT_DEV_MAX_RANKS;
constexpr int MAX_DST = WEFT_DEV_MAX_RANKS + WEFT_MOE_K_MAX_TOPK;

typedef weft_moe_k_direct_t P;

using weft::copy_multi;
using weft::st_release_sys;

/* The flag `from` keeps in owner's window at off (records: stride apart). */
__device__ inline uint64_t *flag(const P &a, int owner, uint64_t off, uint64_t stride, int from) {
  return (uint64_t *)(a.win[owner] + off + (uint64_t)from * stride);
}

/* A warp: the first entry from source s whose token is t or later (its entries are in token
 * order), 32 probes a step, so that a search is a few dependent loads (one thread's binary
 * search took 7 us of 10 in the opening kernel). */
__device__ uint64_t first_at(const P &a, int s, uint64_t t) {
  const unsigned lane = threadIdx.x % 32;
  uint64_t lo = a.recv_off[s], hi = a.recv_off[s + 1]; /* the answer lies in [lo, hi] */
  while (lo < hi) {
    const uint64_t step = (hi - lo + 31) / 32, at = lo + step * lane;
    const bool before = at < hi && (uint64_t)a.tok_of[at] < t;
    const uint64_t c = (uint64_t)__popc(__ballot_sync(~0u, before)); /* a prefix of the lanes */
    if (c == 0) return lo;
    const uint64_t end = lo + step * c; /* the first probe not before t, or past hi */
    lo += step * (c - 1) + 1;
    hi = end < hi ? end : hi;
  }
  return lo;
}

/* Two warps a source (OPEN_THREADS): source s's entries of round i, for the grid that reads
 * them. */
__device__ void ranges(const P &a, uint64_t i) {
  const int w = threadIdx.x / 32, s = w / 2;
  if (s >= a.nranks) return;
  const uint64_t at = first_at(a, s, (i + (uint64_t)(w % 2)) * a.chunk);
  if (threadIdx.x % 32 == 0) (w % 2 ? a.state->hi : a.state->lo)[s] = at;
}

/* The source of a receiving block: blocks go span to a peer, this rank skipped. */
__device__ inline int peer_of(const P &a, uint64_t span) {
  const int q = (int)(blockIdx.x / span);
  return q < a.rank ? q : q + 1;
}

/* A round's opening, in a lone block: the entries' ranges, the phase's round counted, and
 * every rank read what we wrote into it last round (its ack at `acks` in our window). */
__device__ void open_round(const P &a, uint64_t i, uint64_t *rounds, uint64_t acks, int phase) {
  ranges(a, i);
  if (threadIdx.x) return;
  weft_moe_k_dstate_t *st = a.state;
  if (i == 0) st->failed = 0;
  const uint64_t R = ++*rounds;
  if (!st->failed && !moe_wait_flags(a, acks, WEFT_MOE_K_FLAG_STRIDE, R - 1, phase)) st->failed = 1;
}

/* fp8: the block quantizes x once into each destination's bytes and scales. */
__device__ void quantize_all(const P &a, const char *x, char *const *q, char *const *sc, int nd) {
  uint8_t *const *qq = reinterpret_cast<uint8_t *const *>(q);
  float *const *ss = reinterpret_cast<float *const *>(sc);
  if (a.dtype == WEFT_MOE_K_F32)
    moe_fp8::quantize_to((const float *)x, a.hidden, qq, ss, nd);
  else if (a.dtype == WEFT_MOE_K_F16)
    moe_fp8::quantize_to((const __half *)x, a.hidden, qq, ss, nd);
  else
    moe_fp8::quantize_to((const __nv_bfloat16 *)x, a.hidden, qq, ss, nd);
}

/* ---- dispatch ---- */

__global__ void d_open(P a, uint64_t i) { open_round(a, i, &a.state->round, a.g.dack, 1); }

/* A block a token of this round: one read of it, written into every peer it goes to (its k
 * weights first) and into the rows of this rank's own experts it chose. fp8: a slot holds the
 * token's scales, then its bytes (they fit in a row of 2- or 4-byte elements). */
__global__ void d_send(P a, uint64_t i) {
  weft_moe_k_dstate_t *st = a.state;
  const bool go = !st->failed;
  const int n = a.nranks, k = a.k, me = a.rank;
  const uint64_t t = i * a.chunk + blockIdx.x, nb = WEFT_MOE_FP8_BLOCKS(a.hidden);
  const uint64_t out_row = a.fp8 ? a.hidden : a.g.row_bytes;
  __shared__ char *dst[MAX_DST], *dsc[MAX_DST];
  __shared__ float *wdst[WEFT_DEV_MAX_RANKS];
  __shared__ int nd, nw;
  if (go && t < a.tokens) {
    if (threadIdx.x == 0) {
      nd = 0, nw = 0;
      for (int r = 0; r < n; r++) {
        const int32_t p = a.pos[t * n + r];
        if (p < 0) continue;
        if (r != me) {
          char *slot =
              a.win[r] + a.g.dstage + ((uint64_t)me * a.chunk + blockIdx.x) * a.g.slot_bytes;
          wdst[nw++] = (float *)slot;
          dsc[nd] = slot + a.g.hdr_bytes;
          dst[nd++] = slot + a.g.hdr_bytes + (a.fp8 ? nb * sizeof(float) : 0);
          continue;
        }
        const uint64_t e = a.recv_off[me] + (uint64_t)p;
        for (int j = 0; j < k; j++) {
          const uint64_t row = a.row_of[e * k + j];
          if (row == WEFT_MOE_K_NO_ROW) continue;
          dsc[nd] = a.fp8 ? (char *)(a.out_s + row * nb) : NULL;
          dst[nd++] = (char *)a.out + row * out_row;
          if (a.out_w) a.out_w[row] = a.in_w ? a.in_w[t * k + j] : 1.0f;
        }
      }
    }
    __syncthreads();
    for (int c = threadIdx.x; c < nw * k; c += blockDim.x)
      wdst[c / k][c % k] = a.in_w ? a.in_w[t * k + c % k] : 1.0f;
    const char *x = (const char *)a.in + t * a.g.row_bytes;
    if (a.fp8)
      quantize_all(a, x, dst, dsc, nd);
    else
      copy_multi(dst, nd, x, a.g.row_bytes);
  }
  if (!moe_last_block(&st->ticket) || !go || threadIdx.x) return;
  for (int r = 0; r < n; r++)
    st_release_sys(flag(a, r, a.g.dsig, a.g.sig_bytes, me), st->round);
}

__global__ void d_wait(P a) {
  weft_moe_k_dstate_t *st = a.state;
  if (threadIdx.x || st->failed) return;
  if (!moe_wait_flags(a, a.g.dsig, a.g.sig_bytes, st->round, 1)) st->failed = 1;
}

/* A block an entry a peer sent this round: its slot into the rows of our experts it chose. */
__global__ void d_recv(P a, uint64_t i, uint64_t span) {
  weft_moe_k_dstate_t *st = a.state;
  const bool go = !st->failed && a.nranks > 1;
  const int k = a.k, me = a.rank;
  const int s = go ? peer_of(a, span) : 0;
  const uint64_t e = go ? st->lo[s] + blockIdx.x % span : 0;
  const uint64_t nb = WEFT_MOE_FP8_BLOCKS(a.hidden), out_row = a.fp8 ? a.hidden : a.g.row_bytes;
  if (go && e < st->hi[s]) {
    const uint64_t q = (uint64_t)a.tok_of[e] - i * a.chunk;
    const char *slot = a.win[me] + a.g.dstage + ((uint64_t)s * a.chunk + q) * a.g.slot_bytes;
    __shared__ char *dst[WEFT_MOE_K_MAX_TOPK], *dsc[WEFT_MOE_K_MAX_TOPK];
    __shared__ int nd;
    if (threadIdx.x == 0) {
      nd = 0;
      for (int j = 0; j < k; j++) {
        const uint64_t row = a.row_of[e * k + j];
        if (row == WEFT_MOE_K_NO_ROW) continue;
        dsc[nd] = a.fp8 ? (char *)(a.out_s + row * nb) : NULL;
        dst[nd++] = (char *)a.out + row * out_row;
        if (a.out_w) a.out_w[row] = __ldcg((const float *)slot + j);
      }
    }
    __syncthreads();
    const char *src = slot + a.g.hdr_bytes;
    if (a.fp8) {
      copy_multi(dsc, nd, src, nb * sizeof(float));
      copy_multi(dst, nd, src + nb * sizeof(float), a.hidden);
    } else {
      copy_multi(dst, nd, src, a.g.row_bytes);
    }
  }
  if (!moe_last_block(&st->ticket) || st->failed || threadIdx.x) return;
  for (int r = 0; r < a.nranks; r++) /* we are done with what each source wrote this round */
    st_release_sys(flag(a, r, a.g.dack, WEFT_MOE_K_FLAG_STRIDE, me), st->round);
}

/* ---- combine ---- */

__global__ void c_open(P a, uint64_t i) { open_round(a, i, &a.state->cround, a.g.cack, 2); }

/* acc[q] += s * element q of p's unit c (N elements: a 16-byte vector, or 1). */
template <typename T, int N>
__device__ __forceinline__ void load_add(float *acc, const T *p, uint64_t c, float s) {
  if (N > 1) {
    const uint4 u = __ldcg((const uint4 *)p + c);
    const T *e = (const T *)&u;
#pragma unroll
    for (int q = 0; q < N; q++)
      acc[q] += s * moe_fp8::up(e[q]);
  } else {
    acc[0] += s * moe_fp8::up(p[c]);
  }
}

/* dst = the partials part[0..np) added in order, with this rank's own sum (its rows own[j]
 * scaled by osc[j], rounded to T as a peer's partial is) taken in at index own_at; all in
 * f32. units: N-element units of a row. The tables are the block's, in shared memory. */
template <typename T, int N>
__device__ void sum_table(T *dst, const T *const *part, int np, int own_at, const T *const *own,
                          const float *osc, int no, uint64_t units) {
  for (uint64_t c = threadIdx.x; c < units; c += blockDim.x) {
    float acc[N], mine[N];
#pragma unroll
    for (int q = 0; q < N; q++)
      acc[q] = 0.0f, mine[q] = 0.0f;
    for (int j = 0; j < no; j++)
      load_add<T, N>(mine, own[j], c, osc[j]);
    for (int i = 0; i <= np; i++) {
      if (i == own_at && no) {
#pragma unroll
        for (int q = 0; q < N; q++) {
          T r;
          moe_fromf(mine[q], &r);
          acc[q] += moe_fp8::up(r);
        }
      }
      if (i < np) load_add<T, N>(acc, part[i], c, 1.0f);
    }
    if (N > 1) {
      uint4 o;
      T *oe = (T *)&o;
#pragma unroll
      for (int q = 0; q < N; q++)
        moe_fromf(acc[q], &oe[q]);
      ((uint4 *)dst)[c] = o;
    } else {
      moe_fromf(acc[0], &dst[c]);
    }
  }
}

/* The tables' sum into dst, 16 bytes a thread where every row allows it. */
template <typename T>
__device__ void sum_any(T *dst, const T *const *part, int np, int own_at, const T *const *own,
                        const float *osc, int no, uint64_t hidden) {
  constexpr int V = 16 / sizeof(T);
  uintptr_t al = (uintptr_t)dst | (hidden * sizeof(T));
  for (int i = 0; i < np; i++)
    al |= (uintptr_t)part[i];
  for (int j = 0; j < no; j++)
    al |= (uintptr_t)own[j];
  if (al % 16 == 0)
    sum_table<T, V>(dst, part, np, own_at, own, osc, no, hidden / V);
  else
    sum_table<T, 1>(dst, part, np, own_at, own, osc, no, hidden);
}

/* Thread 0: the rows of entry e's choices here and their weights, into the block's table. */
template <typename T> __device__ int rows_of(const P &a, uint64_t e, const T **own, float *osc) {
  int no = 0;
  for (int j = 0; j < a.k; j++) {
    const uint64_t r = a.row_of[e * a.k + j];
    if (r == WEFT_MOE_K_NO_ROW) continue;
    own[no] = (const T *)a.in + r * a.hidden;
    osc[no++] = a.in_w ? a.in_w[r] : 1.0f;
  }
  return no;
}

/* A block an entry a peer sent this round: its rows summed with their weights into its
 * home's window. */
template <typename T> __global__ void c_back(P a, uint64_t i, uint64_t span) {
  weft_moe_k_dstate_t *st = a.state;
  const bool go = !st->failed && a.nranks > 1;
  const int me = a.rank;
  const int s = go ? peer_of(a, span) : 0;
  const uint64_t e = go ? st->lo[s] + blockIdx.x % span : 0;
  if (go && e < st->hi[s]) {
    __shared__ const T *own[WEFT_MOE_K_MAX_TOPK];
    __shared__ float osc[WEFT_MOE_K_MAX_TOPK];
    __shared__ int no;
    if (threadIdx.x == 0) no = rows_of<T>(a, e, own, osc);
    __syncthreads();
    const uint64_t q = (uint64_t)a.tok_of[e] - i * a.chunk;
    T *dst = (T *)(a.win[s] + a.g.cstage + ((uint64_t)me * a.chunk + q) * a.g.row_pad);
    sum_any<T>(dst, NULL, 0, 0, own, osc, no, a.hidden);
  }
  if (!moe_last_block(&st->ticket) || st->failed || threadIdx.x) return;
  for (int r = 0; r < a.nranks; r++)
    st_release_sys(flag(a, r, a.g.csig, WEFT_MOE_K_FLAG_STRIDE, me), st->cround);
}

__global__ void c_wait(P a) {
  weft_moe_k_dstate_t *st = a.state;
  if (threadIdx.x || st->failed) return;
  if (!moe_wait_flags(a, a.g.csig, WEFT_MOE_K_FLAG_STRIDE, st->cround, 2)) st->failed = 1;
}

/* A block a token of this round: y = the ranks' partials in rank order, this rank's own
 * summed here; a token that chose no expert gets zeros. */
template <typename T> __global__ void c_home(P a, uint64_t i) {
  weft_moe_k_dstate_t *st = a.state;
  const bool go = !st->failed;
  const int n = a.nranks, me = a.rank;
  const uint64_t t = i * a.chunk + blockIdx.x;
  if (go && t < a.tokens) {
    __shared__ const T *part[WEFT_DEV_MAX_RANKS], *own[WEFT_MOE_K_MAX_TOPK];
    __shared__ float osc[WEFT_MOE_K_MAX_TOPK];
    __shared__ int np, no, own_at;
    if (threadIdx.x == 0) {
      np = 0, no = 0, own_at = 0;
      for (int r = 0; r < n; r++) {
        const int32_t p = a.pos[t * n + r];
        if (p < 0) continue;
        if (r == me) {
          own_at = np;
          no = rows_of<T>(a, a.recv_off[me] + (uint64_t)p, own, osc);
          continue;
        }
        part[np++] = (const T *)(a.win[me] + a.g.cstage +
                                 ((uint64_t)r * a.chunk + blockIdx.x) * a.g.row_pad);
      }
    }
    __syncthreads();
    sum_any<T>((T *)a.out + t * a.hidden, part, np, own_at, own, osc, no, a.hidden);
  }
  if (!moe_last_block(&st->ticket) || !go || threadIdx.x) return;
  for (int r = 0; r < n; r++) /* we are done with what each rank wrote this round */
    st_release_sys(flag(a, r, a.g.cack, WEFT_MOE_K_FLAG_STRIDE, me), st->cround);
}

/* Round i's sizes: peer entries' blocks (span a peer, at least one block in all) and this
 * rank's tokens' blocks (at least one). */
struct round_t {
  uint64_t span;
  unsigned peers, mine;
};
round_t round_of(const P *a, uint64_t i) {
  const uint64_t lo = i * a->chunk, C = a->chunk;
  const uint64_t span = a->max_tokens - lo < C ? a->max_tokens - lo : C;
  const uint64_t mine = a->tokens <= lo ? 0 : a->tokens - lo < C ? a->tokens - lo : C;
  const uint64_t peers = span * (uint64_t)(a->nranks - 1);
  return {span, (unsigned)(peers ? peers : 1), (unsigned)(mine ? mine : 1)};
}

template <typename T> void combine_rounds(const P *a, cudaStream_t s) {
  for (uint64_t i = 0; i * a->chunk < a->max_tokens; i++) {
    const round_t r = round_of(a, i);
    c_open<<<1, OPEN_THREADS, 0, s>>>(*a, i);
    c_back<T><<<r.peers, THREADS, 0, s>>>(*a, i, r.span);
    c_wait<<<1, 32, 0, s>>>(*a);
    c_home<T><<<r.mine, THREADS, 0, s>>>(*a, i);
  }
}

} // namespace

extern "C" int weft_moe_k_direct_dispatch(const weft_moe_k_direct_t *a, void *stream) {
  (void)cudaGetLastError();
  if (a->nranks > WEFT_DEV_MAX_RANKS || a->k > WEFT_MOE_K_MAX_TOPK || !a->chunk)
    return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  for (uint64_t i = 0; i * a->chunk < a->max_tokens; i++) {
    const round_t r = round_of(a, i);
    d_open<<<1, OPEN_THREADS, 0, s>>>(*a, i);
    d_send<<<r.mine, THREADS, 0, s>>>(*a, i);
    d_wait<<<1, 32, 0, s>>>(*a);
    d_recv<<<r.peers, THREADS, 0, s>>>(*a, i, r.span);
  }
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_direct_combine(const weft_moe_k_direct_t *a, void *stream) {
  (void)cudaGetLastError();
  if (a->nranks > WEFT_DEV_MAX_RANKS || a->k > WEFT_MOE_K_MAX_TOPK || !a->chunk)
    return (int)cudaErrorInvalidValue;
  cudaStream_t s = (cudaStream_t)stream;
  if (a->dtype == WEFT_MOE_K_F32)
    combine_rounds<float>(a, s);
  else if (a->dtype == WEFT_MOE_K_F16)
    combine_rounds<__half>(a, s);
  else
    combine_rounds<__nv_bfloat16>(a, s);
  return (int)cudaGetLastError();
}
