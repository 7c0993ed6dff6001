/* MoE dispatch and combine on device communicators (CUDA builds): the direct path's kernels
 * on the shared window (direct.c) or, staged, kernels around weft's device alltoallv, over the
 * plan device_layout.c left on the GPU, all on the caller's stream with no wait for the GPU
 * (the ranks still trade verdicts over the bootstrap ring before data moves), except that
 * where ranks share a GPU the staged path waits for its packing kernel. Staging comes
 * stream-ordered from the layer's own memory pool. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "checked.h"
#include "comm.h"
#include "err.h"
#include "moe_dev.h"
#include "moe_kernels.h"

int weft_moe_dev_owns(weft_moe_t m, const void *p, size_t bytes) {
  return moe_dev(m)->check_ptr(m->comm, "buffer", p, bytes) == WEFT_SUCCESS;
}

int weft_moe_dev_ring_only(struct weft_comm *comm) {
  const weft_dev_view_t *v = weft_comm_device_view(comm);
  return v && v->ring_only;
}

/* A pool of the layer's own that keeps what it was given: CUDA's default pool hands freed
 * memory back at every synchronisation, and mapping hundreds of MiB of staging again cost
 * more than the copies (one H200: 1-rank dispatch 497 us, most of it that). The pool holds
 * the largest staging the layer used until weft_moe_destroy; the process's default pool is
 * left as the application set it. */
void *weft_moe_dev_pool(weft_moe_t m) {
  struct cudaMemPoolProps props = {
      .allocType = cudaMemAllocationTypePinned,
      .location = {.type = cudaMemLocationTypeDevice, .id = moe_dev(m)->device}};
  cudaMemPool_t pool = NULL;
  uint64_t keep = UINT64_MAX;
  if (cudaMemPoolCreate(&pool, &props) != cudaSuccess) return cudaGetLastError(), NULL;
  if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep) != cudaSuccess) {
    cudaGetLastError();
    cudaMemPoolDestroy(pool);
    return NULL;
  }
  return pool;
}

void weft_moe_dev_pool_free(void *pool) {
  if (pool) cudaMemPoolDestroy((cudaMemPool_t)pool);
}

/* Mapped: with unified addressing (every platform weft's CUDA build supports) kernels use
 * the host pointer as it is. Made with the layer's GPU current, so that no other GPU's
 * context is touched. */
int64_t *weft_moe_dev_routes(weft_moe_t m, size_t n) {
  void *p = NULL;
  int saved = -1;
  if (n > SIZE_MAX / sizeof(int64_t) || weft_dev_enter(moe_dev(m)->device, &saved)) return NULL;
  if (cudaHostAlloc(&p, n * sizeof(int64_t), cudaHostAllocMapped | cudaHostAllocPortable) !=
      cudaSuccess)
    p = NULL, cudaGetLastError();
  else
    memset(p, 0, n * sizeof(int64_t));
  weft_dev_leave(moe_dev(m)->device, saved);
  return p;
}

void weft_moe_dev_routes_free(int64_t *routes) {
  if (routes) cudaFreeHost(routes);
}

void weft_moe_dev_free(weft_moe_handle_t h) {
  moe_dev_t *d = h->dev;
  if (!d) return;
  if (d->block) cudaFreeAsync(d->block, d->last);
  if (d->block2) cudaFreeAsync(d->block2, d->last);
  if (d->done) cudaEventDestroy(d->done);
  if (d->packed) cudaEventDestroy(d->packed);
  free(d->tables);
  free(d);
  h->dev = NULL;
}

const int64_t *weft_moe_dev_counts(weft_moe_handle_t h) {
  return h->dev ? ((moe_dev_t *)h->dev)->counts : NULL;
}

