/* Pairing a device rank's sends to itself with its receives from itself (see
 * self_pairs.h): the order of issue decides, as between two ranks. */
#include "self_pairs.h"

#include "dtype.h"
#include "err.h"

int weft_dev_is_self(int rank, const weft_task_t *t) {
  weft_coll_t k = t->args.coll;
  return (k == WEFT_COLL_SEND || k == WEFT_COLL_RECV) && t->args.root == rank;
}

weft_result_t weft_dev_self_pairs(int rank, const weft_task_t *tasks, int ntasks, int *pair,
                                  int *nself) {
  int sends = 0, recvs = 0, next_send = 0;
  *nself = 0;
  for (int i = 0; i < ntasks; i++) {
    pair[i] = -1;
    if (!weft_dev_is_self(rank, &tasks[i])) continue;
    ++*nself;
    if (tasks[i].args.coll == WEFT_COLL_SEND) {
      sends++;
      continue;
    }
    recvs++;
    while (next_send < ntasks && !(weft_dev_is_self(rank, &tasks[next_send]) &&
                                   tasks[next_send].args.coll == WEFT_COLL_SEND))
      next_send++;
    if (next_send == ntasks) break; /* counted below */
    const weft_task_t *s = &tasks[next_send], *r = &tasks[i];
    /* both sizes were checked against size_t when each call was issued */
    size_t sb = s->args.count * weft_dtype_size(s->dtype);
    size_t rb = r->args.count * weft_dtype_size(r->dtype);
    if (sb != rb)
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "rank %d sends %zu bytes to itself but receives %zu from itself "
                            "(send/recv pair %d)",
                            rank, sb, rb, recvs);
    pair[i] = next_send++;
  }
  if (sends != recvs)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "rank %d has %d sends to itself and %d receives from itself; on a "
                          "device communicator each needs its partner in the same group",
                          rank, sends, recvs);
  return WEFT_SUCCESS;
}
