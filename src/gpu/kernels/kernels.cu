/* The device executor: one kernel per launch runs every work item of an operation or a
 * group, each item on its own blocks (one block = one channel). Every collective is a
 * direct exchange through peers' staging slots, cut into rounds of one chunk per block,
 * which is bandwidth-optimal when every GPU reaches every other over NVLink; allreduce,
 * reduce_scatter and allgather can also run as a pipelined ring (WEFT_ALGO=ring). */
#include <cuda_runtime.h>

#include "dev.h"
#include "prims.cuh"

namespace weft {

/* Every type, op and input count: one loop that picks the arithmetic per 16-byte vector (a
 * branch every thread of the block takes alike). One function instead of one per type and
 * op: each function called through the ABI adds its register saves to the kernel's stack
 * frame, and the driver reserves that frame for every thread the GPU can hold (7 KiB of
 * frame cost 1.6 GiB per GPU). A tail shorter than 16 bytes, or buffers not 16-byte
 * aligned, go through the same arithmetic a vector at a time from bytes. */
__device__ __noinline__ void reduce_general(int dtype, int op, char *const *dst, int nd,
                                            const char *const *in, int nin, uint64_t count,
                                            int nranks) {
  const uint64_t bytes = count * (uint64_t)dtype_size(dtype);
  uintptr_t al = 0;
  for (int d = 0; d < nd; d++)
    al |= (uintptr_t)dst[d];
  for (int j = 0; j < nin; j++)
    al |= (uintptr_t)in[j];
  const uint64_t nv = (al & 15) == 0 ? bytes / 16 : 0;
  const int t = threadIdx.x, nt = blockDim.x;
#pragma unroll 1
  for (uint64_t i = t; i < nv; i += nt) {
    uint4 v[WEFT_DEV_MAX_RANKS];
#pragma unroll
    for (int j = 0; j < WEFT_DEV_MAX_RANKS; j++)
      if (j < nin) v[j] = ((const uint4 *)in[j])[i];
    uint4 o = reduce_vec_any(dtype, op, v, nin, nranks);
    for (int d = 0; d < nd; d++)
      ((uint4 *)dst[d])[i] = o;
  }
#pragma unroll 1
  for (uint64_t b = nv * 16 + (uint64_t)t * 16; b < bytes; b += (uint64_t)nt * 16) {
    uint64_t len = bytes - b < 16 ? bytes - b : 16;
    union {
      uint4 v[WEFT_DEV_MAX_RANKS];
      unsigned char c[WEFT_DEV_MAX_RANKS][16];
    } u;
    for (int j = 0; j < nin; j++)
      for (int x = 0; x < 16; x++)
        u.c[j][x] = x < (int)len ? (unsigned char)in[j][b + x] : 0;
    union {
      uint4 v;
      unsigned char c[16];
    } o;
    o.v = reduce_vec_any(dtype, op, u.v, nin, nranks);
    for (int d = 0; d < nd; d++)
      for (uint64_t x = 0; x < len; x++)
        dst[d][b + x] = (char)o.c[x];
  }
}

/* Two inputs (two ranks, or a reduce with one peer) summed in the types training moves:
 * loops unrolled for them alone, several loads of both inputs in flight per thread. */
template <int DT>
__device__ __noinline__ void reduce_sum2(char *const *dst, int nd, const char *const *in,
                                         uint64_t count, int nranks) {
  reduce2<DT, WEFT_SUM>(dst, nd, in, count, nranks);
}

__device__ inline void reduce_any(int dtype, int op, char *const *dst, int nd,
                                  const char *const *in, int nin, uint64_t count, int nranks) {
  if (nin == 2 && op == WEFT_SUM) switch (dtype) {
    case WEFT_F32: reduce_sum2<WEFT_F32>(dst, nd, in, count, nranks); return;
    case WEFT_BF16: reduce_sum2<WEFT_BF16>(dst, nd, in, count, nranks); return;
    case WEFT_F16: reduce_sum2<WEFT_F16>(dst, nd, in, count, nranks); return;
    default: break;
    }
  reduce_general(dtype, op, dst, nd, in, nin, count, nranks);
}

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

__device__ void allreduce(const Chan &c, const Item &w, bool twoshot) {
  const weft_dev_item_t *it = w.it;
  const int n = c.n, me = c.rank, es = w.es;
  const char *in = (const char *)it->send;
  char *out = (char *)it->recv;
  uint64_t count = it->count, v = 16 / es;
  uint64_t seg = twoshot ? ((count + n - 1) / n + v - 1) / v * v : count;
  uint64_t unit = unit_for(seg, w.nb, w.chunk_elems, es, w.rounds);
  /* elements of rank p's segment: a chunk must not run past it into the next one, which in
   * place holds input that its owner may not have read yet */
  auto seg_len = [&](int p) -> uint64_t {
    uint64_t base = twoshot ? (uint64_t)p * seg : 0;
    return count <= base ? 0 : count - base < seg ? count - base : seg;
  };
  if (unit == 0) return;
  int peers[WEFT_DEV_MAX_RANKS];
  for (int i = 0; i < n - 1; i++)
    peers[i] = peer_at(c, i);
  uint64_t k = 0;
  for (uint64_t off = (uint64_t)w.ci * unit; off < seg; off += (uint64_t)w.nb * unit) {
    k++;
    /* 1. scatter: every peer gets its segment's chunk of our input (one-shot: all of it) */
    int nd = 0, dsts[WEFT_DEV_MAX_RANKS];
    if (w.steps & STEP_SEND) {
      uint32_t bytes[WEFT_DEV_MAX_RANKS];
      for (int i = 0; i < n - 1; i++) {
        int p = peers[i];
        uint64_t base = twoshot ? (uint64_t)p * seg : 0, len = clamp_len(seg_len(p), off, unit);
        if (!len) continue;
        char *slot = c.send_slot(p);
        if (!slot) return;
        copy1(slot, in + (base + off) * es, len * es);
        bytes[nd] = (uint32_t)(len * es);
        dsts[nd++] = p;
      }
      c.publish(dsts, nd, bytes, 0);
      sent_round(w, k);
    }
    /* 2. reduce our segment in rank order; two-shot also pushes the result to every peer */
    uint64_t mybase = twoshot ? (uint64_t)me * seg : 0;
    uint64_t mylen = clamp_len(seg_len(me), off, unit);
    if ((w.steps & STEP_RECV) && mylen) {
      const char *src[WEFT_DEV_MAX_RANKS];
      char *dst[WEFT_DEV_MAX_RANKS];
      int srcs[WEFT_DEV_MAX_RANKS], ns = 0, ndst = 0;
      if (!collect(c, in + (mybase + off) * es, src, srcs, &ns) || !await_round(c, w, k)) return;
      dst[ndst++] = out + (mybase + off) * es;
      nd = 0;
      if (twoshot)
        for (int i = 0; i < n - 1; i++) {
          dst[ndst] = c.send_slot(peers[i]);
          if (!dst[ndst++]) return;
          dsts[nd++] = peers[i];
        }
      reduce_any(it->dtype, it->op, dst, ndst, src, n, mylen, n);
      c.release(srcs, ns);
      if (twoshot) c.publish(dsts, nd, mylen * es);
    }
    if (!twoshot || !(w.steps & STEP_GATHER)) continue;
    /* 3. gather: the other segments' reduced chunks */
    for (int i = 0; i < n - 1; i++) {
      int p = peers[i];
      uint64_t base = (uint64_t)p * seg, len = clamp_len(seg_len(p), off, unit);
      if (!len) continue;
      const char *slot = c.recv_slot(p);
      if (!slot) return;
      copy1(out + (base + off) * es, slot, len * es);
      c.release(&p, 1);
    }
  }
  rounds_done(w);
}

/* Sends a block of each peer's part of `in` (stride apart, or the same block when stride
 * is 0), copies our own part locally, and receives every peer's block into `out`. */
__device__ void exchange(const Chan &c, const Item &w, uint64_t count, const char *in,
                         uint64_t in_stride, char *out, uint64_t out_stride, bool self_copy) {
  const int n = c.n, me = c.rank, es = w.es;
  uint64_t unit = unit_for(count, w.nb, w.chunk_elems, es, w.rounds), k = 0;
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    uint64_t len = clamp_len(count, off, unit);
    k++;
    if (w.steps & STEP_SEND) {
      if (!scatter(c, in, in_stride, off, len, es)) return;
      sent_round(w, k);
    }
    if (!(w.steps & STEP_RECV)) continue;
    if (!await_round(c, w, k)) return;
    if (self_copy)
      copy1(out + ((uint64_t)me * out_stride + off) * es,
            in + ((uint64_t)me * in_stride + off) * es, len * es);
    for (int i = 0; i < n - 1; i++) {
      int p = (me + n - 1 - i) % n;
      const char *slot = c.recv_slot(p);
      if (!slot) return;
      copy1(out + ((uint64_t)p * out_stride + off) * es, slot, len * es);
      c.release(&p, 1);
    }
  }
  rounds_done(w);
}

