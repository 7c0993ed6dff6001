/* Device communicators with CUDA: each rank's staging region is mapped by every peer (p2p
 * transport); an operation, or a whole group, becomes one kernel launch on the caller's
 * stream with no host synchronisation, so it can be captured in a CUDA graph. Kernels
 * report timeouts through host-mapped memory, which the heartbeat thread watches. */
#include "dev_comm.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "dev_plan.h"
#include "window.h"
#include "dtype.h"
#include "err.h"
#include "failure.h"
#include "p2p.h"
#include "param.h"

struct weft_dev {
  int device;
  weft_p2p_t p2p;
  uint64_t *counters;
  int32_t *abort_h, *abort_d;
  weft_dev_error_t *err_h, *err_d;
  uint32_t chunk_bytes, stages;
  uint32_t ll_block;     /* WEFT_LL_BLOCK_BYTES */
  uint64_t oneshot_max;  /* allreduce one-shot up to this (WEFT_ONESHOT_MAX_BYTES) */
  uint64_t ll_max;       /* low-latency kernel up to this per peer (WEFT_LL_MAX_BYTES) */
  int ll_max_set;        /* ... as the user set it */
  uint64_t ll128_max[2]; /* 128-byte kernel past that, up to this (WEFT_LL128_MAX_BYTES) */
  uint64_t ll128_fit;    /* ... past this, rings (weft_dev_ll128_fit) */
  uint64_t ll_lim[2];    /* what the low-latency kernel takes: copies, reductions */
  uint64_t ce_min;       /* WEFT_CE_MIN_BYTES as it applies here */
  uint64_t direct_min, direct_read_max; /* WEFT_DIRECT_MIN_BYTES, WEFT_DIRECT_READ_MAX_BYTES */
  int direct_channels;                  /* WEFT_DIRECT_CHANNELS */
  uint64_t params[WEFT_DEV_NPARAMS];    /* as read, for the ranks to compare */
  weft_dev_planner_t plan;              /* channels per operation; send/recv message counts */
  cudaEvent_t order;
  cudaStream_t last; /* stream of the last launch */
  int launched;
  weft_dev_launch_t launch; /* the comm's part filled at setup, the items per operation */
  weft_dev_ll_t ll;         /* likewise for the low-latency kernel */
  const void *checked[8];   /* device pointers validated lately (a call costs ~1 us) */
  int logged_ll128;
  int checked_next;
};

/* Channel counters, the low-latency kernels' sequence numbers, a few bytes for weft_barrier's
 * one-byte allreduce, the in-place rounds' progress, then the direct operations' counts. */
#define COUNTER_BYTES (sizeof(uint64_t) * WEFT_DEV_MAX_CHANNELS * WEFT_DEV_MAX_RANKS * 2)
#define LLSEQ_OFF     COUNTER_BYTES
#define LL128SEQ_OFF  (LLSEQ_OFF + sizeof(uint64_t) * WEFT_DEV_LL_CHANNELS)
#define SCRATCH_OFF   (LL128SEQ_OFF + sizeof(uint64_t) * WEFT_DEV_LL128_CHANNELS)
#define PROGRESS_OFF  (SCRATCH_OFF + 256)
#define DSEQ_OFF      (PROGRESS_OFF + WEFT_DEV_COLL_CHANNELS * WEFT_DEV_FLAG_STRIDE)
#define PRIVATE_BYTES (DSEQ_OFF + WEFT_DEV_DIRECT_CHANNELS * WEFT_DEV_FLAG_STRIDE)

/* Runs with c's device current, restoring the caller's afterwards. */
static int enter_device(int device, int *saved) {
  if (cudaGetDevice(saved) != cudaSuccess) *saved = -1;
  return *saved == device ? 0 : cudaSetDevice(device) == cudaSuccess ? 0 : -1;
}
static void leave_device(int device, int saved) {
  if (saved >= 0 && saved != device) cudaSetDevice(saved);
}

/* flags, staging slots, the low-latency buffers, then the 128-byte kernel's (where it runs) */
static size_t ll_offset(const struct weft_dev *d, int nranks) {
  size_t chans = (size_t)d->plan.max_channels + WEFT_DEV_P2P_CHANNELS;
  return WEFT_DEV_STAGE_OFF +
         chans * (size_t)(nranks > 1 ? nranks - 1 : 1) * d->stages * d->chunk_bytes;
}
/* lines on 128-byte boundaries, whatever chunk size the staging slots have: a line must be
 * one store to land whole */
static size_t ll128_offset(const struct weft_dev *d, int nranks) {
  size_t end =
      ll_offset(d, nranks) + WEFT_DEV_LL_OFF(WEFT_DEV_LL_CHANNELS, 0, 0, nranks > 1 ? nranks : 2);
  return (end + WEFT_DEV_LL128_LINE_BYTES - 1) / WEFT_DEV_LL128_LINE_BYTES *
         WEFT_DEV_LL128_LINE_BYTES;
}
/* with_ll128: the 128-byte kernel's buffers too */
static size_t region_bytes(const struct weft_dev *d, int nranks, int with_ll128) {
  return ll128_offset(d, nranks) + (with_ll128 ? weft_dev_ll128_bytes(nranks) : 0);
}

