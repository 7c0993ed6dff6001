/* MoE low-latency mode on windows: dispatch and combine as kernels alone (no host wait, so
 * a CUDA graph can hold them). Senders write each token straight into the receiver's window
 * and post a record with their counts; the receiver waits for every record, then places the
 * rows. One block waits for flags while the grids that move data never spin, so that ranks
 * sharing a GPU cannot starve each other's kernels. */
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "fp8.cuh"
#include "moe_kernels.h"
#include "prims.cuh"
#include "win.cuh"

namespace {

constexpr int THREADS = 256;

typedef weft_moe_k_ll_t P;

/* A block per row: slots and tokens are bounded by max_tokens (int32), so this fits. */
unsigned blocks(uint64_t rows) { return (unsigned)(rows < 1 ? 1 : rows); }

using weft::copy_multi; /* a block copies one row into several, the widest unit all allow */
using weft::st_release_sys;

__device__ inline weft_moe_k_rec_t *drec(const P &a, int owner, int src) {
  return (weft_moe_k_rec_t *)(a.win[owner] + a.g.dsig + (uint64_t)src * a.g.sig_bytes);
}
__device__ inline weft_moe_k_rec_t *crec(const P &a, int owner, int src) {
  return (weft_moe_k_rec_t *)(a.win[owner] + a.g.csig + (uint64_t)src * WEFT_MOE_K_FLAG_STRIDE);
}
__device__ inline uint64_t *ack(const P &a, int owner, uint64_t off, int from) {
  return (uint64_t *)(a.win[owner] + off + (uint64_t)from * WEFT_MOE_K_FLAG_STRIDE);
}
__device__ inline const int32_t *rec_counts(const weft_moe_k_rec_t *r) {
  return (const int32_t *)(r + 1);
}

__device__ void fail(const P &a, int phase) {
  a.status->code = a.failed_code, a.status->rank = a.rank, a.status->phase = phase;
  a.status->a = a.status->b = a.status->c = 0;
}

/* Thread 0 of a lone block: every rank's flag at off + r * stride of our window reaches
 * target; false (the slot's status failed too) when the communicator aborts or the timeout
 * passes. */
__device__ bool wait_all(const P &a, uint64_t off, uint64_t stride, uint64_t target, int phase) {
  if (moe_wait_flags(a, off, stride, target, phase)) return true;
  fail(a, phase);
  return false;
}

/* ---- dispatch ---- */

__global__ void d_open(P a) {
  if (threadIdx.x) return;
  weft_moe_k_llh_t *h = a.h;
  uint64_t R = ++a.state->round;
  h->round = R, h->refused = 0, h->ticket = 0;
  /* every rank read what we wrote into it last round */
  if (!wait_all(a, a.g.dack, WEFT_MOE_K_FLAG_STRIDE, R - 1, 1)) h->refused = 2;
}

__global__ void d_send(P a) {
  weft_moe_k_llh_t *h = a.h;
  const bool go = h->refused == 0;
  const int32_t code = a.code ? a.code : h->own_code;
  const int k = a.k, n = a.nranks;
  const uint64_t e = blockIdx.x; /* a block an entry: a token for one rank */
  if (go && code == 0 && e < a.send_off[n]) {
    int r = 0;
    while (r + 1 < n && a.send_off[r + 1] <= e)
      r++;
    uint64_t p = e - a.send_off[r], t = a.send_list[e];
    char *slot = a.win[r] + a.g.dstage + ((uint64_t)a.rank * a.bound + p) * a.g.slot_bytes;
    if (threadIdx.x < (unsigned)k) {
      int j = threadIdx.x;
      int32_t *hd = (int32_t *)slot + 3 * j;
      const int32_t *em = a.meta + (e * WEFT_MOE_K_META(k) + j) * 2;
      hd[0] = em[0], hd[1] = em[1];
      ((float *)hd)[2] = a.in_w ? a.in_w[t * k + j] : 1.0f;
    }
    char *dst = slot + a.g.hdr_bytes;
    const char *x = (const char *)a.in + t * a.g.row_bytes;
    if (!a.fp8) {
      copy_multi(&dst, 1, x, a.g.row_bytes);
    } else { /* the scales, then the e4m3 bytes: fp8 rows fit in row_pad for 2- and 4-byte
                types (hidden + 4 per 128 elements) */
      float *sc = (float *)dst;
      uint8_t *q = (uint8_t *)(dst + WEFT_MOE_FP8_BLOCKS(a.hidden) * sizeof(float));
      if (a.dtype == WEFT_MOE_K_F32)
        moe_fp8::quantize((const float *)x, a.hidden, q, sc);
      else if (a.dtype == WEFT_MOE_K_F16)
        moe_fp8::quantize((const __half *)x, a.hidden, q, sc);
      else
        moe_fp8::quantize((const __nv_bfloat16 *)x, a.hidden, q, sc);
    }
  }
  if (!moe_last_block(&h->ticket) || !go) return;
  const bool ok = code == 0;
  for (int r = 0; r < n; r++) {
    weft_moe_k_rec_t *rec = drec(a, r, a.rank);
    int32_t *cnt = (int32_t *)(rec + 1);
    for (int l = threadIdx.x; l < a.local; l += blockDim.x)
      cnt[l] = ok ? (int32_t)a.counts[(int64_t)r * a.local + l] : 0;
    if (threadIdx.x == 0) {
      rec->code = code, rec->ntok = ok ? (int32_t)a.counts[a.experts + r] : 0;
      rec->a = a.code ? a.a : h->own_a, rec->b = a.code ? a.b : h->own_b;
      rec->c = a.code ? a.c : h->own_c;
      rec->fp8 = a.fp8;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int r = 0; r < n; r++)
      st_release_sys(&drec(a, r, a.rank)->round, h->round);
  }
}

__global__ void d_wait(P a) {
  if (threadIdx.x || a.h->refused == 2) return;
  if (!wait_all(a, a.g.dsig, a.g.sig_bytes, a.h->round, 1)) a.h->refused = 2;
}

/* Rows of local expert l that sources below s sent. */
__device__ uint64_t before(const P &a, int l, int s) {
  uint64_t at = 0;
  for (int q = 0; q < s; q++)
    at += (uint64_t)rec_counts(drec(a, a.rank, q))[l];
  return at;
}

__global__ void d_recv(P a) {
  weft_moe_k_llh_t *h = a.h;
  const bool failed = h->refused == 2;
  const int k = a.k, n = a.nranks, me = a.rank;
  const uint64_t B = a.bound;
  int bad = -1, odd = -1; /* the lowest refusing rank; the lowest whose fp8 differs from 0's */
  for (int s = 0; s < n && !failed && bad < 0; s++)
    if (drec(a, me, s)->code) bad = s;
  for (int s = 1; s < n && !failed && bad < 0 && odd < 0; s++)
    if (drec(a, me, s)->fp8 != drec(a, me, 0)->fp8) odd = s;
  if (odd >= 0) bad = odd;
  const uint64_t q = blockIdx.x; /* a block a slot: source q / B's token q % B */
  const int src = (int)(q / B);
  if (!failed && bad < 0 && q % B < (uint64_t)drec(a, me, src)->ntok) {
    const weft_moe_k_rec_t *rec = drec(a, me, src);
    const char *slot = a.win[me] + a.g.dstage + q * a.g.slot_bytes;
    __shared__ char *dst[WEFT_MOE_K_MAX_TOPK], *dsc[WEFT_MOE_K_MAX_TOPK];
    __shared__ int nd;
    const uint64_t nb = WEFT_MOE_FP8_BLOCKS(a.hidden), out_row = a.fp8 ? a.hidden : a.g.row_bytes;
    if (threadIdx.x == 0) {
      nd = 0;
      for (int j = 0; j < k; j++) {
        const int32_t *hd = (const int32_t *)slot + 3 * j;
        int32_t l = __ldcg(hd), idx = __ldcg(hd + 1);
        int64_t row = -1;
        if (l >= 0 && l < a.local && idx >= 0 && idx < rec_counts(rec)[l]) {
          row = (int64_t)((uint64_t)l * n * B + before(a, l, src) + (uint64_t)idx);
          dst[nd] = (char *)a.out + (uint64_t)row * out_row;
          dsc[nd++] = a.fp8 ? (char *)(a.out_s + (uint64_t)row * nb) : NULL;
          if (a.out_w) a.out_w[row] = __ldcg((const float *)hd + 2);
        }
        a.row_of[q * k + j] = row;
      }
    }
    __syncthreads();
    if (!a.fp8) {
      copy_multi(dst, nd, slot + a.g.hdr_bytes, a.g.row_bytes);
    } else {
      copy_multi(dsc, nd, slot + a.g.hdr_bytes, nb * sizeof(float));
      copy_multi(dst, nd, slot + a.g.hdr_bytes + nb * sizeof(float), a.hidden);
    }
  }
  if (blockIdx.x == 0 && !failed) {
    for (int l = threadIdx.x; l < a.local; l += blockDim.x) /* a refused round: none */
      a.counts_out[l] = bad < 0 ? (int64_t)before(a, l, n) : 0;
    if (threadIdx.x == 0) {
      for (int s = 0; s < n; s++)
        h->ntok_from[s] = bad < 0 ? drec(a, me, s)->ntok : 0;
      const weft_moe_k_rec_t *rec = bad >= 0 ? drec(a, me, bad) : NULL;
      a.status->code = odd >= 0 ? a.fp8_code : rec ? rec->code : 0;
      a.status->rank = bad, a.status->phase = 1;
      a.status->a = odd >= 0 ? drec(a, me, 0)->fp8 : rec ? rec->a : 0; /* fp8: rank 0's */
      a.status->b = rec ? rec->b : 0;
      a.status->c = rec ? rec->c : 0;
      if (bad >= 0) h->refused = 1;
    }
  }
  if (!moe_last_block(&h->ticket) || failed || threadIdx.x) return;
  for (int s = 0; s < n; s++) /* we are done with what each source wrote this round */
    st_release_sys(ack(a, s, a.g.dack, me), h->round);
}

/* ---- combine ---- */

__global__ void c_open(P a) {
  if (threadIdx.x) return;
  weft_moe_k_llh_t *h = a.h;
  h->cfailed = 0, h->ticket = 0;
  if (h->refused) { /* every rank saw the same refusal of the dispatch: no round */
    h->cround = 0;
    return;
  }
  uint64_t C = ++a.state->cround;
  h->cround = C;
  if (!wait_all(a, a.g.cack, WEFT_MOE_K_FLAG_STRIDE, C - 1, 2)) h->cfailed = 1;
}

template <typename T> __global__ void c_back(P a) {
  weft_moe_k_llh_t *h = a.h;
  const bool go = h->cround != 0 && !h->cfailed;
  const int k = a.k, n = a.nranks;
  const uint64_t B = a.bound;
  const uint64_t q = blockIdx.x; /* a block a slot: source q / B's token q % B */
  const int home = (int)(q / B);
  if (go && a.code == 0 && q % B < (uint64_t)h->ntok_from[home]) {
    const T *src[WEFT_MOE_K_MAX_TOPK];
    float w[WEFT_MOE_K_MAX_TOPK];
    for (int j = 0; j < k; j++) {
      int64_t r = a.row_of[q * k + j];
      src[j] = r >= 0 ? (const T *)a.in + (uint64_t)r * a.hidden : NULL;
      w[j] = r >= 0 && a.in_w ? a.in_w[r] : 1.0f;
    }
    T *dst = (T *)(a.win[home] + a.g.cstage + ((uint64_t)a.rank * B + q % B) * a.g.row_pad);
    moe_sum_rows<T>(dst, src, w, k, a.hidden);
  }
  if (!moe_last_block(&h->ticket) || !go || threadIdx.x) return;
  for (int s = 0; s < n; s++) {
    weft_moe_k_rec_t *rec = crec(a, s, a.rank);
    rec->code = a.code, rec->ntok = 0, rec->a = a.a, rec->b = a.b, rec->c = a.c;
  }
  __threadfence_system();
  for (int s = 0; s < n; s++)
    st_release_sys(&crec(a, s, a.rank)->round, h->cround);
}

__global__ void c_wait(P a) {
  weft_moe_k_llh_t *h = a.h;
  if (threadIdx.x || h->cround == 0 || h->cfailed) return;
  if (!wait_all(a, a.g.csig, WEFT_MOE_K_FLAG_STRIDE, h->cround, 2)) h->cfailed = 1;
}

template <typename T> __global__ void c_home(P a) {
  weft_moe_k_llh_t *h = a.h;
  const bool go = h->cround != 0 && !h->cfailed;
  const int n = a.nranks, me = a.rank;
  int bad = -1;
  for (int r = 0; r < n && go && bad < 0; r++)
    if (crec(a, me, r)->code) bad = r;
  const uint64_t t = blockIdx.x; /* a block a token */
  if (go && bad < 0 && t < a.tokens) {
    const T *src[WEFT_DEV_MAX_RANKS];
    for (int r = 0; r < n; r++) {
      int32_t p = a.pos[t * n + r];
      src[r] = p >= 0 ? (const T *)(a.win[me] + a.g.cstage +
                                    ((uint64_t)r * a.bound + (uint64_t)p) * a.g.row_pad)
                      : NULL;
    }
    moe_sum_rows<T>((T *)a.out + t * a.hidden, src, NULL, n, a.hidden);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0 && go) {
    const weft_moe_k_rec_t *rec = bad >= 0 ? crec(a, me, bad) : NULL;
    a.status->code = rec ? rec->code : 0, a.status->rank = bad, a.status->phase = 2;
    a.status->a = rec ? rec->a : 0, a.status->b = rec ? rec->b : 0;
    a.status->c = rec ? rec->c : 0;
  }
  if (!moe_last_block(&h->ticket) || !go || threadIdx.x) return;
  for (int r = 0; r < n; r++)
    st_release_sys(ack(a, r, a.g.cack, me), h->cround);
}

template <typename I>
__global__ void stamp(weft_moe_k_llh_t *h, weft_moe_k_status_t *status,
                      const unsigned long long *bad, const I *ids, int k, int experts, int bad_code,
                      int repeated_code) {
  unsigned long long b = *bad;
  status->code = 0, status->rank = -1, status->phase = 0; /* the slot's last holder's, gone */
  h->own_code = 0, h->own_a = h->own_b = h->own_c = 0;
  h->refused = 0, h->cround = 0, h->cfailed = 0, h->ticket = 0;
  for (int r = 0; r < WEFT_DEV_MAX_RANKS; r++)
    h->ntok_from[r] = 0;
  if (b == ~0ull) return;
  int64_t id = (int64_t)ids[b];
  h->own_code = id < -1 || id >= experts ? bad_code : repeated_code;
  h->own_a = (int64_t)(b / k), h->own_b = (int64_t)(b % k), h->own_c = id;
}

template <typename T> void combine_kernels(const P &a, cudaStream_t s) {
  c_back<T><<<blocks((uint64_t)a.nranks * a.bound), THREADS, 0, s>>>(a);
  c_wait<<<1, 32, 0, s>>>(a);
  c_home<T><<<blocks(a.tokens), THREADS, 0, s>>>(a);
}

} // namespace