/* Operations on windows (weft_dev_item_t.direct): an allgather or alltoall writes its blocks
 * straight into the peers' recvbufs, a reduce_scatter reads its block straight from the
 * peers' sendbufs, an allreduce does both, so the bytes cross HBM once on each side instead
 * of going through staging. Each channel first posts din to every peer (our buffer may now be
 * written, or read: our stream is past whatever used it before), with our window offset and size
 * beside it, and waits for theirs; a peer whose offset or size differ from ours is touched
 * not at all. When every access of ours is fenced it posts dout; the operation ends when
 * every peer's dout has come. Flags and counters are apart from the staging protocol's, so
 * a rank that took the staged path against a direct peer times out instead of reading
 * garbage. Rounds of all channels advance side by side through the buffers, as in the
 * staged kernels. */
__device__ bool direct_open(const Chan &c, uint64_t k) {
  const weft_dev_launch_t &L = *c.L;
  const int n = c.n, me = c.rank;
  if (threadIdx.x == 0)
    for (int p = 0; p < n; p++) {
      if (p == me) continue;
      uint64_t *f = c.out_flag(p, WEFT_DEV_DIN_OFF(c.ch, me));
      f[1] = L.direct_where;
      f[2] = L.direct_bytes;
      f[3] = L.direct_where_send;
      st_release_sys(f, k);
    }
  for (int i = 0; i < n - 1; i++) {
    int p = peer_at(c, i);
    const uint64_t *f = c.in_flag(p, WEFT_DEV_DIN_OFF(c.ch, p));
    if (!c.wait_geq(f, k, p)) return false;
    const volatile uint64_t *v = f;
    if (v[1] != L.direct_where || v[2] != L.direct_bytes || v[3] != L.direct_where_send) {
      if (threadIdx.x == 0) { /* as wait_geq records a timeout; the other blocks stop too */
        if (L.error->code == 0) {
          L.error->peer = p;
          L.error->channel = c.ch;
          L.error->kind = c.kind;
          __threadfence_system();
          L.error->code = WEFT_DEV_ERR_MISMATCH;
        }
        *L.abort_flag = 1;
        *c.bail = 1;
      }
      return false;
    }
  }
  return true;
}

