/* Pipelined chain for broadcast and reduce: ranks in a line starting at the root, data in
 * chunks, so every link is busy once the pipeline fills; time ~ (chunks + n - 2) chunk
 * transfers. Best for large messages. */
#include "schedule.h"

weft_result_t weft_chain(const weft_coll_args_t *a, weft_sched_t *s) {
  int n = a->nranks, pos = (a->rank - a->root + n) % n;
  int up = (a->rank - 1 + n) % n, down = (a->rank + 1) % n; /* toward / away from root */
  int is_root = pos == 0, is_last = pos == n - 1;
  uint64_t k = (a->count + a->chunk - 1) / a->chunk;
  if (a->coll != WEFT_COLL_BROADCAST && a->coll != WEFT_COLL_REDUCE) return WEFT_ERR_UNSUPPORTED;
  if (n == 1) {
    if (!a->in_place)
      weft_sched_add(s, WEFT_STEP_COPY, a->rank, WEFT_BUF_RECV, 0, WEFT_BUF_SEND, 0, a->count, -1,
                     -1);
    return weft_sched_status(s);
  }
  if (a->coll == WEFT_COLL_BROADCAST) {
    if (is_root && !a->in_place)
      weft_sched_add(s, WEFT_STEP_COPY, a->rank, WEFT_BUF_RECV, 0, WEFT_BUF_SEND, 0, a->count, -1,
                     -1);
    for (uint64_t c = 0; c < k; c++) {
      uint64_t off = c * a->chunk, len = a->count - off < a->chunk ? a->count - off : a->chunk;
      int32_t got = -1;
      if (!is_root)
        got = weft_sched_add(s, WEFT_STEP_RECV, up, WEFT_BUF_RECV, off, 0, 0, len, -1, -1);
      if (!is_last)
        weft_sched_add(s, WEFT_STEP_SEND, down, is_root ? WEFT_BUF_SEND : WEFT_BUF_RECV, off, 0, 0,
                       len, got, -1);
    }
    return weft_sched_status(s);
  }
  /* Reduce flows from the far end toward the root; non-roots accumulate in scratch
   * (their recvbuf may be NULL). */
  if (!is_root) s->scratch_count = a->count;
  for (uint64_t c = 0; c < k; c++) {
    uint64_t off = c * a->chunk, len = a->count - off < a->chunk ? a->count - off : a->chunk;
    if (is_last) {
      weft_sched_add(s, WEFT_STEP_SEND, up, WEFT_BUF_SEND, off, 0, 0, len, -1, -1);
      continue;
    }
    weft_buf_t acc = is_root ? WEFT_BUF_RECV : WEFT_BUF_SCRATCH;
    int32_t red =
        weft_sched_add(s, WEFT_STEP_RECV_REDUCE, down, acc, off, WEFT_BUF_SEND, off, len, -1, -1);
    if (!is_root) weft_sched_add(s, WEFT_STEP_SEND, up, acc, off, 0, 0, len, red, -1);
  }
  return weft_sched_status(s);
}
