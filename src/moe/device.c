/* MoE on device communicators (CUDA builds): each layout's plan copied to the GPU once, then
 * dispatch and combine as kernels around weft's device alltoallv, all on the caller's stream
 * with no wait for the GPU (only the layout waits, to read the ids; the ranks still trade
 * verdicts over the bootstrap ring before data moves). Staging comes from CUDA's
 * stream-ordered pool, so nothing here waits for other kernels of the process. */
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
  /* the handle's calls run in the order made, whatever their streams: each waits for the
   * last one's event when its stream differs; the block is freed in the last stream's order */
  cudaEvent_t done;
  cudaStream_t last;
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

/* *out = sum of the sizes, each rounded up to 256 bytes; 0 when that overflows. */
static int staged_total(const size_t *bytes, int n, size_t *out) {
  *out = 0;
  for (int i = 0; i < n; i++) {
    size_t up;
    if (!weft_add_fits(bytes[i], 255, &up) || !weft_add_fits(*out, up / 256 * 256, out)) return 0;
  }
  return 1;
}

static size_t up256(size_t b) { return (b + 255) / 256 * 256; }

/* Each token's sent entries in rank order (the send side is grouped by rank), and the
 * padding rows; both into host arrays for the upload. */
static int host_tables(const weft_moe_handle_t h, int width, uint64_t **entries, uint64_t **pad,
                       uint64_t *npad) {
  const weft_moe_plan_t *p = &h->plan;
  size_t ns = p->send_off[p->nranks], used = 0, cells, eb, pb;
  if (!weft_mul_fits(p->tokens, (size_t)width, &cells) ||
      !weft_mul_fits(cells + 1, sizeof **entries, &eb) ||
      !weft_mul_fits(p->rows + 1, sizeof **pad, &pb))
    return -1;
  *entries = malloc(eb);
  *pad = malloc(pb);
  if (!*entries || !*pad) return -1;
  for (size_t i = 0; i < cells; i++)
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
  int width = p->k < p->nranks ? p->k : p->nranks, saved = -1, entered = 0;
  moe_dev_t *d = calloc(1, sizeof *d);
  uint64_t *entries = NULL, *pad = NULL;
  weft_result_t rc = WEFT_SUCCESS;
  if (!d || host_tables(h, width, &entries, &pad, &d->npad))
    ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "weft_moe_layout: out of memory");
  size_t ns = p->send_off[p->nranks], nr = p->recv_off[p->nranks], k = (size_t)p->k, total;
  /* arrays the host holds (sizes that fit), as bytes */
  size_t b[4] = {ns * 8, nr * k * 8, p->tokens * (size_t)width * 8, d->npad * 8};
  const void *src[4] = {p->send_list, p->row_of, entries, pad};
  if (!staged_total(b, 4, &total))
    ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "weft_moe_layout: the plan's size overflows");
  if (weft_dev_enter(dev(h->moe)->device, &saved))
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "weft_moe_layout: cannot make the GPU current");
  entered = 1;
  if (cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming) != cudaSuccess) {
    d->done = NULL;
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "weft_moe_layout: cudaEventCreate: %s",
             cudaGetErrorString(cudaGetLastError()));
  }
  if (total && cudaMallocAsync(&d->block, total, st) != cudaSuccess) {
    d->block = NULL;
    ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "weft_moe_layout: no device memory for the plan: %s",
             cudaGetErrorString(cudaGetLastError()));
  }
  char *at = d->block;
  uint64_t **dst[4] = {&d->send_list, &d->row_of, &d->entries, &d->pad};
  for (int i = 0; i < 4; i++) {
    *dst[i] = (uint64_t *)at;
    if (b[i] && cudaMemcpyAsync(at, src[i], b[i], cudaMemcpyHostToDevice, st) != cudaSuccess)
      ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "weft_moe_layout: copying the plan to the GPU: %s",
               cudaGetErrorString(cudaGetLastError()));
    at += up256(b[i]);
  }
  /* in place before the call returns: a dispatch on another stream reads it, and the host
   * arrays it came from are freed below */
  if (cudaStreamSynchronize(st) != cudaSuccess)
    ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "weft_moe_layout: copying the plan to the GPU: %s",
             cudaGetErrorString(cudaGetLastError()));
  d->width = width, d->last = st;
  h->dev = d, d = NULL;
out:
  if (d) {
    if (d->block) cudaFreeAsync(d->block, st);
    if (d->done) cudaEventDestroy(d->done);
  }
  if (entered) weft_dev_leave(dev(h->moe)->device, saved);
  free(d);
  free(entries);
  free(pad);
  return rc;
}

void weft_moe_dev_free(weft_moe_handle_t h) {
  moe_dev_t *d = h->dev;
  if (!d) return;
  if (d->block) cudaFreeAsync(d->block, d->last);
  if (d->done) cudaEventDestroy(d->done);
  free(d);
  h->dev = NULL;
}

static int kcode(weft_dtype_t t) {
  return t == WEFT_F32 ? WEFT_MOE_K_F32 : t == WEFT_F16 ? WEFT_MOE_K_F16 : WEFT_MOE_K_BF16;
}

/* A data call's resources, all taken before the ranks agree to go on: the alltoallv counts
 * and the stream-ordered staging. */
typedef struct {
  size_t *cnt, *dsp, *rcnt, *rdsp;
  void *block;
  char *buf[4];
  int saved, entered;
} call_t;

/* Takes them (sizes in bytes, n of them) and agrees with the peers; on any rank's failure
 * every rank returns that failure, and call_end releases what was taken. */
