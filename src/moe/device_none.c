/* The MoE device path in a build without CUDA: there are no device communicators, so none
 * of this is reached; it keeps moe.c free of #ifdefs. */
#include "err.h"
#include "moe.h"

static weft_result_t none(void) {
  return weft_set_error(WEFT_ERR_UNSUPPORTED, "MoE on device buffers needs a CUDA build");
}

int weft_moe_dev_owns(weft_moe_t m, const void *p, size_t bytes) {
  (void)m, (void)p, (void)bytes;
  return 0;
}
int weft_moe_dev_ring_only(struct weft_comm *comm) {
  (void)comm;
  return 0;
}
void *weft_moe_dev_pool(weft_moe_t m) {
  (void)m;
  return NULL;
}
void weft_moe_dev_pool_free(void *pool) { (void)pool; }
int64_t *weft_moe_dev_routes(weft_moe_t m, size_t n) {
  (void)m, (void)n;
  return NULL;
}
void weft_moe_dev_routes_free(int64_t *routes) { (void)routes; }
weft_result_t weft_moe_dev_layout(weft_moe_t m, weft_moe_handle_t h, const void *ids, size_t tokens,
                                  weft_moe_verdict_t mine, weft_stream_t s) {
  (void)m, (void)h, (void)ids, (void)tokens, (void)mine, (void)s;
  return none();
}
weft_result_t weft_moe_dev_dispatch(weft_moe_handle_t h, const void *x, const float *w,
                                    void *recv_x, float *recv_w, float *recv_s, weft_stream_t s) {
  (void)h, (void)x, (void)w, (void)recv_x, (void)recv_w, (void)recv_s, (void)s;
  return none();
}
weft_result_t weft_moe_dev_combine(weft_moe_handle_t h, const void *rows, const float *w, void *y,
                                   weft_stream_t s) {
  (void)h, (void)rows, (void)w, (void)y, (void)s;
  return none();
}
void weft_moe_dev_free(weft_moe_handle_t h) { (void)h; }
const int64_t *weft_moe_dev_counts(weft_moe_handle_t h) {
  (void)h;
  return NULL;
}
weft_result_t weft_moe_ll_create(weft_moe_t m) {
  m->ll = NULL;
  return WEFT_SUCCESS;
}
void weft_moe_ll_destroy(weft_moe_t m) { (void)m; }
weft_result_t weft_moe_ll_layout(weft_moe_t m, weft_moe_handle_t h, const void *ids, size_t tokens,
                                 weft_moe_verdict_t v, weft_stream_t s) {
  (void)m, (void)h, (void)ids, (void)tokens, (void)v, (void)s;
  return none();
}
weft_result_t weft_moe_ll_dispatch(weft_moe_handle_t h, weft_moe_verdict_t v, const char *fn,
                                   const void *x, const float *w, void *recv_x, float *recv_w,
                                   float *recv_s, weft_stream_t s) {
  (void)h, (void)v, (void)fn, (void)x, (void)w, (void)recv_x, (void)recv_w, (void)recv_s, (void)s;
  return none();
}
weft_result_t weft_moe_ll_combine(weft_moe_handle_t h, weft_moe_verdict_t v, const char *fn,
                                  const void *rows, const float *w, void *y, weft_stream_t s) {
  (void)h, (void)v, (void)fn, (void)rows, (void)w, (void)y, (void)s;
  return none();
}
weft_result_t weft_moe_ll_finish(weft_moe_handle_t h) {
  (void)h;
  return none();
}
weft_result_t weft_moe_ll_counts(weft_moe_handle_t h, int64_t *counts, int64_t *offsets) {
  (void)h, (void)counts, (void)offsets;
  return none();
}
const int64_t *weft_moe_ll_device_counts(weft_moe_handle_t h) {
  (void)h;
  return NULL;
}
void weft_moe_ll_free(weft_moe_handle_t h) { (void)h; }
weft_result_t weft_moe_direct_create(weft_moe_t m) {
  m->direct = NULL;
  return WEFT_SUCCESS;
}
void weft_moe_direct_destroy(weft_moe_t m) { (void)m; }
