/* The MoE API: a layer's configuration checked and agreed, each batch's layout exchanged,
 * and dispatch and combine checked on every rank before any data moves (a refusal on one
 * rank is a refusal on all, so that no rank waits for a peer that gave up). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "checked.h"
#include "comm.h"
#include "err.h"
#include "moe.h"

static const char *const BUF_NAME[] = {"topk_ids",     "x",           "recv_x",
                                       "rows",         "y",           "topk_weights",
                                       "recv_weights", "row_weights", "recv_scales"};
enum { B_IDS, B_X, B_RECV_X, B_ROWS, B_Y, B_W, B_RECV_W, B_ROW_W, B_RECV_S };

/* Every rank's verdict, over the bootstrap ring (host and device communicators alike, and
 * no GPU work): the lowest refusing rank's reason becomes every rank's error. */
weft_result_t weft_moe_agree(weft_moe_t m, const char *fn, weft_moe_verdict_t mine) {
  weft_moe_verdict_t *all = m->verdicts; /* made with the layer: agreeing never allocates */
  all[m->rank] = mine;
  CHECK(weft_bootstrap_allgather(m->comm->boot, all, sizeof *all));
  return weft_moe_judge(m, fn, all, sizeof *all);
}

weft_result_t weft_moe_settle(weft_moe_t m, const char *fn, weft_result_t mine) {
  char why[1024] = "";
  if (mine != WEFT_SUCCESS) snprintf(why, sizeof why, "%s", weft_thread_error());
  weft_moe_verdict_t v = {mine == WEFT_SUCCESS ? MOE_OK : MOE_FAILED, 0, 0, 0};
  weft_result_t rc = weft_moe_agree(m, fn, v);
  return mine != WEFT_SUCCESS ? weft_set_error(mine, "%s", why) : rc;
}

weft_result_t weft_moe_judge(weft_moe_t m, const char *fn, const void *all, size_t stride) {
  int r = 0;
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  for (; r < m->nranks; r++) {
    memcpy(&v, (const char *)all + (size_t)r * stride, sizeof v);
    if (v.code != MOE_OK) break;
  }
  if (r == m->nranks) return WEFT_SUCCESS;
  /* a buffer's name comes from a peer's index: kept inside the table */
  const char *buf = BUF_NAME[v.a >= 0 && v.a <= B_RECV_S ? v.a : 0];
  switch (v.code) {
  case MOE_BAD_ID:
  case MOE_REPEATED_ID:
    return weft_set_error(
        WEFT_ERR_INVALID_ARG, "%s: rank %d: token %lld's choice %lld is expert %lld, which %s", fn,
        r, (long long)v.a, (long long)v.b, (long long)v.c,
        v.code == MOE_BAD_ID ? "is not in [-1, num_experts)" : "the token already chose");
  case MOE_NULL_BUF:
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: rank %d: %s is NULL", fn, r, buf);
  case MOE_NOT_DEVICE:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: %s is not device memory of the communicator's GPU", fn, r,
                          buf);
  case MOE_MISALIGNED:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: %s is not aligned to its element size (%lld bytes)", fn, r,
                          buf, (long long)v.b);
  case MOE_TOO_BIG:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: %lld tokens of this shape "
                          "do not fit in memory's address range",
                          fn, r, (long long)v.a);
  case MOE_OVER_BOUND:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: %lld tokens exceed the low-latency bound of %lld "
                          "(config.max_tokens)",
                          fn, r, (long long)v.a, (long long)v.b);
  case MOE_NO_SLOT:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: %lld low-latency handles are live already (destroy one "
                          "first)",
                          fn, r, (long long)v.a);
  case MOE_FP8_MISMATCH:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: ranks disagree on fp8: rank 0 called %s and rank %d %s", fn,
                          r, v.a ? "weft_moe_dispatch_fp8" : "weft_moe_dispatch", r,
                          v.a ? "weft_moe_dispatch" : "weft_moe_dispatch_fp8");
  case MOE_BUSY:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: the handle's split call is not finished "
                          "(weft_moe_finish first)",
                          fn, r);
  case MOE_FAILED:
    return weft_set_error(WEFT_ERR_SYSTEM,
                          "%s: rank %d: an earlier operation on its stream, or a CUDA call, failed "
                          "(its error says which)",
                          fn, r);
  case MOE_NO_MEM: return weft_set_error(WEFT_ERR_NO_MEMORY, "%s: rank %d: out of memory", fn, r);
  default:
    /* what a rank sends from another collective call: one that failed an earlier call and
     * went on while its peers are still in this one */
    return weft_set_error(WEFT_ERR_MISMATCH,
                          "%s: rank %d answered with %lld, which is no verdict of this call: "
                          "the ranks are in different calls (did one fail an earlier call and "
                          "go on?)",
                          fn, r, (long long)v.code);
  }
}

