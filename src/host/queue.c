/* The host engine's queue: a blocking call on an idle communicator runs inline on the caller's
 * thread (lowest latency); anything else goes through the comm's queue and its progress
 * thread, which sleeps on a condition variable while the queue is empty. A failed op marks
 * the comm failed, and later ops fail at once with the first error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "host.h"
#include "stream.h"

/* Runs op, recording a failure on the comm. Called with h->running held by this thread. */
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
  if (weft_host_of(c)->full_check && weft_check_applies(op)) rc = weft_check_call(c, op);
  if (rc == WEFT_SUCCESS) rc = weft_exec_op(c, op);
  if (rc != WEFT_SUCCESS) {
    snprintf(msg, len, "%s", weft_thread_error());
    weft_comm_fail(c, rc, msg, op->seq);
  }
  return rc;
}

static void *progress_main(void *arg) {
  weft_comm_t c = arg;
  weft_host_t *h = weft_host_of(c);
  char msg[1024];
  pthread_mutex_lock(&c->mu);
  for (;;) {
    while (!h->qhead && !h->stop)
      pthread_cond_wait(&h->cv, &c->mu);
    if (!h->qhead) break;
    if (h->running) { /* an inline op holds the comm: wait for it */
      pthread_cond_wait(&h->cv, &c->mu);
      continue;
    }
    weft_work_t *op = h->qhead;
    h->qhead = op->next;
    if (!h->qhead) h->qtail = NULL;
    h->running = 1;
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
    h->running = 0;
    pthread_cond_broadcast(&h->cv);
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static weft_result_t progress_start(weft_comm_t c) {
  weft_host_t *h = weft_host_of(c);
  if (h->thread_started) return WEFT_SUCCESS;
  int e = pthread_create(&h->thread, NULL, progress_main, c);
  if (e != 0) return weft_set_error(WEFT_ERR_SYSTEM, "progress thread: %s", strerror(e));
  h->thread_started = 1;
  return WEFT_SUCCESS;
}

void weft_progress_stop(weft_comm_t c) {
  weft_host_t *h = weft_host_of(c);
  pthread_mutex_lock(&c->mu);
  int started = h->thread_started;
  h->stop = 1;
  pthread_cond_broadcast(&h->cv);
  pthread_mutex_unlock(&c->mu);
  if (started) pthread_join(h->thread, NULL);
  h->thread_started = 0;
}

static void append(weft_comm_t c, weft_work_t *op) {
  weft_host_t *h = weft_host_of(c);
  op->next = NULL;
  if (h->qtail)
    h->qtail->next = op;
  else
    h->qhead = op;
  h->qtail = op;
  pthread_cond_broadcast(&h->cv);
}

weft_result_t weft_enqueue(weft_comm_t c, weft_work_t *op) {
  weft_host_t *h = weft_host_of(c);
  char msg[1024] = "";
  if (op->stream) { /* asynchronous: op is heap-allocated and the progress thread frees it */
    pthread_mutex_lock(&c->mu);
    weft_result_t rc = progress_start(c);
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
  if (!h->running && !h->qhead) {
    h->running = 1;
    pthread_mutex_unlock(&c->mu);
    weft_result_t rc = exec_checked(c, op, msg, sizeof msg);
    pthread_mutex_lock(&c->mu);
    h->running = 0;
    pthread_cond_broadcast(&h->cv);
    pthread_mutex_unlock(&c->mu);
    return rc == WEFT_SUCCESS ? rc : weft_set_error(rc, "%s", msg);
  }
  weft_result_t rc = progress_start(c);
  if (rc == WEFT_SUCCESS) {
    append(c, op);
    while (!op->done)
      pthread_cond_wait(&h->cv, &c->mu);
    rc = op->result;
    snprintf(msg, sizeof msg, "%s", c->error);
  }
  pthread_mutex_unlock(&c->mu);
  return rc == WEFT_SUCCESS ? rc : weft_set_error(rc, "%s", msg);
}
