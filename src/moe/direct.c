/* Normal mode's direct path on device communicators whose GPUs map each other (CUDA builds):
 * the communicator's normal-mode layers share a window of WEFT_MOE_WINDOW_BYTES that every
 * peer writes into, and a dispatch or combine is its kernels' rounds (direct.cu) on the
 * caller's stream, after the ranks agreed to go on (device.c). Without windows, or with the
 * variable at 0, device.c's staged path serves. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "err.h"
#include "moe_dev.h"
#include "moe_kernels.h"
#include "param.h"

/* What every normal-mode layer of a device communicator shares: one window (as DeepEP keeps
 * one buffer for all layers), the rounds counted on it, and the order of the calls on it. */
struct weft_moe_window {
  weft_window_t win;
  char *buf;
  weft_moe_k_dstate_t *state;
  /* the layers' calls run in the order made, whatever their streams (every rank counts its
   * rounds in that order): a call on another stream than the last waits for its event */
  cudaEvent_t done;
  cudaStream_t last;
  int recorded;
  int layers; /* that use it: the last one's destroy frees it */
};

static void window_free(struct weft_moe_window *w) {
  if (w->done) cudaEventDestroy(w->done);
  if (w->buf) cudaFree(w->buf);
  if (w->state) cudaFree(w->state);
  free(w);
}

/* Collective, with the GPU current: the communicator's window of `bytes`, or NULL (on every
 * rank alike) when some rank could not make it: the staged path then serves. */
static struct weft_moe_window *window_new(weft_moe_t m, size_t bytes) {
  const char *fn = "weft_moe_create";
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  struct weft_moe_window *w = calloc(1, sizeof *w);
  if (!w)
    v.code = MOE_NO_MEM;
  else if (cudaMalloc((void **)&w->buf, bytes) != cudaSuccess ||
           cudaMalloc((void **)&w->state, sizeof *w->state) != cudaSuccess)
    cudaGetLastError(), v.code = MOE_NO_MEM;
  else if (cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming) != cudaSuccess)
    cudaGetLastError(), w->done = NULL, v.code = MOE_FAILED;
  /* zeroed before any peer can write: registration below is the first it can */
  else if (cudaMemset(w->buf, 0, bytes) != cudaSuccess ||
           cudaMemset(w->state, 0, sizeof *w->state) != cudaSuccess ||
           cudaDeviceSynchronize() != cudaSuccess)
    cudaGetLastError(), v.code = MOE_FAILED;
  if (v.code == MOE_FAILED) weft_set_error(WEFT_ERR_SYSTEM, "%s: a CUDA call failed", fn);
  weft_result_t rc = weft_moe_agree(m, fn, v);
  /* registration fails on every rank alike (its exchanges are collective) */
  if (rc == WEFT_SUCCESS) rc = weft_window_register(m->comm, w->buf, bytes, &w->win);
  if (rc == WEFT_SUCCESS) {
    WEFT_INFO(WEFT_SUB_COLL, "%s: the MoE layers' window: %zu bytes", fn, bytes);
    return w;
  }
  WEFT_WARN(WEFT_SUB_COLL, "%s: no MoE window (%s); dispatch and combine go through staging", fn,
            weft_thread_error());
  if (w) window_free(w);
  return NULL;
}