__device__ void direct_close(const Chan &c, uint64_t k, uint64_t *seq) {
  const int n = c.n, me = c.rank;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int p = 0; p < n; p++)
      if (p != me) st_relaxed_sys(c.out_flag(p, WEFT_DEV_DOUT_OFF(c.ch, me)), k);
  }
  for (int i = 0; i < n - 1; i++) {
    int p = peer_at(c, i);
    if (!c.wait_geq(c.in_flag(p, WEFT_DEV_DOUT_OFF(c.ch, p)), k, p)) return;
  }
  if (threadIdx.x == 0) *seq = k;
}

/* Allgather or alltoall. With two roles the second copies our own block: in the writers'
 * blocks that copy held NVLink up (4 GiB allgather: 300 GB/s against 365). */
__device__ void direct_exchange(const Chan &c, const Item &w, const char *in, uint64_t in_stride,
                                bool self_copy) {
  const weft_dev_launch_t &L = *c.L;
  const int n = c.n, me = c.rank, es = w.es;
  const uint64_t count = w.it->count, step = (uint64_t)w.nb;
  uint64_t unit = unit_for(count, w.nb, w.chunk_elems, es, 1);
  if (unit == 0 || (uint64_t)w.ci * unit >= count) return; /* the peers' channel idles too */
  char *out = (char *)w.it->recv;
  if ((w.steps & STEP_RECV) && self_copy)
    for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += step * unit)
      copy1(out + ((uint64_t)me * count + off) * es, in + ((uint64_t)me * in_stride + off) * es,
            clamp_len(count, off, unit) * es);
  if (!(w.steps & STEP_SEND)) return;
  uint64_t *seq = L.dseq + (uint64_t)c.ch * (WEFT_DEV_FLAG_STRIDE / 8), k = *seq + 1;
  if (!direct_open(c, k)) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += step * unit)
    for (int i = 0; i < n - 1; i++) {
      int p = peer_at(c, i);
      copy1(L.direct[p] + ((uint64_t)me * count + off) * es,
            in + ((uint64_t)p * in_stride + off) * es, clamp_len(count, off, unit) * es);
    }
  direct_close(c, k, seq);
}

