/* Block-wide primitives of the device executor: flag waits with a timeout and an abort
 * path, credit-based slots in a peer's staging area, and 16-byte copy and reduce loops.
 * A channel is one block's private FIFO to every peer: the sender waits for a free slot
 * (the receiver's "done" count), writes the chunk into the receiver's memory over NVLink,
 * fences at system scope and bumps "ready"; the receiver waits for "ready", reads the
 * chunk from its own memory, and returns the slot. Counts only grow, so flags never need
 * resetting, and they persist in device memory so a replayed CUDA graph stays in step. */
#ifndef WEFT_DEVICE_PRIMS_CUH
#define WEFT_DEVICE_PRIMS_CUH

#include <stdint.h>

#include "dev.h"
#include "types.cuh"

namespace weft {

__device__ inline uint64_t ld_acquire_sys(const uint64_t *p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ inline void st_release_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

/* A relaxed store at system scope: after a fence.sc.sys it completes the release pattern. */
__device__ inline void st_relaxed_sys(uint64_t *p, uint64_t v) {
  asm volatile("st.relaxed.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}

__device__ inline uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* A wait past its report time says what it waits for, in host memory the heartbeat thread
 * reads every 100 ms (weft_dev_launch_t.waiting): the fields, then how long so far. Only in
 * the first WEFT_NOTE_NS of each report period, so that waiting blocks do not keep writing host
 * memory. Blocks may overwrite each other's notes: the host reports whichever it finds. */
#define WEFT_NOTE_NS 250000000ull
__device__ inline void note_wait(weft_dev_error_t *w, uint64_t report_ns, int peer, int ch,
                                 uint32_t kind, uint64_t where, uint64_t want, uint64_t seen,
                                 uint64_t waited) {
  if (waited % report_ns >= WEFT_NOTE_NS) return;
  volatile weft_dev_error_t *v = w;
  v->peer = peer;
  v->channel = ch;
  v->kind = kind;
  v->where = where;
  v->want = want;
  v->seen = seen;
  __threadfence_system();
  v->waited_ns = waited;
}

/* One block's view of its channel. Peers are slots (weft_dev_slots_t): on up to
 * WEFT_DEV_MAX_RANKS ranks a rank's number is its slot, so the all-peer algorithms pass ranks;
 * the ring ones ask slot() for their neighbours'. */
struct Chan {
  const weft_dev_launch_t *L;
  int ch, rank, n;
  uint64_t *sent, *recvd; /* shared memory, per slot */
  int *bail;              /* shared memory */
  uint32_t kind;

  /* A flag in our own region that peer writes, and one in peer's region that we write. The
   * first is read through our inbox for that peer: on another host, the proxy raises it. */
  __device__ uint64_t *in_flag(int peer, uint64_t off) const {
    return (uint64_t *)(L->inbox[peer] + off);
  }
  __device__ uint64_t *out_flag(int peer, uint64_t off) const {
    return (uint64_t *)(L->region[peer] + off);
  }
  /* The slot of rank r (-1: not reached; the host plans nothing that would ask). */
  __device__ int slot(int r) const { return weft_dev_slot_of(&L->slots, r); }
  /* Staging slot seq of the sender whose staging index in base's region is idx (dev.h). */
  __device__ char *stage(const char *base, int idx, uint64_t seq) const {
    return (char *)base + weft_dev_stage_off(ch, L->coll_channels, L->slots.nsrc, idx, L->stages,
                                             L->chunk_bytes, seq);
  }

  /* Where flag p lies for the host: a flag of the region, or (in-place rounds) this block's
   * own sender's count in private memory: WEFT_DEV_WHERE_PROGRESS */
  __device__ uint64_t where_of(const uint64_t *p, int peer) const {
    const char *q = (const char *)p, *r = L->inbox[peer];
    return q >= r && q < r + WEFT_DEV_STAGE_OFF ? (uint64_t)(q - r) : WEFT_DEV_WHERE_PROGRESS;
  }

  /* Thread 0 waits for *p >= target; everyone learns the outcome. */
  __device__ bool wait_geq(const uint64_t *p, uint64_t target, int peer) const {
    if (threadIdx.x == 0 && !*bail) {
      uint64_t start = 0, seen;
      for (uint32_t spins = 0; (seen = ld_acquire_sys(p)) < target; spins++) {
        if ((spins & 1023) != 1023) continue;
        uint64_t now = global_ns();
        if (!start) start = now;
        uint32_t code = WEFT_DEV_ERR_NONE;
        if (*L->abort_flag)
          code = WEFT_DEV_ERR_ABORTED;
        else if (now - start > L->timeout_ns)
          code = WEFT_DEV_ERR_TIMEOUT;
        else if (L->report_ns && now - start > L->report_ns)
          note_wait(L->waiting, L->report_ns, peer, ch, kind, where_of(p, peer), target, seen,
                    now - start);
        if (code != WEFT_DEV_ERR_NONE) {
          if (code == WEFT_DEV_ERR_TIMEOUT && L->error->code == 0) {
            L->error->peer = peer;
            L->error->channel = ch;
            L->error->kind = kind;
            L->error->where = where_of(p, peer);
            L->error->want = target;
            L->error->seen = seen;
            __threadfence_system();
            L->error->code = code;
            *L->abort_flag = 1; /* the other blocks stop too */
          }
          *bail = 1;
          break;
        }
      }
    }
    __syncthreads();
    /* Every thread acquires too, so its own reads of the chunk (or writes into a freed slot)
     * are ordered after the flag at system scope, not only through thread 0 and the
     * barrier. */
    if (*bail) return false;
    if (threadIdx.x != 0) (void)ld_acquire_sys(p);
    return true;
  }

  /* Where the next chunk to dst goes, once dst has a free slot. */
  __device__ char *send_slot(int dst) const {
    uint64_t s = sent[dst];
    uint64_t need = s + 1 > L->stages ? s + 1 - L->stages : 0;
    if (!wait_geq(in_flag(dst, WEFT_DEV_DONE_OFF(ch, dst)), need, dst)) return nullptr;
    return stage(L->region[dst], L->slots.stage_out[dst], s);
  }
  /* After the whole block wrote the chunks: make them visible, then bump ready. One fence
   * (cumulative over the block's writes through the barrier) covers every peer's flag. Each
   * chunk's length (bytes[i], or same for all where bytes is null) goes beside its flag,
   * for a proxy to carry only those. */
  __device__ void publish(const int *dsts, int nd, const uint32_t *bytes, uint64_t same) const {
    __syncthreads();
    if (threadIdx.x == 0 && nd > 0) {
      for (int i = 0; i < nd; i++) {
        int d = dsts[i];
        uint64_t flag = WEFT_DEV_READY_OFF(ch, L->slots.flag_out[d]);
        *(uint32_t *)((char *)out_flag(d, WEFT_DEV_SIZE_OFF(flag, sent[d]))) =
            bytes ? bytes[i] : (uint32_t)same;
      }
      __threadfence_system();
      for (int i = 0; i < nd; i++) {
        int d = dsts[i];
        st_relaxed_sys(out_flag(d, WEFT_DEV_READY_OFF(ch, L->slots.flag_out[d])), ++sent[d]);
      }
    }
    __syncthreads();
  }
  __device__ void publish(const int *dsts, int nd, uint64_t same) const {
    publish(dsts, nd, nullptr, same);
  }
  __device__ const char *recv_slot(int src) const {
    uint64_t r = recvd[src];
    if (!wait_geq(in_flag(src, WEFT_DEV_READY_OFF(ch, src)), r + 1, src)) return nullptr;
    return stage(L->inbox[src], L->slots.stage_in[src], r);
  }
  /* After the whole block has read the chunks: hand the slots back. */
  __device__ void release(const int *srcs, int ns) const {
    __syncthreads();
    if (threadIdx.x == 0)
      for (int i = 0; i < ns; i++) {
        int s = srcs[i];
        st_release_sys(out_flag(s, WEFT_DEV_DONE_OFF(ch, L->slots.flag_out[s])), ++recvd[s]);
      }
    __syncthreads();
  }
};

/* Block-wide copy to nd destinations (the collectives' up to WEFT_DEV_MAX_RANKS, MoE's rows
 * of a token's experts), 16 bytes a thread when every pointer allows it. */
__device__ inline void copy_multi(char *const *dst, int nd, const char *src, uint64_t bytes) {
  uintptr_t al = (uintptr_t)src | bytes;
  for (int d = 0; d < nd; d++)
    al |= (uintptr_t)dst[d];
  const int t = threadIdx.x, nt = blockDim.x;
  if ((al & 15) == 0) {
    const uint4 *s = (const uint4 *)src;
    uint64_t nv = bytes / 16, i = t;
    for (; i + 3 * nt < nv; i += 4 * nt) {
      uint4 a = s[i], b = s[i + nt], c = s[i + 2 * nt], e = s[i + 3 * nt];
      for (int d = 0; d < nd; d++) {
        uint4 *o = (uint4 *)dst[d];
        o[i] = a, o[i + nt] = b, o[i + 2 * nt] = c, o[i + 3 * nt] = e;
      }
    }
    for (; i < nv; i += nt) {
      uint4 a = s[i];
      for (int d = 0; d < nd; d++)
        ((uint4 *)dst[d])[i] = a;
    }
    return;
  }
  if ((al & 3) == 0) {
    for (uint64_t i = t; i < bytes / 4; i += nt) {
      uint32_t a = ((const uint32_t *)src)[i];
      for (int d = 0; d < nd; d++)
        ((uint32_t *)dst[d])[i] = a;
    }
    return;
  }
  for (uint64_t i = t; i < bytes; i += nt) {
    char a = src[i];
    for (int d = 0; d < nd; d++)
      dst[d][i] = a;
  }
}

__device__ inline void copy1(char *dst, const char *src, uint64_t bytes) {
  copy_multi(&dst, 1, src, bytes);
}

/* One 16-byte vector of each input, reduced in rank order: M inputs when NIN > 0 (NIN ==
 * M), else the first nin of M. */
template <int DT, int OP, int M = WEFT_DEV_MAX_RANKS, int NIN = 0>
__device__ __forceinline__ uint4 reduce_vec(const uint4 *v, int nin, int nranks) {
  typedef Ty<DT> T;
  typedef typename T::S S;
  typedef typename T::A A;
  constexpr int V = 16 / sizeof(S);
  A acc[V];
  const S *e0 = (const S *)&v[0];
#pragma unroll
  for (int k = 0; k < V; k++)
    acc[k] = T::up(e0[k]);
#pragma unroll
  for (int j = 1; j < M; j++)
    if (NIN || j < nin) {
      const S *e = (const S *)&v[j];
#pragma unroll
      for (int k = 0; k < V; k++)
        acc[k] = combine<DT, OP>(acc[k], T::up(e[k]));
    }
  uint4 o;
  S *eo = (S *)&o;
#pragma unroll
  for (int k = 0; k < V; k++)
    eo[k] = finish<DT, OP>(acc[k], nranks);
  return o;
}

/* The arithmetic of any type and op, chosen at run time (a branch every thread of a block
 * takes alike): the general reduction loop and the low-latency kernel's packets. */
template <int DT>
__device__ __forceinline__ uint4 reduce_vec_op(int op, const uint4 *v, int nin, int nranks) {
  switch (op) {
  case WEFT_PROD: return reduce_vec<DT, WEFT_PROD>(v, nin, nranks);
  case WEFT_MIN: return reduce_vec<DT, WEFT_MIN>(v, nin, nranks);
  case WEFT_MAX: return reduce_vec<DT, WEFT_MAX>(v, nin, nranks);
  case WEFT_AVG: return reduce_vec<DT, WEFT_AVG>(v, nin, nranks);
  default: return reduce_vec<DT, WEFT_SUM>(v, nin, nranks);
  }
}

__device__ __forceinline__ uint4 reduce_vec_any(int dtype, int op, const uint4 *v, int nin,
                                                int nranks) {
  switch (dtype) {
  case WEFT_F64: return reduce_vec_op<WEFT_F64>(op, v, nin, nranks);
  case WEFT_F16: return reduce_vec_op<WEFT_F16>(op, v, nin, nranks);
  case WEFT_BF16: return reduce_vec_op<WEFT_BF16>(op, v, nin, nranks);
  case WEFT_I8: return reduce_vec_op<WEFT_I8>(op, v, nin, nranks);
  case WEFT_U8: return reduce_vec_op<WEFT_U8>(op, v, nin, nranks);
  case WEFT_I32: return reduce_vec_op<WEFT_I32>(op, v, nin, nranks);
  case WEFT_I64: return reduce_vec_op<WEFT_I64>(op, v, nin, nranks);
  case WEFT_U32: return reduce_vec_op<WEFT_U32>(op, v, nin, nranks);
  case WEFT_U64: return reduce_vec_op<WEFT_U64>(op, v, nin, nranks);
  case WEFT_FP8_E4M3: return reduce_vec_op<WEFT_FP8_E4M3>(op, v, nin, nranks);
  case WEFT_FP8_E5M2: return reduce_vec_op<WEFT_FP8_E5M2>(op, v, nin, nranks);
  default: return reduce_vec_op<WEFT_F32>(op, v, nin, nranks);
  }
}

/* out[d][i] = in[0][i] op in[1][i], for every destination d: two inputs known when
 * compiling, so the vectors stay in registers and each thread keeps U loads of both in
 * flight (a reducer reads two streams; one load at a time left it well short of NVLink's
 * rate). */
template <int DT, int OP>
__device__ void reduce2(char *const *dst, int nd, const char *const *in, uint64_t count,
                        int nranks) {
  typedef Ty<DT> T;
  typedef typename T::S S;
  typedef typename T::A A;
  constexpr int V = 16 / sizeof(S), U = 4;
  uintptr_t al = (uintptr_t)in[0] | (uintptr_t)in[1];
  for (int d = 0; d < nd; d++)
    al |= (uintptr_t)dst[d];
  const int t = threadIdx.x, nt = blockDim.x;
  uint64_t done = 0;
  if ((al & 15) == 0) {
    uint64_t nv = count / V;
    for (uint64_t i0 = t; i0 < nv; i0 += (uint64_t)U * nt) {
      uint4 v[U][2];
#pragma unroll
      for (int u = 0; u < U; u++)
#pragma unroll
        for (int j = 0; j < 2; j++)
          if (i0 + (uint64_t)u * nt < nv) v[u][j] = ((const uint4 *)in[j])[i0 + (uint64_t)u * nt];
#pragma unroll
      for (int u = 0; u < U; u++) {
        uint64_t i = i0 + (uint64_t)u * nt;
        if (i >= nv) break;
        uint4 o = reduce_vec<DT, OP, 2, 2>(v[u], 2, nranks);
        for (int d = 0; d < nd; d++)
          ((uint4 *)dst[d])[i] = o;
      }
    }
    done = nv * V;
  }
  for (uint64_t i = done + t; i < count; i += nt) {
    A acc = combine<DT, OP>(T::up(((const S *)in[0])[i]), T::up(((const S *)in[1])[i]));
    S o = finish<DT, OP>(acc, nranks);
    for (int d = 0; d < nd; d++)
      ((S *)dst[d])[i] = o;
  }
}

/* A low-latency kernel's wait, checked by one lane every few thousand spins: true when it
 * must give up, aborted or past the timeout (counted from *start, set at the first check);
 * a timeout is recorded for the host as kind, and stops the other blocks too. */
__device__ inline bool ll_give_up(const weft_dev_ll_t &P, uint64_t *start, int src, int ch,
                                  uint32_t kind) {
  uint64_t now = global_ns();
  if (!*start) *start = now;
  if (!*P.abort_flag && now - *start <= P.timeout_ns) {
    if (P.report_ns && now - *start > P.report_ns)
      note_wait(P.waiting, P.report_ns, src, ch, kind, 0, 0, 0, now - *start);
    return false;
  }
  if (!*P.abort_flag && P.error->code == 0) {
    P.error->peer = src;
    P.error->channel = ch;
    P.error->kind = kind;
    __threadfence_system();
    P.error->code = WEFT_DEV_ERR_TIMEOUT;
    *P.abort_flag = 1;
  }
  return true;
}

/* 8 bytes of every rank's packet, in rank order, reduced: the 16-byte arithmetic of the
 * general kernel on vectors whose upper half is zero (and discarded). The low-latency
 * kernels move payload 8 bytes at a time. */
__device__ inline uint64_t reduce_pkt(int dtype, int op, const uint64_t *v, int n, int nranks) {
  uint4 w[WEFT_DEV_MAX_RANKS];
#pragma unroll
  for (int j = 0; j < WEFT_DEV_MAX_RANKS; j++)
    if (j < n) w[j] = make_uint4((uint32_t)v[j], (uint32_t)(v[j] >> 32), 0, 0);
  uint4 o = reduce_vec_any(dtype, op, w, n, nranks);
  return (uint64_t)o.x | (uint64_t)o.y << 32;
}

__device__ inline uint64_t load_bytes(const char *p, uint64_t n) {
  if (n == 8 && ((uintptr_t)p & 7) == 0) return *(const uint64_t *)p;
  uint64_t v = 0;
  for (uint64_t b = 0; b < n; b++)
    v |= (uint64_t)(uint8_t)p[b] << (8 * b);
  return v;
}

__device__ inline void store_bytes(char *p, uint64_t v, uint64_t n) {
  if (n == 8 && ((uintptr_t)p & 7) == 0) {
    *(uint64_t *)p = v;
    return;
  }
  for (uint64_t b = 0; b < n; b++)
    p[b] = (char)(v >> (8 * b));
}

/* Blocks of kernel k (WEFT_DEV_THREADS each) that one SM keeps resident; 1 where CUDA cannot
 * say. A shared GPU's block budget is counted in these (src/gpu/share.c). */
template <typename K> inline int occupancy(K k) {
  int n = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, k, WEFT_DEV_THREADS, 0) != cudaSuccess) {
    cudaGetLastError();
    return 1;
  }
  return n > 0 ? n : 1;
}

} // namespace weft

#endif
