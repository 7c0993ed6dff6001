/* Group state is per thread (like the last error): a group is a property of the calling
 * thread's program order, not of any one communicator. */
#include "group.h"

#include <stdlib.h>
#include <string.h>

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

weft_result_t weft_group_discard(void) {
  if (grp.depth == 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_group_discard without weft_group_start");
  if (--grp.depth == 0) drop_items();
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
  weft_comm_t comms[WEFT_GROUP_MAX_COMMS];
  weft_stream_t first_stream[WEFT_GROUP_MAX_COMMS]; /* each comm's first call's stream */
  weft_work_t *ops[WEFT_GROUP_MAX_COMMS];
  weft_result_t rc = WEFT_SUCCESS;
  for (int i = 0; i < grp.n; i++) {
    int k = 0;
    while (k < ncomms && comms[k] != grp.items[i].comm)
      k++;
    if (k == ncomms) {
      if (ncomms == WEFT_GROUP_MAX_COMMS) {
        drop_items();
        return weft_set_error(WEFT_ERR_INVALID_ARG,
                              "weft_group_end: the group spans more than WEFT_GROUP_MAX_COMMS "
                              "(%d) communicators; none of its operations ran",
                              WEFT_GROUP_MAX_COMMS);
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
  drop_items();
  /* each engine runs its comms' parts its own way (the gpu engine: one kernel per comm on
   * its first call's stream), so one group holds comms of one engine */
  for (int k = 1; k < ncomms; k++)
    if (comms[k]->engine != comms[0]->engine) {
      for (int j = 0; j < ncomms; j++)
        weft_work_free(ops[j]);
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "group: %s and %s communicators cannot share a group (their streams "
                            "differ)",
                            comms[0]->engine->name, comms[k]->engine->name);
    }
  return ncomms ? comms[0]->engine->submit_group(comms, ops, first_stream, ncomms) : rc;
}
