/* The gpu engine in a build without CUDA: it serves device communicators only to refuse
 * them with a clear error, and windows likewise. */
#include "comm.h"
#include "err.h"

static int none_serves(const weft_config_t *config) { return config && config->device >= 0; }

static weft_result_t none_setup(struct weft_comm *c, const weft_config_t *config) {
  (void)c;
  return weft_set_error(WEFT_ERR_UNSUPPORTED,
                        "weft_comm_init: device %d asked, but this weft was built without CUDA "
                        "(meson -Dcuda=enabled needs nvcc)",
                        config->device);
}

/* setup never succeeds, so no communicator reaches these */
static void none_free(struct weft_comm *c) { (void)c; }
static void none_watch(struct weft_comm *c) { (void)c; }
static void none_cancel(struct weft_comm *c) { (void)c; }
static weft_result_t none_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced) {
  (void)c, (void)t, (void)forced;
  return weft_set_error(WEFT_ERR_UNSUPPORTED, "device communicators need a CUDA build");
}
static weft_result_t none_submit(struct weft_comm *c, weft_task_t *tasks, int ntasks,
                                 weft_stream_t stream) {
  (void)c, (void)tasks, (void)ntasks, (void)stream;
  return weft_set_error(WEFT_ERR_UNSUPPORTED, "device communicators need a CUDA build");
}
static weft_result_t none_submit_group(struct weft_comm **comms, struct weft_work **ops,
                                       const weft_stream_t *streams, int n) {
  (void)comms, (void)ops, (void)streams, (void)n;
  return weft_set_error(WEFT_ERR_UNSUPPORTED, "device communicators need a CUDA build");
}
static size_t none_memory(const struct weft_comm *c) {
  (void)c;
  return 0;
}
static void *none_barrier_byte(struct weft_comm *c) {
  (void)c;
  return NULL;
}

const weft_engine_t weft_engine_gpu = {
    .size = sizeof(weft_engine_t),
    .name = "gpu",
    .serves = none_serves,
    .setup = none_setup,
    .free = none_free,
    .tune = none_tune,
    .submit = none_submit,
    .submit_group = none_submit_group,
    .watch = none_watch,
    .cancel = none_cancel,
    .memory = none_memory,
    .barrier_byte = none_barrier_byte,
};

weft_result_t weft_window_register(weft_comm_t comm, void *buf, size_t bytes, weft_window_t *win) {
  (void)buf, (void)bytes;
  if (win) *win = NULL;
  if (!comm || !win)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_window_register: NULL argument");
  return weft_set_error(WEFT_ERR_UNSUPPORTED, "weft_window_register: windows need a device "
                                              "communicator, and this weft was built without CUDA");
}
weft_result_t weft_window_deregister(weft_comm_t comm, weft_window_t win) {
  if (!comm || !win)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_window_deregister: NULL argument");
  return weft_set_error(WEFT_ERR_UNSUPPORTED,
                        "weft_window_deregister: this weft was built without CUDA");
}
