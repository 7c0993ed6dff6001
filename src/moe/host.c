/* MoE data movement for host buffers: dispatch packs each token once per destination rank,
 * moves the rows and the weights with alltoallv, and copies every received token into the
 * rows of its local experts; combine sums a token's local rows with their weights (f32),
 * sends that partial home, and sums the partials into token order. Each call is two halves:
 * its start packs and queues the alltoallvs on a host stream of its own, so the caller may
 * compute while they run; weft_moe_host_finish waits for them and writes the outputs. */
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "dtype.h"
#include "err.h"
#include "moe.h"

_Static_assert(sizeof(size_t) == sizeof(uint64_t), "counts travel as WEFT_U64");

/* bf16 inline (a shift each way, rounding to nearest even), so that the row loops below
 * vectorise; f16 through dtype.c. */
static inline float bf16_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* acc[i] += w * src[i] for a row of t */
static void axpy_row(weft_dtype_t t, float w, const void *src, float *acc, size_t n) {
  if (t == WEFT_F32) {
    const float *s = src;
    for (size_t i = 0; i < n; i++)
      acc[i] += w * s[i];
  } else if (t == WEFT_BF16) {
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++)
      acc[i] += w * bf16_f32(s[i]);
  } else {
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++)
      acc[i] += w * weft_f16_to_f32(s[i]);
  }
}