/* Host-staged regions live in /dev/shm and carry PCIe's bandwidth, not NVLink's. On 2 H200s
 * (bench/results/2026-11-30-h200x2-tuning-9.txt) 16 channels of 64 KiB chunks beat 4 and 8
 * channels and 128 KiB from 4 MiB up (allreduce 64 MiB: 2.10 ms against 2.54 with 8 x 128
 * KiB), and the low-latency kernel, which doubles the bytes crossing PCIe, won only up to
 * 256 KiB per peer (allreduce 1 MiB: 57.8 us against 77.9). Each rank's segment holds
 * about 10 MiB per peer. */
enum { HOST_CHANNELS = 16, HOST_CHUNK_BYTES = 64 * 1024, HOST_LL_MAX_BYTES = 256 * 1024 };
static void host_sizing(struct weft_dev *d) {
  if (d->plan.max_channels > HOST_CHANNELS) d->plan.max_channels = HOST_CHANNELS;
  if (d->chunk_bytes > HOST_CHUNK_BYTES) d->chunk_bytes = HOST_CHUNK_BYTES;
  if (!d->ll_max_set && d->ll_max > HOST_LL_MAX_BYTES) d->ll_max = HOST_LL_MAX_BYTES;
  d->ll128_max[0] = d->ll128_max[1] = 0; /* host memory over PCIe may split a 128-byte store */
}