/* Allreduce, two-shot: our segment of every rank's sendbuf, reduced in rank order into our
 * recvbuf and every peer's at once. In place too: our segment of a peer's buffer is read and
 * then overwritten by us alone, each element by one thread, which loads before it stores. */
__device__ void direct_allreduce(const Chan &c, const Item &w) {
  const weft_dev_launch_t &L = *c.L;
  const int n = c.n, me = c.rank, es = w.es;
  const uint64_t count = w.it->count, step = (uint64_t)w.nb, v = 16 / es;
  const uint64_t seg = ((count + n - 1) / n + v - 1) / v * v, base = (uint64_t)me * seg;
  const uint64_t mine = count > base ? (count - base < seg ? count - base : seg) : 0;
  uint64_t unit = unit_for(seg, w.nb, w.chunk_elems, es, 1);
  if (unit == 0 || (uint64_t)w.ci * unit >= seg) return; /* alike on every rank */
  uint64_t *seq = L.dseq + (uint64_t)c.ch * (WEFT_DEV_FLAG_STRIDE / 8), k = *seq + 1;
  if (!direct_open(c, k)) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < mine; off += step * unit) {
    const char *src[WEFT_DEV_MAX_RANKS];
    char *dst[WEFT_DEV_MAX_RANKS];
    uint64_t at = (base + off) * es;
    for (int j = 0; j < n; j++) {
      src[j] = (j == me ? (const char *)w.it->send : L.direct_send[j]) + at;
      dst[j] = (j == me ? (char *)w.it->recv : L.direct[j]) + at;
    }
    reduce_any(w.it->dtype, w.it->op, dst, n, src, n, clamp_len(mine, off, unit), n);
  }
  direct_close(c, k, seq);
}

/* Reduce_scatter: our block of every rank's sendbuf, reduced in rank order (as the staged
 * kernel does, so the bits agree) into our recvbuf. In place our block is only ours to read:
 * the peers read theirs. One role. */
__device__ void direct_reduce_scatter(const Chan &c, const Item &w) {
  const weft_dev_launch_t &L = *c.L;
  const int n = c.n, me = c.rank, es = w.es;
  const uint64_t count = w.it->count, step = (uint64_t)w.nb;
  uint64_t unit = unit_for(count, w.nb, w.chunk_elems, es, 1);
  if (unit == 0 || (uint64_t)w.ci * unit >= count) return;
  uint64_t *seq = L.dseq + (uint64_t)c.ch * (WEFT_DEV_FLAG_STRIDE / 8), k = *seq + 1;
  if (!direct_open(c, k)) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += step * unit) {
    const char *src[WEFT_DEV_MAX_RANKS];
    for (int j = 0; j < n; j++)
      src[j] =
          (j == me ? (const char *)w.it->send : L.direct[j]) + ((uint64_t)me * count + off) * es;
    char *dst = (char *)w.it->recv + off * es;
    reduce_any(w.it->dtype, w.it->op, &dst, 1, src, n, clamp_len(count, off, unit), n);
  }
  direct_close(c, k, seq);
}

__device__ void reduce_scatter(const Chan &c, const Item &w) {
  const weft_dev_item_t *it = w.it;
  const int n = c.n, me = c.rank, es = w.es;
  const char *in = (const char *)it->send;
  char *out = (char *)it->recv;
  uint64_t count = it->count, unit = unit_for(count, w.nb, w.chunk_elems, es, w.rounds);
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    uint64_t len = clamp_len(count, off, unit);
    if ((w.steps & STEP_SEND) && !scatter(c, in, count, off, len, es)) return;
    if (!(w.steps & STEP_RECV)) continue;
    const char *src[WEFT_DEV_MAX_RANKS];
    int srcs[WEFT_DEV_MAX_RANKS], ns = 0;
    if (!collect(c, in + ((uint64_t)me * count + off) * es, src, srcs, &ns)) return;
    char *dst = out + off * es;
    reduce_any(it->dtype, it->op, &dst, 1, src, n, len, n);
    c.release(srcs, ns);
  }
}

