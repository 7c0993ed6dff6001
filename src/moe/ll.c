/* MoE low-latency mode on device communicators whose GPUs map each other (CUDA builds): the
 * layer keeps a window every peer writes into (ll.cu), a few handle slots of device memory
 * sized by max_tokens, and their outcomes in host-mapped memory. Every call is kernels on the
 * caller's stream with no host wait and no allocation, so a CUDA graph can capture it. */
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "err.h"
#include "moe_dev.h"
#include "moe_kernels.h"

enum { LL_SLOTS = 4, SCRATCH = LL_SLOTS };

typedef struct {
  int used;
  void *mem;
  weft_moe_k_llh_t *h;
  int64_t *counts;
  unsigned long long *bad;
  uint64_t *send_off, *send_list, *entries;
  int32_t *pos, *meta;
  int64_t *row_of, *counts_out;
  unsigned long long *mask; /* route's scratch */
  uint32_t *before;
  /* its last call made outside any capture, which weft_moe_finish waits for (the layer's own
   * event may be a capture's) */
  cudaEvent_t done;
  int eager;
} ll_slot_t;

struct weft_moe_ll {
  weft_window_t win;
  char *buf;
  weft_moe_k_geom_t g;
  weft_moe_k_llstate_t *state;
  weft_moe_k_status_t *status_h, *status_d; /* [LL_SLOTS + 1] */
  ll_slot_t slot[LL_SLOTS + 1];             /* the last: refusals of layouts that made no handle */
  /* The layer's calls run in the order made, whatever their streams (every rank counts its
   * rounds in that order): a call on another stream than the last waits for its event, when
   * both are outside any capture or in the same one (an event recorded in a capture means
   * nothing outside it: the graph's stream orders its replays). */
  cudaEvent_t done;
  cudaStream_t last;
  unsigned long long capture; /* the capture the last call was made in, 0 if none */
  int recorded;
};