static weft_result_t dev_init(weft_comm_t c, struct weft_dev *d, int device) {
  const char *ll128s = weft_param_str("WEFT_LL128_MAX_BYTES"),
             *ces = weft_param_str("WEFT_CE_MIN_BYTES");
  int ndev = 0;
  cudaError_t ce = cudaGetDeviceCount(&ndev);
  if (ce != cudaSuccess)
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "weft_comm_init: device %d asked, but CUDA has no "
                          "usable device here: %s",
                          device, cudaGetErrorString(ce));
  if (device >= ndev)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_init: device %d, but %d GPU(s) visible",
                          device, ndev);
  if (c->nlocal != c->nranks)
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "weft_comm_init: device communicators span one host for now (%d of %d "
                          "ranks are here)",
                          c->nlocal, c->nranks);
  int64_t chunk = weft_param_int("WEFT_P2P_CHUNK_BYTES"),
          stages = weft_param_int("WEFT_P2P_STAGES"), ch = weft_param_int("WEFT_P2P_CHANNELS"),
          bb = weft_param_int("WEFT_P2P_BLOCK_BYTES"), split = weft_param_int("WEFT_P2P_SPLIT"),
          llb = weft_param_int("WEFT_LL_BLOCK_BYTES"), rounds = weft_param_int("WEFT_P2P_ROUNDS"),
          oneshot = weft_param_int("WEFT_ONESHOT_MAX_BYTES"),
          llmax = weft_param_int("WEFT_LL_MAX_BYTES"), sets = weft_param_int("WEFT_P2P_SETS"),
          ll128 = weft_dev_ll128_max(ll128s, c->nranks, 0),
          ll128r = weft_dev_ll128_max(ll128s, c->nranks, 1),
          cemin = weft_dev_ce_min(ces, c->nranks, 0),
          dmin = weft_param_int("WEFT_DIRECT_MIN_BYTES"),
          dch = weft_param_int("WEFT_DIRECT_CHANNELS"),
          dread = weft_param_int("WEFT_DIRECT_READ_MAX_BYTES");
  if (chunk < 1024 || chunk > (64 << 20) || chunk % 16)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_P2P_CHUNK_BYTES=%lld: use a multiple of 16 in [1 KiB, 64 MiB]",
                          (long long)chunk);
  if (stages < 2 || stages > 16)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_STAGES=%lld: use 2-16",
                          (long long)stages);
  if (ch < 1 || ch > WEFT_DEV_COLL_CHANNELS)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_CHANNELS=%lld: use 1-%d", (long long)ch,
                          WEFT_DEV_COLL_CHANNELS);
  if (llmax < 0 || llmax > WEFT_DEV_LL_MAX_BYTES)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_LL_MAX_BYTES=%lld: use 0-%d",
                          (long long)llmax, WEFT_DEV_LL_MAX_BYTES);
  if (ll128 < 0 && weft_dev_ll128_ring(c->nranks))
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_LL128_MAX_BYTES=%s: use auto, 0 (never) or a byte count", ll128s);
  if (ll128 < 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_LL128_MAX_BYTES=%s: use auto, 0 (never) or a byte count up to "
                          "%llu (the 128-byte kernel's buffers on %d ranks)",
                          ll128s, (unsigned long long)weft_dev_ll128_capacity(c->nranks),
                          c->nranks);
  if (cemin < 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_CE_MIN_BYTES=%s: use 0 (never, the default), auto or a byte count",
                          ces);
  if (dmin < 0 || dread < 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s=%lld: use 0 or a byte count",
                          dmin < 0 ? "WEFT_DIRECT_MIN_BYTES" : "WEFT_DIRECT_READ_MAX_BYTES",
                          (long long)(dmin < 0 ? dmin : dread));
  if (dch < 1 || dch > WEFT_DEV_DIRECT_CHANNELS)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_DIRECT_CHANNELS=%lld: use 1-%d",
                          (long long)dch, WEFT_DEV_DIRECT_CHANNELS);
  if (sets != 1 && sets != 2 && sets != 4 && sets != 8)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_SETS=%lld: use 1, 2, 4 or 8",
                          (long long)sets);
  if (rounds < 1 || rounds > 64)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_ROUNDS=%lld: use 1-64",
                          (long long)rounds);
  if (split != 0 && split != 1)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_SPLIT=%lld: use 0 or 1",
                          (long long)split);
  if (llb < 512 || llb > WEFT_DEV_LL_SLOT_BYTES / 2 || llb % 16)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_LL_BLOCK_BYTES=%lld: use a multiple of 16 in [512, %d]",
                          (long long)llb, WEFT_DEV_LL_SLOT_BYTES / 2);
  d->chunk_bytes = (uint32_t)chunk;
  d->stages = (uint32_t)stages;
  d->ll_block = (uint32_t)llb;
  /* One-shot moves (n-1) x the buffer into each rank in one exchange; two-shot moves
   * 2(n-1)/n x in two. On 2 ranks that is the same traffic, so one-shot wins everywhere:
   * on 2 H200s it beat two-shot from 2 MiB (20.0 vs 24.9 us) to 1 GiB (3.06 vs 3.31 ms;
   * bench/results/2026-11-30-h200x2-tuning-5.txt). On 4 H200s it won up to 1 MiB (29.5
   * against 35.6 us) and lost from 2 MiB (56.4 against 46.3; bench/results/
   * 2026-11-30-h200x4.txt); 3 ranks, where its share of the traffic is smaller, keep that
   * limit. More ranks multiply it: 256 KiB there is a guess, not a measurement. */
  d->oneshot_max = oneshot > 0      ? (uint64_t)oneshot
                   : c->nranks <= 2 ? UINT64_MAX
                   : c->nranks <= 4 ? 1 << 20
                                    : 256 * 1024;
  d->ll_max = llmax > 0 ? (uint64_t)llmax : WEFT_DEV_LL_MAX_BYTES;
  d->ll_max_set = llmax > 0;
  d->ll128_max[0] = (uint64_t)ll128;
  d->ll128_max[1] = (uint64_t)ll128r;
  d->ll128_fit = weft_dev_ll128_fit(c->nranks);
  d->direct_min = (uint64_t)dmin;
  d->direct_read_max = (uint64_t)dread;
  d->direct_channels = (int)dch;
  d->launch.rounds = (uint32_t)rounds;
  d->plan.split = (int)split;
  d->plan.rank = c->rank;
  d->plan.nranks = c->nranks;
  d->plan.max_channels = (int)ch;
  d->plan.p2p_sets = (int)sets;
  d->plan.block_bytes = bb > 0 ? (size_t)bb : 8192;
  const int64_t as_read[WEFT_DEV_NPARAMS] = {chunk,  stages, ch,      split, bb,    sets,
                                             rounds, llb,    oneshot, llmax, ll128, ll128r,
                                             cemin,  dmin,   dch,     dread};
  for (int i = 0; i < WEFT_DEV_NPARAMS; i++)
    d->params[i] = (uint64_t)as_read[i];
  /* staging is sized for the channels in use: ask for fewer, hold less */
  CUDA_CHECK(cudaSetDevice(device), "weft_comm_init: cudaSetDevice");
  CUDA_CHECK(cudaMalloc((void **)&d->counters, PRIVATE_BYTES), "weft_comm_init: cudaMalloc");
  CUDA_CHECK(cudaMemset(d->counters, 0, PRIVATE_BYTES), "weft_comm_init: cudaMemset");
  CUDA_CHECK(cudaHostAlloc((void **)&d->abort_h, 64, cudaHostAllocMapped),
             "weft_comm_init: cudaHostAlloc");
  CUDA_CHECK(cudaHostAlloc((void **)&d->err_h, sizeof *d->err_h, cudaHostAllocMapped),
             "weft_comm_init: cudaHostAlloc");
  memset(d->abort_h, 0, 64);
  memset(d->err_h, 0, sizeof *d->err_h);
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&d->abort_d, d->abort_h, 0),
             "weft_comm_init: cudaHostGetDevicePointer");
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&d->err_d, d->err_h, 0),
             "weft_comm_init: cudaHostGetDevicePointer");
  CUDA_CHECK(cudaEventCreateWithFlags(&d->order, cudaEventDisableTiming),
             "weft_comm_init: cudaEventCreate");
  return WEFT_SUCCESS;
}