extern "C" int weft_moe_k_ll_stamp(weft_moe_k_llh_t *h, weft_moe_k_status_t *status,
                                   const unsigned long long *bad, const void *ids, int id_bytes,
                                   int k, int experts, int bad_code, int repeated_code,
                                   void *stream) {
  (void)cudaGetLastError();
  cudaStream_t s = (cudaStream_t)stream;
  if (id_bytes == 4)
    stamp<<<1, 1, 0, s>>>(h, status, bad, (const int32_t *)ids, k, experts, bad_code,
                          repeated_code);
  else
    stamp<<<1, 1, 0, s>>>(h, status, bad, (const int64_t *)ids, k, experts, bad_code,
                          repeated_code);
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_ll_dispatch(const weft_moe_k_ll_t *a, void *stream) {
  (void)cudaGetLastError();
  cudaStream_t s = (cudaStream_t)stream;
  int width = a->k < a->nranks ? a->k : a->nranks;
  d_open<<<1, 32, 0, s>>>(*a);
  d_send<<<blocks(a->bound * (uint64_t)width), THREADS, 0, s>>>(*a);
  d_wait<<<1, 32, 0, s>>>(*a);
  d_recv<<<blocks((uint64_t)a->nranks * a->bound), THREADS, 0, s>>>(*a);
  return (int)cudaGetLastError();
}

extern "C" int weft_moe_k_ll_combine(const weft_moe_k_ll_t *a, void *stream) {
  (void)cudaGetLastError();
  cudaStream_t s = (cudaStream_t)stream;
  c_open<<<1, 32, 0, s>>>(*a);
  if (a->dtype == WEFT_MOE_K_F32)
    combine_kernels<float>(*a, s);
  else if (a->dtype == WEFT_MOE_K_F16)
    combine_kernels<__half>(*a, s);
  else
    combine_kernels<__nv_bfloat16>(*a, s);
  return (int)cudaGetLastError();
}
