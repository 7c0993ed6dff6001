/* Device communicators in a build without CUDA: refused with a clear error. */
#include "dev_comm.h"
#include "err.h"

weft_result_t weft_dev_setup(struct weft_comm *c, int device) {
  (void)c;
  return weft_set_error(WEFT_ERR_UNSUPPORTED,
                        "weft_comm_init: device %d asked, but this weft was built without CUDA "
                        "(meson -Dcuda=enabled needs nvcc)",
                        device);
}
void weft_dev_free(struct weft_comm *c) { (void)c; }
weft_result_t weft_dev_submit(struct weft_comm *c, weft_task_t *tasks, int ntasks,
                              weft_stream_t stream) {
  (void)c, (void)tasks, (void)ntasks, (void)stream;
  return weft_set_error(WEFT_ERR_UNSUPPORTED, "device communicators need a CUDA build");
}
void weft_dev_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced) {
  (void)c, (void)t, (void)forced;
}
void weft_dev_watch(struct weft_comm *c) { (void)c; }
void weft_dev_abort(struct weft_comm *c) { (void)c; }
void *weft_dev_scratch(const struct weft_comm *c) {
  (void)c;
  return NULL;
}
size_t weft_dev_memory(const struct weft_comm *c) {
  (void)c;
  return 0;
}
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
