/* Tasks and work items: what a task owns and a queued op's memory, freed the same way by the
 * API, groups and every engine. */
#include <stdlib.h>

#include "comm.h"

void weft_task_free(weft_task_t *t) {
  free(t->owned);
  t->owned = NULL;
}

void weft_work_free(weft_work_t *op) {
  for (int i = 0; i < op->ntasks; i++)
    weft_task_free(&op->tasks[i]);
  free(op->tasks);
  free(op);
}
