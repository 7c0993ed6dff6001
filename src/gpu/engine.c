/* The gpu engine: device buffers, each call (or each communicator's part of a group) one
 * kernel launch on the caller's CUDA stream; kernels report failures through host-mapped
 * memory, which the heartbeat thread watches. */
#include "comm.h"
#include "err.h"
#include "gpu.h"
#include "window.h"

static int gpu_serves(const weft_config_t *config) { return config && config->device >= 0; }

static weft_result_t check_ptr(struct weft_comm *c, const char *what, const void *p, size_t bytes) {
  return weft_dev_check_ptr(dev_of(c), what, p, bytes);
}

static weft_result_t gpu_setup(struct weft_comm *c, const weft_config_t *config) {
  CHECK(weft_dev_setup(c, config->device));
  struct weft_dev *d = dev_of(c);
  d->view = (weft_dev_view_t){.device = d->device,
                              .host_staged = weft_regions_host_staged(d->regions) ||
                                             weft_regions_spans_hosts(d->regions),
                              .gpu_shared = weft_regions_gpu_shared(d->regions),
                              .ring_only = !d->plan.slots.identity,
                              .abort_flag = d->abort_d,
                              .error = d->err_d,
                              .waiting = d->launch.waiting,
                              .timeout_ns = d->launch.timeout_ns,
                              .report_ns = d->launch.report_ns,
                              .moe_window_bytes = d->moe_window_bytes,
                              .check_ptr = check_ptr,
                              .window_peer = weft_window_peer};
  return WEFT_SUCCESS;
}

static weft_dev_view_t *gpu_device_view(struct weft_comm *c) { return &dev_of(c)->view; }

static const char *gpu_peer_path(const struct weft_comm *c, int peer) {
  int s = weft_dev_slot_of(&dev_of(c)->plan.slots, peer);
  /* a rank past the slots is reached through the ring's neighbours */
  return s >= 0 ? weft_regions_pair(dev_of(c)->regions, s) : "ring";
}

static weft_result_t gpu_submit(struct weft_comm *c, weft_task_t *tasks, int ntasks,
                                weft_stream_t stream) {
  weft_result_t rc = weft_dev_submit(c, tasks, ntasks, stream);
  for (int i = 0; i < ntasks; i++) /* launched or refused: nothing of theirs is needed now */
    weft_task_free(&tasks[i]);
  return rc;
}

/* Each comm's part is one kernel on its first call's stream. */
static weft_result_t gpu_submit_group(struct weft_comm **comms, weft_work_t **ops,
                                      const weft_stream_t *streams, int n) {
  weft_result_t rc = WEFT_SUCCESS;
  for (int k = 0; k < n; k++) {
    weft_result_t e = weft_dev_submit(comms[k], ops[k]->tasks, ops[k]->ntasks, streams[k]);
    if (e != WEFT_SUCCESS && rc == WEFT_SUCCESS) rc = e;
    weft_work_free(ops[k]);
  }
  return rc;
}

static void *gpu_barrier_byte(struct weft_comm *c) { return weft_dev_scratch(c); }

const weft_engine_t weft_engine_gpu = {
    .size = sizeof(weft_engine_t),
    .name = "gpu",
    .serves = gpu_serves,
    .setup = gpu_setup,
    .free = weft_dev_free,
    .tune = weft_dev_tune,
    .submit = gpu_submit,
    .submit_group = gpu_submit_group,
    .watch = weft_dev_watch,
    .watch_always = 1,
    .cancel = weft_dev_abort,
    .memory = weft_dev_memory,
    .barrier_byte = gpu_barrier_byte,
    .device_view = gpu_device_view,
    .peer_path = gpu_peer_path,
};
