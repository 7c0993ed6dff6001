/* The host engine: host buffers, run by the executor of schedules over the transports,
 * inline when the queue is idle and the call is blocking, else queued in stream order for
 * the progress thread. */
#include <stdlib.h>

#include "err.h"
#include "host.h"
#include "param.h"
#include "stream.h"

static int host_serves(const weft_config_t *config) { return !config || config->device < 0; }

static void host_free(struct weft_comm *c) {
  weft_host_t *h = weft_host_of(c);
  if (!h) return;
  weft_progress_stop(c);
  for (int i = 0; i < WEFT_SCHED_CACHE; i++)
    weft_sched_free(&h->cache[i].sched);
  pthread_cond_destroy(&h->cv);
  free(h->scratch);
  free(h->chan_send);
  free(h->chan_recv);
  free(h);
  c->engine_state = NULL;
}

static weft_result_t host_setup(struct weft_comm *c, const weft_config_t *config) {
  (void)config;
  weft_host_t *h = calloc(1, sizeof *h);
  if (!h) return weft_set_error(WEFT_ERR_NO_MEMORY, "comm init: out of memory");
  pthread_cond_init(&h->cv, NULL);
  c->engine_state = h;
  h->chan_send = calloc((size_t)c->nranks, sizeof *h->chan_send);
  h->chan_recv = calloc((size_t)c->nranks, sizeof *h->chan_recv);
  if (!h->chan_send || !h->chan_recv) {
    host_free(c);
    return weft_set_error(WEFT_ERR_NO_MEMORY, "comm init: out of memory");
  }
  /* read here, on the caller's thread: weft's own threads never read the environment */
  h->full_check = weft_param_get_int(WEFT_PARAM_CHECK) != 0;
  return WEFT_SUCCESS;
}

static weft_result_t host_submit(struct weft_comm *c, weft_task_t *tasks, int ntasks,
                                 weft_stream_t stream) {
  if (!stream) { /* blocking: runs before returning, so the tasks may stay where they are */
    weft_work_t op = {.tasks = tasks, .ntasks = ntasks};
    weft_result_t rc = weft_enqueue(c, &op);
    for (int i = 0; i < ntasks; i++)
      weft_task_free(&tasks[i]);
    return rc;
  }
  weft_work_t *op = calloc(1, sizeof *op);
  weft_task_t *copy = malloc(sizeof *copy * (size_t)ntasks);
  if (!op || !copy) {
    free(op);
    free(copy);
    for (int i = 0; i < ntasks; i++)
      weft_task_free(&tasks[i]);
    return weft_set_error(WEFT_ERR_NO_MEMORY, "out of memory queueing an operation");
  }
  for (int i = 0; i < ntasks; i++)
    copy[i] = tasks[i];
  *op = (weft_work_t){.tasks = copy, .ntasks = ntasks, .stream = stream};
  return weft_enqueue(c, op);
}

static weft_result_t host_submit_group(struct weft_comm **comms, weft_work_t **ops,
                                       const weft_stream_t *streams, int n) {
  weft_stream_t user_stream = n ? streams[0] : NULL; /* the group's first call's */
  weft_result_t rc = WEFT_SUCCESS;
  if (n == 1 && !user_stream) { /* blocking, one comm: run it like a single call */
    weft_work_t op = *ops[0];
    op.stream = NULL;
    rc = weft_enqueue(comms[0], &op);
    weft_work_free(ops[0]); /* op was a copy: the tasks are still ops[0]'s */
    return rc;
  }
  /* Several comms must progress at the same time: each gets its own stream, so none
   * waits for another's ticket; the group then waits for all of them (also when the user
   * gave a stream: one stream's tickets would serialise the comms and could deadlock). */
  weft_stream_t own[WEFT_GROUP_MAX_COMMS] = {0};
  if (n > WEFT_GROUP_MAX_COMMS) { /* weft_group_end refuses such a group: never here */
    for (int k = 0; k < n; k++)
      weft_work_free(ops[k]);
    return weft_set_error(WEFT_ERR_INTERNAL, "group: %d communicators, more than %d", n,
                          WEFT_GROUP_MAX_COMMS);
  }
  for (int k = 0; k < n; k++) {
    weft_stream_t s = NULL;
    if (n == 1)
      s = user_stream;
    else if (weft_stream_create(&own[k]) == WEFT_SUCCESS)
      s = own[k];
    if (!s) {
      rc = weft_set_error(WEFT_ERR_NO_MEMORY, "group: no stream for communicator %d of %d", k + 1,
                          n);
      for (int j = k; j < n; j++)
        weft_work_free(ops[j]);
      break;
    }
    ops[k]->stream = s;
    weft_result_t e = weft_enqueue(comms[k], ops[k]);
    if (e != WEFT_SUCCESS && rc == WEFT_SUCCESS) rc = e;
  }
  for (int k = 0; k < n; k++)
    if (own[k]) {
      weft_result_t e = weft_stream_destroy(own[k]);
      if (e != WEFT_SUCCESS && rc == WEFT_SUCCESS) rc = e;
    }
  return rc;
}

/* Host operations are waited for by host threads, which see their own failures. */
static void host_watch(struct weft_comm *c) { (void)c; }

/* The transports wake the thread running an op (comm.c); the queue's waiters wake here. */
static void host_cancel(struct weft_comm *c) {
  weft_host_t *h = weft_host_of(c);
  pthread_mutex_lock(&c->mu);
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&c->mu);
}
static size_t host_memory(const struct weft_comm *c) {
  (void)c;
  return 0;
}
static void *host_barrier_byte(struct weft_comm *c) {
  (void)c;
  return NULL;
}

const weft_engine_t weft_engine_host = {
    .size = sizeof(weft_engine_t),
    .name = "host",
    .serves = host_serves,
    .setup = host_setup,
    .free = host_free,
    .tune = weft_host_tune,
    .submit = host_submit,
    .submit_group = host_submit_group,
    .watch = host_watch,
    .cancel = host_cancel,
    .memory = host_memory,
    .barrier_byte = host_barrier_byte,
};
