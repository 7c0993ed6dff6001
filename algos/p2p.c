/* Point-to-point: a send or a receive is a one-step schedule, which lets it join a group
 * with collectives and other sends and receives. */
#include "schedule.h"

weft_result_t weft_p2p(const weft_coll_args_t *a, weft_sched_t *s) {
  if (a->coll == WEFT_COLL_SEND)
    weft_sched_add(s, WEFT_STEP_SEND, a->root, WEFT_BUF_SEND, 0, 0, 0, a->count, -1, -1);
  else if (a->coll == WEFT_COLL_RECV)
    weft_sched_add(s, WEFT_STEP_RECV, a->root, WEFT_BUF_RECV, 0, 0, 0, a->count, -1, -1);
  else
    return WEFT_ERR_UNSUPPORTED;
  return weft_sched_status(s);
}
