/* The host engine's parts (engine.c puts them behind weft_engine_t): the tuner's cost model
 * and the executor of schedules over the transports. */
#ifndef WEFT_HOST_H
#define WEFT_HOST_H

#include "comm.h"

/* Picks the algorithm and chunk for host buffers (engine.h's tune). */
weft_result_t weft_host_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced);

/* The schedule for t, from the comm's cache when it can be kept (not alltoallv: its arrays
 * would make the key); *is_owned says the caller must free *owned, which *out then is. */
weft_result_t weft_host_sched(weft_comm_t c, const weft_task_t *t, const weft_sched_t **out,
                              weft_sched_t *owned, int *is_owned);

#endif