/* Ranks that set the device parameters differently would size their regions apart or run
 * kernels that cannot talk to each other, and hang or corrupt: every rank checks all. */
static weft_result_t agree_params(weft_comm_t c, const struct weft_dev *d) {
  uint64_t *all = calloc((size_t)c->nranks, sizeof d->params);
  if (!all) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  memcpy(all + (size_t)c->rank * WEFT_DEV_NPARAMS, d->params, sizeof d->params);
  weft_result_t rc = weft_bootstrap_allgather(c->boot, all, sizeof d->params);
  int r = 0, i = rc == WEFT_SUCCESS ? weft_dev_params_differ(all, c->nranks, &r) : -1;
  if (i >= 0)
    rc = weft_set_error(WEFT_ERR_INVALID_ARG,
                        "weft_comm_init: %s differs between ranks (rank 0 read %lld, rank %d "
                        "%lld): set it alike on every rank of a device communicator",
                        weft_dev_param_name(i), (long long)all[i], r,
                        (long long)all[(size_t)r * WEFT_DEV_NPARAMS + i]);
  free(all);
  return rc;
}

/* Every rank learns whether every other one got its GPU ready, so that one bad device
 * fails the whole init at once instead of leaving the others waiting for the mapping. */
static weft_result_t agree(weft_comm_t c, weft_result_t mine) {
  int32_t *st = calloc((size_t)c->nranks, sizeof *st);
  if (!st) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  st[c->rank] = (int32_t)mine;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", weft_thread_error());
  weft_result_t rc = weft_bootstrap_allgather(c->boot, st, sizeof *st);
  if (rc == WEFT_SUCCESS && mine != WEFT_SUCCESS) /* our own reason first */
    rc = weft_set_error(mine, "%s", msg);
  for (int p = 0; p < c->nranks && rc == WEFT_SUCCESS; p++)
    if (st[p] != WEFT_SUCCESS)
      rc = weft_set_error((weft_result_t)st[p],
                          "weft_comm_init: rank %d could not set up its GPU (%s)", p,
                          weft_result_string((weft_result_t)st[p]));
  free(st);
  return rc;
}

static void dev_release(struct weft_dev *d) {
  weft_p2p_unmap(&d->p2p);
  if (d->counters) cudaFree(d->counters);
  if (d->abort_h) cudaFreeHost(d->abort_h);
  if (d->err_h) cudaFreeHost(d->err_h);
  if (d->order) cudaEventDestroy(d->order);
  free(d);
}

/* The low-latency kernel's limits per peer, for copies and for reductions, fixed once the
 * 128-byte kernel's fate is known (not per call: queueing is what small operations cost).
 * The general kernel's fixed cost (a fence and two flag hops, 7 us as graph replays on 2
 * H200s, against 2.7; *-tuning-6.txt) outweighs sending every 8 bytes as 16 up to there.
 * Reductions use its whole 2 MiB per peer (allreduce of 2 MiB: 17.1 against 20.4 us); copies
 * stop at 1 MiB, past which they gained nothing or lost (alltoall of 4 MiB: 17.4 against 16.8
 * us; *-tuning-11.txt). Where the 128-byte kernel runs (NVLink between every pair), it takes
 * over from 256 KiB per peer: it drew there and won above (allreduce of 512 KiB 6.4 against
 * 7.6 us, of 2 MiB 12.8 against 17.2; alltoall of 2 MiB 9.3 against 11.3; *-tuning-18.txt).
 * WEFT_LL_MAX_BYTES sets one limit for the small kernel's every collective. */
enum { LL_COPY_MAX_BYTES = 1 << 20, LL_UNDER_LL128_BYTES = 256 << 10 };
static void ll_limits(struct weft_dev *d) {
  for (int reduces = 0; reduces < 2; reduces++)
    d->ll_lim[reduces] = d->ll_max_set                                   ? d->ll_max
                         : d->ll128_max[reduces] >= LL_UNDER_LL128_BYTES ? LL_UNDER_LL128_BYTES
                         : reduces || d->ll_max < LL_COPY_MAX_BYTES      ? d->ll_max
                                                                         : LL_COPY_MAX_BYTES;
}

