/* Normal mode's direct path on device communicators whose GPUs map each other (CUDA builds):
 * the layer registers a window of WEFT_MOE_WINDOW_BYTES that every peer writes into, and a
 * dispatch or combine is its kernels' rounds (direct.cu) on the caller's stream, after the
 * ranks agreed to go on (device.c). Without windows, or with the variable at 0, device.c's
 * staged path serves. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "comm.h"
#include "err.h"
#include "moe_dev.h"
#include "moe_kernels.h"
#include "param.h"
#include "window.h"

enum { MAX_CHUNK = 8192 }; /* tokens a round: past this, rounds no longer cost anything seen */

struct weft_moe_direct {
  weft_window_t win;
  char *buf;
  weft_moe_k_geom_t g;
  uint64_t chunk;
  weft_moe_k_dstate_t *state;
  /* the layer's calls run in the order made, whatever their streams (every rank counts its
   * rounds in that order): a call on another stream than the last waits for its event */
  cudaEvent_t done;
  cudaStream_t last;
  int recorded;
};

/* The chunk a window of `budget` bytes holds (0: none fits), and its geometry. */
static uint64_t chunk_for(weft_moe_t m, size_t budget, weft_moe_k_geom_t *g) {
  size_t row = m->cfg.hidden * weft_dtype_size(m->cfg.dtype), n = (size_t)m->nranks;
  if (weft_moe_ll_geometry(m->nranks, m->local, m->cfg.topk, row, 1, g)) return 0;
  size_t per = n * (g->slot_bytes + g->row_pad); /* a token more from each source */
  if (budget < g->total) return 0;
  uint64_t c = 1 + (budget - g->total) / per;
  c = c < MAX_CHUNK ? c : MAX_CHUNK;
  return weft_moe_ll_geometry(m->nranks, m->local, m->cfg.topk, row, c, g) ? 0 : c;
}

static void direct_free(struct weft_moe_direct *w) {
  if (w->done) cudaEventDestroy(w->done);
  if (w->buf) cudaFree(w->buf);
  if (w->state) cudaFree(w->state);
  free(w);
}

weft_result_t weft_moe_direct_create(weft_moe_t m) {
  const char *fn = "weft_moe_create";
  struct weft_dev *d = moe_dev(m);
  m->direct = NULL;
  size_t budget = (size_t)weft_param_get_int(WEFT_PARAM_MOE_WINDOW_BYTES);
  weft_moe_k_geom_t g;
  uint64_t chunk = budget ? chunk_for(m, budget, &g) : 0;
  /* alike on every rank: the variable is agreed, and so is the config */
  if (weft_ipc_host_staged(d->ipc) || !chunk) return WEFT_SUCCESS;
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  struct weft_moe_direct *w = calloc(1, sizeof *w);
  int saved = -1, entered = weft_dev_enter(d->device, &saved) == 0;
  if (!w || !entered) {
    v.code = w ? MOE_FAILED : MOE_NO_MEM;
  } else {
    w->g = g, w->chunk = chunk;
    if (cudaMalloc((void **)&w->buf, g.total) != cudaSuccess ||
        cudaMalloc((void **)&w->state, sizeof *w->state) != cudaSuccess)
      cudaGetLastError(), v.code = MOE_NO_MEM;
    else if (cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming) != cudaSuccess)
      cudaGetLastError(), w->done = NULL, v.code = MOE_FAILED;
    /* zeroed before any peer can write: registration below is the first it can */
    else if (cudaMemset(w->buf, 0, g.total) != cudaSuccess ||
             cudaMemset(w->state, 0, sizeof *w->state) != cudaSuccess ||
             cudaDeviceSynchronize() != cudaSuccess)
      cudaGetLastError(), v.code = MOE_FAILED;
  }
  weft_result_t rc = weft_moe_agree(m, fn, v);
  int agreed = rc == WEFT_SUCCESS;
  if (agreed) rc = weft_window_register(m->comm, w->buf, g.total, &w->win);
  if (entered) weft_dev_leave(d->device, saved);
  if (rc == WEFT_SUCCESS) {
    m->direct = w;
    return WEFT_SUCCESS;
  }
  if (w) direct_free(w);
  if (agreed) return rc; /* the registration failed, on every rank */
  /* a rank short of memory: every rank takes the staged path, which holds none */
  WEFT_WARN(WEFT_SUB_COLL, "%s: no MoE window (%s); dispatch and combine go through staging", fn,
            weft_thread_error());
  return WEFT_SUCCESS;
}