static int misaligned(const void *p, size_t align) { return p && (uintptr_t)p % align != 0; }

/* ---- the layer ---- */

/* Fields compared across ranks, in this order. */
static const char *const FIELD[] = {"num_experts", "topk", "hidden", "dtype",
                                    "index_type",  "mode", "align",  "max_tokens"};
enum { NFIELD = 8 };

/* What is wrong with c on nranks ranks (NULL: nothing). */
static const char *config_problem(const weft_moe_config_t *c, int nranks) {
  if (c->num_experts < 1 || c->num_experts % nranks)
    return "num_experts must be a positive multiple of the rank count";
  if (c->topk < 1 || c->topk > WEFT_MOE_MAX_TOPK) return "topk must be in 1..WEFT_MOE_MAX_TOPK";
  if (c->topk > c->num_experts) return "topk exceeds num_experts";
  if (c->hidden < 1) return "hidden must be at least 1";
  if (c->dtype != WEFT_F32 && c->dtype != WEFT_F16 && c->dtype != WEFT_BF16)
    return "dtype must be WEFT_F32, WEFT_F16 or WEFT_BF16";
  if (c->index_type != WEFT_I32 && c->index_type != WEFT_I64)
    return "index_type must be WEFT_I32 or WEFT_I64";
  if (c->mode != WEFT_MOE_NORMAL && c->mode != WEFT_MOE_LOW_LATENCY)
    return "mode must be WEFT_MOE_NORMAL or WEFT_MOE_LOW_LATENCY";
  if (c->align > WEFT_MOE_MAX_ALIGN) return "align must be at most WEFT_MOE_MAX_ALIGN rows";
  size_t block, rows;
  if (c->mode == WEFT_MOE_LOW_LATENCY) {
    if (c->max_tokens < 1)
      return "low-latency mode needs max_tokens (the most tokens a rank sends)";
    if (c->align > 1) return "align is for normal mode (low-latency blocks have a fixed size)";
    if (!weft_mul_fits(c->max_tokens, (size_t)nranks, &block) ||
        !weft_mul_fits(block, (size_t)(c->num_experts / nranks), &rows) || rows > INT64_MAX)
      return "max_tokens * num_experts overflows";
  }
  size_t row;
  if (!weft_mul_fits(c->hidden, weft_dtype_size(c->dtype), &row))
    return "hidden times the element size overflows";
  return NULL;
}

