/* The device executor: one kernel per launch runs every work item of an operation or a
 * group, each item on its own blocks (one block = one channel). Every collective is a
 * direct exchange through peers' staging slots, cut into rounds of one chunk per block,
 * which is bandwidth-optimal when every GPU reaches every other over NVLink. */
#include <cuda_runtime.h>

#include "dev.h"
#include "prims.cuh"

namespace weft {

typedef void (*reduce_fn)(char *const *, int, const char *const *, int, uint64_t, int);

template <int DT, int OP>
__device__ __noinline__ void reduce_entry(char *const *dst, int nd, const char *const *in, int nin,
                                          uint64_t count, int nranks) {
  reduce_multi<DT, OP>(dst, nd, in, nin, count, nranks);
}

template <int DT>
__device__ void reduce_dt(int op, char *const *dst, int nd, const char *const *in, int nin,
                          uint64_t count, int nranks) {
  switch (op) {
  case WEFT_PROD: reduce_entry<DT, WEFT_PROD>(dst, nd, in, nin, count, nranks); break;
  case WEFT_MIN: reduce_entry<DT, WEFT_MIN>(dst, nd, in, nin, count, nranks); break;
  case WEFT_MAX: reduce_entry<DT, WEFT_MAX>(dst, nd, in, nin, count, nranks); break;
  case WEFT_AVG: reduce_entry<DT, WEFT_AVG>(dst, nd, in, nin, count, nranks); break;
  default: reduce_entry<DT, WEFT_SUM>(dst, nd, in, nin, count, nranks); break;
  }
}

__device__ __noinline__ void reduce_any(int dtype, int op, char *const *dst, int nd,
                                        const char *const *in, int nin, uint64_t count,
                                        int nranks) {
  switch (dtype) {
  case WEFT_F64: reduce_dt<WEFT_F64>(op, dst, nd, in, nin, count, nranks); break;
  case WEFT_F16: reduce_dt<WEFT_F16>(op, dst, nd, in, nin, count, nranks); break;
  case WEFT_BF16: reduce_dt<WEFT_BF16>(op, dst, nd, in, nin, count, nranks); break;
  case WEFT_I8: reduce_dt<WEFT_I8>(op, dst, nd, in, nin, count, nranks); break;
  case WEFT_U8: reduce_dt<WEFT_U8>(op, dst, nd, in, nin, count, nranks); break;
  case WEFT_I32: reduce_dt<WEFT_I32>(op, dst, nd, in, nin, count, nranks); break;
  case WEFT_I64: reduce_dt<WEFT_I64>(op, dst, nd, in, nin, count, nranks); break;
  case WEFT_FP8_E4M3: reduce_dt<WEFT_FP8_E4M3>(op, dst, nd, in, nin, count, nranks); break;
  case WEFT_FP8_E5M2: reduce_dt<WEFT_FP8_E5M2>(op, dst, nd, in, nin, count, nranks); break;
  default: reduce_dt<WEFT_F32>(op, dst, nd, in, nin, count, nranks); break;
  }
}

__device__ inline int dtype_size(int t) {
  switch (t) {
  case WEFT_F64:
  case WEFT_I64: return 8;
  case WEFT_F32:
  case WEFT_I32: return 4;
  case WEFT_F16:
  case WEFT_BF16: return 2;
  default: return 1;
  }
}

/* Elements per round and block: the length split over the blocks, in whole 16-byte
 * vectors, at most one chunk. Sender and receiver of a pair compute the same. */
__device__ inline uint64_t unit_for(uint64_t len, int nb, uint64_t chunk_elems, int es) {
  uint64_t v = 16 / es;
  uint64_t u = (len + nb - 1) / nb;
  u = (u + v - 1) / v * v;
  return u < chunk_elems ? u : chunk_elems;
}

__device__ inline uint64_t clamp_len(uint64_t total, uint64_t off, uint64_t unit) {
  return off >= total ? 0 : (total - off < unit ? total - off : unit);
}

struct Item {
  const weft_dev_item_t *it;
  int ci, nb, es;
  uint64_t chunk_elems;
};

/* The peers in the order this rank talks to them: rank+1 first, so that the ranks do not
 * all write into the same peer at once. */
__device__ inline int peer_at(const Chan &c, int i) { return (c.rank + 1 + i) % c.n; }

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
  c.publish(dsts, nd);
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
  uint64_t unit = unit_for(seg, w.nb, w.chunk_elems, es);
  if (unit == 0) return;
  int peers[WEFT_DEV_MAX_RANKS];
  for (int i = 0; i < n - 1; i++)
    peers[i] = peer_at(c, i);
  for (uint64_t off = (uint64_t)w.ci * unit; off < seg; off += (uint64_t)w.nb * unit) {
    /* 1. scatter: every peer gets its segment's chunk of our input (one-shot: all of it) */
    int nd = 0, dsts[WEFT_DEV_MAX_RANKS];
    for (int i = 0; i < n - 1; i++) {
      int p = peers[i];
      uint64_t base = twoshot ? (uint64_t)p * seg : 0;
      uint64_t len = clamp_len(twoshot ? (count > base ? count - base : 0) : count, off, unit);
      if (!len) continue;
      char *slot = c.send_slot(p);
      if (!slot) return;
      copy1(slot, in + (base + off) * es, len * es);
      dsts[nd++] = p;
    }
    c.publish(dsts, nd);
    /* 2. reduce our segment in rank order; two-shot also pushes the result to every peer */
    uint64_t mybase = twoshot ? (uint64_t)me * seg : 0;
    uint64_t mylen = clamp_len(count > mybase ? count - mybase : 0, off, unit);
    if (mylen) {
      const char *src[WEFT_DEV_MAX_RANKS];
      char *dst[WEFT_DEV_MAX_RANKS];
      int srcs[WEFT_DEV_MAX_RANKS], ns = 0, ndst = 0;
      if (!collect(c, in + (mybase + off) * es, src, srcs, &ns)) return;
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
      if (twoshot) c.publish(dsts, nd);
    }
    if (!twoshot) continue;
    /* 3. gather: the other segments' reduced chunks */
    for (int i = 0; i < n - 1; i++) {
      int p = peers[i];
      uint64_t base = (uint64_t)p * seg;
      uint64_t len = clamp_len(count > base ? count - base : 0, off, unit);
      if (!len) continue;
      const char *slot = c.recv_slot(p);
      if (!slot) return;
      copy1(out + (base + off) * es, slot, len * es);
      c.release(&p, 1);
    }
  }
}