void weft_moe_direct_destroy(weft_moe_t m) {
  struct weft_moe_direct *w = m->direct;
  if (!w) return;
  int saved = -1, entered = weft_dev_enter(moe_dev(m)->device, &saved) == 0;
  cudaDeviceSynchronize();
  /* the peers' last acks land in our window after our own kernels end: free it only once
   * every rank's kernels have */
  int32_t all[WEFT_DEV_MAX_RANKS] = {0};
  all[m->rank] = 1;
  weft_bootstrap_allgather(m->comm->boot, all, sizeof *all);
  weft_window_deregister(m->comm, w->win);
  direct_free(w);
  if (entered) weft_dev_leave(moe_dev(m)->device, saved);
  m->direct = NULL;
}

int weft_moe_direct_order(weft_moe_t m, cudaStream_t st) {
  struct weft_moe_direct *w = m->direct;
  return w->recorded && w->last != st && cudaStreamWaitEvent(st, w->done, 0) != cudaSuccess;
}

/* The kernels' arguments for h's call. */
static weft_moe_k_direct_t params(weft_moe_handle_t h) {
  weft_moe_t m = h->moe;
  struct weft_moe_direct *w = m->direct;
  struct weft_dev *d = moe_dev(m);
  const moe_dev_t *p = h->dev;
  weft_moe_k_direct_t a = {.g = w->g,
                           .rank = m->rank,
                           .nranks = m->nranks,
                           .k = m->cfg.topk,
                           .dtype = m->cfg.dtype == WEFT_F32   ? WEFT_MOE_K_F32
                                    : m->cfg.dtype == WEFT_F16 ? WEFT_MOE_K_F16
                                                               : WEFT_MOE_K_BF16,
                           .chunk = w->chunk,
                           .hidden = m->cfg.hidden,
                           .tokens = h->plan.tokens,
                           .max_tokens = p->max_tokens,
                           .state = w->state,
                           .pos = p->pos,
                           .recv_off = p->recv_off,
                           .row_of = p->row_of,
                           .tok_of = p->tok_of,
                           .abort_flag = d->abort_d,
                           .error = d->err_d,
                           .timeout_ns = d->launch.timeout_ns};
  for (int r = 0; r < m->nranks; r++)
    a.win[r] = weft_window_peer(w->win, r);
  return a;
}

static int launched(weft_moe_t m, cudaStream_t st, int e) {
  struct weft_moe_direct *w = m->direct;
  if (e == (int)cudaSuccess && cudaEventRecord(w->done, st) != cudaSuccess)
    e = (int)cudaGetLastError();
  if (e == (int)cudaSuccess) w->recorded = 1, w->last = st;
  return e;
}

int weft_moe_direct_dispatch(weft_moe_handle_t h, const void *x, const float *wt, void *recv_x,
                             float *recv_w, cudaStream_t st) {
  weft_moe_k_direct_t a = params(h);
  a.in = x, a.in_w = wt, a.out = recv_x, a.out_w = recv_w;
  return launched(h->moe, st, weft_moe_k_direct_dispatch(&a, st));
}

int weft_moe_direct_combine(weft_moe_handle_t h, const void *rows, const float *wt, void *y,
                            cudaStream_t st) {
  weft_moe_k_direct_t a = params(h);
  a.in = rows, a.in_w = wt, a.out = y;
  return launched(h->moe, st, weft_moe_k_direct_combine(&a, st));
}
