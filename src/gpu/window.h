/* Symmetric windows of device communicators (window.c): collective registration, and the
 * paths an operation takes when its buffers lie in windows (the kernels or the copy engines
 * writing straight into the peers' recvbufs, the kernels reading their sendbufs). */
#ifndef WEFT_WINDOW_H
#define WEFT_WINDOW_H

#include "comm.h"
#include "dev.h"

/* Runs t (one operation, not a group's) through the copy engines when it qualifies; *taken
 * says whether it did (then the result is the operation's). */
weft_result_t weft_window_try(struct weft_comm *c, const weft_task_t *t, weft_stream_t stream,
                              int *taken);
/* Whether t (one operation, not a group's) is an allreduce into a window that runs faster as
 * a reduce_scatter by the kernels then an allgather of the reduced segments through the copy
 * engines (weft_dev_ce_split says when), and the copy engines take that allgather. Then parts holds
 * the two, to submit in order. */
int weft_window_split_allreduce(struct weft_comm *c, const weft_task_t *t, weft_task_t parts[2]);
/* Whether t (one operation, not a group's) is an allgather or out-of-place alltoall whose
 * recvbuf lies in a window, or a reduce_scatter whose sendbuf does, from
 * WEFT_DIRECT_MIN_BYTES per block: then the kernel writes straight into the peers' recvbufs
 * (reads straight from their sendbufs), and L's direct table is filled for it. */
int weft_window_direct(struct weft_comm *c, const weft_task_t *t, weft_dev_launch_t *L);
/* Rank r's buffer of w as mapped here (w's own for this rank). */
char *weft_window_peer(weft_window_t w, int r);
/* At destroy: this rank's mappings of its peers' windows go (local, like destroy). */
void weft_window_free_all(struct weft_comm *c);

#endif
