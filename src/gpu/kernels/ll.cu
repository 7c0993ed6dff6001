/* The low-latency kernel (see weft_dev_ll_t) for small allreduce, allgather, alltoall,
 * reduce_scatter, broadcast and reduce: one block per block_bytes of each peer's payload (at
 * most 16 KiB), every thread sends its own 8-byte packets, then polls and copies or reduces
 * them (in rank order on every rank). */
#include <cuda_runtime.h>

#include "dev.h"
#include "prims.cuh"

namespace weft {

__device__ inline void st_line(uint4 *p, uint32_t lo, uint32_t hi, uint32_t seq) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(lo), "r"(seq),
               "r"(hi), "r"(seq)
               : "memory");
}

__device__ inline uint4 ld_line(const uint4 *p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

/* Waits for line l of src to carry seq; false when the channel gave up (timeout or abort,
 * recorded for the host like the general kernel's waits). Every thread polls a line of its
 * own, so only the lowest waiting lane of a warp reads the clock and the host-mapped abort
 * flag, every 4096 spins: with each of up to 64K threads reading host memory every 1024
 * spins, a wait that ran long flooded PCIe with reads, and loops with NCCL in the process
 * ran 50-100x slower (bench/results/2026-11-30-h200x2-tuning-12.txt). */
__device__ inline bool poll_line(const weft_dev_ll_t &P, const uint4 *line, uint32_t seq, int src,
                                 int ch, uint4 *out, volatile int *bail) {
  uint4 l = ld_line(line);
  uint64_t start = 0;
  for (uint32_t spins = 0; l.y != seq || l.w != seq; spins++) {
    if ((spins & 1023) == 1023) {
      if (*bail) return false;
      if ((spins & 4095) == 4095 && (threadIdx.x & 31) == __ffs(__activemask()) - 1 &&
          ll_give_up(P, &start, src, ch, WEFT_DEV_LL_KIND(P.kind))) {
        *bail = 1;
        return false;
      }
    }
    l = ld_line(line);
  }
  *out = l;
  return true;
}

/* Across hosts: once the block's lines are all written (the barrier, then a system fence,
 * which orders what the barrier made visible), their count (an acknowledgement's one line
 * for ranks outside `data`) and then the operation's seq go beside them in each remote rank's
 * mirror, where its proxy looks. */
__device__ inline void post_lines(const weft_dev_ll_t &P, int ch, int parity, uint64_t lines,
                                  uint32_t data, uint64_t op) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence_system();
  const int n = P.nranks, me = P.rank;
  for (int p = 0; p < n; p++) {
    if (p == me || !(P.remote >> p & 1)) continue;
    uint64_t *w = (uint64_t *)(P.region[p] + P.post_off +
                               WEFT_DEV_LL_POST_OFF(ch, parity, me < p ? me : me - 1, n));
    st_relaxed_sys(w + 1, data >> p & 1 ? lines : 1);
    st_release_sys(w, op);
  }
}

/* The receiving half with two ranks: a thread's lines (up to LL_BATCH of them) are read
 * from the one peer together, so their latencies overlap, then each is polled on until it
 * carries seq, combined with ours in rank order, and stored. */
enum { LL_BATCH = 4 };
__device__ inline void recv_pair(const weft_dev_ll_t &P, const char *mine, char *out,
                                 uint64_t total, uint64_t len, uint64_t lines, uint32_t seq,
                                 int parity, int ch, bool reduces, volatile int *bail) {
  const int me = P.rank, src = 1 - me;
  const uint4 *base = (const uint4 *)(P.inbox[src] + P.ll_off + WEFT_DEV_LL_OFF(ch, parity, 0, 2));
  const uint64_t step = blockDim.x;
  for (uint64_t i0 = threadIdx.x; i0 < lines && !*bail; i0 += LL_BATCH * step) {
    uint4 l[LL_BATCH];
#pragma unroll
    for (int u = 0; u < LL_BATCH; u++)
      if (i0 + u * step < lines) l[u] = ld_line(base + i0 + u * step);
#pragma unroll
    for (int u = 0; u < LL_BATCH; u++) {
      uint64_t i = i0 + u * step;
      if (i >= lines) break;
      if ((l[u].y != seq || l[u].w != seq) && !poll_line(P, base + i, seq, src, ch, &l[u], bail))
        return;
      uint64_t nb = len - i * 8 < 8 ? len - i * 8 : 8;
      uint64_t theirs = (uint64_t)l[u].x | (uint64_t)l[u].z << 32;
      uint64_t ours = load_bytes(mine + i * 8, nb);
      if (reduces) {
        uint64_t v[2] = {me == 0 ? ours : theirs, me == 0 ? theirs : ours};
        store_bytes(out + i * 8, reduce_pkt(P.dtype, P.op, v, 2, 2), nb);
      } else {
        store_bytes(out + (uint64_t)src * total + i * 8, theirs, nb);
        if (mine != out + (uint64_t)me * total)
          store_bytes(out + (uint64_t)me * total + i * 8, ours, nb);
      }
    }
  }
}

