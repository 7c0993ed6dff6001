/* The device engine's state and what its files share: setup.c and params.c fill a weft_dev
 * at init; submit.c, errors.c and window.c read it. Only files of src/gpu include this, and
 * only in a CUDA build (dev_none.c stands in without CUDA). */
#ifndef WEFT_GPU_H
#define WEFT_GPU_H

#include <cuda_runtime_api.h>

#include "budget.h"
#include "comm.h"
#include "dev.h"
#include "dev_plan.h"
#include "dev_view.h"
#include "op.h"
#include "regions.h"
#include "sharers.h"

/* In CUDA code: a failed call returns WEFT_ERR_SYSTEM with what and CUDA's reason. */
#define CUDA_CHECK(call, what)                                                                     \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess)                                                                         \
      return weft_set_error(WEFT_ERR_SYSTEM, "%s: %s", what, cudaGetErrorString(e_));              \
  } while (0)

struct weft_dev {
  int device;
  weft_regions_t *regions; /* every rank's staging region, reached by a device transport */
  uint64_t *counters;
  int32_t *abort_h, *abort_d;
  weft_dev_error_t *err_h, *err_d; /* [0] the kernels' error, [1] their wait note */
  _Atomic int64_t wait_said_ms;    /* when a wait note was last said (weft_now_ms) */
  uint32_t chunk_bytes, stages;
  uint32_t ll_block;     /* WEFT_LL_BLOCK_BYTES */
  uint64_t oneshot_max;  /* allreduce one-shot up to this (WEFT_ONESHOT_MAX_BYTES) */
  uint64_t ll_max;       /* low-latency kernel up to this per peer (WEFT_LL_MAX_BYTES) */
  int ll_max_set;        /* ... as the user set it */
  int net;               /* some rank is on another host (weft_dev_net_sizing) */
  uint64_t ll128_max[2]; /* 128-byte kernel past that, up to this (WEFT_LL128_MAX_BYTES) */
  uint64_t ll128_fit;    /* ... past this, rings (weft_dev_ll128_fit) */
  uint64_t ll_lim[2];    /* what the low-latency kernel takes: copies, reductions */
  uint64_t ll_rooted;    /* ... and of broadcast and reduce (WEFT_LL_ROOTED_BYTES) */
  uint64_t ce_min;       /* WEFT_CE_MIN_BYTES as it applies here */
  uint64_t direct_min, direct_read_max; /* WEFT_DIRECT_MIN_BYTES, WEFT_DIRECT_READ_MAX_BYTES */
  int direct_channels;                  /* WEFT_DIRECT_CHANNELS */
  int ll_channels;          /* most blocks of the low-latency kernel (the budget's, or all) */
  weft_dev_budget_t budget; /* ranks sharing the GPU and the blocks each may hold (share.c) */
  weft_sharers_t *sharers;  /* this communicator's slot in its GPU's registry */
  weft_dev_planner_t plan;  /* channels per operation; send/recv message counts */
  cudaEvent_t order;
  cudaStream_t last; /* stream of the last launch */
  int launched;
  weft_dev_launch_t launch; /* the comm's part filled at setup, the items per operation */
  weft_dev_ll_t ll;         /* likewise for the low-latency kernel */
  const void *checked[8];   /* device pointers validated lately (a call costs ~1 us) */
  int logged_ll128;
  int logged_rooted;          /* a broadcast or reduce by the small kernel, said once at INFO */
  int held;                   /* some capture holds the proxy awake: the last one's id below */
  unsigned long long held_id; /* (submit.c's hold_for_graph) */
  int checked_next;
  struct weft_winset *wins;   /* registered windows (window.c), NULL until the first */
  uint64_t moe_window_bytes;  /* WEFT_MOE_WINDOW_BYTES */
  weft_dev_view_t view;       /* what MoE sees (dev_view.h), filled once setup succeeded */
  struct weft_rproxy *rproxy; /* ranks on other hosts: the proxy carrying their chunks */
  /* its workers' connections past the communicator's own (tr[link_tr]), torn down after it */
  void *links[8];
  int nlinks, link_tr;
  int kick_fds[8]; /* an eventfd in each one's waits: queued operations wake it napping (-1) */
  uint8_t *reach;  /* across hosts: [nranks], the remote ranks the kernels reach */
};

extern const weft_engine_t weft_engine_gpu;

/* A device communicator's state: the engine's, set once its setup succeeded. */
static inline struct weft_dev *dev_of(const struct weft_comm *c) {
  return (struct weft_dev *)c->engine_state;
}

