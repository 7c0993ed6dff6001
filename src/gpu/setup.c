/* Device communicators' setup and teardown: every rank binds its GPU, reads the parameters,
 * agrees with the others, and sets up the staging regions (regions.h); destroy waits for
 * the kernels that may still write into the regions before they go. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "err.h"
#include "gpu.h"
#include "param.h"
#include "region.h"
#include "topo.h"
#include "window.h"

_Static_assert((int)WEFT_DEV_MAX_RANKS <= (int)WEFT_REGIONS_MAX_SLOTS,
               "the mapping must hold every slot");

/* Runs with c's device current, restoring the caller's afterwards. */
int weft_dev_enter(int device, int *saved) {
  if (cudaGetDevice(saved) != cudaSuccess) *saved = -1;
  return *saved == device ? 0 : cudaSetDevice(device) == cudaSuccess ? 0 : -1;
}
void weft_dev_leave(int device, int saved) {
  if (saved >= 0 && saved != device) cudaSetDevice(saved);
}

static weft_result_t dev_init(weft_comm_t c, struct weft_dev *d, int device) {
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
  CHECK(weft_dev_read_params(c, d));
  /* staging is sized for the channels in use: ask for fewer, hold less */
  CUDA_CHECK(cudaSetDevice(device), "weft_comm_init: cudaSetDevice");
  CUDA_CHECK(cudaMalloc((void **)&d->counters, weft_dev_private_bytes()),
             "weft_comm_init: cudaMalloc");
  CUDA_CHECK(cudaMemset(d->counters, 0, weft_dev_private_bytes()), "weft_comm_init: cudaMemset");
  CUDA_CHECK(cudaHostAlloc((void **)&d->abort_h, 64, cudaHostAllocMapped),
             "weft_comm_init: cudaHostAlloc");
  /* the kernels' error, then their wait note */
  CUDA_CHECK(cudaHostAlloc((void **)&d->err_h, 2 * sizeof *d->err_h, cudaHostAllocMapped),
             "weft_comm_init: cudaHostAlloc");
  memset(d->abort_h, 0, 64);
  memset(d->err_h, 0, 2 * sizeof *d->err_h);
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&d->abort_d, d->abort_h, 0),
             "weft_comm_init: cudaHostGetDevicePointer");
  CUDA_CHECK(cudaHostGetDevicePointer((void **)&d->err_d, d->err_h, 0),
             "weft_comm_init: cudaHostGetDevicePointer");
  CUDA_CHECK(cudaEventCreateWithFlags(&d->order, cudaEventDisableTiming),
             "weft_comm_init: cudaEventCreate");
  if (c->nlocal < c->nranks && !(d->reach = calloc((size_t)c->nranks, 1)))
    return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  return WEFT_SUCCESS;
}

/* Stops the proxy (if any), first saying what its workers did: a pause while chunks wait is
 * the kernels' wait too, a hiccup. */
static void stop_proxy(weft_comm_t c, struct weft_dev *d) {
  if (!d->rproxy) return;
  weft_proxy_stats_t st = weft_rproxy_stats(d->rproxy);
  WEFT_INFO(WEFT_SUB_NET,
            "rank %d: proxy: %llu passes, %llu naps, %llu pauses of over %d us between passes "
            "(longest %lld us)",
            c->rank, (unsigned long long)st.passes, (unsigned long long)st.naps,
            (unsigned long long)st.pauses, WEFT_PUMP_PAUSE_US, (long long)st.longest_us);
  weft_rproxy_stop(d->rproxy);
  d->rproxy = NULL;
}

static void dev_release(weft_comm_t c, struct weft_dev *d) {
  stop_proxy(c, d); /* before the regions it writes go, and its connections */
  for (int i = 0; i < d->nlinks; i++)
    c->tr[d->link_tr]->teardown(d->links[i]);
  for (int i = 0; i < 8; i++)
    if (d->kick_fds[i] >= 0) close(d->kick_fds[i]);
  weft_regions_unmap(d->regions);
  weft_sharers_leave(d->sharers);
  if (d->counters) cudaFree(d->counters);
  if (d->abort_h) cudaFreeHost(d->abort_h);
  if (d->err_h) cudaFreeHost(d->err_h);
  if (d->order) cudaEventDestroy(d->order);
  free(d->reach);
  free(d);
}

/* The proxy's view of a failure: a lost connection is a lost peer, or the abort. It checks
 * nothing itself: local failures are the heartbeat thread's to find (their checks keep state
 * of their own), and notices from other hosts come over the bootstrap ring, which the
 * caller's thread may be using. */