/* Pipelined ring (weft_dev_item_t.ring): a channel's chunk of each segment travels rank to
 * rank + 1, one staging slot at a time, so every rank writes to one peer only and each step
 * waits on one neighbour, the pattern NCCL runs on NVLink. At step s (0..2n-2 for allreduce)
 * a rank handles segment me - s - 1: it sends its input (s = 0), adds its input to what
 * came from rank - 1 and sends the sum on (s < n - 1), finishes the sum into its output and
 * sends it on (s = n - 1: its own segment), or stores what came and passes it on (s >= n).
 * reduce_scatter stops after step n - 1, allgather starts at it with its own block. Sums
 * run in ring order (segment g: rank g + 1 first), on every rank alike; an average divides
 * only in the final step. Needs two staging slots: a rank holds rank - 1's slot while it
 * waits for one in rank + 1. */
__device__ void ring(const Chan &c, const Item &w) {
  const weft_dev_item_t *it = w.it;
  const int n = c.n, me = c.rank, es = w.es, next = (me + 1) % n, prev = (me + n - 1) % n;
  const bool ar = it->kind == WEFT_DEV_ALLREDUCE_TWOSHOT, ag = it->kind == WEFT_DEV_ALLGATHER;
  const char *in = (const char *)it->send;
  char *out = (char *)it->recv;
  const uint64_t count = it->count, v = 16 / es;
  /* allreduce: segments of its buffer as two-shot cuts them; else rank blocks */
  const uint64_t seg = ar ? ((count + n - 1) / n + v - 1) / v * v : count;
  const uint64_t in_stride = ag ? 0 : seg, out_stride = ar || ag ? seg : 0;
  const int first = ag ? n - 1 : 0, last = ar || ag ? 2 * n - 2 : n - 1;
  const int partial_op = it->op == WEFT_AVG ? WEFT_SUM : it->op;
  auto seg_len = [&](int g) -> uint64_t {
    if (!ar) return count;
    uint64_t base = (uint64_t)g * seg;
    return count <= base ? 0 : count - base < seg ? count - base : seg;
  };
  uint64_t unit = unit_for(seg, w.nb, w.chunk_elems, es, w.rounds);
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < seg; off += (uint64_t)w.nb * unit)
    for (int s = first; s <= last; s++) {
      const int g = (me - s - 1 + 2 * n) % n;
      const uint64_t len = clamp_len(seg_len(g), off, unit);
      if (!len) continue; /* rank - 1 skipped it one step earlier, rank + 1 will one later */
      const char *from = nullptr, *mine = in + ((uint64_t)g * in_stride + off) * es;
      char *dst[2];
      int nd = 0;
      const bool sends = s < last; /* the last step keeps what it made */
      if (s > first && !(from = c.recv_slot(prev))) return;
      if (sends && !(dst[nd++] = c.send_slot(next))) return;
      char *o = out + ((uint64_t)g * out_stride + off) * es;
      if (s >= n - 1 && !(s == first && o == mine)) dst[nd++] = o; /* in place: already there */
      if (!ag && s > 0 && s <= n - 1) {
        const char *src[2] = {from, mine};
        reduce_any(it->dtype, s == n - 1 ? it->op : partial_op, dst, nd, src, 2, len, n);
      } else {
        copy_multi(dst, nd, s == first ? mine : from, len * es);
      }
      /* the slot back to rank - 1 first: publishing after it cost nothing, the other way
       * round 1 GiB allgathers ran 8% longer on 2 H200s (device calls 27 and 29) */
      if (s > first) c.release(&prev, 1);
      if (sends) c.publish(&next, 1, len * es);
    }
}