/* Broadcast and reduce send one way, so a rank may hear nothing from a peer in an operation
 * and run ahead: two operations on, it would write the parity slot that peer may still be
 * reading. So in every operation a rank writes every peer, its data or an acknowledgement
 * (line 0 alone), and a rank that received nothing from a peer (its bit in the top byte of
 * the channel's seq word) first waits for that peer's line of the previous operation: the
 * peer began it, so it is done with the one before, whose slot is about to be reused. */
enum : uint64_t { SEQ_BITS = 56, SEQ_MASK = (1ull << SEQ_BITS) - 1 };

__device__ inline const uint4 *in_line(const weft_dev_ll_t &P, int src, int ch, int parity) {
  const int me = P.rank;
  return (const uint4 *)(P.inbox[src] + P.ll_off +
                         WEFT_DEV_LL_OFF(ch, parity, src < me ? src : src - 1, P.nranks));
}

__device__ inline uint4 *out_line(const weft_dev_ll_t &P, int dst, int ch, int parity) {
  const int me = P.rank;
  return (uint4 *)(P.region[dst] + P.ll_off +
                   WEFT_DEV_LL_OFF(ch, parity, me < dst ? me : me - 1, P.nranks));
}

/* Thread src waits for peer src's line of operation prev where owed says so. */
__device__ inline bool await_owed(const weft_dev_ll_t &P, int ch, uint32_t owed, uint64_t prev,
                                  volatile int *bail) {
  const int src = threadIdx.x;
  uint4 l;
  if (src < P.nranks && (owed >> src & 1))
    poll_line(P, in_line(P, src, ch, (int)(prev & 1)), (uint32_t)prev, src, ch, &l, bail);
  __syncthreads();
  return !*bail;
}

/* Each peer's payload is `count` elements (allreduce, broadcast and reduce: the whole buffer;
 * allgather, alltoall and reduce_scatter: one rank's block); block ch carries bytes
 * [ch * block_bytes, +block_bytes) of every payload. A thread sends its lines to every peer
 * it sends data to, then receives the same lines from every peer it hears, so in place it
 * reads each input line before it overwrites it. */
