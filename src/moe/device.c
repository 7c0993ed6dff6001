/* MoE on device communicators (CUDA builds): each layout's plan copied to the GPU once, then
 * dispatch and combine as kernels around weft's device alltoallv, all on the caller's stream
 * with no host synchronisation (only the layout waits, to read the ids). Staging comes from
 * CUDA's stream-ordered pool, so nothing here waits for other kernels of the process. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "err.h"
#include "gpu.h"
#include "moe.h"
#include "moe_kernels.h"

_Static_assert(sizeof(size_t) == sizeof(uint64_t), "plan arrays go to the GPU as they are");

/* The plan on the GPU: one allocation holding the four arrays. */
typedef struct {
  uint64_t *send_list; /* [entries sent] the token of each */
  uint64_t *row_of;    /* [entries received][k] */
  uint64_t *entries;   /* [tokens][width] each token's sent entries in rank order, NO_ROW-padded */
  uint64_t *pad;       /* [npad] padding rows */
  uint64_t npad;
  int width;
  void *block;
  cudaStream_t last; /* stream of the handle's last call: the block is freed in its order */
} moe_dev_t;

static struct weft_dev *dev(weft_moe_t m) { return dev_of(m->comm); }

int weft_moe_dev_owns(weft_moe_t m, const void *p, size_t bytes) {
  return weft_dev_check_ptr(dev(m), "buffer", p, bytes) == WEFT_SUCCESS;
}

weft_result_t weft_moe_dev_fetch(void *dst, const void *src, size_t bytes, weft_stream_t s) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)s),
             "weft_moe_layout: copying the ids to the host");
  CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)s), "weft_moe_layout: waiting for the ids");
  return WEFT_SUCCESS;
}

static size_t up256(size_t b) { return (b + 255) / 256 * 256; }

/* Each token's sent entries in rank order (the send side is grouped by rank), and the
 * padding rows; both into host arrays for the upload. */
static int host_tables(const weft_moe_handle_t h, int width, uint64_t **entries, uint64_t **pad,
                       uint64_t *npad) {
  const weft_moe_plan_t *p = &h->plan;
  size_t ns = p->send_off[p->nranks], used = 0;
  *entries = malloc((p->tokens * (size_t)width + 1) * sizeof **entries);
  *pad = malloc((p->rows + 1) * sizeof **pad);
  if (!*entries || !*pad) return -1;
  for (size_t i = 0; i < p->tokens * (size_t)width; i++)
    (*entries)[i] = WEFT_MOE_K_NO_ROW;
  for (size_t e = 0; e < ns; e++) {
    uint64_t *slot = *entries + p->send_list[e] * (size_t)width;
    while (*slot != WEFT_MOE_K_NO_ROW) /* at most width: a token goes to a rank once */
      slot++;
    *slot = e;
  }
  for (int l = 0; l < p->local; l++) {
    size_t end = l + 1 < p->local ? (size_t)p->offset[l + 1] : p->rows;
    for (size_t r = (size_t)(p->offset[l] + p->count[l]); r < end; r++)
      (*pad)[used++] = r;
  }
  *npad = used;
  return 0;
}

