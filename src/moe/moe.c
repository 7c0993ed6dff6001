/* The MoE API: a layer's configuration checked and agreed, each batch's layout exchanged,
 * and dispatch and combine checked on every rank before any data moves (a refusal on one
 * rank is a refusal on all, so that no rank waits for a peer that gave up). */
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "comm.h"
#include "err.h"
#include "moe.h"

/* Why a rank refuses a call, shared with every rank so that all print the same reason. */
enum { OK = 0, BAD_ID, REPEATED_ID, NULL_BUF, MISALIGNED, TOO_BIG, NO_MEM };
static const char *const BUF_NAME[] = {
    "topk_ids", "x", "recv_x", "rows", "y", "topk_weights", "recv_weights", "row_weights"};
enum { B_IDS, B_X, B_RECV_X, B_ROWS, B_Y, B_W, B_RECV_W, B_ROW_W };

typedef struct {
  int64_t code, a, b, c;
} verdict_t;

/* Every rank's verdict: the lowest refusing rank's becomes every rank's error (two small
 * collectives, nothing allocated, so that even an out-of-memory rank takes part). */
static weft_result_t agree(weft_moe_t m, const char *fn, verdict_t mine) {
  int64_t key = mine.code != OK ? m->rank : INT64_MAX, first = 0;
  CHECK(weft_allreduce(&key, &first, 1, WEFT_I64, WEFT_MIN, m->comm, NULL));
  if (first == INT64_MAX) return WEFT_SUCCESS;
  verdict_t v = mine;
  int r = (int)first;
  CHECK(weft_broadcast(&mine, &v, 4, WEFT_I64, r, m->comm, NULL));
  if (v.a < 0 || v.a > B_ROW_W) v.a = 0; /* names a buffer only: keep it in the table */
  switch (v.code) {
  case BAD_ID:
  case REPEATED_ID:
    return weft_set_error(
        WEFT_ERR_INVALID_ARG, "%s: rank %d: token %lld's choice %lld is expert %lld, which %s", fn,
        r, (long long)v.a, (long long)v.b, (long long)v.c,
        v.code == BAD_ID ? "is not in [-1, num_experts)" : "the token already chose");
  case NULL_BUF:
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: rank %d: %s is NULL", fn, r, BUF_NAME[v.a]);
  case MISALIGNED:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: %s is not aligned to its element size (%lld bytes)", fn, r,
                          BUF_NAME[v.a], (long long)v.b);
  case TOO_BIG:
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %d: %lld tokens of this shape "
                          "do not fit in memory's address range",
                          fn, r, (long long)v.a);
  default: return weft_set_error(WEFT_ERR_NO_MEMORY, "%s: rank %d: out of memory", fn, r);
  }
}

static int misaligned(const void *p, size_t align) { return p && (uintptr_t)p % align != 0; }

/* ---- the layer ---- */

/* Fields compared across ranks, in this order. */
static const char *const FIELD[] = {"num_experts", "topk", "hidden", "dtype",
                                    "index_type",  "mode", "align"};
enum { NFIELD = 7 };

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
  if (c->mode == WEFT_MOE_LOW_LATENCY) return "low-latency mode is not built yet";
  size_t row;
  if (!weft_mul_fits(c->hidden, weft_dtype_size(c->dtype), &row))
    return "hidden times the element size overflows";
  return NULL;
}