static weft_result_t proxy_explain(void *ctx, weft_result_t rc, int peer) {
  weft_comm_t c = ctx;
  if (atomic_load(&c->aborted))
    return weft_set_error(WEFT_ERR_ABORTED, "rank %d: the communicator was aborted", c->rank);
  if (rc != WEFT_ERR_PEER_LOST) return rc;
  char first[512];
  snprintf(first, sizeof first, "%s", weft_thread_error());
  return weft_fail_peer_gone(c, peer, first);
}
/* Across hosts the proxy's streams carry the communicator's failure notices both ways. */
static int proxy_told_others(void *ctx, weft_notice_t *n) { return weft_fail_told_others(ctx, n); }
static weft_result_t proxy_heard(void *ctx, const weft_notice_t *n) {
  return weft_fail_heard(ctx, n);
}
static void proxy_fail(void *ctx, weft_result_t rc, const char *msg) {
  weft_comm_t c = ctx;
  pthread_mutex_lock(&c->mu);
  uint64_t seq = c->seq;
  pthread_mutex_unlock(&c->mu);
  weft_comm_fail(c, rc, msg, seq);
}

/* The NUMA node of GPU device (sysfs), -1 where not known: the proxy's threads run there,
 * beside the pinned memory they copy and, on real servers, the GPU's nearest NIC. */
static int gpu_numa(int device) {
  char bus[WEFT_TOPO_BUSID];
  int numa = -1;
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, device) != cudaSuccess) return -1;
  for (char *p = bus; *p; p++)
    *p = (char)tolower((unsigned char)*p);
  weft_topo_t *t = calloc(1, sizeof *t);
  if (t && weft_topo_from_sysfs("/", t) == WEFT_SUCCESS)
    for (int i = 0; i < t->ngpus; i++)
      if (!strcmp(weft_topo_gpu(t, i)->busid, bus)) numa = weft_topo_gpu(t, i)->numa;
  free(t);
  return numa;
}

/* Ranks on other hosts: the region proxy over the comm's tcp transport (region.h), with
 * WEFT_PROXY_THREADS workers, each on connections of its own, made at setup (the comm's own
 * instance connects a pair on its first use; the proxy's heartbeats need every stream now). */
static weft_result_t start_proxy(weft_comm_t c, struct weft_dev *d) {
  const int tcp = weft_comm_transport_index(c, "tcp");
  const weft_dev_slots_t *sl = &d->plan.slots;
  uint8_t remote[WEFT_DEV_MAX_RANKS] = {0};
  char *region[WEFT_DEV_MAX_RANKS] = {0};
  void *states[WEFT_RPROXY_MAX_LINKS] = {0};
  if (tcp < 0)
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "weft_comm_init: rank %d: ranks on other hosts, but no tcp transport "
                          "reaches them (WEFT_TRANSPORT)",
                          c->rank);
  /* the extra connections go to every remote rank this rank's kernels reach (d->reach comes
   * from an agreed step: what follows is collective) */
  uint8_t *reach = d->reach;
  for (int s = 0; s < sl->nslots; s++) {
    remote[s] = (uint8_t)weft_regions_remote(d->regions, s);
    region[s] = weft_regions_host_region(d->regions, s);
    reach[sl->rank[s]] = remote[s];
  }
  int nlinks = (int)weft_param_get_int(WEFT_PARAM_PROXY_THREADS);
  if (nlinks < 1) nlinks = 1;
  d->link_tr = tcp;
  weft_result_t rc = WEFT_SUCCESS;
  for (int w = 0; w < nlinks && rc == WEFT_SUCCESS; w++) { /* every rank reads the same count */
    /* without one a worker would nap through an operation's first chunks (up to 1 ms) after
     * a quiet spell; as it is, the rank still takes part in the collective setup */
    d->kick_fds[w] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (d->kick_fds[w] < 0)
      WEFT_INFO(WEFT_SUB_INIT, "rank %d: proxy: no eventfd (%s): worker %d naps undisturbed",
                c->rank, strerror(errno), w);
    rc = weft_comm_transport_again(c, tcp, reach, d->kick_fds[w], &d->links[d->nlinks]);
    if (rc == WEFT_SUCCESS) states[w] = d->links[d->nlinks++];
  }
  CHECK(rc);
  weft_rproxy_init_t in = {.link = {.rank = c->rank,
                                    .nranks = c->nranks,
                                    .tr = c->tr[tcp],
                                    .tr_state = states[0],
                                    .abort_flag = &c->aborted,
                                    .kernel_abort = d->abort_h,
                                    .timeout_ms = c->timeout_ms,
                                    .explain = proxy_explain,
                                    .fail = proxy_fail,
                                    .told_others = proxy_told_others,
                                    .heard = proxy_heard,
                                    .ctx = c},
                           .nlinks = nlinks,
                           .numa = gpu_numa(d->device),
                           .tr_states = states,
                           .slots = sl,
                           .remote = remote,
                           .region = region,
                           .region_bytes = weft_regions_bytes(d->regions),
                           .chunk_bytes = d->chunk_bytes,
                           .stages = d->stages,
                           .coll_channels = d->plan.max_channels,
                           /* the launch's: post_off 0 where the small kernel stays home */
                           .ll_off = d->ll.ll_off,
                           .ll_post_off = d->ll.post_off,
                           .ll_channels = d->ll_channels,
                           .kick_fds = d->kick_fds};
  CHECK(weft_rproxy_start(&in, &d->rproxy));
  WEFT_INFO(WEFT_SUB_INIT,
            "rank %d: %d of %d ranks on other hosts, reached by the proxy over tcp (%d threads, "
            "NUMA node %d)",
            c->rank, c->nranks - c->nlocal, c->nranks, nlinks, in.numa);
  return WEFT_SUCCESS;
}

