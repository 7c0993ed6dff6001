/* What the device engine shows the layers above it (MoE) of a device communicator: its GPU,
 * how its peers are reached, the words its kernels read, and the calls they may make. Asked
 * through engine.h's device_view (weft_comm_device_view); only this header, not gpu.h, is
 * for files outside src/gpu. CUDA builds only. */
#ifndef WEFT_DEV_VIEW_H
#define WEFT_DEV_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "dev.h"
#include "weft.h"

struct weft_comm;
struct weft_moe_window;

typedef struct weft_dev_view {
  int device;          /* the CUDA device the communicator's kernels run on */
  int host_staged;     /* peers are reached through host memory or on other hosts: no kernel writes
                          into them */
  int gpu_shared;      /* some ranks of the communicator share a GPU */
  int ring_only;       /* past WEFT_DEV_MAX_RANKS ranks: a rank's kernels reach its ring
                          neighbours alone (src/gpu/slots.h) */
  int32_t *abort_flag; /* device word every kernel wait reads: nonzero gives up */
  weft_dev_error_t *error;   /* where a kernel reports what failed (errors.c reads it) */
  weft_dev_error_t *waiting; /* where a long wait notes itself (errors.c says it at WARN) */
  uint64_t timeout_ns;       /* a kernel's wait gives up after this */
  uint64_t report_ns;        /* ... and notes itself after this (0: never) */
  uint64_t moe_window_bytes; /* WEFT_MOE_WINDOW_BYTES, agreed at init */
  /* the MoE layers' own: the window they share in normal mode (src/moe/direct.c) */
  struct weft_moe_window *moe_win;
  /* WEFT_SUCCESS when p holds `bytes` of memory the communicator's kernels can use; else an
   * error that says what p is (what names the argument). */
  weft_result_t (*check_ptr)(struct weft_comm *c, const char *what, const void *p, size_t bytes);
  /* Rank r's buffer of the window w as mapped here (w's own for this rank). */
  char *(*window_peer)(weft_window_t w, int r);
} weft_dev_view_t;

/* Makes device current, keeping the caller's in *saved; 0 or -1 (it could not). */
int weft_dev_enter(int device, int *saved);
void weft_dev_leave(int device, int saved);

#endif