weft_result_t weft_moe_create(weft_comm_t comm, const weft_moe_config_t *config, weft_moe_t *moe) {
  const char *fn = "weft_moe_create";
  if (!comm || !config || !moe)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: NULL argument", fn);
  *moe = NULL;
  if (config->size < sizeof(weft_moe_config_t))
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: config->size is %zu, not sizeof(weft_moe_config_t) (start from "
                          "WEFT_MOE_CONFIG_INIT)",
                          fn, config->size);
  if (strcmp(comm->engine->name, "host") != 0)
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "%s: MoE on device communicators is not built yet (host buffers only)",
                          fn);
  const weft_moe_config_t *c = config;
  int n = comm->nranks;
  /* every rank's fields and whether it found them valid (its rank + 1, else 0): equal on
   * all ranks exactly when the smallest and the largest are */
  const char *why = config_problem(c, n);
  int64_t mine[NFIELD + 1] = {c->num_experts,
                              c->topk,
                              (int64_t)c->hidden,
                              c->dtype,
                              c->index_type,
                              c->mode,
                              (int64_t)(c->align ? c->align : 1),
                              why ? comm->rank + 1 : 0},
                        lo[NFIELD + 1], hi[NFIELD + 1];
  CHECK(weft_allreduce(mine, lo, NFIELD + 1, WEFT_I64, WEFT_MIN, comm, NULL));
  CHECK(weft_allreduce(mine, hi, NFIELD + 1, WEFT_I64, WEFT_MAX, comm, NULL));
  if (why)
    return weft_set_error(strstr(why, "not built") ? WEFT_ERR_UNSUPPORTED : WEFT_ERR_INVALID_ARG,
                          "%s: %s", fn, why);
  if (hi[NFIELD])
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: rank %lld's config is invalid (its error "
                          "says why)",
                          fn, (long long)hi[NFIELD] - 1);
  for (int f = 0; f < NFIELD; f++)
    if (lo[f] != hi[f])
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "%s: ranks disagree on %s: from %lld to %lld (%lld here, on rank %d)",
                            fn, FIELD[f], (long long)lo[f], (long long)hi[f], (long long)mine[f],
                            comm->rank);
  weft_moe_t m = calloc(1, sizeof *m);
  if (!m) return weft_set_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
  m->comm = comm, m->rank = comm->rank, m->nranks = n, m->cfg = *c;
  m->cfg.size = sizeof m->cfg, m->local = c->num_experts / n;
  if (!m->cfg.align) m->cfg.align = 1;
  *moe = m;
  return WEFT_SUCCESS;
}

weft_result_t weft_moe_destroy(weft_moe_t moe) {
  if (!moe) return WEFT_SUCCESS;
  if (moe->handles)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_moe_destroy: %d handle(s) made from it still live", moe->handles);
  free(moe);
  return WEFT_SUCCESS;
}

/* ---- layout ---- */

/* Waits for a host stream's earlier work: the host path runs within the call. */
static weft_result_t order_after(weft_stream_t stream) {
  return stream ? weft_stream_synchronize(stream) : WEFT_SUCCESS;
}

/* Exchanges who sends what: counts (alltoall), then each sent token's ids (alltoallv). */
static weft_result_t exchange(weft_moe_t m, weft_moe_plan_t *p, const char *fn) {
  size_t n = (size_t)m->nranks, k = (size_t)p->k;
  p->recv_tok = calloc(n, sizeof *p->recv_tok);
  size_t *sc = calloc(4 * n, sizeof *sc), *sd = sc + n, *rc_ = sc + 2 * n, *rd = sc + 3 * n;
  verdict_t v = {OK, 0, 0, 0};
  if (!p->recv_tok || !sc) v.code = NO_MEM;
  weft_result_t rc = agree(m, fn, v);
  if (rc == WEFT_SUCCESS) /* size_t counts as u64: weft_dtype has no size_t */
    rc = weft_alltoall(p->send_tok, p->recv_tok, 1, WEFT_U64, m->comm, NULL);
  if (rc == WEFT_SUCCESS) {
    v.code = weft_moe_plan_recv_alloc(p) ? NO_MEM : OK;
    rc = agree(m, fn, v);
  }
  if (rc == WEFT_SUCCESS) {
    for (size_t r = 0; r < n; r++) /* ids per entry k: extents checked in recv_alloc */
      sc[r] = p->send_tok[r] * k, sd[r] = p->send_off[r] * k, rc_[r] = p->recv_tok[r] * k,
      rd[r] = p->recv_off[r] * k;
    rc = weft_alltoallv(p->send_ids, sc, sd, p->recv_ids, rc_, rd, WEFT_I32, m->comm, NULL);
  }
  free(sc);
  return rc;
}

