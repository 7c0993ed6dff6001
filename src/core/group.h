/* Group calls: between weft_group_start and weft_group_end, tasks are collected per
 * calling thread and submitted together, one op per communicator. */
#ifndef WEFT_GROUP_H
#define WEFT_GROUP_H

#include "comm.h"

/* 1 when the calling thread is inside a group: the task is taken (ownership moves). */
int weft_group_active(void);
weft_result_t weft_group_add(weft_comm_t comm, weft_task_t *task, weft_stream_t stream);

#endif
