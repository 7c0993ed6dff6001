/* Submitting work: a blocking call on an idle communicator runs inline on the caller's
 * thread (lowest latency); anything else goes through the comm's queue and its progress
 * thread, which sleeps on a condition variable while the queue is empty. A failed op marks
 * the comm failed, and later ops fail at once with the first error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "err.h"
#include "stream.h"

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

/* Runs op, recording a failure on the comm. Called with c->running held by this thread. */
static weft_result_t exec_checked(weft_comm_t c, weft_work_t *op, char *msg, size_t len) {
  weft_result_t rc;
  pthread_mutex_lock(&c->mu);
  rc = c->async_error;
  if (rc != WEFT_SUCCESS) snprintf(msg, len, "communicator failed earlier: %.900s", c->error);
  pthread_mutex_unlock(&c->mu);
  if (rc == WEFT_SUCCESS && atomic_load(&c->aborted)) {
    rc = WEFT_ERR_ABORTED;
    snprintf(msg, len, "communicator was aborted");
  }
  if (rc != WEFT_SUCCESS) return rc;
  if (c->full_check && weft_check_applies(op)) rc = weft_check_call(c, op);
  if (rc == WEFT_SUCCESS) rc = weft_exec_op(c, op);
  if (rc != WEFT_SUCCESS) {
    snprintf(msg, len, "%s", weft_thread_error());
    weft_comm_fail(c, rc, msg, op->seq);
  }
  return rc;
}

static void *progress_main(void *arg) {
  weft_comm_t c = arg;
  char msg[1024];
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!c->qhead && !c->stop)
      pthread_cond_wait(&c->cv, &c->mu);
    if (!c->qhead) break;
    if (c->running) { /* an inline op holds the comm: wait for it */
      pthread_cond_wait(&c->cv, &c->mu);
      continue;
    }
    weft_work_t *op = c->qhead;
    c->qhead = op->next;
    if (!c->qhead) c->qtail = NULL;
    c->running = 1;
    pthread_mutex_unlock(&c->mu);
    if (op->stream) weft_stream_wait_turn(op->stream, op->ticket);
    msg[0] = 0;
    weft_result_t rc = exec_checked(c, op, msg, sizeof msg);
    if (op->stream) {
      weft_stream_complete(op->stream, op->ticket, rc, msg);
      weft_work_free(op);
      pthread_mutex_lock(&c->mu);
    } else {
      pthread_mutex_lock(&c->mu);
      op->result = rc;
      if (rc != WEFT_SUCCESS) snprintf(c->error, sizeof c->error, "%s", msg);
      op->done = 1;
    }
    c->running = 0;
    pthread_cond_broadcast(&c->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

weft_result_t weft_progress_start(weft_comm_t c) {
  if (c->thread_started) return WEFT_SUCCESS;
  int e = pthread_create(&c->thread, NULL, progress_main, c);
  if (e != 0) return weft_set_error(WEFT_ERR_SYSTEM, "progress thread: %s", strerror(e));
  c->thread_started = 1;
  return WEFT_SUCCESS;
}

void weft_progress_stop(weft_comm_t c) {
  pthread_mutex_lock(&c->mu);
  int started = c->thread_started;
  c->stop = 1;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (started) pthread_join(c->thread, NULL);
  c->thread_started = 0;
}

static void append(weft_comm_t c, weft_work_t *op) {
  op->next = NULL;
  if (c->qtail)
    c->qtail->next = op;
  else
    c->qhead = op;
  c->qtail = op;
  pthread_cond_broadcast(&c->cv);
}

weft_result_t weft_enqueue(weft_comm_t c, weft_work_t *op) {
  char msg[1024] = "";
  if (op->stream) { /* asynchronous: op is heap-allocated and the progress thread frees it */
    pthread_mutex_lock(&c->mu);
    weft_result_t rc = weft_progress_start(c);
    if (rc == WEFT_SUCCESS) {
      op->seq = ++c->seq;
      op->ticket = weft_stream_ticket(op->stream);
      append(c, op);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc != WEFT_SUCCESS) weft_work_free(op);
    return rc;
  }
  pthread_mutex_lock(&c->mu);
  op->seq = ++c->seq;
  if (!c->running && !c->qhead) {
    c->running = 1;
    pthread_mutex_unlock(&c->mu);
    weft_result_t rc = exec_checked(c, op, msg, sizeof msg);
    pthread_mutex_lock(&c->mu);
    c->running = 0;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    return rc == WEFT_SUCCESS ? rc : weft_set_error(rc, "%s", msg);
  }
  weft_result_t rc = weft_progress_start(c);
  if (rc == WEFT_SUCCESS) {
    append(c, op);
    while (!op->done)
      pthread_cond_wait(&c->cv, &c->mu);
    rc = op->result;
    snprintf(msg, sizeof msg, "%s", c->error);
  }
  pthread_mutex_unlock(&c->mu);
  return rc == WEFT_SUCCESS ? rc : weft_set_error(rc, "%s", msg);
}
