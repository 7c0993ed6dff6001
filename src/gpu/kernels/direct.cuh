/* The direct algorithms on windows: straight between the peers' buffers, no staging. Part of
 * the device kernel's one translation unit. */
#ifndef WEFT_DIRECT_CUH
#define WEFT_DIRECT_CUH

#include "prims.cuh"
#include "reduce.cuh"
#include "rounds.cuh"

namespace weft {

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

} // namespace weft

#endif
