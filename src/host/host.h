/* The host engine's parts (engine.c puts them behind weft_engine_t): its state, the queue and
 * progress thread that run queued work, the tuner's cost model, the executor of schedules over
 * the transports and its schedule cache, and WEFT_CHECK's comparison of calls. */
#ifndef WEFT_HOST_H
#define WEFT_HOST_H

#include <pthread.h>

#include "comm.h"

typedef struct {
  weft_coll_args_t key; /* without the alltoallv arrays */
  weft_algo_t algo;
  weft_sched_t sched;
  uint64_t last_use;
} weft_sched_entry_t;

enum { WEFT_SCHED_CACHE = 64 };

/* A host communicator's engine state (comm->engine_state). */
typedef struct weft_host {
  int full_check; /* WEFT_CHECK=1 */

  /* work queue and progress thread, under the comm's mu */
  pthread_cond_t cv;
  weft_work_t *qhead, *qtail;
  int running; /* an op is executing (progress thread or inline) */
  int stop;
  int thread_started;
  pthread_t thread;

  /* executor resources: touched only by the thread running an op */
  uint32_t *chan_send, *chan_recv; /* per peer: ops that used the channel (fingerprints) */
  char *scratch;
  size_t scratch_bytes;
  weft_sched_entry_t cache[WEFT_SCHED_CACHE];
  uint64_t cache_clock;
} weft_host_t;

static inline weft_host_t *weft_host_of(const struct weft_comm *c) {
  return (weft_host_t *)c->engine_state;
}

/* Queue (queue.c). Queues op (or runs it inline when the queue is idle and stream is NULL). */
weft_result_t weft_enqueue(struct weft_comm *comm, weft_work_t *op);
/* Stops the progress thread once the queue is empty (no-op when it never started). */
void weft_progress_stop(struct weft_comm *comm);

/* Runs one op's tasks to completion on the calling thread (executor.c). */
weft_result_t weft_exec_op(struct weft_comm *comm, weft_work_t *op);

/* Picks the algorithm and chunk for host buffers (engine.h's tune). */
weft_result_t weft_host_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced);

/* The schedule for t, from the comm's cache when it can be kept (not alltoallv: its arrays
 * would make the key); *is_owned says the caller must free *owned, which *out then is. */
weft_result_t weft_host_sched(weft_comm_t c, const weft_task_t *t, const weft_sched_t **out,
                              weft_sched_t *owned, int *is_owned);

/* WEFT_CHECK=1 (check.c): compares every rank's call before running it. */
int weft_check_applies(const weft_work_t *op);
weft_result_t weft_check_call(struct weft_comm *comm, const weft_work_t *op);
/* "allreduce(count 1000, float, sum)": a call as errors name it (op and root where they apply). */
void weft_call_name(char *buf, size_t len, weft_coll_t coll, uint64_t count, weft_dtype_t dtype,
                    weft_op_t op, int root);

#endif