/* A slot's device arrays for bound tokens, carved from one allocation. */
static int slot_alloc(weft_moe_t m, ll_slot_t *s) {
  size_t n = (size_t)m->nranks, k = (size_t)m->cfg.topk, B = m->cfg.max_tokens;
  size_t E = (size_t)m->cfg.num_experts, w = k < n ? k : n, ent = B * w, masks, before;
  if (!weft_moe_k_route_scratch(B, (int)E, (int)n, &masks, &before)) return -1;
  /* other sizes fit: the geometry already multiplied n * B by a row, and these are smaller */
  size_t bytes[11] = {(E + n + 1) * 8,
                      (n + 1) * 8,
                      B * n * 4,
                      ent * 8,
                      ent * 8,
                      ent * WEFT_MOE_K_META(k) * 8,
                      n * B * k * 8,
                      (size_t)m->local * 8,
                      sizeof(weft_moe_k_llh_t),
                      masks,
                      before};
  void *p[11];
  size_t total;
  if (!weft_moe_dev_staged(bytes, 11, &total) || cudaMalloc(&s->mem, total) != cudaSuccess ||
      cudaMemset(s->mem, 0, total) != cudaSuccess ||
      cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  weft_moe_dev_carve(s->mem, bytes, 11, p);
  s->counts = p[0], s->bad = (unsigned long long *)(s->counts + E + n);
  s->send_off = p[1], s->pos = p[2], s->send_list = p[3], s->entries = p[4], s->meta = p[5];
  s->row_of = p[6], s->counts_out = p[7], s->h = p[8], s->mask = p[9], s->before = p[10];
  return 0;
}

static void ll_free_all(struct weft_moe_ll *ll) {
  for (int i = 0; i <= LL_SLOTS; i++) {
    if (ll->slot[i].mem) cudaFree(ll->slot[i].mem);
    if (ll->slot[i].done) cudaEventDestroy(ll->slot[i].done);
  }
  if (ll->done) cudaEventDestroy(ll->done);
  if (ll->buf) cudaFree(ll->buf);
  if (ll->state) cudaFree(ll->state);
  if (ll->status_h) cudaFreeHost(ll->status_h);
  free(ll);
}

weft_result_t weft_moe_ll_create(weft_moe_t m) {
  const char *fn = "weft_moe_create";
  weft_dev_view_t *d = moe_dev(m);
  m->ll = NULL;
  if (d->host_staged) return WEFT_SUCCESS; /* the bootstrap path serves */
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  struct weft_moe_ll *ll = calloc(1, sizeof *ll);
  int saved = -1, entered = weft_dev_enter(d->device, &saved) == 0;
  size_t ns = (LL_SLOTS + 1) * sizeof(weft_moe_k_status_t);
  if (!ll || !entered) {
    v.code = ll ? MOE_FAILED : MOE_NO_MEM;
  } else if (weft_moe_ll_geometry(m->nranks, m->local, m->cfg.topk,
                                  m->cfg.hidden * weft_dtype_size(m->cfg.dtype), m->cfg.max_tokens,
                                  &ll->g)) {
    v.code = MOE_TOO_BIG, v.a = (int64_t)m->cfg.max_tokens;
  } else if (cudaMalloc((void **)&ll->buf, ll->g.total) != cudaSuccess ||
             cudaMalloc((void **)&ll->state, sizeof *ll->state) != cudaSuccess ||
             cudaHostAlloc((void **)&ll->status_h, ns, cudaHostAllocMapped) != cudaSuccess ||
             cudaHostGetDevicePointer((void **)&ll->status_d, ll->status_h, 0) != cudaSuccess) {
    cudaGetLastError();
    v.code = MOE_NO_MEM;
  } else {
    memset(ll->status_h, 0, ns);
    if (cudaEventCreateWithFlags(&ll->done, cudaEventDisableTiming) != cudaSuccess)
      cudaGetLastError(), ll->done = NULL, v.code = MOE_FAILED;
    for (int i = 0; i <= LL_SLOTS && v.code == MOE_OK; i++)
      if (slot_alloc(m, &ll->slot[i])) v.code = MOE_NO_MEM;
    /* zeroed before any peer can write: registration below is the first it can */
    if (v.code == MOE_OK && (cudaMemset(ll->buf, 0, ll->g.total) != cudaSuccess ||
                             cudaMemset(ll->state, 0, sizeof *ll->state) != cudaSuccess ||
                             cudaDeviceSynchronize() != cudaSuccess))
      cudaGetLastError(), v.code = MOE_FAILED;
  }
  if (v.code == MOE_FAILED) weft_set_error(WEFT_ERR_SYSTEM, "%s: a CUDA call failed", fn);
  weft_result_t rc = weft_moe_agree(m, fn, v);
  if (rc == WEFT_SUCCESS) rc = weft_window_register(m->comm, ll->buf, ll->g.total, &ll->win);
  if (entered) weft_dev_leave(d->device, saved);
  if (rc != WEFT_SUCCESS) {
    if (ll) ll_free_all(ll);
    return rc;
  }
  m->ll = ll;
  return WEFT_SUCCESS;
}

void weft_moe_ll_destroy(weft_moe_t m) {
  struct weft_moe_ll *ll = m->ll;
  if (!ll) return;
  weft_moe_dev_window_close(m, ll->win);
  int saved = -1, entered = weft_dev_enter(moe_dev(m)->device, &saved) == 0;
  ll_free_all(ll);
  if (entered) weft_dev_leave(moe_dev(m)->device, saved);
  m->ll = NULL;
}

/* The kernels' arguments for slot i. */
static weft_moe_k_ll_t params(weft_moe_t m, int i) {
  struct weft_moe_ll *ll = m->ll;
  weft_dev_view_t *d = moe_dev(m);
  ll_slot_t *s = &ll->slot[i];
  weft_moe_k_ll_t a = {.g = ll->g,
                       .rank = m->rank,
                       .nranks = m->nranks,
                       .local = m->local,
                       .k = m->cfg.topk,
                       .experts = m->cfg.num_experts,
                       .dtype = moe_kcode(m->cfg.dtype),
                       .bound = m->cfg.max_tokens,
                       .hidden = m->cfg.hidden,
                       .state = ll->state,
                       .h = s->h,
                       .status = ll->status_d + i,
                       .failed_code = MOE_FAILED,
                       .fp8_code = MOE_FP8_MISMATCH,
                       .counts = s->counts,
                       .pos = s->pos,
                       .meta = s->meta,
                       .send_off = s->send_off,
                       .send_list = s->send_list,
                       .row_of = s->row_of,
                       .counts_out = s->counts_out,
                       .abort_flag = d->abort_flag,
                       .error = d->error,
                       .waiting = d->waiting,
                       .timeout_ns = d->timeout_ns,
                       .report_ns = d->report_ns};
  for (int r = 0; r < m->nranks; r++)
    a.win[r] = d->window_peer(ll->win, r);
  return a;
}

/* The capture st is in, 0 if none. */
static unsigned long long capture_of(cudaStream_t st) {
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
#if CUDART_VERSION >= 13000 /* the call took more outputs in CUDA 13 */
  cudaError_t e = cudaStreamGetCaptureInfo(st, &cs, &id, NULL, NULL, NULL, NULL);
#else
  cudaError_t e = cudaStreamGetCaptureInfo(st, &cs, &id);
#endif
  if (e != cudaSuccess) cudaGetLastError();
  return cs == cudaStreamCaptureStatusActive ? id : 0;
}

/* Orders a call on st after the layer's last, and records it after; -1 on a CUDA error. */
static int call_begin(struct weft_moe_ll *ll, cudaStream_t st) {
  return ll->recorded && ll->last != st && ll->capture == capture_of(st) &&
         cudaStreamWaitEvent(st, ll->done, 0) != cudaSuccess;
}
static int call_end(struct weft_moe_ll *ll, ll_slot_t *s, cudaStream_t st) {
  if (cudaEventRecord(ll->done, st) != cudaSuccess) return -1;
  ll->recorded = 1, ll->last = st, ll->capture = capture_of(st);
  if (!ll->capture) {
    if (cudaEventRecord(s->done, st) != cudaSuccess) return -1;
    s->eager = 1;
  }
  return 0;
}

/* Rank r's refusal v as this rank's error: the message every rank gives for it. */
static weft_result_t judged(weft_moe_t m, const char *fn, int r, weft_moe_verdict_t v) {
  memset(m->verdicts, 0, (size_t)m->nranks * sizeof *m->verdicts);
  m->verdicts[r] = v;
  return weft_moe_judge(m, fn, m->verdicts, sizeof *m->verdicts);
}

static weft_result_t launched(int e, const char *fn) {
  if (e == (int)cudaSuccess) return WEFT_SUCCESS;
  return weft_set_error(WEFT_ERR_SYSTEM, "%s: launching the low-latency kernels: %s", fn,
                        cudaGetErrorString((cudaError_t)e));
}

typedef int (*kernels_t)(const weft_moe_k_ll_t *a, void *stream);

/* Slot i's call a through `run` on st, ordered after the layer's last call; with v refusing,
 * its refusal instead (a's buffers dropped), and this rank's error for it. */
static weft_result_t launch(weft_moe_t m, int i, weft_moe_verdict_t v, const char *fn,
                            weft_moe_k_ll_t *a, kernels_t run, cudaStream_t st) {
  a->code = (int32_t)v.code, a->a = v.a, a->b = v.b, a->c = v.c;
  if (v.code != MOE_OK) a->in = NULL, a->in_w = NULL, a->out = NULL, a->out_w = a->out_s = NULL;
  int e = call_begin(m->ll, st) ? (int)cudaGetLastError() : run(a, st);
  if (e == (int)cudaSuccess && call_end(m->ll, &m->ll->slot[i], st)) e = (int)cudaGetLastError();
  weft_result_t rc = launched(e, fn);
  return v.code != MOE_OK ? judged(m, fn, m->rank, v) : rc;
}

/* Slot i's dispatch (or, with v refusing, its refusal) on st. */
static weft_result_t run_dispatch(weft_moe_t m, int i, weft_moe_verdict_t v, const char *fn,
                                  const void *x, const float *w, void *recv_x, float *recv_w,
                                  float *recv_s, cudaStream_t st, size_t tokens) {
  weft_moe_k_ll_t a = params(m, i);
  a.tokens = tokens, a.fp8 = recv_s != NULL;
  a.in = x, a.in_w = w, a.out = recv_x, a.out_w = recv_w, a.out_s = recv_s;
  return launch(m, i, v, fn, &a, weft_moe_k_ll_dispatch, st);
}

weft_result_t weft_moe_ll_layout(weft_moe_t m, weft_moe_handle_t h, const void *ids, size_t tokens,
                                 weft_moe_verdict_t v, weft_stream_t s) {
  const char *fn = "weft_moe_layout";
  struct weft_moe_ll *ll = m->ll;
  cudaStream_t st = (cudaStream_t)s;
  int saved = -1, i = 0;
  if (weft_dev_enter(moe_dev(m)->device, &saved))
    return weft_set_error(WEFT_ERR_SYSTEM, "%s: cannot make the GPU current", fn);
  while (i < LL_SLOTS && ll->slot[i].used)
    i++;
  if (v.code == MOE_OK && !h) v.code = MOE_NO_MEM;
  if (v.code == MOE_OK && i == LL_SLOTS) v.code = MOE_NO_SLOT, v.a = LL_SLOTS;
  weft_result_t rc;
  if (v.code != MOE_OK) { /* the peers' next dispatch learns of it (and writes nothing) */
    rc = run_dispatch(m, SCRATCH, v, fn, NULL, NULL, NULL, NULL, NULL, st, 0);
    goto out;
  }
  ll_slot_t *sl = &ll->slot[i];
  size_t n = (size_t)m->nranks, k = (size_t)m->cfg.topk;
  weft_moe_k_route_t a = {.ids = ids,
                          .id_bytes = (int)weft_dtype_size(m->cfg.index_type),
                          .k = (int)k,
                          .experts = m->cfg.num_experts,
                          .nranks = (int)n,
                          .local = m->local,
                          .width = (int)(k < n ? k : n),
                          .tokens = tokens,
                          .counts = sl->counts,
                          .bad = sl->bad,
                          .send_off = sl->send_off,
                          .pos = sl->pos,
                          .send_list = sl->send_list,
                          .entries = sl->entries,
                          .meta = sl->meta,
                          .mask = sl->mask,
                          .before = sl->before};
  sl->eager = 0; /* the slot's last holder's calls are not this handle's */
  int e = call_begin(ll, st) ? (int)cudaGetLastError() : weft_moe_k_route(&a, st);
  if (e == (int)cudaSuccess)
    e = weft_moe_k_ll_stamp(sl->h, ll->status_d + i, sl->bad, ids, a.id_bytes, (int)k, a.experts,
                            MOE_BAD_ID, MOE_REPEATED_ID, st);
  if (e == (int)cudaSuccess && call_end(ll, sl, st)) e = (int)cudaGetLastError();
  if ((rc = launched(e, fn)) != WEFT_SUCCESS) goto out;
  sl->used = 1;
  h->ll = i + 1;
  weft_moe_plan_t *p = &h->plan;
  p->nranks = m->nranks, p->local = m->local, p->k = m->cfg.topk, p->tokens = tokens;
  p->rows = (size_t)m->local * n * m->cfg.max_tokens, p->fixed = 1;
out:
  weft_dev_leave(moe_dev(m)->device, saved);
  return rc;
}

weft_result_t weft_moe_ll_dispatch(weft_moe_handle_t h, weft_moe_verdict_t v, const char *fn,
                                   const void *x, const float *w, void *recv_x, float *recv_w,
                                   float *recv_s, weft_stream_t s) {
  weft_moe_t m = h->moe;
  int saved = -1;
  if (weft_dev_enter(moe_dev(m)->device, &saved))
    return weft_set_error(WEFT_ERR_SYSTEM, "%s: cannot make the GPU current", fn);
  weft_result_t rc = run_dispatch(m, h->ll - 1, v, fn, x, w, recv_x, recv_w, recv_s,
                                  (cudaStream_t)s, h->plan.tokens);
  h->dispatched = 1;
  weft_dev_leave(moe_dev(m)->device, saved);
  return rc;
}

weft_result_t weft_moe_ll_combine(weft_moe_handle_t h, weft_moe_verdict_t v, const char *fn,
                                  const void *rows, const float *w, void *y, weft_stream_t s) {
  weft_moe_t m = h->moe;
  int saved = -1, i = h->ll - 1;
  if (weft_dev_enter(moe_dev(m)->device, &saved))
    return weft_set_error(WEFT_ERR_SYSTEM, "%s: cannot make the GPU current", fn);
  weft_moe_k_ll_t a = params(m, i);
  a.tokens = h->plan.tokens, a.in = rows, a.in_w = w, a.out = y;
  weft_result_t rc = launch(m, i, v, fn, &a, weft_moe_k_ll_combine, (cudaStream_t)s);
  weft_dev_leave(moe_dev(m)->device, saved);
  return rc;
}

weft_result_t weft_moe_ll_finish(weft_moe_handle_t h) {
  weft_moe_t m = h->moe;
  struct weft_moe_ll *ll = m->ll;
  int saved = -1, i = h->ll - 1;
  if (weft_dev_enter(moe_dev(m)->device, &saved))
    return weft_set_error(WEFT_ERR_SYSTEM, "weft_moe_finish: cannot make the GPU current");
  /* the handle's last call made outside a capture; after a graph's replay, its caller
   * synchronizes the graph's stream */
  ll_slot_t *sl = &ll->slot[i];
  cudaError_t e = sl->eager ? cudaEventSynchronize(sl->done) : cudaSuccess;
  weft_dev_leave(moe_dev(m)->device, saved);
  if (e != cudaSuccess)
    return weft_set_error(WEFT_ERR_SYSTEM, "weft_moe_finish: %s", cudaGetErrorString(e));
  volatile weft_moe_k_status_t *st = m->ll->status_h + i;
  if (st->code == MOE_OK) return WEFT_SUCCESS;
  const char *fn = st->phase == 2 ? "weft_moe_combine" : "weft_moe_dispatch";
  if (st->code == MOE_FAILED)
    return weft_set_error(WEFT_ERR_TIMEOUT,
                          "%s: rank %d waited in vain for a peer (weft_comm_get_async_error says "
                          "which)",
                          fn, m->rank);
  int r = (int)st->rank;
  if (r < 0 || r >= m->nranks) r = m->rank; /* the kernels write a rank; keep the index safe */
  return judged(m, fn, r, (weft_moe_verdict_t){st->code, st->a, st->b, st->c});
}

weft_result_t weft_moe_ll_counts(weft_moe_handle_t h, int64_t *counts, int64_t *offsets) {
  weft_moe_t m = h->moe;
  size_t block = (size_t)m->nranks * m->cfg.max_tokens;
  if (offsets)
    for (int l = 0; l < m->local; l++)
      offsets[l] = (int64_t)(l * block);
  if (!counts) return WEFT_SUCCESS;
  if (!h->dispatched)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_moe_expert_counts: in low-latency mode on a device communicator "
                          "the counts are known once the handle's dispatch ran");
  CHECK(weft_moe_ll_finish(h));
  int saved = -1;
  if (weft_dev_enter(moe_dev(m)->device, &saved))
    return weft_set_error(WEFT_ERR_SYSTEM, "weft_moe_expert_counts: cannot make the GPU current");
  cudaError_t e = cudaMemcpy(counts, m->ll->slot[h->ll - 1].counts_out,
                             (size_t)m->local * sizeof *counts, cudaMemcpyDeviceToHost);
  weft_dev_leave(moe_dev(m)->device, saved);
  if (e != cudaSuccess)
    return weft_set_error(WEFT_ERR_SYSTEM, "weft_moe_expert_counts: %s", cudaGetErrorString(e));
  return WEFT_SUCCESS;
}

const int64_t *weft_moe_ll_device_counts(weft_moe_handle_t h) {
  return h->moe->ll->slot[h->ll - 1].counts_out;
}

void weft_moe_ll_free(weft_moe_handle_t h) {
  if (h->ll) h->moe->ll->slot[h->ll - 1].used = 0;
  h->ll = 0;
}