weft_result_t weft_moe_create(weft_comm_t comm, const weft_moe_config_t *config, weft_moe_t *moe) {
  const char *fn = "weft_moe_create";
  if (!comm) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  if (moe) *moe = NULL;
  /* every rank's fields and whether it found them valid (rank + 1, else 0), over the
   * bootstrap ring: equal on all ranks exactly when the smallest and the largest are. A
   * rank with a bad argument or no memory still takes part, or its peers would wait. */
  int n = comm->nranks;
  weft_moe_config_t c = WEFT_MOE_CONFIG_INIT;
  const char *why = !config || !moe ? "config or moe is NULL"
                    : config->size < sizeof(weft_moe_config_t)
                        ? "config->size is smaller than sizeof(weft_moe_config_t) (start from "
                          "WEFT_MOE_CONFIG_INIT)"
                        : NULL;
  int device = weft_comm_device_view(comm) != NULL;
  if (!why) c = *config, why = config_problem(&c, n);
  weft_moe_t m = calloc(1, sizeof *m);
  int64_t(*all)[NFIELD + 1] = calloc((size_t)n, sizeof *all);
  if (m) m->verdicts = calloc((size_t)n, sizeof *m->verdicts);
  if (!why && (!m || !m->verdicts)) why = "out of memory";
  if (!why && device) {
    m->comm = comm;
    if (c.num_experts > INT32_MAX - n - MOE_ROUTE_HEAD - 2)
      why = "num_experts is too large for device buffers";
    else if (!(m->pool = weft_moe_dev_pool(m)))
      why = "cannot make a CUDA memory pool on its GPU";
    else if (!(m->routes = weft_moe_dev_routes(m, (size_t)n * moe_route_stride(c.num_experts, n))))
      why = "cannot allocate pinned host memory for the layouts' counts";
  }
  int64_t mine[NFIELD + 1] = {c.num_experts,
                              c.topk,
                              (int64_t)c.hidden,
                              c.dtype,
                              c.index_type,
                              c.mode,
                              (int64_t)(c.align ? c.align : 1),
                              c.mode == WEFT_MOE_LOW_LATENCY ? (int64_t)c.max_tokens : 0,
                              why ? comm->rank + 1 : 0},
                        lo[NFIELD + 1], hi[NFIELD + 1];
  weft_result_t rc = WEFT_SUCCESS;
  int bad_rank = -1;
  /* without this array the rank cannot take part: its peers then fail at their timeout */
  if (!all) ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
  memcpy(all[comm->rank], mine, sizeof mine);
  CHECK_GOTO(weft_bootstrap_allgather(comm->boot, all, sizeof *all), rc, out);
  memcpy(lo, mine, sizeof mine), memcpy(hi, mine, sizeof mine);
  for (int r = 0; r < n; r++) {
    for (int f = 0; f < NFIELD; f++) {
      lo[f] = all[r][f] < lo[f] ? all[r][f] : lo[f];
      hi[f] = all[r][f] > hi[f] ? all[r][f] : hi[f];
    }
    if (all[r][NFIELD] && bad_rank < 0) bad_rank = r;
  }
  if (why) ERR_GOTO(rc, out, WEFT_ERR_INVALID_ARG, "%s: %s", fn, why);
  if (bad_rank >= 0)
    ERR_GOTO(rc, out, WEFT_ERR_INVALID_ARG,
             "%s: rank %d's config or arguments are invalid (its error says why)", fn, bad_rank);
  for (int f = 0; f < NFIELD; f++)
    if (lo[f] != hi[f])
      ERR_GOTO(rc, out, WEFT_ERR_INVALID_ARG,
               "%s: ranks disagree on %s: from %lld to %lld (%lld here, on rank %d)", fn, FIELD[f],
               (long long)lo[f], (long long)hi[f], (long long)mine[f], comm->rank);
  if (device && weft_moe_dev_ring_only(comm)) /* alike on every rank */
    ERR_GOTO(rc, out, WEFT_ERR_UNSUPPORTED,
             "%s: a device communicator of %d ranks reaches only ring neighbours (past %d "
             "ranks, docs/hosts.md); MoE needs every rank to reach every other",
             fn, n, WEFT_DEV_MAX_RANKS);
  m->comm = comm, m->rank = comm->rank, m->nranks = n, m->cfg = c;
  m->device = device;
  m->cfg.size = sizeof m->cfg, m->local = c.num_experts / n;
  if (!m->cfg.align) m->cfg.align = 1;
  /* low-latency mode on device buffers: a window, so that no call waits on the host */
  if (device && c.mode == WEFT_MOE_LOW_LATENCY) CHECK_GOTO(weft_moe_ll_create(m), rc, out);
  if (device && c.mode == WEFT_MOE_NORMAL) CHECK_GOTO(weft_moe_direct_create(m), rc, out);
  *moe = m, m = NULL;
out:
  if (m) weft_moe_dev_pool_free(m->pool), free(m->verdicts), weft_moe_dev_routes_free(m->routes);
  free(m);
  free(all);
  return rc;
}

weft_result_t weft_moe_destroy(weft_moe_t moe) {
  if (!moe) return WEFT_SUCCESS;
  if (moe->handles)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_moe_destroy: %d handle(s) made from it still live", moe->handles);
  weft_moe_ll_destroy(moe);
  weft_moe_direct_destroy(moe);
  weft_moe_dev_pool_free(moe->pool);
  free(moe->verdicts);
  weft_moe_dev_routes_free(moe->routes);
  free(moe);
  return WEFT_SUCCESS;
}

/* ---- layout ---- */

/* Waits for a host stream's earlier work (the host path runs within the call); -1 when that
 * work failed. Device streams order themselves. */