void weft_moe_dev_window_close(weft_moe_t m, weft_window_t win) {
  int saved = -1, entered = weft_dev_enter(moe_dev(m)->device, &saved) == 0;
  cudaDeviceSynchronize();               /* this rank's kernels, graphs' included */
  int32_t all[WEFT_DEV_MAX_RANKS] = {0}; /* a device communicator has at most these */
  all[m->rank] = 1;
  weft_bootstrap_allgather(m->comm->boot, all, sizeof *all);
  weft_window_deregister(m->comm, win);
  if (entered) weft_dev_leave(moe_dev(m)->device, saved);
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
  if (!ok || !weft_moe_dev_staged(bytes, n, &total))
    v.code = MOE_TOO_BIG, v.a = (int64_t)h->plan.tokens;
  else if (!c->cnt)
    v.code = MOE_NO_MEM;
  else if (weft_dev_enter(moe_dev(m)->device, &c->saved))
    v.code = MOE_FAILED;
  else if ((c->entered = 1) && total &&
           cudaMallocFromPoolAsync(&c->block, total, m->pool, st) != cudaSuccess)
    c->block = NULL, v.code = MOE_NO_MEM, cudaGetLastError();
  else if (d->last != st && cudaStreamWaitEvent(st, d->done, 0) != cudaSuccess)
    v.code = MOE_FAILED;
  else if (m->direct && weft_moe_direct_order(m, st))
    v.code = MOE_FAILED;
  if (c->cnt) {
    size_t nr = (size_t)m->nranks;
    c->dsp = c->cnt + nr, c->rcnt = c->cnt + 2 * nr, c->rdsp = c->cnt + 3 * nr;
  }
  weft_moe_dev_carve(c->block, bytes, n, (void **)c->buf);
  if (v.code == MOE_FAILED)
    weft_set_error(WEFT_ERR_SYSTEM, "%s: %s", fn, cudaGetErrorString(cudaGetLastError()));
  return weft_moe_agree(m, fn, v);
}

static void call_end(weft_moe_handle_t h, cudaStream_t st, call_t *c, int ran) {
  moe_dev_t *d = h->dev;
  if (c->block) cudaFreeAsync(c->block, st);
  if (ran && cudaEventRecord(d->done, st) == cudaSuccess) d->last = st;
  if (c->entered) weft_dev_leave(moe_dev(h->moe)->device, c->saved);
  free(c->cnt);
}

/* Ranks sharing one GPU: under MPS a kernel launched after a peer's alltoallv kernel started
 * spinning for this rank's chunks may not be scheduled until that kernel gives up (measured
 * on one H200, 4 ranks: in each of the 8 traced failures, the packing kernel of the last
 * rank to launch ran 5 s late, exactly when a peer's alltoallv timed out; bench/results/
 * 2026-12-03-h200-staged-defect.txt). So there the packing kernel (rc: its launch) finishes
 * on every rank before any rank's alltoallv starts, and a failed one stops every rank. */
static weft_result_t packed_everywhere(weft_moe_handle_t h, cudaStream_t st, weft_result_t rc,
                                       const char *fn) {
  moe_dev_t *d = h->dev;
  if (!d->packed) return rc; /* GPUs of their own: the layout made no event */
  if (rc == WEFT_SUCCESS && (cudaEventRecord(d->packed, st) != cudaSuccess ||
                             cudaEventSynchronize(d->packed) != cudaSuccess))
    rc = weft_set_error(WEFT_ERR_SYSTEM, "%s: packing: %s", fn,
                        cudaGetErrorString(cudaGetLastError()));
  return weft_moe_settle(h->moe, fn, rc);
}

/* The alltoallv counts of one side, `per` elements an entry, without this rank's own entries
 * (they take the direct path). */
static void others(const weft_moe_plan_t *p, int rank, int recv, size_t per, size_t *cnt,
                   size_t *dsp) {
  weft_moe_plan_counts(p, recv, per, cnt, dsp);
  cnt[rank] = 0;
}

static weft_result_t kernel_rc(int e, const char *fn, const char *what) {
  if (e == (int)cudaSuccess) return WEFT_SUCCESS;
  return weft_set_error(WEFT_ERR_SYSTEM, "%s: launching the %s kernel: %s", fn, what,
                        cudaGetErrorString((cudaError_t)e));
}

/* A dispatch's staging (sent entries of `row` bytes and their k weights, the received ones
 * likewise) taken, and the ranks agreed; on failure call_end(.., 0) releases it. */
static weft_result_t dispatch_begin(weft_moe_handle_t h, cudaStream_t st, size_t row, call_t *c,
                                    const char *fn) {
  const weft_moe_plan_t *p = &h->plan;
  size_t n = (size_t)p->nranks, k = (size_t)p->k, ns = p->send_off[n], nr = p->recv_off[n];
  size_t bytes[4];
  int fits[4] = {weft_mul_fits(ns, row, &bytes[0]), weft_mul_fits(ns * k, 4, &bytes[1]),
                 weft_mul_fits(nr, row, &bytes[2]), weft_mul_fits(nr * k, 4, &bytes[3])};
  return call_begin(h, st, bytes, fits, 4, c, fn);
}

/* fp8 dispatch: every entry (this rank's own too) quantized into the staging, as its scales
 * then its e4m3 bytes, and moved with the weights by two alltoallv. */
