/* MoE data movement for host buffers: dispatch packs each token once per destination rank,
 * moves the rows and the weights with alltoallv, and copies every received token into the
 * rows of its local experts; combine sums a token's local rows with their weights (f32),
 * sends that partial home, and sums the partials into token order. */
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

/* Every rank allocates its staging before any moves data: a rank short of memory that
 * skipped the exchanges would leave its peers waiting in them, so it fails them all. */
static weft_result_t all_allocated(weft_moe_t m, const char *fn, int ok_here) {
  weft_moe_verdict_t v = {ok_here ? MOE_OK : MOE_NO_MEM, 0, 0, 0};
  return weft_moe_agree(m, fn, v);
}

weft_result_t weft_moe_host_dispatch(weft_moe_handle_t h, const void *x, const float *w,
                                     void *recv_x, float *recv_w) {
  const weft_moe_plan_t *p = &h->plan;
  weft_moe_t m = h->moe;
  int n = m->nranks;
  size_t k = (size_t)p->k, hid = m->cfg.hidden, row = hid * weft_dtype_size(m->cfg.dtype);
  size_t ns = p->send_off[n], nr = p->recv_off[n];
  char *sbuf = alloc2(ns, row), *rbuf = alloc2(nr, row);
  float *sw = alloc2(ns * k, sizeof(float)), *rw = alloc2(nr * k, sizeof(float));
  size_t *cnt = calloc(4 * (size_t)n, sizeof *cnt), *dsp = cnt + n, *rcnt = cnt + 2 * n,
         *rdsp = cnt + 3 * n;
  weft_result_t rc = all_allocated(m, "weft_moe_dispatch", sbuf && rbuf && sw && rw && cnt);
  if (rc != WEFT_SUCCESS) goto out;
  for (size_t e = 0; e < ns; e++) {
    size_t t = p->send_list[e];
    memcpy(sbuf + e * row, (const char *)x + t * row, row);
    for (size_t j = 0; j < k; j++)
      sw[e * k + j] = w ? w[t * k + j] : 1.0f;
  }
  weft_moe_plan_counts(p, 0, hid, cnt, dsp);
  weft_moe_plan_counts(p, 1, hid, rcnt, rdsp);
  CHECK_GOTO(weft_alltoallv(sbuf, cnt, dsp, rbuf, rcnt, rdsp, m->cfg.dtype, m->comm, NULL), rc,
             out);
  weft_moe_plan_counts(p, 0, k, cnt, dsp);
  weft_moe_plan_counts(p, 1, k, rcnt, rdsp);
  CHECK_GOTO(weft_alltoallv(sw, cnt, dsp, rw, rcnt, rdsp, WEFT_F32, m->comm, NULL), rc, out);
  /* padding rows: zeros, and weight 0 (low-latency blocks leave their unused rows alone) */
  for (int l = 0; l < m->local && !p->fixed; l++) {
    size_t end = weft_moe_block_end(p, l);
    size_t pad0 = (size_t)(p->offset[l] + p->count[l]);
    if (end == pad0) continue;
    memset((char *)recv_x + pad0 * row, 0, (end - pad0) * row);
    if (recv_w)
      for (size_t r = pad0; r < end; r++)
        recv_w[r] = 0.0f;
  }
  for (size_t i = 0; i < nr; i++)
    for (size_t j = 0; j < k; j++) {
      size_t r = p->row_of[i * k + j];
      if (r == WEFT_MOE_NO_ROW) continue;
      memcpy((char *)recv_x + r * row, rbuf + i * row, row);
      if (recv_w) recv_w[r] = rw[i * k + j];
    }
out:
  free(sbuf);
  free(rbuf);
  free(sw);
  free(rw);
  free(cnt);
  return rc;
}

weft_result_t weft_moe_host_combine(weft_moe_handle_t h, const void *rows, const float *w,
                                    void *y) {
  const weft_moe_plan_t *p = &h->plan;
  weft_moe_t m = h->moe;
  int n = m->nranks;
  weft_dtype_t t = m->cfg.dtype;
  size_t k = (size_t)p->k, hid = m->cfg.hidden, row = hid * weft_dtype_size(t);
  size_t ns = p->send_off[n], nr = p->recv_off[n];
  char *part = alloc2(nr, row), *back = alloc2(ns, row);
  float *acc = alloc2(hid, sizeof(float));
  size_t hb; /* hid * es fit (create checked it); hid * 4 need not for 2-byte types */
  float *yacc = weft_mul_fits(hid, sizeof(float), &hb) ? alloc2(p->tokens, hb) : NULL;
  size_t *cnt = calloc(4 * (size_t)n, sizeof *cnt), *dsp = cnt + n, *rcnt = cnt + 2 * n,
         *rdsp = cnt + 3 * n;
  weft_result_t rc = all_allocated(m, "weft_moe_combine", part && back && acc && yacc && cnt);
  if (rc != WEFT_SUCCESS) goto out;
  /* each received token: the weighted sum of its rows here, in f32, sent home once */
  for (size_t i = 0; i < nr; i++) {
    memset(acc, 0, hid * sizeof *acc);
    for (size_t j = 0; j < k; j++) {
      size_t r = p->row_of[i * k + j];
      if (r == WEFT_MOE_NO_ROW) continue;
      axpy_row(t, w ? w[r] : 1.0f, (const char *)rows + r * row, acc, hid);
    }
    from_f32(t, acc, part + i * row, hid);
  }
  weft_moe_plan_counts(p, 1, hid, cnt, dsp);
  weft_moe_plan_counts(p, 0, hid, rcnt, rdsp);
  CHECK_GOTO(weft_alltoallv(part, cnt, dsp, back, rcnt, rdsp, t, m->comm, NULL), rc, out);
  /* home: every rank's partial of a token added in rank order, then y once */
  memset(yacc, 0, p->tokens * hid * sizeof *yacc);
  for (size_t e = 0; e < ns; e++) {
    axpy_row(t, 1.0f, back + e * row, yacc + p->send_list[e] * hid, hid);
  }
  if (p->tokens) from_f32(t, yacc, y, p->tokens * hid);
out:
  free(part);
  free(back);
  free(acc);
  free(yacc);
  free(cnt);
  return rc;
}