static int order_after(weft_moe_t m, weft_stream_t stream) {
  return !m->device && stream && weft_stream_synchronize(stream) != WEFT_SUCCESS ? -1 : 0;
}

weft_result_t weft_moe_layout(weft_moe_t moe, const void *topk_ids, size_t tokens,
                              weft_moe_handle_t *handle, weft_stream_t stream) {
  const char *fn = "weft_moe_layout";
  if (!moe || !handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: NULL argument", fn);
  *handle = NULL;
  weft_moe_t m = moe;
  size_t k = (size_t)m->cfg.topk, es = weft_dtype_size(m->cfg.index_type), bytes = 0;
  weft_moe_handle_t h = calloc(1, sizeof *h);
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  weft_moe_bad_t bad = {0};
  weft_result_t rc;
  if (!h)
    v.code = MOE_NO_MEM;
  else if (order_after(m, stream))
    v.code = MOE_FAILED;
  else if (!weft_extent_fits(0, tokens, k * es, &bytes))
    v.code = MOE_TOO_BIG, v.a = (int64_t)tokens;
  else if (m->cfg.mode == WEFT_MOE_LOW_LATENCY && tokens > m->cfg.max_tokens)
    v.code = MOE_OVER_BOUND, v.a = (int64_t)tokens, v.b = (int64_t)m->cfg.max_tokens;
  else if (tokens && !topk_ids)
    v.code = MOE_NULL_BUF, v.a = B_IDS;
  else if (misaligned(topk_ids, es))
    v.code = MOE_MISALIGNED, v.a = B_IDS, v.b = (int64_t)es;
  else if (m->device && tokens && !weft_moe_dev_owns(m, topk_ids, bytes))
    v.code = MOE_NOT_DEVICE, v.a = B_IDS;
  if (m->ll) {
    if (h) h->moe = m;
    rc = weft_moe_ll_layout(m, h, topk_ids, tokens, v, stream);
    goto done;
  }
  if (m->device) {
    if (h) h->moe = m;
    /* the GPU reads the ids; the ranks then agree once, on verdicts and counts together */
    rc = weft_moe_dev_layout(m, h, topk_ids, tokens, v, stream);
    goto done;
  }
  if (v.code == MOE_OK) {
    int r = weft_moe_plan_send(&h->plan, m->nranks, m->cfg.num_experts, m->cfg.topk, topk_ids,
                               m->cfg.index_type, tokens, &bad);
    if (r == -1)
      v.code = bad.repeated ? MOE_REPEATED_ID : MOE_BAD_ID, v.a = bad.token, v.b = bad.slot,
      v.c = bad.id;
    else if (r)
      v.code = MOE_NO_MEM;
  }
  rc = weft_moe_agree(m, fn, v);
  if (rc == WEFT_SUCCESS) rc = weft_moe_exchange(m, &h->plan, fn);
  if (rc == WEFT_SUCCESS) {
    size_t block = m->cfg.mode == WEFT_MOE_LOW_LATENCY ? m->cfg.max_tokens * (size_t)m->nranks : 0;
    int r = weft_moe_plan_rows(&h->plan, m->rank, m->cfg.align, block);
    v.code = r == -1 ? MOE_TOO_BIG : r ? MOE_NO_MEM : MOE_OK, v.a = (int64_t)tokens;
    rc = weft_moe_agree(m, fn, v);
  }
done:
  if (rc != WEFT_SUCCESS) {
    if (h) weft_moe_dev_free(h), weft_moe_plan_free(&h->plan);
    free(h);
    return rc;
  }
  h->moe = m;
  m->handles++;
  *handle = h;
  return WEFT_SUCCESS;
}

weft_result_t weft_moe_handle_destroy(weft_moe_handle_t handle) {
  if (!handle) return WEFT_SUCCESS;
  weft_result_t rc = weft_moe_host_finish(handle); /* a split call's exchange may still run */
  handle->moe->handles--;
  weft_moe_ll_free(handle);
  weft_moe_dev_free(handle);
  weft_moe_plan_free(&handle->plan);
  free(handle);
  return rc;
}

weft_result_t weft_moe_recv_rows(weft_moe_handle_t handle, size_t *rows) {
  if (!handle || !rows)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_moe_recv_rows: NULL argument");
  *rows = handle->plan.rows;
  return WEFT_SUCCESS;
}

weft_result_t weft_moe_expert_counts(weft_moe_handle_t handle, int64_t *counts, int64_t *offsets) {
  if (!handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_moe_expert_counts: NULL handle");
  if (handle->ll) return weft_moe_ll_counts(handle, counts, offsets);
  size_t bytes = (size_t)handle->plan.local * sizeof(int64_t);
  if (counts) memcpy(counts, handle->plan.count, bytes);
  if (offsets) memcpy(offsets, handle->plan.offset, bytes);
  return WEFT_SUCCESS;
}

weft_result_t weft_moe_device_counts(weft_moe_handle_t handle, const int64_t **counts) {
  if (!handle || !counts)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_moe_device_counts: NULL argument");
  *counts = NULL;
  if (!handle->moe->device)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_moe_device_counts: a host communicator's counts are on the host "
                          "(weft_moe_expert_counts)");
  *counts = handle->ll ? weft_moe_ll_device_counts(handle) : weft_moe_dev_counts(handle);
  return WEFT_SUCCESS;
}

/* ---- dispatch and combine ---- */

/* A buffer of a data call: `need`ed when its extent is not empty. */
typedef struct {
  const void *p;
  int name, need;
  size_t rows, row_bytes, align;
} buf_t;

/* The local checks of a data call, in the order given. */
static weft_moe_verdict_t check_bufs(weft_moe_t m, const buf_t *b, int nb) {
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  for (int i = 0; i < nb && v.code == MOE_OK; i++) {
    size_t bytes;
    v.a = b[i].name;
    if (!weft_mul_fits(b[i].rows, b[i].row_bytes, &bytes))
      v.code = MOE_TOO_BIG, v.a = (int64_t)b[i].rows;
    else if (b[i].need && bytes && !b[i].p)
      v.code = MOE_NULL_BUF;
    else if (misaligned(b[i].p, b[i].align))
      v.code = MOE_MISALIGNED, v.b = (int64_t)b[i].align;
    else if (m->device && b[i].p && bytes && !weft_moe_dev_owns(m, b[i].p, bytes))
      v.code = MOE_NOT_DEVICE;
  }
  return v;
}

/* A checked and agreed call's end: started (split), or finished here. */
static weft_result_t run_call(weft_moe_handle_t h, weft_result_t started, int split) {
  if (started != WEFT_SUCCESS) return started;
  if (split) return h->busy = 1, WEFT_SUCCESS;
  return h->moe->device ? WEFT_SUCCESS : weft_moe_host_finish(h);
}

/* fp8: recv_x holds e4m3 rows, recv_s their scales (else NULL) */
static weft_result_t dispatch_call(weft_moe_handle_t handle, const void *x,
                                   const float *topk_weights, void *recv_x, float *recv_weights,
                                   float *recv_s, int fp8, weft_stream_t stream, int split) {
  const char *fn = fp8     ? "weft_moe_dispatch_fp8"
                   : split ? "weft_moe_dispatch_start"
                           : "weft_moe_dispatch";
  if (!handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: NULL handle", fn);
  weft_moe_handle_t h = handle;
  weft_moe_t m = h->moe;
  size_t es = weft_dtype_size(m->cfg.dtype), row = m->cfg.hidden * es, k = (size_t)m->cfg.topk;
  size_t hid = m->cfg.hidden, nb = WEFT_MOE_FP8_BLOCKS(hid);
  const buf_t b[] = {{x, B_X, 1, h->plan.tokens, row, es},
                     {recv_x, B_RECV_X, 1, h->plan.rows, fp8 ? hid : row, fp8 ? 1 : es},
                     {topk_weights, B_W, 0, h->plan.tokens, k * sizeof(float), sizeof(float)},
                     {recv_weights, B_RECV_W, 0, h->plan.rows, sizeof(float), sizeof(float)},
                     {recv_s, B_RECV_S, 1, h->plan.rows, nb * sizeof(float), sizeof(float)}};
  weft_moe_verdict_t v = check_bufs(m, b, fp8 ? 5 : 4);
  if (v.code == MOE_OK && h->busy) v.code = MOE_BUSY;
  if (h->ll) /* no agreement on the host: a refusal travels with the data */
    return run_call(
        h, weft_moe_ll_dispatch(h, v, fn, x, topk_weights, recv_x, recv_weights, recv_s, stream),
        split);
  if (v.code == MOE_OK && order_after(m, stream)) v.code = MOE_FAILED;
  if (v.code == MOE_OK) v.a = fp8;
  CHECK(weft_moe_agree(m, fn, v));
  /* both kinds move the same entries, so only the agreement can tell that ranks called
   * different ones: every rank sees the same verdicts and refuses alike */
  for (int r = 1; r < m->nranks; r++)
    if (m->verdicts[r].a != m->verdicts[0].a) {
      m->verdicts[r] = (weft_moe_verdict_t){MOE_FP8_MISMATCH, m->verdicts[0].a, 0, 0};
      return weft_moe_judge(m, fn, m->verdicts, sizeof *m->verdicts);
    }
  return run_call(
      h,
      m->device ? weft_moe_dev_dispatch(h, x, topk_weights, recv_x, recv_weights, recv_s, stream)
                : weft_moe_host_dispatch(h, x, topk_weights, recv_x, recv_weights, recv_s),
      split);
}

static weft_result_t combine_call(weft_moe_handle_t handle, const void *rows,
                                  const float *row_weights, void *y, weft_stream_t stream,
                                  int split) {
  const char *fn = split ? "weft_moe_combine_start" : "weft_moe_combine";
  if (!handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: NULL handle", fn);
  weft_moe_handle_t h = handle;
  weft_moe_t m = h->moe;
  size_t es = weft_dtype_size(m->cfg.dtype), row = m->cfg.hidden * es;
  const buf_t b[] = {{rows, B_ROWS, 1, h->plan.rows, row, es},
                     {y, B_Y, 1, h->plan.tokens, row, es},
                     {row_weights, B_ROW_W, 0, h->plan.rows, sizeof(float), sizeof(float)}};
  weft_moe_verdict_t v = check_bufs(m, b, 3);
  if (v.code == MOE_OK && h->busy) v.code = MOE_BUSY;
  if (h->ll) {
    if (!h->dispatched) /* every rank's program makes the same mistake: nothing to tell them */
      return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: the handle's dispatch has not run", fn);
    return run_call(h, weft_moe_ll_combine(h, v, fn, rows, row_weights, y, stream), split);
  }
  if (v.code == MOE_OK && order_after(m, stream)) v.code = MOE_FAILED;
  CHECK(weft_moe_agree(m, fn, v));
  return run_call(h,
                  m->device ? weft_moe_dev_combine(h, rows, row_weights, y, stream)
                            : weft_moe_host_combine(h, rows, row_weights, y),
                  split);
}

weft_result_t weft_moe_dispatch(weft_moe_handle_t handle, const void *x, const float *topk_weights,
                                void *recv_x, float *recv_weights, weft_stream_t stream) {
  return dispatch_call(handle, x, topk_weights, recv_x, recv_weights, NULL, 0, stream, 0);
}

weft_result_t weft_moe_dispatch_fp8(weft_moe_handle_t handle, const void *x,
                                    const float *topk_weights, uint8_t *recv_x8, float *recv_scales,
                                    float *recv_weights, weft_stream_t stream) {
  return dispatch_call(handle, x, topk_weights, recv_x8, recv_weights, recv_scales, 1, stream, 0);
}

weft_result_t weft_moe_dispatch_start(weft_moe_handle_t handle, const void *x,
                                      const float *topk_weights, void *recv_x, float *recv_weights,
                                      weft_stream_t stream) {
  return dispatch_call(handle, x, topk_weights, recv_x, recv_weights, NULL, 0, stream, 1);
}

weft_result_t weft_moe_combine(weft_moe_handle_t handle, const void *rows, const float *row_weights,
                               void *y, weft_stream_t stream) {
  return combine_call(handle, rows, row_weights, y, stream, 0);
}

weft_result_t weft_moe_combine_start(weft_moe_handle_t handle, const void *rows,
                                     const float *row_weights, void *y, weft_stream_t stream) {
  return combine_call(handle, rows, row_weights, y, stream, 1);
}

weft_result_t weft_moe_finish(weft_moe_handle_t handle) {
  if (!handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_moe_finish: NULL handle");
  handle->busy = 0;
  if (handle->ll) return weft_moe_ll_finish(handle);
  return weft_moe_host_finish(handle); /* device calls: the stream orders their outputs */
}
