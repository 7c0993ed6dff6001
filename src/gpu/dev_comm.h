/* Device communicators (one CUDA device per rank, all ranks on one host): setup of the
 * peer-mapped staging, the launch of operations on the caller's CUDA stream, and the
 * watch that turns a kernel's timeout into a communicator failure. Built from
 * dev_comm.c with CUDA, else from dev_none.c, which refuses device communicators. */
#ifndef WEFT_DEV_COMM_H
#define WEFT_DEV_COMM_H

#include <stddef.h>

#include "comm.h"
#include "p2p.h"

/* In CUDA code: a failed call returns WEFT_ERR_SYSTEM with what and CUDA's reason. */
#define CUDA_CHECK(call, what)                                                                     \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return weft_set_error(WEFT_ERR_SYSTEM, "%s: %s", what, cudaGetErrorString(e_));              \
  } while (0)

/* Collective: binds c to device and maps every peer's staging region. */
weft_result_t weft_dev_setup(struct weft_comm *c, int device);
/* Waits for c's last operation, then (if c is healthy) for the peers, and frees. */
void weft_dev_free(struct weft_comm *c);
/* Runs tasks (one call, or a group's) as one kernel on stream (a cudaStream_t). */
weft_result_t weft_dev_submit(struct weft_comm *c, weft_task_t *tasks, int ntasks,
                              weft_stream_t stream);
/* Picks the device algorithm for t: forced (from WEFT_ALGO, WEFT_ALGO_AUTO when unset) where
 * the device collective has it, else by size (WEFT_ONESHOT_MAX_BYTES). */
void weft_dev_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced);
/* From the heartbeat thread and queries: a kernel's error becomes the comm's failure, and
 * a failed comm makes its kernels give up. */
void weft_dev_watch(struct weft_comm *c);
/* Makes running and later kernels of c give up at once (abort). */
void weft_dev_abort(struct weft_comm *c);
size_t weft_dev_memory(const struct weft_comm *c);
/* 256 bytes of device memory for weft_barrier. */
void *weft_dev_scratch(const struct weft_comm *c);
/* The peer mappings (which ranks share this process, host-staged or not); NULL on host comms. */
const weft_p2p_t *weft_dev_p2p(const struct weft_comm *c);
/* WEFT_CE_MIN_BYTES as it applies to c (0: the copy engines never take an operation). */
uint64_t weft_dev_ce_min_bytes(const struct weft_comm *c);
/* WEFT_DIRECT_MIN_BYTES and WEFT_DIRECT_READ_MAX_BYTES as read at init (0 on host comms). */
void weft_dev_direct_limits(const struct weft_comm *c, uint64_t *min, uint64_t *read_max);
/* Waits until c's last launch on the GPU has finished. */
void weft_dev_idle(struct weft_comm *c);

#endif