static weft_result_t dispatch_fp8(weft_moe_handle_t h, const void *x, const float *w,
                                  uint8_t *recv_x, float *recv_w, float *recv_s, weft_stream_t s) {
  const char *fn = "weft_moe_dispatch_fp8";
  const weft_moe_plan_t *p = &h->plan;
  moe_dev_t *d = h->dev;
  weft_moe_t m = h->moe;
  cudaStream_t st = (cudaStream_t)s;
  size_t n = (size_t)p->nranks, k = (size_t)p->k, hid = m->cfg.hidden;
  /* a multiple of 16 bytes an entry: every entry's scales aligned, and the alltoallv moves
   * whole 16-byte units */
  size_t wire = (WEFT_MOE_FP8_BLOCKS(hid) * 4 + hid + 15) / 16 * 16;
  size_t ns = p->send_off[n], nr = p->recv_off[n];
  call_t c;
  weft_result_t rc = dispatch_begin(h, st, wire, &c, fn);
  if (rc != WEFT_SUCCESS) {
    call_end(h, st, &c, 0);
    return rc;
  }
  char **buf = c.buf;
  rc = kernel_rc(weft_moe_k_gather_fp8(moe_kcode(m->cfg.dtype), x, d->send_list, ns, hid, wire,
                                       buf[0], w, (float *)buf[1], (int)k, st),
                 fn, "fp8 gather");
  rc = packed_everywhere(h, st, rc, fn);
  weft_moe_plan_counts(p, 0, wire, c.cnt, c.dsp);
  weft_moe_plan_counts(p, 1, wire, c.rcnt, c.rdsp);
  if (rc == WEFT_SUCCESS)
    rc = weft_alltoallv(buf[0], c.cnt, c.dsp, buf[2], c.rcnt, c.rdsp, WEFT_U8, m->comm, s);
  weft_moe_plan_counts(p, 0, k, c.cnt, c.dsp);
  weft_moe_plan_counts(p, 1, k, c.rcnt, c.rdsp);
  if (rc == WEFT_SUCCESS)
    rc = weft_alltoallv(buf[1], c.cnt, c.dsp, buf[3], c.rcnt, c.rdsp, WEFT_F32, m->comm, s);
  if (rc == WEFT_SUCCESS)
    rc = kernel_rc(weft_moe_k_scatter_fp8(buf[2], (const float *)buf[3], d->row_of, nr, (int)k, hid,
                                          wire, recv_x, recv_s, recv_w, d->pad, d->npad, st),
                   fn, "fp8 scatter");
  call_end(h, st, &c, 1);
  return rc;
}

/* The direct path (direct.c) once the ranks agreed: the padding rows zeroed, then the rounds;
 * recv_s non-NULL: fp8. */
static weft_result_t dispatch_direct(weft_moe_handle_t h, const void *x, const float *w,
                                     void *recv_x, float *recv_w, float *recv_s, cudaStream_t st) {
  const char *fn = recv_s ? "weft_moe_dispatch_fp8" : "weft_moe_dispatch";
  moe_dev_t *d = h->dev;
  weft_moe_t m = h->moe;
  size_t hid = m->cfg.hidden, row = hid * weft_dtype_size(m->cfg.dtype);
  int k = m->cfg.topk;
  call_t c;
  weft_result_t rc = call_begin(h, st, NULL, NULL, 0, &c, fn);
  int agreed = rc == WEFT_SUCCESS;
  if (agreed) {
    weft_moe_k_self_t none = {0};
    int e = recv_s ? weft_moe_k_scatter_fp8(NULL, NULL, NULL, 0, k, hid, 0, recv_x, recv_s, recv_w,
                                            d->pad, d->npad, st)
                   : weft_moe_k_scatter(NULL, NULL, NULL, 0, k, row, recv_x, recv_w, d->pad,
                                        d->npad, none, st);
    rc = kernel_rc(e ? e : weft_moe_direct_dispatch(h, x, w, recv_x, recv_w, recv_s, st), fn,
                   "dispatch");
  }
  call_end(h, st, &c, agreed);
  return rc;
}