/* Sends a block of each peer's part of `in` (stride apart, or the same block when stride
 * is 0), copies our own part locally, and receives every peer's block into `out`. */
__device__ void exchange(const Chan &c, const Item &w, uint64_t count, const char *in,
                         uint64_t in_stride, char *out, uint64_t out_stride, bool self_copy) {
  const int n = c.n, me = c.rank, es = w.es;
  uint64_t unit = unit_for(count, w.nb, w.chunk_elems, es);
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    uint64_t len = clamp_len(count, off, unit);
    if (!scatter(c, in, in_stride, off, len, es)) return;
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
}

__device__ void reduce_scatter(const Chan &c, const Item &w) {
  const weft_dev_item_t *it = w.it;
  const int n = c.n, me = c.rank, es = w.es;
  const char *in = (const char *)it->send;
  char *out = (char *)it->recv;
  uint64_t count = it->count, unit = unit_for(count, w.nb, w.chunk_elems, es);
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    uint64_t len = clamp_len(count, off, unit);
    if (!scatter(c, in, count, off, len, es)) return;
    const char *src[WEFT_DEV_MAX_RANKS];
    int srcs[WEFT_DEV_MAX_RANKS], ns = 0;
    if (!collect(c, in + ((uint64_t)me * count + off) * es, src, srcs, &ns)) return;
    char *dst = out + off * es;
    reduce_any(it->dtype, it->op, &dst, 1, src, n, len, n);
    c.release(srcs, ns);
  }
}

/* Broadcast (reduce = false) or reduce to the root, directly. */
__device__ void rooted(const Chan &c, const Item &w, bool reduce) {
  const weft_dev_item_t *it = w.it;
  const int n = c.n, me = c.rank, es = w.es, root = it->root;
  const char *in = (const char *)it->send;
  char *out = (char *)it->recv;
  uint64_t count = it->count, unit = unit_for(count, w.nb, w.chunk_elems, es);
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    uint64_t len = clamp_len(count, off, unit);
    bool sender = reduce ? me != root : me == root;
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
    c.publish(dsts, nd);
    if (!reduce && me == root) {
      if (in != out) copy1(out + off * es, in + off * es, len * es);
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
    su[p] = unit_for(v->sendcounts[p], w.nb, w.chunk_elems, es);
    ru[p] = unit_for(v->recvcounts[p], w.nb, w.chunk_elems, es);
  }
  for (uint64_t k = 0;; k++) {
    bool more = false;
    int nd = 0, dsts[WEFT_DEV_MAX_RANKS];
    for (int i = 0; i < n - 1; i++) {
      int p = peer_at(c, i);
      uint64_t off = (k * w.nb + w.ci) * su[p];
      if (!su[p] || off >= v->sendcounts[p]) continue;
      more = true;
      char *slot = c.send_slot(p);
      if (!slot) return;
      copy1(slot, in + (v->sdispls[p] + off) * es, clamp_len(v->sendcounts[p], off, su[p]) * es);
      dsts[nd++] = p;
    }
    c.publish(dsts, nd);
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
      copy1(out + (v->rdispls[p] + roff) * es, slot, clamp_len(v->recvcounts[p], roff, ru[p]) * es);
      c.release(&p, 1);
    }
    if (!more) return;
  }
}

