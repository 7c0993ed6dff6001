/* Host stream objects (see stream.h). */
#include "stream.h"

#include <stdio.h>
#include <stdlib.h>

#include "err.h"

weft_result_t weft_stream_create(weft_stream_t *stream) {
  if (!stream) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_stream_create: stream is NULL");
  weft_stream_t s = calloc(1, sizeof *s);
  if (!s) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_stream_create: out of memory");
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  *stream = s;
  return WEFT_SUCCESS;
}

uint64_t weft_stream_ticket(weft_stream_t s) {
  pthread_mutex_lock(&s->mu);
  uint64_t t = ++s->issued;
  pthread_mutex_unlock(&s->mu);
  return t;
}

void weft_stream_wait_turn(weft_stream_t s, uint64_t ticket) {
  pthread_mutex_lock(&s->mu);
  while (s->completed + 1 < ticket)
    pthread_cond_wait(&s->cv, &s->mu);
  pthread_mutex_unlock(&s->mu);
}

void weft_stream_complete(weft_stream_t s, uint64_t ticket, weft_result_t rc, const char *msg) {
  pthread_mutex_lock(&s->mu);
  s->completed = ticket;
  if (rc != WEFT_SUCCESS && s->error == WEFT_SUCCESS) {
    s->error = rc;
    snprintf(s->message, sizeof s->message, "%s", msg);
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

weft_result_t weft_stream_synchronize(weft_stream_t s) {
  if (!s) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_stream_synchronize: stream is NULL");
  pthread_mutex_lock(&s->mu);
  while (s->completed < s->issued)
    pthread_cond_wait(&s->cv, &s->mu);
  weft_result_t rc = s->error;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", s->message);
  pthread_mutex_unlock(&s->mu);
  if (rc != WEFT_SUCCESS) return weft_set_error(rc, "%s", msg);
  return WEFT_SUCCESS;
}

weft_result_t weft_stream_query(weft_stream_t s) {
  if (!s) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_stream_query: stream is NULL");
  pthread_mutex_lock(&s->mu);
  weft_result_t rc = s->completed < s->issued ? WEFT_ERR_IN_PROGRESS : s->error;
  pthread_mutex_unlock(&s->mu);
  return rc;
}

weft_result_t weft_stream_destroy(weft_stream_t s) {
  if (!s) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_stream_destroy: stream is NULL");
  weft_result_t rc = weft_stream_synchronize(s);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
  return rc;
}
