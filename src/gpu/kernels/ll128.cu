/* The 128-byte low-latency kernel (see weft_dev_ll_t) for medium and large allreduce,
 * allgather, alltoall and reduce_scatter over NVLink: eight threads carry a 128-byte line,
 * 120 bytes of payload and a flag in its last 8, stored by one warp instruction that NVLink
 * delivers whole; the receiver polls the lines themselves. Past its buffers, a channel's
 * slot becomes a ring that the receiver's credits let the sender reuse. */
#include <cuda_runtime.h>

#include "dev.h"
#include "prims.cuh"

namespace weft {

constexpr unsigned FULL = 0xffffffffu; /* every lane of a warp */

enum {
  LINE = WEFT_DEV_LL128_LINE_BYTES,
  DATA = WEFT_DEV_LL128_DATA_BYTES,
  /* lines per thread and step: a warp moves 4 * U consecutive lines, then waits for the
   * peers' same lines. Fewer per warp won on 2 H200s (8 MiB allreduce 32.9 us with 1, 35.1
   * with 2, 39.7 with 4; 16 MiB allgather 32.5, 35.0, 41.9; bench/results/
   * 2026-11-30-h200x2-tuning-18.txt) */
  U = 1,
  WARPS = WEFT_DEV_THREADS / 32,
  STEP = WARPS * 4 * U, /* lines a block moves in one step */
};
static_assert((int)STEP == (int)WEFT_DEV_LL128_STEP, "the host sizes rings in these steps");

__device__ inline void st_pair(uint64_t *p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

__device__ inline void ld_pair(const uint64_t *p, uint64_t *a, uint64_t *b) {
  asm volatile("ld.volatile.global.v2.u64 {%0, %1}, [%2];"
               : "=l"(*a), "=l"(*b)
               : "l"(p)
               : "memory");
}

/* Bytes [off, off + 8) of a payload of len bytes, those that exist (zeros past the end). */
__device__ inline uint64_t get8(const char *p, uint64_t len, uint64_t off) {
  return off >= len ? 0 : load_bytes(p + off, len - off < 8 ? len - off : 8);
}
__device__ inline void put8(char *p, uint64_t len, uint64_t off, uint64_t v) {
  if (off < len) store_bytes(p + off, v, len - off < 8 ? len - off : 8);
}

/* Line i's two words of this thread in the slot src writes in owner's region. */
__device__ inline uint64_t *word(const weft_dev_ll_t &P, int owner, int src, int ch, int parity,
                                 uint64_t i) {
  int slot = src < owner ? src : src - 1;
  char *base =
      P.region[owner] + P.ll128_off + WEFT_DEV_LL128_OFF(ch, parity, slot, P.nranks, P.ll128_lines);
  return (uint64_t *)(base + i * LINE) + (threadIdx.x & 7) * 2;
}

/* A warp's check while it waits for src, every 1024 spins: whether the block gave up, or
 * (lane 0, every 4096) the operation was aborted or ran past its timeout, which is recorded
 * for the host as the other kernels do. Every lane calls it alike. */
__device__ __forceinline__ bool warp_gives_up(const weft_dev_ll_t &P, uint32_t spins,
                                              uint64_t *start, int src, int ch,
                                              volatile int *bail) {
  if ((spins & 1023) != 1023) return false;
  int give_up = *bail;
  if (!give_up && (spins & 4095) == 4095 && (threadIdx.x & 31) == 0 &&
      ll_give_up(P, start, src, ch, WEFT_DEV_LL128_KIND(P.kind))) {
    *bail = 1;
    give_up = 1;
  }
  return __shfl_sync(FULL, give_up, 0) != 0;
}

/* Waits until each of this warp's lines that exist carries flag in its last word (the second
 * word of the line's eighth thread); w0/w1 hold the words. Every lane calls it alike. False
 * when the block gave up: a timeout (recorded for the host as the other kernels do) or an
 * abort. Only lane 0 reads the clock and the host-mapped abort flag, every 4096 spins. */
__device__ bool wait_lines(const weft_dev_ll_t &P, uint64_t *const *at, const bool *has,
                           uint64_t flag, int src, int ch, uint64_t *w0, uint64_t *w1,
                           volatile int *bail) {
  const int lane = threadIdx.x & 31, flag_lane = lane | 7;
  uint64_t start = 0;
  for (uint32_t spins = 0;; spins++) {
    bool ok = true;
#pragma unroll
    for (int u = 0; u < U; u++) {
      uint64_t f = __shfl_sync(FULL, w1[u], flag_lane);
      if (has[u] && f != flag) ok = false;
    }
    if (__all_sync(FULL, ok)) return true;
    if (warp_gives_up(P, spins, &start, src, ch, bail)) return false;
#pragma unroll
    for (int u = 0; u < U; u++) {
      uint64_t f = __shfl_sync(FULL, w1[u], flag_lane);
      if (has[u] && f != flag) ld_pair(at[u], &w0[u], &w1[u]);
    }
  }
}

/* The credit word that `from` writes in `owner`'s region for this warp of channel ch: the
 * steps of ours it has consumed, with the operation's sequence number above them. */
__device__ inline uint64_t *credit(const weft_dev_ll_t &P, int owner, int from, int ch) {
  int slot = from < owner ? from : from - 1;
  return (
      uint64_t *)(P.region[owner] + P.ll128_off +
                  WEFT_DEV_LL128_CREDIT_OFF(ch, threadIdx.x >> 5, slot, P.nranks, P.ll128_lines));
}

/* Waits until peer p's credit word reaches want. *known keeps what was read, so that most
 * steps need no load; lane 0's reading stands for the warp's. False when the block gave up. */
__device__ bool wait_credit(const weft_dev_ll_t &P, int p, int ch, uint64_t want, uint64_t *known,
                            volatile int *bail) {
  const volatile uint64_t *w = credit(P, P.rank, p, ch);
  uint64_t start = 0;
  for (uint32_t spins = 0; *known < want; spins++) {
    *known = __shfl_sync(FULL, *w, 0);
    if (warp_gives_up(P, spins, &start, p, ch, bail)) return false;
  }
  __syncwarp();
  return true;
}

/* One block's part of an operation. Each peer's payload is `count` elements (allreduce: the
 * whole buffer; allgather, alltoall and reduce_scatter: one rank's block), cut into lines,
 * block ch taking an equal run of them. NR: the ranks when known at compile time (2: every
 * loop over peers unrolls and the words stay in registers), else 0. */
template <int NR> struct Run {
  const weft_dev_ll_t &P;
  int n, me, ch, parity, t, lane;
  uint64_t seq, total, l0, l1, own;
  /* ring: lines of the slot the channel cycles through, a whole number (q) of steps, where
   * its lines do not fit in the slot (else 0); a receiver credits every cstep steps */
  uint64_t ring, q, cstep;
  int ahead; /* steps a warp sends before it waits for the first: 1, or 0 on a ring */
  bool per_peer, reduces;
  const char *in;
  char *out;

  __device__ Run(const weft_dev_ll_t &p, uint64_t s) : P(p), seq(s) {
    n = NR ? NR : P.nranks, me = P.rank, ch = blockIdx.x, parity = (int)(seq & 1);
    lane = threadIdx.x & 31, t = lane & 7;
    total = P.count * (uint64_t)dtype_size(P.dtype);
    uint64_t lines = (total + DATA - 1) / DATA, per = (lines + gridDim.x - 1) / gridDim.x;
    l0 = (uint64_t)ch * per < lines ? (uint64_t)ch * per : lines;
    l1 = l0 + per < lines ? l0 + per : lines;
    ring = l1 - l0 > P.ll128_lines ? P.ll128_lines / STEP * STEP : 0;
    q = ring / STEP;
    ahead = ring ? 0 : 1;
    /* at most q - ahead, else two ranks could each wait for the other's credit */
    cstep = q / 3 ? q / 3 : 1;
    per_peer = P.kind == WEFT_DEV_ALLTOALL || P.kind == WEFT_DEV_REDUCE_SCATTER;
    reduces = P.kind == WEFT_DEV_ALLREDUCE_ONESHOT || P.kind == WEFT_DEV_REDUCE_SCATTER;
    in = (const char *)P.send;
    out = (char *)P.recv;
    own = per_peer ? (uint64_t)me * total : 0; /* our part of the input */
  }

  /* where line i of the channel sits in its slot, and the flag it carries there: the
   * sequence number above 24 bits, its lap of the ring below */
  __device__ uint64_t pos(uint64_t i) const { return ring ? (i - l0) % ring : i - l0; }
  __device__ uint64_t flag(uint64_t i) const { return seq << 24 | (ring ? (i - l0) / ring : 0); }

  /* the lines of the warp's step that starts at line b, and which exist */
  __device__ void lines(uint64_t b, uint64_t *idx, bool *has) const {
#pragma unroll
    for (int u = 0; u < U; u++) {
      idx[u] = b + 4 * u + (lane >> 3);
      has[u] = idx[u] < l1;
    }
  }

  /* Our lines of the step to every peer (the same payload to all but for alltoall and
   * reduce_scatter), once the peer has consumed what they overwrite (known[k]: its credit
   * as last read). False when the block gave up. */
  __device__ bool send(uint64_t b, uint64_t *known, volatile int &bail) const {
    uint64_t idx[U], w0[U], w1[U], s = (b - l0) / STEP;
    bool has[U];
    lines(b, idx, has);
#pragma unroll
    for (int k = 1; k < (NR ? NR : WEFT_DEV_MAX_RANKS); k++) {
      if (k >= n) break;
      int p = (me + k) % n;
      if (ring && s >= q && !wait_credit(P, p, ch, seq << 32 | (s - q + 1), &known[k], &bail))
        return false;
      if (k == 1 || per_peer) {
        const char *src = in + (per_peer ? (uint64_t)p * total : 0);
#pragma unroll
        for (int u = 0; u < U; u++) {
          uint64_t off = idx[u] * DATA + t * 16;
          w0[u] = has[u] ? get8(src, total, off) : 0;
          w1[u] = t == 7 ? flag(b) : has[u] ? get8(src, total, off + 8) : 0;
        }
      }
#pragma unroll
      for (int u = 0; u < U; u++)
        if (has[u]) st_pair(word(P, p, me, ch, parity, pos(idx[u])), w0[u], w1[u]);
    }
    return true;
  }

  /* The same lines from every peer, in rank order (ours from the input), reduced or placed.
   * False when the block gave up. */
  __device__ bool recv(uint64_t b, volatile int &bail) const {
    uint64_t idx[U], v0[U][WEFT_DEV_MAX_RANKS], v1[U][WEFT_DEV_MAX_RANKS];
    bool has[U];
    lines(b, idx, has);
#pragma unroll
    for (int src = 0; src < (NR ? NR : WEFT_DEV_MAX_RANKS); src++) {
      if (src >= n) break;
      if (src == me) {
#pragma unroll
        for (int u = 0; u < U; u++) {
          uint64_t off = idx[u] * DATA + t * 16;
          v0[u][src] = has[u] ? get8(in + own, total, off) : 0;
          v1[u][src] = has[u] && t < 7 ? get8(in + own, total, off + 8) : 0;
        }
        continue;
      }
      uint64_t *at[U], w0[U], w1[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        at[u] = word(P, me, src, ch, parity, has[u] ? pos(idx[u]) : 0);
        w0[u] = w1[u] = 0;
        if (has[u]) ld_pair(at[u], &w0[u], &w1[u]);
      }
      if (!wait_lines(P, at, has, flag(b), src, ch, w0, w1, &bail)) return false;
      /* the lines are in registers: the sender may overwrite them */
      uint64_t s = (b - l0) / STEP + 1;
      if (ring && s % cstep == 0 && lane == 0)
        *(volatile uint64_t *)credit(P, src, me, ch) = seq << 32 | s;
#pragma unroll
      for (int u = 0; u < U; u++) {
        v0[u][src] = w0[u];
        v1[u][src] = w1[u];
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      if (!has[u]) continue;
      uint64_t off = idx[u] * DATA + t * 16;
      if (reduces) {
        put8(out, total, off, reduce_pkt(P.dtype, P.op, v0[u], n, n));
        if (t < 7) put8(out, total, off + 8, reduce_pkt(P.dtype, P.op, v1[u], n, n));
        continue;
      }
#pragma unroll
      for (int src = 0; src < (NR ? NR : WEFT_DEV_MAX_RANKS); src++) {
        if (src >= n) break;
        if (src == me && in + own == out + (uint64_t)me * total) continue; /* in place */
        put8(out + (uint64_t)src * total, total, off, v0[u][src]);
        if (t < 7) put8(out + (uint64_t)src * total, total, off + 8, v1[u][src]);
      }
    }
    return true;
  }
};

/* Where the operation fits the buffers, a warp sends the lines of its next step before it
 * waits for those of this one, so that two steps are in flight (the wait is a round trip over
 * NVLink). On rings one step is: more in flight ran slower there (32 MiB allreduce 117.3 us
 * with one, 129.7 with two, 131.2 with four; 1 MiB 9.6 with two, 10.7 with one;
 * bench/results/2026-11-30-h200x2-tuning-21.txt). In place, a thread still reads each of its
 * input bytes before it writes them: a step's output lines are the ones it sent. */
template <int NR>
__device__ void ll128_run(const weft_dev_ll_t &P, uint64_t seq, volatile int &bail) {
  const Run<NR> R(P, seq);
  uint64_t known[NR ? NR : WEFT_DEV_MAX_RANKS] = {};
  uint64_t b = R.l0 + (uint64_t)(threadIdx.x >> 5) * 4 * U;
  if (R.ahead && b < R.l1 && !R.send(b, known, bail)) return;
  for (; b < R.l1 && !bail; b += STEP) {
    if (b + R.ahead * STEP < R.l1 && !R.send(b + R.ahead * STEP, known, bail)) break;
    if (!R.recv(b, bail)) break;
  }
}

/* Blocks with no lines still count the operation, so that every channel's sequence stays
 * the same. */
__global__ void __launch_bounds__(WEFT_DEV_THREADS)
    ll128_kernel(const __grid_constant__ weft_dev_ll_t P) {
  volatile __shared__ int bail;
  const uint64_t seq = P.seq128[blockIdx.x] + 1;
  if (threadIdx.x == 0) bail = 0;
  __syncthreads();
  if (P.nranks == 2)
    ll128_run<2>(P, seq, bail);
  else
    ll128_run<0>(P, seq, bail);
  __syncthreads();
  if (threadIdx.x == 0 && !bail) P.seq128[blockIdx.x] = seq;
}

} // namespace weft

extern "C" int weft_dev_launch_ll128(const weft_dev_ll_t *l, void *stream) {
  void *args[] = {(void *)l};
  return (int)cudaLaunchKernel((const void *)weft::ll128_kernel, dim3(WEFT_DEV_LL128_CHANNELS),
                               dim3(WEFT_DEV_THREADS), args, 0, (cudaStream_t)stream);
}
