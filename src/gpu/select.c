/* What runs a device operation: the algorithm (one-shot, two-shot or ring allreduce; ring or
 * direct reduce_scatter and allgather), and for a lone small operation the low-latency
 * protocol (16-byte packets, or 128-byte lines over NVLink) instead of the general kernel. */
#include "dtype.h"
#include "gpu.h"

weft_result_t weft_dev_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced) {
  weft_coll_t k = t->args.coll;
  t->algo = WEFT_ALGO_DIRECT;
  /* past WEFT_DEV_MAX_RANKS ranks the kernels reach their ring neighbours alone (slots.h) */
  if (!dev_of(c)->plan.slots.identity) {
    if (k != WEFT_COLL_SEND && k != WEFT_COLL_RECV) t->algo = WEFT_ALGO_RING;
    return WEFT_SUCCESS;
  }
  if (k != WEFT_COLL_ALLREDUCE && k != WEFT_COLL_REDUCE_SCATTER && k != WEFT_COLL_ALLGATHER)
    return WEFT_SUCCESS;
  /* As on host buffers, a forced algorithm the device collective does not have leaves the
   * choice to the defaults. */
  if (forced == WEFT_ALGO_RING || (k != WEFT_COLL_ALLREDUCE && forced == WEFT_ALGO_DIRECT) ||
      (k == WEFT_COLL_ALLREDUCE && (forced == WEFT_ALGO_ONESHOT || forced == WEFT_ALGO_TWOSHOT))) {
    t->algo = forced;
    return WEFT_SUCCESS;
  }
  if (k != WEFT_COLL_ALLREDUCE) return WEFT_SUCCESS;
  size_t bytes = t->args.count * weft_dtype_size(t->dtype);
  t->algo = bytes <= dev_of(c)->oneshot_max ? WEFT_ALGO_ONESHOT : WEFT_ALGO_TWOSHOT;
  return WEFT_SUCCESS;
}

/* A lone small allreduce (one-shot), allgather, alltoall or reduce_scatter takes the
 * low-latency protocol up to d->ll_lim per peer, the 128-byte one past that up to
 * d->ll128_max; a lone broadcast or reduce the small one up to d->ll_rooted too (one way,
 * sending twice its bytes costs more against the general kernel); everything else, and a
 * forced ring, the general kernel. */
weft_proto_t weft_dev_protocol(const struct weft_comm *c, const weft_task_t *tasks, int ntasks) {
  if (ntasks != 1 || c->nranks < 2 || tasks->algo == WEFT_ALGO_RING) return WEFT_PROTO_SIMPLE;
  const weft_task_t *t = tasks;
  const struct weft_dev *d = dev_of(c);
  size_t bytes = t->args.count * weft_dtype_size(t->dtype);
  int reduces = t->args.coll == WEFT_COLL_ALLREDUCE || t->args.coll == WEFT_COLL_REDUCE_SCATTER ||
                t->args.coll == WEFT_COLL_REDUCE;
  uint64_t lim = d->ll_lim[reduces];
  if (t->args.coll == WEFT_COLL_BROADCAST || t->args.coll == WEFT_COLL_REDUCE)
    return bytes && bytes <= lim && bytes <= d->ll_rooted ? WEFT_PROTO_LL : WEFT_PROTO_SIMPLE;
  if (bytes == 0 || (bytes > lim && bytes > d->ll128_max[reduces])) return WEFT_PROTO_SIMPLE;
  switch (t->args.coll) {
  case WEFT_COLL_ALLREDUCE:
    if (t->algo != WEFT_ALGO_ONESHOT) return WEFT_PROTO_SIMPLE;
    break;
  case WEFT_COLL_ALLGATHER:
  case WEFT_COLL_ALLTOALL:
  case WEFT_COLL_REDUCE_SCATTER: break;
  default: return WEFT_PROTO_SIMPLE;
  }
  return bytes > lim ? WEFT_PROTO_LL128 : WEFT_PROTO_LL;
}