weft_result_t weft_dev_setup(weft_comm_t c, int device) {
  struct weft_dev *d = calloc(1, sizeof *d);
  if (!d) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  d->device = device;
  int saved = -1;
  cudaGetDevice(&saved);
  weft_result_t rc = agree(c, dev_init(c, d, device));
  if (rc == WEFT_SUCCESS) rc = agree_params(c, d);
  if (rc == WEFT_SUCCESS) {
    struct weft_dev h = *d;
    host_sizing(&h);
    size_t bytes[3] = {region_bytes(d, c->nranks, d->ll128_max[0] || d->ll128_max[1]),
                       region_bytes(d, c->nranks, 0), region_bytes(&h, c->nranks, 0)};
    rc = weft_p2p_map(c->boot, c->rank, c->nranks, device, bytes,
                      weft_param_int("WEFT_P2P_DISABLE") != 0, &d->p2p);
    if (rc == WEFT_SUCCESS && d->p2p.host) host_sizing(d);
  }
  leave_device(device, saved);
  if (rc != WEFT_SUCCESS) {
    dev_release(d);
    return rc;
  }
  /* The 128-byte kernel trusts a warp's 128-byte store to land whole: NVLink between two GPUs
   * does that; PCIe, host memory and ranks on one GPU (p2p.nvlink is 0 for all) are not known
   * to. The region was sized without its buffers there. */
  if ((d->ll128_max[0] || d->ll128_max[1]) && !d->p2p.nvlink) {
    WEFT_INFO(WEFT_SUB_INIT,
              "rank %d: the 128-byte low-latency kernel is off: some pair of ranks is not on two "
              "GPUs joined by NVLink",
              c->rank);
    d->ll128_max[0] = d->ll128_max[1] = 0;
  }
  ll_limits(d);
  d->ce_min =
      (uint64_t)weft_dev_ce_min(weft_param_str("WEFT_CE_MIN_BYTES"), c->nranks, d->p2p.gpu_shared);
  /* Ranks sharing a GPU share its SMs too: with split roles their kernels could hold every
   * SM with blocks that wait for blocks not yet resident. One block per channel there. */
  if (d->p2p.gpu_shared) {
    d->plan.split = 0;
    if (c->rank == 0)
      WEFT_WARN(WEFT_SUB_INIT,
                "several ranks of this communicator share a GPU: CUDA time-slices kernels of "
                "different processes, so each collective waits for a time slice (2.3 ms with 2 "
                "ranks per H200, 6.8 ms with 4); use one process per GPU, or MPS");
  }
  /* What every launch of this comm passes, filled once. */
  weft_dev_launch_t *L = &d->launch;
  weft_dev_ll_t *P = &d->ll;
  for (int r = 0; r < c->nranks; r++)
    L->region[r] = P->region[r] = d->p2p.region[r];
  L->counters = d->counters;
  L->progress = (uint64_t *)((char *)d->counters + PROGRESS_OFF);
  L->dseq = (uint64_t *)((char *)d->counters + DSEQ_OFF);
  L->abort_flag = P->abort_flag = d->abort_d;
  L->error = P->error = d->err_d;
  L->rank = P->rank = c->rank;
  L->nranks = P->nranks = c->nranks;
  L->timeout_ns = P->timeout_ns = (uint64_t)c->timeout_ms * 1000000ull;
  L->chunk_bytes = d->chunk_bytes;
  L->stages = d->stages;
  L->coll_channels = d->plan.max_channels;
  P->seq = (uint64_t *)((char *)d->counters + LLSEQ_OFF);
  P->seq128 = (uint64_t *)((char *)d->counters + LL128SEQ_OFF);
  P->ll_off = ll_offset(d, c->nranks);
  P->ll128_off = ll128_offset(d, c->nranks);
  P->ll128_lines = weft_dev_ll128_lines(c->nranks);
  c->dev = d;
  WEFT_INFO(WEFT_SUB_INIT,
            "rank %d: device %d, %zu bytes of staging in %s memory, chunk %u x %u stages", c->rank,
            device, d->p2p.bytes, d->p2p.host ? "host" : "device", d->chunk_bytes, d->stages);
  return WEFT_SUCCESS;
}

void weft_dev_free(weft_comm_t c) {
  struct weft_dev *d = c->dev;
  if (!d) return;
  int saved = -1;
  enter_device(d->device, &saved);
  /* Kernels end on their own (done, aborted or timed out); wait for ours (through the event
   * recorded after the last launch: its stream may be gone by now), then for the peers',
   * since their kernels may still write into our region: those of this process here, the
   * others (only where they mapped our region over IPC) at a barrier. */
  if (d->launched) cudaEventSynchronize(d->order);
  weft_window_free_all(c);
  pthread_mutex_lock(&c->mu);
  int healthy = c->async_error == WEFT_SUCCESS && !atomic_load(&c->aborted);
  pthread_mutex_unlock(&c->mu);
  if (weft_p2p_drain(&d->p2p) && healthy && c->boot) weft_bootstrap_barrier(c->boot);
  int device = d->device;
  dev_release(d);
  leave_device(device, saved);
  c->dev = NULL;
}

size_t weft_dev_memory(const struct weft_comm *c) {
  const struct weft_dev *d = c->dev;
  if (!d) return 0;
  return (d->p2p.host ? 0 : d->p2p.bytes) + PRIVATE_BYTES;
}

void *weft_dev_scratch(const struct weft_comm *c) {
  return c->dev ? (char *)c->dev->counters + SCRATCH_OFF : NULL;
}

const weft_p2p_t *weft_dev_p2p(const struct weft_comm *c) { return c->dev ? &c->dev->p2p : NULL; }

uint64_t weft_dev_ce_min_bytes(const struct weft_comm *c) { return c->dev ? c->dev->ce_min : 0; }