__device__ void sendrecv(const Chan &c, const Item &w, bool send) {
  const weft_dev_item_t *it = w.it;
  int peer = it->root, es = w.es;
  uint64_t count = it->count, unit = unit_for(count, w.nb, w.chunk_elems, es);
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    uint64_t len = clamp_len(count, off, unit);
    if (send) {
      char *slot = c.send_slot(peer);
      if (!slot) return;
      copy1(slot, (const char *)it->send + off * es, len * es);
      c.publish(&peer, 1);
    } else {
      const char *slot = c.recv_slot(peer);
      if (!slot) return;
      copy1((char *)it->recv + off * es, slot, len * es);
      c.release(&peer, 1);
    }
  }
}

__global__ void __launch_bounds__(WEFT_DEV_THREADS)
    kernel(const __grid_constant__ weft_dev_launch_t L) {
  __shared__ uint64_t sent[WEFT_DEV_MAX_RANKS], recvd[WEFT_DEV_MAX_RANKS];
  __shared__ uint64_t sent0[WEFT_DEV_MAX_RANKS], recvd0[WEFT_DEV_MAX_RANKS];
  __shared__ int bail;
  int b = blockIdx.x, i = 0;
  while (i < L.nitems - 1 && b >= L.items[i].block0 + L.items[i].nblocks)
    i++;
  const weft_dev_item_t *it = &L.items[i];
  Item w = {it, b - it->block0, it->nblocks, dtype_size(it->dtype), 0};
  w.chunk_elems = L.chunk_bytes / w.es;
  Chan c = {&L, it->chan0 + w.ci, L.rank, L.nranks, sent, recvd, &bail, it->kind};
  uint64_t *ctr = L.counters + (uint64_t)c.ch * WEFT_DEV_MAX_RANKS * 2;
  if (threadIdx.x < WEFT_DEV_MAX_RANKS) {
    sent[threadIdx.x] = sent0[threadIdx.x] = ctr[threadIdx.x * 2];
    recvd[threadIdx.x] = recvd0[threadIdx.x] = ctr[threadIdx.x * 2 + 1];
  }
  if (threadIdx.x == 0) bail = 0;
  __syncthreads();
  switch (it->kind) {
  case WEFT_DEV_ALLREDUCE_ONESHOT: allreduce(c, w, false); break;
  case WEFT_DEV_ALLREDUCE_TWOSHOT: allreduce(c, w, true); break;
  case WEFT_DEV_REDUCE_SCATTER: reduce_scatter(c, w); break;
  case WEFT_DEV_ALLGATHER: {
    bool self =
        (const char *)it->send != (const char *)it->recv + (uint64_t)c.rank * it->count * w.es;
    exchange(c, w, it->count, (const char *)it->send, 0, (char *)it->recv, it->count, self);
    break;
  }
  case WEFT_DEV_ALLTOALL:
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
  /* Only the counts this block moved: a send and a receive item of one launch may share a
   * channel (one counts sends to a peer, the other receives from it). */
  if (threadIdx.x < WEFT_DEV_MAX_RANKS && !bail) {
    if (sent[threadIdx.x] != sent0[threadIdx.x]) ctr[threadIdx.x * 2] = sent[threadIdx.x];
    if (recvd[threadIdx.x] != recvd0[threadIdx.x]) ctr[threadIdx.x * 2 + 1] = recvd[threadIdx.x];
  }
}

} // namespace weft

extern "C" int weft_dev_launch(const weft_dev_launch_t *l, int nblocks, void *stream) {
  weft::kernel<<<nblocks, WEFT_DEV_THREADS, 0, (cudaStream_t)stream>>>(*l);
  return (int)cudaGetLastError();
}

extern "C" const char *weft_dev_error_string(int code) {
  return cudaGetErrorString((cudaError_t)code);
}