weft_result_t weft_moe_direct_create(weft_moe_t m) {
  weft_dev_view_t *d = moe_dev(m);
  m->direct = NULL;
  size_t row = m->cfg.hidden * weft_dtype_size(m->cfg.dtype);
  /* alike on every rank: the size was agreed at the communicator's init, and the config here */
  uint64_t chunk = d->host_staged || !d->moe_window_bytes
                       ? 0
                       : weft_moe_direct_geometry(m->nranks, m->cfg.topk, row,
                                                  (size_t)d->moe_window_bytes, &m->direct_g);
  if (!chunk) return WEFT_SUCCESS;
  if (!d->moe_win) { /* the first layer: every rank's first, as they create layers alike */
    int saved = -1;
    if (weft_dev_enter(d->device, &saved)) {
      /* still take part, or the peers would wait */
      weft_moe_verdict_t v = {MOE_FAILED, 0, 0, 0};
      weft_set_error(WEFT_ERR_SYSTEM, "weft_moe_create: cannot make the GPU current");
      weft_moe_agree(m, "weft_moe_create", v); /* every rank then goes without */
      return WEFT_SUCCESS;
    }
    d->moe_win = window_new(m, (size_t)d->moe_window_bytes);
    weft_dev_leave(d->device, saved);
    if (!d->moe_win) return WEFT_SUCCESS;
  }
  d->moe_win->layers++;
  m->direct = d->moe_win, m->direct_chunk = chunk;
  WEFT_INFO(WEFT_SUB_COLL, "weft_moe_create: normal mode through the window, %llu tokens a round",
            (unsigned long long)chunk);
  return WEFT_SUCCESS;
}

void weft_moe_direct_destroy(weft_moe_t m) {
  struct weft_moe_window *w = m->direct;
  weft_dev_view_t *d = moe_dev(m);
  m->direct = NULL;
  if (!w || --w->layers > 0) return;
  weft_moe_dev_window_close(m, w->win);
  int saved = -1, entered = weft_dev_enter(d->device, &saved) == 0;
  window_free(w);
  if (entered) weft_dev_leave(d->device, saved);
  d->moe_win = NULL;
}

int weft_moe_direct_order(weft_moe_t m, cudaStream_t st) {
  struct weft_moe_window *w = m->direct;
  return w->recorded && w->last != st && cudaStreamWaitEvent(st, w->done, 0) != cudaSuccess;
}

/* The kernels' arguments for h's call. */
static weft_moe_k_direct_t params(weft_moe_handle_t h) {
  weft_moe_t m = h->moe;
  struct weft_moe_window *w = m->direct;
  weft_dev_view_t *d = moe_dev(m);
  const moe_dev_t *p = h->dev;
  weft_moe_k_direct_t a = {.g = m->direct_g,
                           .rank = m->rank,
                           .nranks = m->nranks,
                           .k = m->cfg.topk,
                           .dtype = moe_kcode(m->cfg.dtype),
                           .chunk = m->direct_chunk,
                           .hidden = m->cfg.hidden,
                           .tokens = h->plan.tokens,
                           .max_tokens = p->max_tokens,
                           .state = w->state,
                           .pos = p->pos,
                           .recv_off = p->recv_off,
                           .row_of = p->row_of,
                           .tok_of = p->tok_of,
                           .abort_flag = d->abort_flag,
                           .error = d->error,
                           .waiting = d->waiting,
                           .timeout_ns = d->timeout_ns,
                           .report_ns = d->report_ns};
  for (int r = 0; r < m->nranks; r++)
    a.win[r] = d->window_peer(w->win, r);
  return a;
}

/* The window's event after whatever e's launches queued, even after a failed one: the next
 * call on another stream must not overtake them. */
static int launched(weft_moe_t m, cudaStream_t st, int e) {
  struct weft_moe_window *w = m->direct;
  if (cudaEventRecord(w->done, st) == cudaSuccess)
    w->recorded = 1, w->last = st;
  else if (e == (int)cudaSuccess)
    e = (int)cudaGetLastError();
  return e;
}

int weft_moe_direct_dispatch(weft_moe_handle_t h, const void *x, const float *wt, void *recv_x,
                             float *recv_w, float *recv_s, cudaStream_t st) {
  weft_moe_k_direct_t a = params(h);
  a.in = x, a.in_w = wt, a.out = recv_x, a.out_w = recv_w, a.out_s = recv_s, a.fp8 = recv_s != NULL;
  return launched(h->moe, st, weft_moe_k_direct_dispatch(&a, st));
}

int weft_moe_direct_combine(weft_moe_handle_t h, const void *rows, const float *wt, void *y,
                            cudaStream_t st) {
  weft_moe_k_direct_t a = params(h);
  a.in = rows, a.in_w = wt, a.out = y;
  return launched(h->moe, st, weft_moe_k_direct_combine(&a, st));
}