static weft_result_t call_begin(weft_moe_handle_t h, cudaStream_t st, const size_t *bytes,
                                const int *fits, int n, call_t *c, const char *fn) {
  weft_moe_t m = h->moe;
  moe_dev_t *d = h->dev;
  size_t total = 0;
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  memset(c, 0, sizeof *c);
  int ok = 1;
  for (int i = 0; i < n; i++)
    ok &= fits[i];
  c->cnt = calloc(4 * (size_t)m->nranks, sizeof *c->cnt);
  if (!ok || !staged_total(bytes, n, &total))
    v.code = MOE_TOO_BIG, v.a = (int64_t)h->plan.tokens;
  else if (!c->cnt)
    v.code = MOE_NO_MEM;
  else if (weft_dev_enter(dev(m)->device, &c->saved))
    v.code = MOE_FAILED;
  else if ((c->entered = 1) && total && cudaMallocAsync(&c->block, total, st) != cudaSuccess)
    c->block = NULL, v.code = MOE_NO_MEM, cudaGetLastError();
  else if (d->last != st && cudaStreamWaitEvent(st, d->done, 0) != cudaSuccess)
    v.code = MOE_FAILED;
  if (c->cnt) {
    size_t nr = (size_t)m->nranks;
    c->dsp = c->cnt + nr, c->rcnt = c->cnt + 2 * nr, c->rdsp = c->cnt + 3 * nr;
  }
  char *at = c->block;
  for (int i = 0; i < n && at; i++)
    c->buf[i] = bytes[i] ? at : NULL, at += up256(bytes[i]);
  if (v.code == MOE_FAILED)
    weft_set_error(WEFT_ERR_SYSTEM, "%s: %s", fn, cudaGetErrorString(cudaGetLastError()));
  return weft_moe_agree(m, fn, v);
}

static void call_end(weft_moe_handle_t h, cudaStream_t st, call_t *c, int ran) {
  moe_dev_t *d = h->dev;
  if (c->block) cudaFreeAsync(c->block, st);
  if (ran && cudaEventRecord(d->done, st) == cudaSuccess) d->last = st;
  if (c->entered) weft_dev_leave(dev(h->moe)->device, c->saved);
  free(c->cnt);
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
  size_t bytes[4];
  int fits[4] = {weft_mul_fits(ns, row, &bytes[0]), weft_mul_fits(ns * k, 4, &bytes[1]),
                 weft_mul_fits(nr, row, &bytes[2]), weft_mul_fits(nr * k, 4, &bytes[3])};
  call_t c;
  weft_result_t rc = call_begin(h, st, bytes, fits, 4, &c, fn);
  if (rc != WEFT_SUCCESS) {
    call_end(h, st, &c, 0);
    return rc;
  }
  char **buf = c.buf;
  /* past here a failure is this rank's alone (a launch, or an alltoallv that failed and
   * told its peers): weft's own timeouts and notices end the peers' waits */
  rc =
      kernel_rc(weft_moe_k_gather(x, d->send_list, ns, row, buf[0], w, (float *)buf[1], (int)k, st),
                fn, "gather");
  weft_moe_plan_counts(p, 0, hid, c.cnt, c.dsp);
  weft_moe_plan_counts(p, 1, hid, c.rcnt, c.rdsp);
  if (rc == WEFT_SUCCESS)
    rc = weft_alltoallv(buf[0], c.cnt, c.dsp, buf[2], c.rcnt, c.rdsp, m->cfg.dtype, m->comm, s);
  weft_moe_plan_counts(p, 0, k, c.cnt, c.dsp);
  weft_moe_plan_counts(p, 1, k, c.rcnt, c.rdsp);
  if (rc == WEFT_SUCCESS)
    rc = weft_alltoallv(buf[1], c.cnt, c.dsp, buf[3], c.rcnt, c.rdsp, WEFT_F32, m->comm, s);
  if (rc == WEFT_SUCCESS)
    rc = kernel_rc(weft_moe_k_scatter(buf[2], (const float *)buf[3], d->row_of, nr, (int)k, row,
                                      recv_x, recv_w, d->pad, d->npad, st),
                   fn, "scatter");
  call_end(h, st, &c, 1);
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
  size_t bytes[2];
  int fits[2] = {weft_mul_fits(nr, row, &bytes[0]), weft_mul_fits(ns, row, &bytes[1])};
  int t = kcode(m->cfg.dtype);
  call_t c;
  weft_result_t rc = call_begin(h, st, bytes, fits, 2, &c, fn);
  if (rc != WEFT_SUCCESS) {
    call_end(h, st, &c, 0);
    return rc;
  }
  rc = kernel_rc(weft_moe_k_partials(t, rows, w, d->row_of, nr, (int)k, hid, c.buf[0], st), fn,
                 "partials");
  weft_moe_plan_counts(p, 1, hid, c.cnt, c.dsp);
  weft_moe_plan_counts(p, 0, hid, c.rcnt, c.rdsp);
  if (rc == WEFT_SUCCESS)
    rc = weft_alltoallv(c.buf[0], c.cnt, c.dsp, c.buf[1], c.rcnt, c.rdsp, m->cfg.dtype, m->comm, s);
  if (rc == WEFT_SUCCESS)
    rc = kernel_rc(weft_moe_k_home(t, c.buf[1], d->entries, d->width, p->tokens, hid, y, st), fn,
                   "home");
  call_end(h, st, &c, 1);
  return rc;
}
