/* Host streams: an issue counter and a completion counter. Work on a stream completes in
 * issue order, also across communicators (each op waits for its predecessor's ticket). */
#ifndef WEFT_STREAM_H
#define WEFT_STREAM_H

#include <pthread.h>
#include <stdint.h>

#include "weft.h"

struct weft_stream {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  uint64_t issued, completed;
  weft_result_t error;
  char message[512];
};

uint64_t weft_stream_ticket(weft_stream_t s);
/* Waits until every op issued before ticket has completed. */
void weft_stream_wait_turn(weft_stream_t s, uint64_t ticket);
void weft_stream_complete(weft_stream_t s, uint64_t ticket, weft_result_t rc, const char *msg);

#endif
