/* A device task for the planner's and the window rules' tests: an f32 collective of count
 * elements per block whose buffers sit at made-up addresses (nothing dereferences them). */
#ifndef WEFT_TEST_DEV_TASK_H
#define WEFT_TEST_DEV_TASK_H

#include <stdint.h>

#include "comm.h"

static inline weft_task_t coll(weft_coll_t k, uint64_t count, uintptr_t send, uintptr_t recv) {
  weft_task_t t = {.args = {.coll = k, .count = count},
                   .dtype = WEFT_F32,
                   .sendbuf = (void *)send,
                   .recvbuf = (void *)recv};
  return t;
}

#endif
