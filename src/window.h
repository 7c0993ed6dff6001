/* Symmetric windows of device communicators (window.c): collective registration, and the
 * copy-engine path an allgather or alltoall takes when its recvbuf lies in a window. */
#ifndef WEFT_WINDOW_H
#define WEFT_WINDOW_H

#include "comm.h"

/* Runs t (one operation, not a group's) through the copy engines when it qualifies; *taken
 * says whether it did (then the result is the operation's). */
weft_result_t weft_window_try(struct weft_comm *c, const weft_task_t *t, weft_stream_t stream,
                              int *taken);
/* At destroy: this rank's mappings of its peers' windows go (local, like destroy). */
void weft_window_free_all(struct weft_comm *c);

#endif