weft_result_t weft_moe_layout(weft_moe_t moe, const void *topk_ids, size_t tokens,
                              weft_moe_handle_t *handle, weft_stream_t stream) {
  const char *fn = "weft_moe_layout";
  if (!moe || !handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: NULL argument", fn);
  *handle = NULL;
  CHECK(order_after(stream));
  weft_moe_t m = moe;
  size_t k = (size_t)m->cfg.topk, es = weft_dtype_size(m->cfg.index_type), bytes;
  weft_moe_handle_t h = calloc(1, sizeof *h);
  verdict_t v = {OK, 0, 0, 0};
  weft_moe_bad_t bad = {0};
  if (!h)
    v.code = NO_MEM;
  else if (!weft_extent_fits(0, tokens, k * es, &bytes))
    v.code = TOO_BIG, v.a = (int64_t)tokens;
  else if (tokens && !topk_ids)
    v.code = NULL_BUF, v.a = B_IDS;
  else if (misaligned(topk_ids, es))
    v.code = MISALIGNED, v.a = B_IDS, v.b = (int64_t)es;
  else {
    int r = weft_moe_plan_send(&h->plan, m->nranks, m->cfg.num_experts, m->cfg.topk, topk_ids,
                               m->cfg.index_type, tokens, &bad);
    if (r == -1)
      v.code = bad.repeated ? REPEATED_ID : BAD_ID, v.a = bad.token, v.b = bad.slot, v.c = bad.id;
    else if (r)
      v.code = NO_MEM;
  }
  weft_result_t rc = agree(m, fn, v);
  if (rc == WEFT_SUCCESS) rc = exchange(m, &h->plan, fn);
  if (rc == WEFT_SUCCESS) {
    v.code = OK;
    int r = weft_moe_plan_rows(&h->plan, m->rank, m->cfg.align);
    if (r) v.code = r == -1 ? TOO_BIG : NO_MEM, v.a = (int64_t)tokens;
    rc = agree(m, fn, v);
  }
  if (rc != WEFT_SUCCESS) {
    if (h) weft_moe_plan_free(&h->plan);
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
  handle->moe->handles--;
  weft_moe_plan_free(&handle->plan);
  free(handle);
  return WEFT_SUCCESS;
}

weft_result_t weft_moe_recv_rows(weft_moe_handle_t handle, size_t *rows) {
  if (!handle || !rows)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_moe_recv_rows: NULL argument");
  *rows = handle->plan.rows;
  return WEFT_SUCCESS;
}

weft_result_t weft_moe_expert_counts(weft_moe_handle_t handle, int64_t *counts, int64_t *offsets) {
  if (!handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_moe_expert_counts: NULL handle");
  size_t bytes = (size_t)handle->plan.local * sizeof(int64_t);
  if (counts) memcpy(counts, handle->plan.count, bytes);
  if (offsets) memcpy(offsets, handle->plan.offset, bytes);
  return WEFT_SUCCESS;
}

/* ---- dispatch and combine ---- */

/* The local checks of a data call: inputs of `in_rows` rows, outputs of `out_rows`. */
static verdict_t check_bufs(weft_moe_handle_t h, const void *in, int in_name, size_t in_rows,
                            void *out, int out_name, size_t out_rows, const void *w, int w_name) {
  weft_moe_t m = h->moe;
  size_t es = weft_dtype_size(m->cfg.dtype);
  verdict_t v = {OK, 0, 0, 0};
  if (in_rows && !in)
    v.code = NULL_BUF, v.a = in_name;
  else if (out_rows && !out)
    v.code = NULL_BUF, v.a = out_name;
  else if (misaligned(in, es) || misaligned(out, es))
    v.code = MISALIGNED, v.a = misaligned(in, es) ? in_name : out_name, v.b = (int64_t)es;
  else if (misaligned(w, sizeof(float)))
    v.code = MISALIGNED, v.a = w_name, v.b = (int64_t)sizeof(float);
  return v;
}

weft_result_t weft_moe_dispatch(weft_moe_handle_t handle, const void *x, const float *topk_weights,
                                void *recv_x, float *recv_weights, weft_stream_t stream) {
  const char *fn = "weft_moe_dispatch";
  if (!handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: NULL handle", fn);
  CHECK(order_after(stream));
  weft_moe_handle_t h = handle;
  verdict_t v =
      check_bufs(h, x, B_X, h->plan.tokens, recv_x, B_RECV_X, h->plan.rows, topk_weights, B_W);
  if (v.code == OK && misaligned(recv_weights, sizeof(float)))
    v.code = MISALIGNED, v.a = B_RECV_W, v.b = (int64_t)sizeof(float);
  CHECK(agree(h->moe, fn, v));
  return weft_moe_host_dispatch(h, x, topk_weights, recv_x, recv_weights);
}

weft_result_t weft_moe_combine(weft_moe_handle_t handle, const void *rows, const float *row_weights,
                               void *y, weft_stream_t stream) {
  const char *fn = "weft_moe_combine";
  if (!handle) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: NULL handle", fn);
  CHECK(order_after(stream));
  weft_moe_handle_t h = handle;
  verdict_t v =
      check_bufs(h, rows, B_ROWS, h->plan.rows, y, B_Y, h->plan.tokens, row_weights, B_ROW_W);
  CHECK(agree(h->moe, fn, v));
  return weft_moe_host_combine(h, rows, row_weights, y);
}