weft_result_t weft_moe_dev_dispatch(weft_moe_handle_t h, const void *x, const float *w,
                                    void *recv_x, float *recv_w, float *recv_s, weft_stream_t s) {
  weft_moe_t m = h->moe;
  /* an fp8 slot holds the scales and the bytes within a row's room */
  size_t fp8_bytes = WEFT_MOE_FP8_BLOCKS(m->cfg.hidden) * sizeof(float) + m->cfg.hidden;
  if (m->direct && (!recv_s || fp8_bytes <= m->direct_g.row_pad))
    return dispatch_direct(h, x, w, recv_x, recv_w, recv_s, (cudaStream_t)s);
  if (recv_s) return dispatch_fp8(h, x, w, recv_x, recv_w, recv_s, s);
  const char *fn = "weft_moe_dispatch";
  const weft_moe_plan_t *p = &h->plan;
  moe_dev_t *d = h->dev;
  cudaStream_t st = (cudaStream_t)s;
  size_t n = (size_t)p->nranks, k = (size_t)p->k, hid = m->cfg.hidden;
  size_t row = hid * weft_dtype_size(m->cfg.dtype), ns = p->send_off[n], nr = p->recv_off[n];
  call_t c;
  weft_result_t rc = dispatch_begin(h, st, row, &c, fn);
  if (rc != WEFT_SUCCESS) {
    call_end(h, st, &c, 0);
    return rc;
  }
  char **buf = c.buf;
  /* past here a failure is this rank's alone (a launch, or an alltoallv that failed and
   * told its peers; but see packed_everywhere): weft's own timeouts and notices end the
   * peers' waits */
  int me = m->rank;
  size_t lo = p->send_off[me], hi = p->send_off[me + 1];
  weft_moe_k_self_t own = {p->recv_off[me], p->recv_off[me + 1], x, d->send_list + lo, w, NULL};
  rc = kernel_rc(
      weft_moe_k_gather(x, d->send_list, ns, lo, hi, row, buf[0], w, (float *)buf[1], (int)k, st),
      fn, "gather");
  rc = packed_everywhere(h, st, rc, fn);
  others(p, me, 0, hid, c.cnt, c.dsp);
  others(p, me, 1, hid, c.rcnt, c.rdsp);
  if (rc == WEFT_SUCCESS)
    rc = weft_alltoallv(buf[0], c.cnt, c.dsp, buf[2], c.rcnt, c.rdsp, m->cfg.dtype, m->comm, s);
  others(p, me, 0, k, c.cnt, c.dsp);
  others(p, me, 1, k, c.rcnt, c.rdsp);
  if (rc == WEFT_SUCCESS)
    rc = weft_alltoallv(buf[1], c.cnt, c.dsp, buf[3], c.rcnt, c.rdsp, WEFT_F32, m->comm, s);
  if (rc == WEFT_SUCCESS)
    rc = kernel_rc(weft_moe_k_scatter(buf[2], (const float *)buf[3], d->row_of, nr, (int)k, row,
                                      recv_x, recv_w, d->pad, d->npad, own, st),
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
  if (m->direct) {
    call_t c;
    weft_result_t rc = call_begin(h, st, NULL, NULL, 0, &c, fn);
    int agreed = rc == WEFT_SUCCESS;
    if (agreed) rc = kernel_rc(weft_moe_direct_combine(h, rows, w, y, st), fn, "combine");
    call_end(h, st, &c, agreed);
    return rc;
  }
  size_t n = (size_t)p->nranks, k = (size_t)p->k, hid = m->cfg.hidden;
  size_t row = hid * weft_dtype_size(m->cfg.dtype), ns = p->send_off[n], nr = p->recv_off[n];
  size_t bytes[2];
  int fits[2] = {weft_mul_fits(nr, row, &bytes[0]), weft_mul_fits(ns, row, &bytes[1])};
  int t = moe_kcode(m->cfg.dtype);
  call_t c;
  weft_result_t rc = call_begin(h, st, bytes, fits, 2, &c, fn);
  if (rc != WEFT_SUCCESS) {
    call_end(h, st, &c, 0);
    return rc;
  }
  int me = m->rank;
  weft_moe_k_self_t own = {p->recv_off[me],
                           p->recv_off[me + 1],
                           NULL,
                           NULL,
                           NULL,
                           c.buf[1] ? c.buf[1] + p->send_off[me] * row : NULL};
  rc = kernel_rc(weft_moe_k_partials(t, rows, w, d->row_of, nr, (int)k, hid, c.buf[0], own, st), fn,
                 "partials");
  rc = packed_everywhere(h, st, rc, fn);
  others(p, me, 1, hid, c.cnt, c.dsp);
  others(p, me, 0, hid, c.rcnt, c.rdsp);
  if (rc == WEFT_SUCCESS)
    rc = weft_alltoallv(c.buf[0], c.cnt, c.dsp, c.buf[1], c.rcnt, c.rdsp, m->cfg.dtype, m->comm, s);
  if (rc == WEFT_SUCCESS)
    rc = kernel_rc(weft_moe_k_home(t, c.buf[1], d->entries, d->width, p->tokens, hid, y, st), fn,
                   "home");
  call_end(h, st, &c, 1);
  return rc;
}
