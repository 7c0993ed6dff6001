/* Group state is per thread (like the last error): a group is a property of the calling
 * thread's program order, not of any one communicator. */
#include "group.h"

#include <stdlib.h>
#include <string.h>

#include "dev_comm.h"
#include "err.h"
#include "stream.h"

typedef struct {
  weft_comm_t comm;
  weft_task_t task;
  weft_stream_t stream;
} item_t;

static _Thread_local struct {
  int depth;
  item_t *items;
  int n, cap;
  weft_result_t error;
} grp;

int weft_group_active(void) { return grp.depth > 0; }

weft_result_t weft_group_start(void) {
  grp.depth++;
  return WEFT_SUCCESS;
}

static void drop_items(void) {
  for (int i = 0; i < grp.n; i++)
    weft_task_free(&grp.items[i].task);
  free(grp.items);
  grp.items = NULL;
  grp.n = grp.cap = 0;
  grp.error = WEFT_SUCCESS;
}

weft_result_t weft_group_add(weft_comm_t comm, weft_task_t *task, weft_stream_t stream) {
  if (grp.n == grp.cap) {
    int ncap = grp.cap ? grp.cap * 2 : 16;
    item_t *ni = realloc(grp.items, (size_t)ncap * sizeof *ni);
    if (!ni) {
      weft_task_free(task);
      grp.error = WEFT_ERR_NO_MEMORY;
      return weft_set_error(WEFT_ERR_NO_MEMORY, "group: out of memory");
    }
    grp.items = ni;
    grp.cap = ncap;
  }
  grp.items[grp.n++] = (item_t){comm, *task, stream};
  return WEFT_SUCCESS;
}

weft_result_t weft_group_end(void) {
  if (grp.depth == 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_group_end without weft_group_start");
  if (--grp.depth > 0) return WEFT_SUCCESS;
  if (grp.error != WEFT_SUCCESS) {
    weft_result_t e = grp.error;
    drop_items();
    return weft_set_error(e, "group: an operation in the group failed to queue; nothing ran");
  }
  /* One op per communicator, tasks in issue order. */
  int ncomms = 0;
  weft_comm_t comms[64];
  weft_stream_t first_stream[64]; /* each comm's first call's stream */
  weft_work_t *ops[64];
  weft_result_t rc = WEFT_SUCCESS;
  for (int i = 0; i < grp.n; i++) {
    int k = 0;
    while (k < ncomms && comms[k] != grp.items[i].comm)
      k++;
    if (k == ncomms) {
      if (ncomms == 64) {
        drop_items();
        return weft_set_error(WEFT_ERR_INVALID_ARG, "group: more than 64 communicators");
      }
      first_stream[ncomms] = grp.items[i].stream;
      comms[ncomms++] = grp.items[i].comm;
    }
  }
  for (int k = 0; k < ncomms; k++) {
    ops[k] = calloc(1, sizeof *ops[k]);
    if (ops[k]) ops[k]->tasks = calloc((size_t)grp.n, sizeof(weft_task_t));
    if (!ops[k] || !ops[k]->tasks) {
      for (int j = 0; j <= k; j++)
        if (ops[j]) {
          free(ops[j]->tasks);
          free(ops[j]);
        }
      drop_items();
      return weft_set_error(WEFT_ERR_NO_MEMORY, "group: out of memory");
    }
    for (int i = 0; i < grp.n; i++)
      if (grp.items[i].comm == comms[k]) {
        ops[k]->tasks[ops[k]->ntasks++] = grp.items[i].task;
        grp.items[i].task.owned = NULL; /* moved */
      }
  }
  weft_stream_t user_stream = ncomms ? first_stream[0] : NULL; /* the group's first call's */
  drop_items();
  /* Device comms: each comm's part of the group is one kernel on its first call's stream. */
  int ndev = 0;
  for (int k = 0; k < ncomms; k++)
    ndev += comms[k]->dev != NULL;
  if (ndev) {
    int mixed = ndev < ncomms;
    if (mixed)
      rc = weft_set_error(WEFT_ERR_INVALID_ARG, "group: host and device communicators cannot "
                                                "share a group (their streams differ)");
    for (int k = 0; k < ncomms; k++) {
      weft_result_t e =
          mixed ? WEFT_SUCCESS
                : weft_dev_submit(comms[k], ops[k]->tasks, ops[k]->ntasks, first_stream[k]);
      if (e != WEFT_SUCCESS && rc == WEFT_SUCCESS) rc = e;
      weft_work_free(ops[k]);
    }
    return rc;
  }
  if (ncomms == 1 && !user_stream) { /* blocking, one comm: run it like a single call */
    weft_work_t op = *ops[0];
    op.stream = NULL;
    rc = weft_enqueue(comms[0], &op);
    weft_work_free(ops[0]); /* op was a copy: the tasks are still ops[0]'s */
    return rc;
  }
  /* Several comms must progress at the same time: each gets its own stream, so none
   * waits for another's ticket; the group then waits for all of them (also when the user
   * gave a stream: one stream's tickets would serialise the comms and could deadlock). */
  weft_stream_t own[64] = {0};
  for (int k = 0; k < ncomms; k++) {
    weft_stream_t s = NULL;
    if (ncomms == 1)
      s = user_stream;
    else if (weft_stream_create(&own[k]) == WEFT_SUCCESS)
      s = own[k];
    if (!s) {
      rc = WEFT_ERR_NO_MEMORY;
      for (int j = k; j < ncomms; j++)
        weft_work_free(ops[j]);
      break;
    }
    ops[k]->stream = s;
    weft_result_t e = weft_enqueue(comms[k], ops[k]);
    if (e != WEFT_SUCCESS && rc == WEFT_SUCCESS) rc = e;
  }
  for (int k = 0; k < ncomms; k++)
    if (own[k]) {
      weft_result_t e = weft_stream_destroy(own[k]);
      if (e != WEFT_SUCCESS && rc == WEFT_SUCCESS) rc = e;
    }
  return rc;
}