/* One INFO line: how this rank's kernels reach each rank they reach (weft_regions_pair). */
static void log_pairs(const struct weft_comm *c, const struct weft_dev *d) {
  const weft_dev_slots_t *sl = &d->plan.slots;
  char line[512];
  int n = 0;
  for (int s = 0; s < sl->nslots && n < (int)sizeof line; s++)
    n += snprintf(line + n, sizeof line - (size_t)n, "%s%d %s", s ? ", " : "", (int)sl->rank[s],
                  weft_regions_pair(d->regions, s));
  WEFT_INFO(WEFT_SUB_INIT, "rank %d: reaches rank %s%s", c->rank, line,
            sl->identity ? ""
                         : " (its ring neighbours: the communicator has more ranks than "
                           "the kernels reach at once)");
}

weft_result_t weft_dev_setup(weft_comm_t c, int device) {
  struct weft_dev *d = calloc(1, sizeof *d);
  if (!d) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  d->device = device;
  for (int i = 0; i < 8; i++)
    d->kick_fds[i] = -1;
  int saved = -1;
  cudaGetDevice(&saved);
  weft_result_t rc = weft_comm_agree(c, dev_init(c, d, device), "could not set up its GPU");
  if (rc == WEFT_SUCCESS) rc = weft_dev_agree_params(c, d);
  if (rc == WEFT_SUCCESS) rc = weft_dev_share_agree(c, d);
  if (rc == WEFT_SUCCESS) weft_dev_budget_apply(d); /* before the region is sized */
  if (rc == WEFT_SUCCESS) {
    /* Across hosts every region, the device ones of this host's pairs included, shares the
     * mirrors' layout, sized for the proxy's path; only the general kernel's chunks and
     * flags travel (the proxy follows those). Its parameters are agreed already, so every
     * rank reaches the same outcome. */
    if (c->nlocal < c->nranks) rc = weft_dev_net_sizing(d);
    /* past WEFT_DEV_MAX_RANKS ranks only the ring algorithms run (slots.h): no low-latency
     * kernel, nor its buffers */
    if (!d->plan.slots.identity) weft_dev_ll_off(d);
  }
  if (rc == WEFT_SUCCESS) {
    struct weft_dev h = *d;
    weft_dev_host_sizing(&h);
    size_t bytes[3] = {weft_dev_region_bytes(d, c->nranks, d->ll128_max[0] || d->ll128_max[1]),
                       weft_dev_region_bytes(d, c->nranks, 0),
                       weft_dev_region_bytes(&h, c->nranks, 0)};
    const weft_dev_slots_t *sl = &d->plan.slots;
    rc = weft_regions_map(c->boot, c->nranks, sl->rank, sl->nslots, sl->self, device, bytes,
                          weft_param_get_int(WEFT_PARAM_P2P_DISABLE) != 0, c->local_rank,
                          &d->regions);
    if (rc == WEFT_SUCCESS && weft_regions_host_staged(d->regions)) weft_dev_host_sizing(d);
  }
  weft_dev_leave(device, saved);
  if (rc != WEFT_SUCCESS) {
    dev_release(c, d);
    return rc;
  }
  /* The 128-byte kernel trusts a warp's 128-byte store to land whole: NVLink between two GPUs
   * does that; PCIe, host memory and ranks on one GPU (weft_regions_nvlink is 0 for all) are not
   * known to. The region was sized without its buffers there. */
  if ((d->ll128_max[0] || d->ll128_max[1]) && !weft_regions_nvlink(d->regions)) {
    WEFT_INFO(WEFT_SUB_INIT,
              "rank %d: the 128-byte low-latency kernel is off: some pair of ranks is not on two "
              "GPUs joined by NVLink",
              c->rank);
    d->ll128_max[0] = d->ll128_max[1] = 0;
  }
  weft_dev_ll_limits(d);
  int shared = d->budget.sharers > 1;
  d->ce_min =
      (uint64_t)weft_dev_ce_min(weft_param_get_str(WEFT_PARAM_CE_MIN_BYTES), c->nranks, shared);
  weft_dev_budget_log(c, d);
  if (shared && weft_regions_gpu_shared(d->regions)) {
    if (c->rank == 0 && !weft_dev_mps(device))
      WEFT_WARN(WEFT_SUB_INIT,
                "several ranks of this communicator share a GPU without MPS: CUDA time-slices "
                "kernels of different processes, so each collective waits for a time slice "
                "(2.25 ms with 2 ranks per H200, 6.8 ms with 4, against 6 us under MPS); use one "
                "process per GPU, or start MPS (nvidia-cuda-mps-control -d)");
    else if (c->rank == 0)
      WEFT_INFO(WEFT_SUB_INIT, "several ranks of this communicator share a GPU, under MPS");
  }
  /* the mirrors' and inbox's device addresses come with their pinning, which waits for the
   * final layout: host-staged sizing above shrinks it */
  weft_result_t prc = WEFT_SUCCESS;
  if (c->nlocal < c->nranks) {
    saved = -1;
    weft_dev_enter(device, &saved);
    prc = weft_dev_pin(c, d);
    weft_dev_leave(device, saved);
    prc = weft_comm_agree(c, prc, "could not pin host memory for its proxy");
  }
  if (prc == WEFT_SUCCESS) weft_dev_fill_launch(c, d);
  if (prc == WEFT_SUCCESS && c->nlocal < c->nranks)
    prc = weft_comm_agree(c, start_proxy(c, d), "could not start its proxy");
  if (prc != WEFT_SUCCESS) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", weft_thread_error());
    saved = -1;
    weft_dev_enter(device, &saved);
    dev_release(c, d);
    weft_dev_leave(device, saved);
    return weft_set_error(prc, "%s", msg);
  }
  c->engine_state = d;
  WEFT_INFO(WEFT_SUB_INIT,
            "rank %d: device %d, %zu bytes of staging in %s memory, chunk %u x %u stages", c->rank,
            device, weft_regions_bytes(d->regions),
            weft_regions_host_staged(d->regions) ? "host" : "device", d->chunk_bytes, d->stages);
  if (c->nlocal < c->nranks) {
    int runs = 0;
    size_t pinned = weft_regions_pinned(d->regions, &runs);
    WEFT_INFO(WEFT_SUB_INIT,
              "rank %d: %zu bytes (%.1f MiB) of host memory pinned for ranks on other hosts, in "
              "%d runs",
              c->rank, pinned, (double)pinned / (1 << 20), runs);
  }
  log_pairs(c, d);
  return WEFT_SUCCESS;
}