static void from_f32(weft_dtype_t t, const float *src, void *dst, size_t n) {
  if (t == WEFT_F32) {
    memcpy(dst, src, n * sizeof *src);
  } else if (t == WEFT_BF16) {
    for (size_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = weft_f32_to_bf16(src[i]);
  } else {
    for (size_t i = 0; i < n; i++)
      ((uint16_t *)dst)[i] = weft_f32_to_f16(src[i]);
  }
}

/* malloc(a * b) that refuses a product past size_t (never 0 bytes, so NULL means failure). */
static void *alloc2(size_t a, size_t b) {
  size_t bytes;
  if (!weft_mul_fits(a ? a : 1, b ? b : 1, &bytes)) return NULL;
  return malloc(bytes);
}

/* A started call: its staging (kept until the exchange is done with it), its stream and
 * where the finish writes. Dispatch: sbuf/rbuf the packed tokens, sw/rw their weights;
 * combine: sbuf/rbuf the partial sums sent and received, yacc y's f32 sums. */
typedef struct {
  int combine;
  weft_stream_t s;
  char *sbuf, *rbuf;
  float *sw, *rw, *yacc;
  size_t *cnt; /* two alltoallvs' counts and displacements: [8][nranks] */
  void *out;   /* recv_x or y */
  float *out_w;
  float *out_s; /* fp8 dispatch: the rows' scales (recv_x then holds e4m3) */
} pending_t;

static void pending_free(pending_t *q) {
  if (!q) return;
  if (q->s) weft_stream_destroy(q->s); /* waits: the queue may still use the staging */
  free(q->sbuf), free(q->rbuf), free(q->sw), free(q->rw), free(q->yacc), free(q->cnt);
  free(q);
}

/* Every rank allocates its staging before any moves data: a rank short of memory that
 * skipped the exchanges would leave its peers waiting in them, so it fails them all. */
static weft_result_t all_allocated(weft_moe_t m, const char *fn, int ok_here) {
  weft_moe_verdict_t v = {ok_here ? MOE_OK : MOE_NO_MEM, 0, 0, 0};
  return weft_moe_agree(m, fn, v);
}

/* The call's state with its counts and stream; NULL when out of memory. */
static pending_t *pending_new(int nranks, int combine) {
  pending_t *q = calloc(1, sizeof *q);
  if (!q) return NULL;
  q->combine = combine;
  q->cnt = calloc(8 * (size_t)nranks, sizeof *q->cnt);
  if (!q->cnt || weft_stream_create(&q->s) != WEFT_SUCCESS) {
    q->s = NULL;
    pending_free(q);
    return NULL;
  }
  return q;
}

/* Queues an alltoallv of the plan's entries, per elements each, sent from the send side
 * (reverse: from the receive side, as combine does) with count set `set` (0 or 1) of q. */
static weft_result_t queue_a2a(weft_moe_handle_t h, pending_t *q, int set, int reverse,
                               const void *src, void *dst, size_t per, weft_dtype_t t) {
  size_t n = (size_t)h->moe->nranks, *c = q->cnt + (size_t)set * 4 * n;
  weft_moe_plan_counts(&h->plan, reverse, per, c, c + n);
  weft_moe_plan_counts(&h->plan, !reverse, per, c + 2 * n, c + 3 * n);
  return weft_alltoallv(src, c, c + n, dst, c + 2 * n, c + 3 * n, t, h->moe->comm, q->s);
}

/* The start's end: q pending on h, or (a queueing failed) dropped after what was queued. */
static weft_result_t started(weft_moe_handle_t h, pending_t *q, weft_result_t rc) {
  if (rc == WEFT_SUCCESS)
    h->pending = q;
  else
    pending_free(q);
  return rc;
}

/* What a row travels as: the token in config.dtype, or (fp8) its hidden e4m3 bytes then
 * its scales. */
static size_t wire_row(weft_moe_t m, int fp8) {
  size_t hid = m->cfg.hidden;
  return fp8 ? hid + WEFT_MOE_FP8_BLOCKS(hid) * sizeof(float) : hid * weft_dtype_size(m->cfg.dtype);
}

weft_result_t weft_moe_host_dispatch(weft_moe_handle_t h, const void *x, const float *w,
                                     void *recv_x, float *recv_w, float *recv_s) {
  const weft_moe_plan_t *p = &h->plan;
  weft_moe_t m = h->moe;
  int n = m->nranks, fp8 = recv_s != NULL;
  size_t k = (size_t)p->k, hid = m->cfg.hidden, row = hid * weft_dtype_size(m->cfg.dtype);
  size_t ns = p->send_off[n], nr = p->recv_off[n], wire = wire_row(m, fp8);
  size_t nb = WEFT_MOE_FP8_BLOCKS(hid);
  pending_t *q = pending_new(n, 0);
  float *scales = fp8 ? alloc2(nb, sizeof(float)) : NULL;
  if (q) {
    q->sbuf = alloc2(ns, wire), q->rbuf = alloc2(nr, wire);
    q->sw = alloc2(ns * k, sizeof(float)), q->rw = alloc2(nr * k, sizeof(float));
  }
  weft_result_t rc = all_allocated(m, fp8 ? "weft_moe_dispatch_fp8" : "weft_moe_dispatch",
                                   q && q->sbuf && q->rbuf && q->sw && q->rw && (!fp8 || scales));
  if (rc != WEFT_SUCCESS) return free(scales), pending_free(q), rc;
  for (size_t e = 0; e < ns; e++) {
    size_t t = p->send_list[e];
    char *to = q->sbuf + e * wire;
    if (fp8) { /* the scales after the bytes: unaligned, so copied */
      weft_moe_fp8_row(m->cfg.dtype, (const char *)x + t * row, hid, (uint8_t *)to, scales);
      memcpy(to + hid, scales, nb * sizeof *scales);
    } else {
      memcpy(to, (const char *)x + t * row, row);
    }
    for (size_t j = 0; j < k; j++)
      q->sw[e * k + j] = w ? w[t * k + j] : 1.0f;
  }
  free(scales);
  q->out = recv_x, q->out_w = recv_w, q->out_s = recv_s;
  rc = fp8 ? queue_a2a(h, q, 0, 0, q->sbuf, q->rbuf, wire, WEFT_U8)
           : queue_a2a(h, q, 0, 0, q->sbuf, q->rbuf, hid, m->cfg.dtype);
  if (rc == WEFT_SUCCESS) rc = queue_a2a(h, q, 1, 0, q->sw, q->rw, k, WEFT_F32);
  return started(h, q, rc);
}

/* Dispatch's second half: every received token into the rows of its local experts. */
static void dispatch_finish(weft_moe_handle_t h, const pending_t *q) {
  const weft_moe_plan_t *p = &h->plan;
  weft_moe_t m = h->moe;
  int fp8 = q->out_s != NULL;
  size_t k = (size_t)p->k, hid = m->cfg.hidden, nb = WEFT_MOE_FP8_BLOCKS(hid);
  size_t row = fp8 ? hid : hid * weft_dtype_size(m->cfg.dtype), wire = wire_row(m, fp8);
  size_t nr = p->recv_off[m->nranks];
  char *recv_x = q->out;
  /* padding rows: zeros (scales 0), and weight 0 (low-latency blocks leave their unused rows
   * alone) */
  for (int l = 0; l < m->local && !p->fixed; l++) {
    size_t end = weft_moe_block_end(p, l);
    size_t pad0 = (size_t)(p->offset[l] + p->count[l]);
    if (end == pad0) continue;
    memset(recv_x + pad0 * row, 0, (end - pad0) * row);
    if (fp8) memset(q->out_s + pad0 * nb, 0, (end - pad0) * nb * sizeof *q->out_s);
    if (q->out_w)
      for (size_t r = pad0; r < end; r++)
        q->out_w[r] = 0.0f;
  }
  for (size_t i = 0; i < nr; i++)
    for (size_t j = 0; j < k; j++) {
      size_t r = p->row_of[i * k + j];
      if (r == WEFT_MOE_NO_ROW) continue;
      memcpy(recv_x + r * row, q->rbuf + i * wire, row);
      if (fp8) memcpy(q->out_s + r * nb, q->rbuf + i * wire + hid, nb * sizeof *q->out_s);
      if (q->out_w) q->out_w[r] = q->rw[i * k + j];
    }
}

weft_result_t weft_moe_host_combine(weft_moe_handle_t h, const void *rows, const float *w,
                                    void *y) {
  const weft_moe_plan_t *p = &h->plan;
  weft_moe_t m = h->moe;
  int n = m->nranks;
  weft_dtype_t t = m->cfg.dtype;
  size_t k = (size_t)p->k, hid = m->cfg.hidden, row = hid * weft_dtype_size(t);
  size_t ns = p->send_off[n], nr = p->recv_off[n];
  pending_t *q = pending_new(n, 1);
  float *acc = alloc2(hid, sizeof(float));
  size_t hb; /* hid * es fit (create checked it); hid * 4 need not for 2-byte types */
  if (q) {
    q->sbuf = alloc2(nr, row), q->rbuf = alloc2(ns, row);
    q->yacc = weft_mul_fits(hid, sizeof(float), &hb) ? alloc2(p->tokens, hb) : NULL;
  }
  weft_result_t rc =
      all_allocated(m, "weft_moe_combine", q && q->sbuf && q->rbuf && q->yacc && acc);
  if (rc != WEFT_SUCCESS) return free(acc), pending_free(q), rc;
  /* each received token: the weighted sum of its rows here, in f32, sent home once */
  for (size_t i = 0; i < nr; i++) {
    memset(acc, 0, hid * sizeof *acc);
    for (size_t j = 0; j < k; j++) {
      size_t r = p->row_of[i * k + j];
      if (r == WEFT_MOE_NO_ROW) continue;
      axpy_row(t, w ? w[r] : 1.0f, (const char *)rows + r * row, acc, hid);
    }
    from_f32(t, acc, q->sbuf + i * row, hid);
  }
  free(acc);
  q->out = y;
  return started(h, q, queue_a2a(h, q, 0, 1, q->sbuf, q->rbuf, hid, t));
}

/* Combine's second half: every rank's partial of a token added in rank order, then y once. */
static void combine_finish(weft_moe_handle_t h, const pending_t *q) {
  const weft_moe_plan_t *p = &h->plan;
  weft_moe_t m = h->moe;
  weft_dtype_t t = m->cfg.dtype;
  size_t hid = m->cfg.hidden, row = hid * weft_dtype_size(t), ns = p->send_off[m->nranks];
  memset(q->yacc, 0, p->tokens * hid * sizeof *q->yacc);
  for (size_t e = 0; e < ns; e++)
    axpy_row(t, 1.0f, q->rbuf + e * row, q->yacc + p->send_list[e] * hid, hid);
  if (p->tokens) from_f32(t, q->yacc, q->out, p->tokens * hid);
}

weft_result_t weft_moe_host_finish(weft_moe_handle_t h) {
  pending_t *q = h->pending;
  if (!q) return WEFT_SUCCESS;
  h->pending = NULL;
  weft_result_t rc = weft_stream_synchronize(q->s);
  if (rc == WEFT_SUCCESS) (q->combine ? combine_finish : dispatch_finish)(h, q);
  pending_free(q);
  return rc;
}