weft_result_t weft_moe_dev_upload(weft_moe_handle_t h, weft_stream_t s) {
  const weft_moe_plan_t *p = &h->plan;
  cudaStream_t st = (cudaStream_t)s;
  int width = p->k < p->nranks ? p->k : p->nranks, saved = -1;
  moe_dev_t *d = calloc(1, sizeof *d);
  uint64_t *entries = NULL, *pad = NULL;
  weft_result_t rc = WEFT_SUCCESS;
  if (!d || host_tables(h, width, &entries, &pad, &d->npad))
    ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "weft_moe_layout: out of memory");
  size_t ns = p->send_off[p->nranks], nr = p->recv_off[p->nranks], k = (size_t)p->k;
  /* sizes of arrays the host already holds: they fit */
  size_t b[4] = {ns * 8, nr * k * 8, p->tokens * (size_t)width * 8, d->npad * 8};
  size_t total = up256(b[0]) + up256(b[1]) + up256(b[2]) + up256(b[3]);
  const void *src[4] = {p->send_list, p->row_of, entries, pad};
  if (weft_dev_enter(dev(h->moe)->device, &saved))
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "weft_moe_layout: cannot make the GPU current");
  if (total && cudaMallocAsync(&d->block, total, st) != cudaSuccess)
    ERR_GOTO(rc, leave, WEFT_ERR_NO_MEMORY,
             "weft_moe_layout: no device memory for the plan "
             "(%zu bytes)",
             total);
  char *at = d->block;
  uint64_t **dst[4] = {&d->send_list, &d->row_of, &d->entries, &d->pad};
  for (int i = 0; i < 4; i++) {
    *dst[i] = (uint64_t *)at;
    /* pageable sources: the call returns once they are staged, so they may be freed */
    if (b[i] && cudaMemcpyAsync(at, src[i], b[i], cudaMemcpyHostToDevice, st) != cudaSuccess)
      ERR_GOTO(rc, leave, WEFT_ERR_SYSTEM, "weft_moe_layout: copying the plan to the GPU: %s",
               cudaGetErrorString(cudaGetLastError()));
    at += up256(b[i]);
  }
  d->width = width, d->last = st;
  h->dev = d, d = NULL;
leave:
  weft_dev_leave(dev(h->moe)->device, saved);
out:
  if (d && d->block) cudaFreeAsync(d->block, st);
  free(d);
  free(entries);
  free(pad);
  return rc;
}

void weft_moe_dev_free(weft_moe_handle_t h) {
  moe_dev_t *d = h->dev;
  if (!d) return;
  if (d->block) cudaFreeAsync(d->block, d->last);
  free(d);
  h->dev = NULL;
}

static int kcode(weft_dtype_t t) {
  return t == WEFT_F32 ? WEFT_MOE_K_F32 : t == WEFT_F16 ? WEFT_MOE_K_F16 : WEFT_MOE_K_BF16;
}

/* Stream-ordered staging of the given sizes (each 256-aligned); NULL pointers for 0 bytes. */
static weft_result_t stage(cudaStream_t s, const size_t *bytes, int n, void **block, char **out,
                           const char *fn) {
  size_t total = 0;
  for (int i = 0; i < n; i++)
    total += up256(bytes[i]);
  *block = NULL;
  if (total && cudaMallocAsync(block, total, s) != cudaSuccess) {
    cudaGetLastError();
    return weft_set_error(WEFT_ERR_NO_MEMORY, "%s: no device memory for staging (%zu bytes)", fn,
                          total);
  }
  char *at = *block;
  for (int i = 0; i < n; i++)
    out[i] = bytes[i] ? at : NULL, at += up256(bytes[i]);
  return WEFT_SUCCESS;
}

static weft_result_t kernel_rc(int e, const char *fn, const char *what) {
  if (e == (int)cudaSuccess) return WEFT_SUCCESS;
  return weft_set_error(WEFT_ERR_SYSTEM, "%s: launching the %s kernel: %s", fn, what,
                        cudaGetErrorString((cudaError_t)e));
}

