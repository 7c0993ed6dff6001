/* The window rules that need no GPU (see window_rules.h). */
#include "window_rules.h"

#include <stdint.h>

#include "dtype.h"

int weft_dev_direct_needs(const weft_task_t *t, int nranks, uint64_t min_bytes, uint64_t read_max) {
  uint64_t n = (uint64_t)nranks, blk = t->args.count * weft_dtype_size(t->dtype);
  const char *send = t->sendbuf, *recv = t->recvbuf;
  if (min_bytes == 0 || blk == 0 || blk < min_bytes) return 0;
  switch (t->args.coll) {
  case WEFT_COLL_ALLGATHER: return WEFT_DEV_DIRECT_RECV;
  case WEFT_COLL_ALLTOALL:
    return send < recv + blk * n && recv < send + blk * n ? 0 : WEFT_DEV_DIRECT_RECV;
  case WEFT_COLL_REDUCE_SCATTER: return blk > read_max ? 0 : WEFT_DEV_DIRECT_SEND;
  case WEFT_COLL_ALLREDUCE: /* two-shot: a segment read from each peer */
    return (blk + n - 1) / n > read_max ? 0 : WEFT_DEV_DIRECT_RECV | WEFT_DEV_DIRECT_SEND;
  default: return 0;
  }
}

uint64_t weft_dev_ce_split(const weft_task_t *t, int nranks, uint64_t ce_min) {
  uint64_t n = (uint64_t)nranks, es = weft_dtype_size(t->dtype);
  if (t->args.coll != WEFT_COLL_ALLREDUCE || n < 2 || ce_min == 0 || t->args.count % n) return 0;
  uint64_t seg = t->args.count / n;
  return seg * es / 2 >= ce_min ? seg : 0;
}

int weft_window_holds(const char *base, size_t size, const void *p, size_t bytes, size_t *off) {
  uintptr_t b = (uintptr_t)base, q = (uintptr_t)p;
  if (q < b || q - b > size || bytes > size - (q - b)) return 0;
  *off = q - b;
  return 1;
}