void weft_dev_direct_limits(const struct weft_comm *c, uint64_t *min, uint64_t *read_max) {
  *min = c->dev ? c->dev->direct_min : 0;
  *read_max = c->dev ? c->dev->direct_read_max : 0;
}

void weft_dev_idle(weft_comm_t c) {
  if (c->dev && c->dev->launched) cudaEventSynchronize(c->dev->order);
}

void weft_dev_abort(weft_comm_t c) {
  if (c->dev) ((volatile int32_t *)c->dev->abort_h)[0] = 1;
}

/* A kernel's error becomes the comm's failure (cheap: one read of host memory). */
static void poll_kernel_error(weft_comm_t c) {
  struct weft_dev *d = c->dev;
  static const char *kinds[WEFT_DEV_KIND_COUNT] = {"one-shot allreduce",
                                                   "two-shot allreduce",
                                                   "reduce_scatter",
                                                   "allgather",
                                                   "broadcast",
                                                   "reduce",
                                                   "alltoall",
                                                   "alltoallv",
                                                   "send",
                                                   "recv"};
  volatile weft_dev_error_t *e = d->err_h;
  if (e->code != WEFT_DEV_ERR_NONE) {
    char msg[512];
    uint32_t k = e->kind, direct = (k & WEFT_DEV_DIRECT_KIND) != 0;
    uint32_t ring = (k & WEFT_DEV_RING_KIND) != 0;
    k &= ~(WEFT_DEV_DIRECT_KIND | WEFT_DEV_RING_KIND);
    uint32_t ll = k >= WEFT_DEV_KIND_COUNT; /* a low-latency kernel's */
    uint32_t ll128 = k >= 2 * WEFT_DEV_KIND_COUNT;
    k -= ll128 ? 2 * WEFT_DEV_KIND_COUNT : ll ? WEFT_DEV_KIND_COUNT : 0;
    const char *what = k < WEFT_DEV_KIND_COUNT ? kinds[k] : "?";
    if (ring) /* "two-shot" names the segments only */
      what = k == WEFT_DEV_ALLREDUCE_TWOSHOT ? "ring allreduce"
             : k == WEFT_DEV_REDUCE_SCATTER  ? "ring reduce_scatter"
                                             : "ring allgather";
    /* a rank writing into windows against one that is not waits on flags of its own */
    const char *hint = direct ? " (on windows: did every rank pass window buffers, at the same "
                                "offsets?)"
                              : "";
    weft_result_t code = WEFT_ERR_TIMEOUT;
    if (e->code == WEFT_DEV_ERR_MISMATCH) {
      code = WEFT_ERR_INVALID_ARG;
      snprintf(msg, sizeof msg,
               "rank %d: the %s on windows found rank %d's buffer at another window or offset, "
               "or of another size (channel %d); it was neither read nor written: every rank "
               "must pass the same offset in the same window",
               c->rank, what, e->peer, e->channel);
    } else {
      snprintf(msg, sizeof msg,
               "rank %d: the %sdevice kernel of the %s%s (channel %d) waited more than %lld ms for "
               "rank %d: that rank is hung, dead, or called a different operation",
               c->rank,
               ll128 ? "128-byte low-latency "
               : ll  ? "low-latency "
                     : "",
               what, hint, e->channel, (long long)c->timeout_ms, e->peer);
    }
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->seq;
    pthread_mutex_unlock(&c->mu);
    weft_comm_fail(c, code, msg, seq);
  }
}

void weft_dev_watch(weft_comm_t c) {
  if (!c->dev) return;
  poll_kernel_error(c);
  /* failures other ranks reported, or a local peer that died */
  weft_result_t rc = weft_fail_check_local(c);
  if (rc != WEFT_SUCCESS) {
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->seq;
    pthread_mutex_unlock(&c->mu);
    weft_comm_fail(c, rc, weft_thread_error(), seq);
  }
  pthread_mutex_lock(&c->mu);
  int failed = c->async_error != WEFT_SUCCESS;
  pthread_mutex_unlock(&c->mu);
  if (failed || atomic_load(&c->aborted)) weft_dev_abort(c);
}

void weft_dev_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced) {
  weft_coll_t k = t->args.coll;
  t->algo = WEFT_ALGO_DIRECT;
  if (k != WEFT_COLL_ALLREDUCE && k != WEFT_COLL_REDUCE_SCATTER && k != WEFT_COLL_ALLGATHER) return;
  /* As on host buffers, a forced algorithm the device collective does not have leaves the
   * choice to the defaults. */
  if (forced == WEFT_ALGO_RING || (k != WEFT_COLL_ALLREDUCE && forced == WEFT_ALGO_DIRECT) ||
      (k == WEFT_COLL_ALLREDUCE && (forced == WEFT_ALGO_ONESHOT || forced == WEFT_ALGO_TWOSHOT))) {
    t->algo = forced;
    return;
  }
  if (k != WEFT_COLL_ALLREDUCE) return;
  size_t bytes = t->args.count * weft_dtype_size(t->dtype);
  t->algo = bytes <= c->dev->oneshot_max ? WEFT_ALGO_ONESHOT : WEFT_ALGO_TWOSHOT;
}