__global__ void __launch_bounds__(WEFT_DEV_THREADS)
    ll_kernel(const __grid_constant__ weft_dev_ll_t P) {
  volatile __shared__ int bail;
  const int ch = blockIdx.x, n = P.nranks, me = P.rank, kind = P.kind, root = P.root;
  const uint64_t word = P.seq[ch], prev = word & SEQ_MASK;
  const uint64_t op = prev + 1; /* never wraps: across hosts the proxy follows it */
  const uint32_t seq = (uint32_t)op;
  const int parity = seq & 1;
  const uint64_t payload = P.block_bytes, es = (uint64_t)dtype_size(P.dtype);
  const uint64_t total = P.count * es, first = (uint64_t)ch * payload;
  const uint64_t len = total - first < payload ? total - first : payload;
  const uint64_t lines = (len + 7) / 8;
  /* where peer p's payload starts in the input, and where src's lands in the output */
  const bool per_peer = kind == WEFT_DEV_ALLTOALL || kind == WEFT_DEV_REDUCE_SCATTER;
  const bool reduces = kind == WEFT_DEV_ALLREDUCE_ONESHOT || kind == WEFT_DEV_REDUCE_SCATTER ||
                       kind == WEFT_DEV_REDUCE;
  const bool rooted = kind == WEFT_DEV_BROADCAST || kind == WEFT_DEV_REDUCE;
  /* whom this rank sends data to, and whom it hears */
  const uint32_t others = ((1u << n) - 1) & ~(1u << me);
  uint32_t data = others, from = others;
  if (kind == WEFT_DEV_REDUCE)
    data = me == root ? 0 : 1u << root, from = me == root ? others : 0;
  else if (kind == WEFT_DEV_BROADCAST)
    data = me == root ? others : 0, from = me == root ? 0 : 1u << root;
  const char *in = (const char *)P.send + first;
  char *out = (char *)P.recv + first;
  if (threadIdx.x == 0) bail = 0;
  __syncthreads();
  if ((word >> SEQ_BITS) && !await_owed(P, ch, (uint32_t)(word >> SEQ_BITS), prev, &bail)) return;
  if (rooted && threadIdx.x < n && (others & ~data) >> threadIdx.x & 1)
    st_line(out_line(P, threadIdx.x, ch, parity), 0, 0, seq); /* an acknowledgement */
  for (uint64_t i = threadIdx.x; data && i < lines; i += blockDim.x) {
    uint64_t nb = len - i * 8 < 8 ? len - i * 8 : 8;
    uint64_t v = per_peer ? 0 : load_bytes(in + i * 8, nb);
    for (int k = 1; k < n; k++) {
      int p = (me + k) % n;
      if (!(data >> p & 1)) continue;
      if (per_peer) v = load_bytes(in + (uint64_t)p * total + i * 8, nb);
      st_line(out_line(P, p, ch, parity) + i, (uint32_t)v, (uint32_t)(v >> 32), seq);
    }
  }
  if (P.remote) /* every line of the block written, then the count for each remote rank's proxy */
    post_lines(P, ch, parity, lines, data, op);
  const uint64_t own = per_peer ? (uint64_t)me * total : 0; /* our part of the input */
  if (!rooted && n == 2) { /* one source: a thread's lines are loaded together, then checked */
    recv_pair(P, in + own, out, total, len, lines, seq, parity, ch, reduces, &bail);
  } else if (kind == WEFT_DEV_BROADCAST) { /* the root's lines, or its own where they go */
    for (uint64_t i = threadIdx.x; i < lines && !bail; i += blockDim.x) {
      uint64_t nb = len - i * 8 < 8 ? len - i * 8 : 8;
      uint4 l;
      if (me == root) {
        if (in != out) store_bytes(out + i * 8, load_bytes(in + i * 8, nb), nb);
      } else if (poll_line(P, in_line(P, root, ch, parity) + i, seq, root, ch, &l, &bail)) {
        store_bytes(out + i * 8, (uint64_t)l.x | (uint64_t)l.z << 32, nb);
      }
    }
  } else if (from) {
    for (uint64_t i = threadIdx.x; i < lines && !bail; i += blockDim.x) {
      uint64_t nb = len - i * 8 < 8 ? len - i * 8 : 8;
      uint64_t vals[WEFT_DEV_MAX_RANKS];
      for (int src = 0; src < n && !bail; src++) {
        if (src == me) {
          vals[src] = load_bytes(in + own + i * 8, nb);
          if (!reduces && in + own != out + (uint64_t)me * total)
            store_bytes(out + (uint64_t)me * total + i * 8, vals[src], nb);
          continue;
        }
        uint4 l;
        if (!poll_line(P, in_line(P, src, ch, parity) + i, seq, src, ch, &l, &bail)) break;
        vals[src] = (uint64_t)l.x | (uint64_t)l.z << 32;
        if (!reduces) store_bytes(out + (uint64_t)src * total + i * 8, vals[src], nb);
      }
      if (bail) break;
      if (reduces) store_bytes(out + i * 8, reduce_pkt(P.dtype, P.op, vals, n, n), nb);
    }
  }
  __syncthreads();
  if (threadIdx.x == 0 && !bail) P.seq[ch] = op | (uint64_t)(others & ~from) << SEQ_BITS;
}

} // namespace weft

/* cudaLaunchKernel itself rather than <<<>>> and cudaGetLastError: the launch is most of
 * what a small operation costs the host, and this skips a call and the stub's bookkeeping. */
extern "C" int weft_dev_launch_ll(const weft_dev_ll_t *l, int nblocks, void *stream) {
  void *args[] = {(void *)l};
  return (int)cudaLaunchKernel((const void *)weft::ll_kernel, dim3(nblocks), dim3(WEFT_DEV_THREADS),
                               args, 0, (cudaStream_t)stream);
}

extern "C" int weft_dev_occupancy_ll(void) { return weft::occupancy(weft::ll_kernel); }