weft_result_t weft_moe_dev_dispatch(weft_moe_handle_t h, const void *x, const float *w,
                                    void *recv_x, float *recv_w, weft_stream_t s) {
  const char *fn = "weft_moe_dispatch";
  const weft_moe_plan_t *p = &h->plan;
  moe_dev_t *d = h->dev;
  weft_moe_t m = h->moe;
  cudaStream_t st = (cudaStream_t)s;
  size_t n = (size_t)p->nranks, k = (size_t)p->k, hid = m->cfg.hidden;
  size_t row = hid * weft_dtype_size(m->cfg.dtype), ns = p->send_off[n], nr = p->recv_off[n];
  size_t bytes[4] = {ns * row, ns * k * 4, nr * row, nr * k * 4};
  char *buf[4] = {0};
  void *block = NULL;
  size_t *cnt = calloc(4 * n, sizeof *cnt), *dsp = cnt + n, *rcnt = cnt + 2 * n,
         *rdsp = cnt + 3 * n;
  int saved = -1;
  weft_result_t rc = WEFT_SUCCESS;
  if (!cnt) return weft_set_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
  if (weft_dev_enter(dev(m)->device, &saved))
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "%s: cannot make the GPU current", fn);
  CHECK_GOTO(stage(st, bytes, 4, &block, buf, fn), rc, leave);
  CHECK_GOTO(
      kernel_rc(weft_moe_k_gather(x, d->send_list, ns, row, buf[0], w, (float *)buf[1], (int)k, st),
                fn, "gather"),
      rc, leave);
  weft_moe_plan_counts(p, 0, hid, cnt, dsp);
  weft_moe_plan_counts(p, 1, hid, rcnt, rdsp);
  CHECK_GOTO(weft_alltoallv(buf[0], cnt, dsp, buf[2], rcnt, rdsp, m->cfg.dtype, m->comm, s), rc,
             leave);
  weft_moe_plan_counts(p, 0, k, cnt, dsp);
  weft_moe_plan_counts(p, 1, k, rcnt, rdsp);
  CHECK_GOTO(weft_alltoallv(buf[1], cnt, dsp, buf[3], rcnt, rdsp, WEFT_F32, m->comm, s), rc, leave);
  rc = kernel_rc(weft_moe_k_scatter(buf[2], (const float *)buf[3], d->row_of, nr, (int)k, row,
                                    recv_x, recv_w, d->pad, d->npad, st),
                 fn, "scatter");
leave:
  if (block) cudaFreeAsync(block, st);
  d->last = st;
  weft_dev_leave(dev(m)->device, saved);
out:
  free(cnt);
  return rc;
}

weft_result_t weft_moe_dev_combine(weft_moe_handle_t h, const void *rows, const float *w, void *y,
                                   weft_stream_t s) {
  const char *fn = "weft_moe_combine";
  const weft_moe_plan_t *p = &h->plan;
  moe_dev_t *d = h->dev;
  weft_moe_t m = h->moe;
  cudaStream_t st = (cudaStream_t)s;
  size_t n = (size_t)p->nranks, k = (size_t)p->k, hid = m->cfg.hidden;
  size_t row = hid * weft_dtype_size(m->cfg.dtype), ns = p->send_off[n], nr = p->recv_off[n];
  size_t bytes[2] = {nr * row, ns * row};
  char *buf[2] = {0};
  void *block = NULL;
  size_t *cnt = calloc(4 * n, sizeof *cnt), *dsp = cnt + n, *rcnt = cnt + 2 * n,
         *rdsp = cnt + 3 * n;
  int saved = -1, t = kcode(m->cfg.dtype);
  weft_result_t rc = WEFT_SUCCESS;
  if (!cnt) return weft_set_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
  if (weft_dev_enter(dev(m)->device, &saved))
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "%s: cannot make the GPU current", fn);
  CHECK_GOTO(stage(st, bytes, 2, &block, buf, fn), rc, leave);
  CHECK_GOTO(kernel_rc(weft_moe_k_partials(t, rows, w, d->row_of, nr, (int)k, hid, buf[0], st), fn,
                       "partials"),
             rc, leave);
  weft_moe_plan_counts(p, 1, hid, cnt, dsp);
  weft_moe_plan_counts(p, 0, hid, rcnt, rdsp);
  CHECK_GOTO(weft_alltoallv(buf[0], cnt, dsp, buf[1], rcnt, rdsp, m->cfg.dtype, m->comm, s), rc,
             leave);
  rc = kernel_rc(weft_moe_k_home(t, buf[1], d->entries, d->width, p->tokens, hid, y, st), fn,
                 "home");
leave:
  if (block) cudaFreeAsync(block, st);
  d->last = st;
  weft_dev_leave(dev(m)->device, saved);
out:
  free(cnt);
  return rc;
}
