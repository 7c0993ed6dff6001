/* The staged algorithms: every peer's chunk through its staging slots at once (allreduce one-
 * and two-shot, reduce_scatter, allgather and alltoall, broadcast and reduce, alltoallv,
 * send and receive). Part of the device kernel's one translation unit. */
#ifndef WEFT_STAGED_CUH
#define WEFT_STAGED_CUH

#include "prims.cuh"
#include "reduce.cuh"
#include "rounds.cuh"

namespace weft {

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

} // namespace weft

#endif
