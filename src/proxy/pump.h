/* The thread both proxies run (proxy.c over FIFOs, region.c over the kernels' regions): it
 * passes over every peer in turn until stopped, reads the communicator's abort word, asks for
 * failures found elsewhere, fails work that stalls, and sleeps on the transport when idle. A
 * failure sets the kernels' abort word, is explained, kept, and reported once. */
#ifndef WEFT_PUMP_H
#define WEFT_PUMP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "transport.h"

typedef struct {
  int rank, nranks;
  const weft_transport_t *tr;
  void *tr_state;
  const atomic_int *abort_flag;
  int32_t *kernel_abort; /* may be NULL */
  int64_t timeout_ms;
  weft_result_t (*check)(void *ctx);                               /* optional */
  weft_result_t (*explain)(void *ctx, weft_result_t rc, int peer); /* optional */
  void (*fail)(void *ctx, weft_result_t rc, const char *msg);      /* optional */
  void *ctx;
  /* The proxy's own: one pass over peer; *moved when bytes moved, *busy when some frame with
   * peer is under way or waits to go. */
  weft_result_t (*pass)(void *self, int peer, int *moved, int *busy);
  void *self;
} weft_pump_init_t;

typedef struct {
  weft_pump_init_t in;
  pthread_t thread;
  int started;
  atomic_int stop;
  atomic_int status; /* weft_result_t; msg is written before it leaves WEFT_SUCCESS */
  char msg[1024];
} weft_pump_t;

weft_result_t weft_pump_start(weft_pump_t *p, const weft_pump_init_t *in);
weft_result_t weft_pump_status(weft_pump_t *p);
void weft_pump_stop(weft_pump_t *p);

#endif