void weft_dev_free(weft_comm_t c) {
  struct weft_dev *d = dev_of(c);
  int saved = -1;
  weft_dev_enter(d->device, &saved);
  /* Kernels end on their own (done, aborted or timed out); wait for ours (through the event
   * recorded after the last launch: its stream may be gone by now), then for the peers',
   * since their kernels may still write into our region: those of this process here, the
   * others (only where they mapped our region over IPC) at a barrier. */
  if (d->launched) cudaEventSynchronize(d->order);
  weft_window_free_all(c);
  pthread_mutex_lock(&c->mu);
  int healthy = c->async_error == WEFT_SUCCESS && !atomic_load(&c->aborted);
  pthread_mutex_unlock(&c->mu);
  /* (across hosts every rank meets there: ranks alone on their host opened no handle, and
   * the proxy's barriers below must pair up alike on every rank) */
  int opened = weft_regions_drain(d->regions);
  if ((opened || weft_regions_spans_hosts(d->regions)) && healthy && c->boot)
    weft_bootstrap_barrier(c->boot);
  /* Across hosts a peer's kernels may still wait for chunks our proxy has yet to carry: it
   * runs on until every rank's kernels are done, and every proxy stops before any socket
   * closes (an unread credit would reset the stream under a proxy still reading it). */
  if (d->rproxy && healthy && c->boot && weft_bootstrap_barrier(c->boot) == WEFT_SUCCESS) {
    stop_proxy(c, d);
    weft_bootstrap_barrier(c->boot);
  }
  int device = d->device;
  dev_release(c, d);
  weft_dev_leave(device, saved);
  c->engine_state = NULL;
}

size_t weft_dev_memory(const struct weft_comm *c) {
  const struct weft_dev *d = dev_of(c);
  return (weft_regions_host_staged(d->regions) ? 0 : weft_regions_bytes(d->regions)) +
         weft_dev_private_bytes();
}