/* Device buffers only: a host pointer would fault the kernel and poison the context. */
static weft_result_t check_ptr(struct weft_dev *d, const char *what, const void *p, size_t bytes) {
  if (!bytes) return WEFT_SUCCESS;
  for (int i = 0; i < 8; i++)
    if (d->checked[i] == p) return WEFT_SUCCESS;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s %p is not memory CUDA knows", what, p);
  }
  if (a.type == cudaMemoryTypeManaged ||
      (a.type == cudaMemoryTypeDevice && a.device == d->device)) {
    d->checked[d->checked_next++ & 7] = p;
    return WEFT_SUCCESS;
  }
  if (a.type != cudaMemoryTypeDevice)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s %p is host memory; a device communicator needs device buffers", what,
                          p);
  return weft_set_error(WEFT_ERR_INVALID_ARG, "%s %p is on GPU %d; this communicator's GPU is %d",
                        what, p, a.device, d->device);
}

/* Every buffer of the operation, before anything is planned or launched. */
static weft_result_t check_buffers(weft_comm_t c, const weft_task_t *tasks, int ntasks) {
  for (int i = 0; i < ntasks; i++) {
    size_t in_b = 0, out_b = 0;
    weft_dev_extents(c->rank, c->nranks, &tasks[i], &in_b, &out_b);
    CHECK(check_ptr(c->dev, "sendbuf", tasks[i].sendbuf, in_b));
    CHECK(check_ptr(c->dev, "recvbuf", tasks[i].recvbuf, out_b));
  }
  return WEFT_SUCCESS;
}

/* A lone small allreduce (one-shot), allgather, alltoall or reduce_scatter takes the
 * low-latency kernel up to d->ll_lim per peer, the 128-byte one past that up to d->ll128_max
 * (*wide). */
static int ll_kind(const weft_comm_t c, const weft_task_t *tasks, int ntasks, int *wide) {
  *wide = 0;
  if (ntasks != 1 || c->nranks < 2 || tasks->algo == WEFT_ALGO_RING) return -1;
  const weft_task_t *t = tasks;
  const struct weft_dev *d = c->dev;
  size_t bytes = t->args.count * weft_dtype_size(t->dtype);
  int reduces = t->args.coll == WEFT_COLL_ALLREDUCE || t->args.coll == WEFT_COLL_REDUCE_SCATTER;
  uint64_t lim = d->ll_lim[reduces];
  if (bytes == 0 || (bytes > lim && bytes > d->ll128_max[reduces])) return -1;
  *wide = bytes > lim;
  switch (t->args.coll) {
  case WEFT_COLL_ALLREDUCE: return t->algo == WEFT_ALGO_ONESHOT ? WEFT_DEV_ALLREDUCE_ONESHOT : -1;
  case WEFT_COLL_ALLGATHER: return WEFT_DEV_ALLGATHER;
  case WEFT_COLL_ALLTOALL: return WEFT_DEV_ALLTOALL;
  case WEFT_COLL_REDUCE_SCATTER: return WEFT_DEV_REDUCE_SCATTER;
  default: return -1;
  }
}

/* The operation's part of the low-latency launch; returns its block count. */
static int prepare_ll(struct weft_dev *d, const weft_task_t *t, int kind, int wide) {
  weft_dev_ll_t *P = &d->ll;
  P->kind = (uint8_t)kind;
  P->send = t->sendbuf;
  P->recv = t->recvbuf;
  P->count = t->args.count;
  P->dtype = (uint8_t)t->dtype;
  P->op = (uint8_t)t->op;
  if (wide) return WEFT_DEV_LL128_CHANNELS;
  /* Blocks of ll_block bytes, fewer and fuller once that would pass the channels: a thread
   * polls its packets one after another, so short blocks answer sooner. */
  size_t bytes = t->args.count * weft_dtype_size(t->dtype), per = d->ll_block;
  size_t fit = (bytes + WEFT_DEV_LL_CHANNELS - 1) / WEFT_DEV_LL_CHANNELS;
  fit = (fit + 15) / 16 * 16;
  if (fit > per) per = fit;
  P->block_bytes = (uint32_t)per;
  return (int)((bytes + per - 1) / per);
}