/* Broadcast (reduce = false) or reduce to the root, directly. */
__device__ void rooted(const Chan &c, const Item &w, bool reduce) {
  const weft_dev_item_t *it = w.it;
  const int n = c.n, me = c.rank, es = w.es, root = it->root;
  const char *in = (const char *)it->send;
  char *out = (char *)it->recv;
  uint64_t count = it->count, unit = unit_for(count, w.nb, w.chunk_elems, es, w.rounds);
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    uint64_t len = clamp_len(count, off, unit);
    bool sender = (reduce ? me != root : me == root) && (w.steps & STEP_SEND);
    int nd = 0, dsts[WEFT_DEV_MAX_RANKS];
    if (sender)
      for (int i = 0; i < n - 1; i++) {
        int p = reduce ? root : peer_at(c, i);
        char *slot = c.send_slot(p);
        if (!slot) return;
        copy1(slot, in + off * es, len * es);
        dsts[nd++] = p;
        if (reduce) break;
      }
    c.publish(dsts, nd, len * es);
    if (!reduce && me == root) { /* with two roles, the second role's blocks copy */
      if (in != out && (w.steps & STEP_RECV)) copy1(out + off * es, in + off * es, len * es);
    } else if (!reduce) {
      const char *slot = c.recv_slot(root);
      if (!slot) return;
      copy1(out + off * es, slot, len * es);
      int r = root;
      c.release(&r, 1);
    } else if (me == root) {
      const char *src[WEFT_DEV_MAX_RANKS];
      int srcs[WEFT_DEV_MAX_RANKS], ns = 0;
      if (!collect(c, in + off * es, src, srcs, &ns)) return;
      char *dst = out + off * es;
      reduce_any(it->dtype, it->op, &dst, 1, src, n, len, n);
      c.release(srcs, ns);
    }
  }
}

__device__ void alltoallv(const Chan &c, const Item &w) {
  const weft_dev_a2av_t *v = &c.L->a2av[w.it->a2av];
  const int n = c.n, me = c.rank, es = w.es;
  const char *in = (const char *)w.it->send;
  char *out = (char *)w.it->recv;
  uint64_t su[WEFT_DEV_MAX_RANKS], ru[WEFT_DEV_MAX_RANKS];
  for (int p = 0; p < n; p++) {
    su[p] = unit_for(v->sendcounts[p], w.nb, w.chunk_elems, es, w.rounds);
    ru[p] = unit_for(v->recvcounts[p], w.nb, w.chunk_elems, es, w.rounds);
  }
  for (uint64_t k = 0;; k++) {
    bool more = false;
    if (w.steps & STEP_SEND) {
      int nd = 0, dsts[WEFT_DEV_MAX_RANKS];
      uint32_t bytes[WEFT_DEV_MAX_RANKS];
      for (int i = 0; i < n - 1; i++) {
        int p = peer_at(c, i);
        uint64_t off = (k * w.nb + w.ci) * su[p];
        if (!su[p] || off >= v->sendcounts[p]) continue;
        more = true;
        char *slot = c.send_slot(p);
        if (!slot) return;
        bytes[nd] = (uint32_t)(clamp_len(v->sendcounts[p], off, su[p]) * es);
        copy1(slot, in + (v->sdispls[p] + off) * es, bytes[nd]);
        dsts[nd++] = p;
      }
      c.publish(dsts, nd, bytes, 0);
    }
    if (w.steps & STEP_RECV) {
      uint64_t off = (k * w.nb + w.ci) * su[me];
      if (su[me] && off < v->sendcounts[me]) {
        more = true;
        copy1(out + (v->rdispls[me] + off) * es, in + (v->sdispls[me] + off) * es,
              clamp_len(v->sendcounts[me], off, su[me]) * es);
      }
      for (int i = 0; i < n - 1; i++) {
        int p = (me + n - 1 - i) % n;
        uint64_t roff = (k * w.nb + w.ci) * ru[p];
        if (!ru[p] || roff >= v->recvcounts[p]) continue;
        more = true;
        const char *slot = c.recv_slot(p);
        if (!slot) return;
        copy1(out + (v->rdispls[p] + roff) * es, slot,
              clamp_len(v->recvcounts[p], roff, ru[p]) * es);
        c.release(&p, 1);
      }
    }
    if (!more) return;
  }
}

__device__ void sendrecv(const Chan &c, const Item &w, bool send) {
  const weft_dev_item_t *it = w.it;
  int peer = it->root, es = w.es;
  uint64_t count = it->count, unit = unit_for(count, w.nb, w.chunk_elems, es, w.rounds);
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    uint64_t len = clamp_len(count, off, unit);
    if (send) {
      char *slot = c.send_slot(peer);
      if (!slot) return;
      copy1(slot, (const char *)it->send + off * es, len * es);
      c.publish(&peer, 1, len * es);
    } else {
      const char *slot = c.recv_slot(peer);
      if (!slot) return;
      copy1((char *)it->recv + off * es, slot, len * es);
      c.release(&peer, 1);
    }
  }
}

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
  case WEFT_DEV_BROADCAST: rooted(c, w, false); break;
  case WEFT_DEV_REDUCE: rooted(c, w, true); break;
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