/* Waits until c's last launch on the GPU has finished. */
static inline void weft_dev_idle(struct weft_comm *c) {
  if (dev_of(c)->launched) cudaEventSynchronize(dev_of(c)->order);
}

/* setup.c. Collective: binds c to device and maps every peer's staging region. */
weft_result_t weft_dev_setup(struct weft_comm *c, int device);
/* Waits for c's last operation, then (if c is healthy) for the peers, and frees. */
void weft_dev_free(struct weft_comm *c);
size_t weft_dev_memory(const struct weft_comm *c);

/* submit.c. WEFT_SUCCESS when p holds `bytes` of memory this communicator's kernels can
 * use (device memory of its GPU, or managed); else an error that says what p is. */
weft_result_t weft_dev_check_ptr(struct weft_dev *d, const char *what, const void *p, size_t bytes);

/* params.c. Reads and checks every device parameter into d (a bad value fails init, naming
 * it), with the defaults measured for this many ranks. */
weft_result_t weft_dev_read_params(const struct weft_comm *c, struct weft_dev *d);
/* Collective: fails where some rank read a parameter differently (params.c says why). */
weft_result_t weft_dev_agree_params(struct weft_comm *c, const struct weft_dev *d);
/* share.c. Collective: how many ranks each rank's GPU serves, and from that the block budget
 * of d's kernels (d->budget), the same on every rank; fails where it cannot hold the kernels. */
weft_result_t weft_dev_share_agree(struct weft_comm *c, struct weft_dev *d);
/* Whether this process's contexts on device are MPS clients (0 where CUDA cannot say). */
int weft_dev_mps(int device);
/* Fits d's channels and kernels to d->budget (nothing where the GPU serves one rank). */
void weft_dev_budget_apply(struct weft_dev *d);
/* INFO: what a launch of d may hold, budgeted or not. */
void weft_dev_budget_log(const struct weft_comm *c, const struct weft_dev *d);
/* Once the mapping is known: limits for host-staged regions, and the low-latency kernels'. */
void weft_dev_host_sizing(struct weft_dev *d);
/* For a communicator spanning hosts (WEFT_PROXY_*), before the regions are sized;
 * WEFT_ERR_INVALID_ARG for a chunk size the kernels cannot cut. */
weft_result_t weft_dev_net_sizing(struct weft_dev *d);
/* Neither low-latency kernel runs (their limits 0, as if the user set them so). */
void weft_dev_ll_off(struct weft_dev *d);
void weft_dev_ll_limits(struct weft_dev *d);

/* layout.c: each rank's staging region (without the low-latency buffers where d->ll_max is 0:
 * across hosts) and private counters. */
size_t weft_dev_region_bytes(const struct weft_dev *d, int nranks, int with_ll128);
size_t weft_dev_private_bytes(void);
/* What every launch of c passes, filled once at setup. */
void weft_dev_fill_launch(const struct weft_comm *c, struct weft_dev *d);
/* Across hosts, once the layout is final: pins what this rank uses of the remote ranks'
 * mirrors and of its inbox (weft_regions_pin). Local; its caller agrees on the outcome. */
weft_result_t weft_dev_pin(const struct weft_comm *c, struct weft_dev *d);
/* 256 bytes of device memory for weft_barrier. */
void *weft_dev_scratch(struct weft_comm *c);

/* errors.c. A kernel's error becomes the comm's failure (one read of host memory). */
void weft_dev_poll_error(struct weft_comm *c);
/* From the heartbeat thread and queries: also failures other ranks reported, and a failed
 * comm makes its kernels give up. */
void weft_dev_watch(struct weft_comm *c);
/* Makes running and later kernels of c give up at once (abort). */
void weft_dev_abort(struct weft_comm *c);

/* select.c. Picks the device algorithm for t: forced (WEFT_ALGO_AUTO when unset) where the
 * device collective has it, else by size (WEFT_ONESHOT_MAX_BYTES). */
weft_result_t weft_dev_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced);
/* The protocol that runs tasks (one call or a group's): see select.c. */
weft_proto_t weft_dev_protocol(const struct weft_comm *c, const weft_task_t *tasks, int ntasks);

/* submit.c. Runs tasks (one call, or a group's) as one kernel on stream (a cudaStream_t). */
weft_result_t weft_dev_submit(struct weft_comm *c, weft_task_t *tasks, int ntasks,
                              weft_stream_t stream);

#endif
