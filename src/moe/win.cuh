/* What the MoE kernels on windows share (ll.cu: low-latency mode, direct.cu: normal mode's
 * direct path): waiting for the peers' flags with a timeout and an abort path, the last block
 * of a grid posting for it, and the f32-accumulated weighted sum of rows. */
#ifndef WEFT_MOE_WIN_CUH
#define WEFT_MOE_WIN_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include "fp8.cuh"
#include "moe_kernels.h"
#include "prims.cuh"

namespace {

/* Where a wait reports to: the communicator's abort flag and error, its timeout, and where a
 * long wait notes itself (after report_ns; 0: never). */
struct moe_waiter {
  volatile int32_t *abort_flag;
  weft_dev_error_t *error, *waiting;
  uint64_t timeout_ns, report_ns;
};

/* Thread 0 of a lone block: waits until the flag at mine + off + r * stride reaches target
 * for every rank r; false (the comm's error written, its kernels told to stop) when the
 * communicator aborts or the timeout passes. phase: 1 dispatch, 2 combine; where: what the
 * flags count (WEFT_DEV_WHERE_MOE_*), for the host's words. */
__device__ bool moe_wait_all(const char *mine, int nranks, uint64_t off, uint64_t stride,
                             uint64_t target, int phase, uint64_t where, const moe_waiter &w) {
  const uint32_t kind = WEFT_DEV_MOE_KIND | (uint32_t)phase;
  uint64_t start = 0; /* one clock for all the peers: the timeout bounds the whole wait */
  for (int r = 0; r < nranks; r++) {
    const uint64_t *f = (const uint64_t *)(mine + off + (uint64_t)r * stride);
    uint64_t seen;
    for (uint32_t spins = 0; (seen = weft::ld_acquire_sys(f)) < target; spins++) {
      if ((spins & 255) != 255) continue;
      uint64_t t = weft::global_ns();
      if (!start) start = t;
      bool aborted = *w.abort_flag != 0;
      if (!aborted && t - start <= w.timeout_ns) {
        if (w.report_ns && t - start > w.report_ns)
          weft::note_wait(w.waiting, w.report_ns, r, -1, kind, where, target, seen, t - start);
        continue;
      }
      if (!aborted && w.error->code == 0) {
        w.error->peer = r, w.error->channel = -1, w.error->kind = kind;
        w.error->where = where, w.error->want = target, w.error->seen = seen;
        __threadfence_system();
        w.error->code = WEFT_DEV_ERR_TIMEOUT;
      }
      *w.abort_flag = 1;
      return false;
    }
  }
  return true;
}

/* moe_wait_all for a kernel's arguments a (ll.cu's or direct.cu's): its own window, its
 * waiter, and what the flags at off count (acks at the geometry's dack and cack, else records). */
template <typename P>
__device__ bool moe_wait_flags(const P &a, uint64_t off, uint64_t stride, uint64_t target,
                               int phase) {
  const bool acks = off == a.g.dack || off == a.g.cack;
  return moe_wait_all(a.win[a.rank], a.nranks, off, stride, target, phase,
                      acks ? WEFT_DEV_WHERE_MOE_ACKS : WEFT_DEV_WHERE_MOE_RECORDS,
                      moe_waiter{a.abort_flag, a.error, a.waiting, a.timeout_ns, a.report_ns});
}

/* The block's writes are done and fenced; true in the grid's last block (which then posts and
 * resets the ticket). */
__device__ bool moe_last_block(uint32_t *ticket) {
  __shared__ bool last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    if (last) *ticket = 0, __threadfence(); /* the other blocks' reads before our acks */
  }
  __syncthreads();
  return last;
}

/* Overloads, not template specialisations: nvcc gives the latter host symbols that escape
 * the anonymous namespace (and libweft.so exports nothing but the API). */
__device__ __forceinline__ void moe_fromf(float v, float *d) { *d = v; }
__device__ __forceinline__ void moe_fromf(float v, __half *d) { *d = __float2half_rn(v); }
__device__ __forceinline__ void moe_fromf(float v, __nv_bfloat16 *d) {
  *d = __float2bfloat16_rn(v);
}

/* The block writes dst = sum over the n sources src[i] (each scaled by w[i], 1 when w is NULL;
 * NULL sources skipped), accumulated in f32 in source order; 16 bytes a thread at a time where
 * all are aligned. Sources through L2 only. */
template <typename T>
__device__ void moe_sum_rows(T *dst, const T *const *src, const float *w, int n, uint64_t hidden) {
  constexpr int V = 16 / sizeof(T);
  uintptr_t al = (uintptr_t)dst | (hidden * sizeof(T));
  for (int i = 0; i < n; i++)
    al |= (uintptr_t)src[i];
  if (al % 16 == 0) {
    for (uint64_t c = threadIdx.x; c < hidden / V; c += blockDim.x) {
      float acc[V];
#pragma unroll
      for (int q = 0; q < V; q++)
        acc[q] = 0.0f;
      for (int i = 0; i < n; i++) {
        if (!src[i]) continue;
        uint4 u = __ldcg((const uint4 *)src[i] + c);
        const T *e = (const T *)&u;
        float wi = w ? w[i] : 1.0f;
#pragma unroll
        for (int q = 0; q < V; q++)
          acc[q] += wi * moe_fp8::up(e[q]);
      }
      uint4 o;
      T *oe = (T *)&o;
#pragma unroll
      for (int q = 0; q < V; q++)
        moe_fromf(acc[q], &oe[q]);
      ((uint4 *)dst)[c] = o;
    }
    return;
  }
  for (uint64_t c = threadIdx.x; c < hidden; c += blockDim.x) {
    float acc = 0.0f;
    for (int i = 0; i < n; i++)
      if (src[i]) acc += (w ? w[i] : 1.0f) * moe_fp8::up(src[i][c]);
    moe_fromf(acc, &dst[c]);
  }
}

} // namespace

#endif
