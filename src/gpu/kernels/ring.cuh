/* The pipelined ring: allreduce, reduce_scatter and allgather rank to rank + 1, and the
 * chain of broadcast and reduce. Part of the device kernel's one translation unit. */
#ifndef WEFT_RING_CUH
#define WEFT_RING_CUH

#include "prims.cuh"
#include "reduce.cuh"
#include "rounds.cuh"

namespace weft {

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
  const int n = c.n, me = c.rank, es = w.es;
  const int next = c.slot((me + 1) % n), prev = c.slot((me + n - 1) % n);
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

/* Broadcast (reduce = false) or reduce as a pipelined chain round the ring: a broadcast's
 * chunks leave the root for root + 1 and each rank stores and passes them on, up to root - 1;
 * a reduce starts at root + 1 with its input and each rank adds its own and passes the sum on,
 * the root last, which stores it. A rank holds its predecessor's slot while it waits for one
 * in its successor, as the ring does, and the chain ends before the root: no cycle. */
__device__ void chain(const Chan &c, const Item &w, bool reduce) {
  const weft_dev_item_t *it = w.it;
  const int n = c.n, me = c.rank, es = w.es, root = it->root;
  const int next = c.slot((me + 1) % n), prev = c.slot((me + n - 1) % n);
  const int pos = (me - root + n) % n; /* 0: the root */
  /* broadcast: the root sends, root - 1 only receives; reduce: root + 1 only sends, the root
   * only receives */
  const bool recv = reduce ? pos != 1 % n : pos != 0, send = reduce ? pos != 0 : pos != n - 1;
  const char *in = (const char *)it->send;
  char *out = (char *)it->recv;
  const uint64_t count = it->count, unit = unit_for(count, w.nb, w.chunk_elems, es, w.rounds);
  const int partial_op = it->op == WEFT_AVG ? WEFT_SUM : it->op;
  if (unit == 0) return;
  for (uint64_t off = (uint64_t)w.ci * unit; off < count; off += (uint64_t)w.nb * unit) {
    const uint64_t len = clamp_len(count, off, unit);
    const char *from = nullptr, *mine = in + off * es;
    char *dst[2];
    int nd = 0;
    if (recv && !(from = c.recv_slot(prev))) return;
    if (send && !(dst[nd++] = c.send_slot(next))) return;
    char *o = out + off * es;
    if (!reduce) {
      /* every rank but the root stores; an out-of-place root copies its input */
      if (pos != 0 || o != mine) dst[nd++] = o;
      copy_multi(dst, nd, pos == 0 ? mine : from, len * es);
    } else if (!recv) {
      copy_multi(dst, nd, mine, len * es);
    } else {
      if (pos == 0) dst[nd++] = o;
      const char *src[2] = {from, mine};
      reduce_any(it->dtype, pos == 0 ? it->op : partial_op, dst, nd, src, 2, len, n);
    }
    if (recv) c.release(&prev, 1);
    if (send) c.publish(&next, 1, len * es);
  }
}

} // namespace weft

#endif