weft_result_t weft_dev_submit(weft_comm_t c, weft_task_t *tasks, int ntasks, weft_stream_t stream) {
  struct weft_dev *d = c->dev;
  cudaStream_t s = (cudaStream_t)(void *)stream;
  poll_kernel_error(c); /* the heartbeat thread watches the rest */
  pthread_mutex_lock(&c->mu);
  weft_result_t rc = c->async_error;
  uint64_t seq = ++c->seq;
  pthread_mutex_unlock(&c->mu);
  if (rc != WEFT_SUCCESS) return weft_set_error(rc, "communicator failed earlier: %s", c->error);
  if (atomic_load(&c->aborted)) return weft_set_error(WEFT_ERR_ABORTED, "communicator was aborted");
  int saved = -1, nblocks = 0;
  if (enter_device(d->device, &saved) != 0)
    return weft_set_error(WEFT_ERR_SYSTEM, "cannot make GPU %d current", d->device);
  int wide = 0, llk = ll_kind(c, tasks, ntasks, &wide), ll = llk >= 0, more = 0, direct = 0;
  uint8_t placed[WEFT_DEV_MAX_GROUP];
  rc = check_buffers(c, tasks, ntasks);
  weft_task_t parts[2];
  /* a forced ring runs as one, through staging, windows or not */
  int windows = ntasks == 1 && c->wins && tasks->algo != WEFT_ALGO_RING;
  if (rc == WEFT_SUCCESS && windows && weft_window_split_allreduce(c, tasks, parts)) {
    leave_device(d->device, saved);
    rc = weft_dev_submit(c, &parts[0], 1, stream);
    return rc != WEFT_SUCCESS ? rc : weft_dev_submit(c, &parts[1], 1, stream);
  }
  if (rc == WEFT_SUCCESS && windows) { /* into a window: copy engines */
    int taken = 0;
    weft_result_t wrc = weft_window_try(c, tasks, stream, &taken);
    if (taken) {
      leave_device(d->device, saved);
      return wrc;
    }
    /* or kernels writing into it, where the low-latency kernels, faster there, do not run.
     * The 128-byte one's rings lost to them but for reduce_scatter (allreduce of 64 MiB 238.5
     * us against 216.9, allgather of 32 MiB 63.2 against 60.8; reduce_scatter of 32 MiB 63.1
     * against 68.8; bench/results/2026-11-30-h200x2-direct-float.txt, the previous run) */
    int yield = ll && wide && llk != WEFT_DEV_REDUCE_SCATTER &&
                tasks->args.count * weft_dtype_size(tasks->dtype) > d->ll128_fit;
    direct = (!ll || yield) && weft_window_direct(c, tasks, &d->launch);
    if (direct) ll = 0;
  }
  if (rc == WEFT_SUCCESS && ntasks > WEFT_DEV_MAX_GROUP)
    rc = weft_set_error(WEFT_ERR_UNSUPPORTED,
                        "a group on a device communicator holds at most %d operations (%d given)",
                        WEFT_DEV_MAX_GROUP, ntasks);
  if (rc == WEFT_SUCCESS && ll) {
    nblocks = prepare_ll(d, tasks, llk, wide);
    if (wide && !d->logged_ll128) {
      d->logged_ll128 = 1;
      WEFT_INFO(WEFT_SUB_COLL,
                "rank %d: %s of %zu bytes per peer by the 128-byte low-latency kernel", c->rank,
                weft_coll_name(tasks->args.coll),
                tasks->args.count * weft_dtype_size(tasks->dtype));
    }
  } else if (rc == WEFT_SUCCESS) {
    memset(placed, 0, (size_t)ntasks); /* only the group's part: this is every call's path */
    rc = weft_dev_plan(&d->plan, tasks, ntasks, placed, &d->launch, &nblocks, &more);
    if (rc == WEFT_SUCCESS && direct && d->launch.nitems == 1)
      nblocks = weft_dev_place_direct(&d->plan, tasks, d->direct_channels, &d->launch.items[0]);
  }
  /* Operations of one comm run in issue order even across streams (their channels are
   * shared); a stream being captured into a graph orders itself. */
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(s, &cap);
  if (rc == WEFT_SUCCESS && (nblocks > 0 || more) && d->launched && d->last != s &&
      cap == cudaStreamCaptureStatusNone && cudaStreamWaitEvent(s, d->order, 0) != cudaSuccess)
    rc = weft_set_error(WEFT_ERR_SYSTEM, "ordering after the previous stream failed");
  /* Sends and receives that did not fit follow in further launches on the same stream;
   * the planner has already fixed which channels each one takes. */
  for (int launched = 0; rc == WEFT_SUCCESS;) {
    if (nblocks > 0) {
      int e = !ll    ? weft_dev_launch(&d->launch, nblocks, s)
              : wide ? weft_dev_launch_ll128(&d->ll, s)
                     : weft_dev_launch_ll(&d->ll, nblocks, s);
      if (e != 0)
        rc = weft_set_error(WEFT_ERR_SYSTEM, "kernel launch of op %llu failed: %s",
                            (unsigned long long)seq, weft_dev_error_string(e));
      launched = 1;
    }
    if (rc != WEFT_SUCCESS || !more) {
      if (rc == WEFT_SUCCESS && launched && cap == cudaStreamCaptureStatusNone &&
          cudaEventRecord(d->order, s) == cudaSuccess) {
        d->last = s;
        d->launched = 1;
      }
      break;
    }
    rc = weft_dev_plan(&d->plan, tasks, ntasks, placed, &d->launch, &nblocks, &more);
  }
  leave_device(d->device, saved);
  return rc;
}
