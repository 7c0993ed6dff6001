/* MoE layout as pure functions: from a batch's top-k ids, which tokens go to which rank (each
 * once, however many of its experts live there), and, once a rank knows what it receives,
 * the expert-major row of every choice. No communication here; moe.c exchanges the counts. */
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "moe.h"
#include "moe_kernels.h"

void weft_moe_plan_free(weft_moe_plan_t *p) {
  free(p->send_tok);
  free(p->send_off);
  free(p->send_list);
  free(p->send_ids);
  free(p->recv_tok);
  free(p->recv_off);
  free(p->recv_ids);
  free(p->row_of);
  free(p->count);
  free(p->offset);
  memset(p, 0, sizeof *p);
}

size_t weft_moe_block_end(const weft_moe_plan_t *p, int l) {
  return l + 1 < p->local ? (size_t)p->offset[l + 1] : p->rows;
}

int64_t weft_moe_id_at(const void *ids, weft_dtype_t t, size_t i) {
  return t == WEFT_I32 ? (int64_t)((const int32_t *)ids)[i] : ((const int64_t *)ids)[i];
}

int weft_moe_check_token(const void *ids, weft_dtype_t t, size_t token, int k, int experts,
                         weft_moe_bad_t *bad) {
  for (int j = 0; j < k; j++) {
    int64_t e = weft_moe_id_at(ids, t, token * (size_t)k + (size_t)j);
    int repeated = 0;
    for (int i = 0; i < j && e >= 0 && !repeated; i++)
      repeated = weft_moe_id_at(ids, t, token * (size_t)k + (size_t)i) == e;
    if (e < -1 || e >= experts || repeated) {
      bad->token = (int64_t)token, bad->slot = j, bad->id = e, bad->repeated = repeated;
      return -1;
    }
  }
  return 0;
}

int weft_moe_plan_send(weft_moe_plan_t *p, int nranks, int experts, int k, const void *ids,
                       weft_dtype_t index_type, size_t tokens, weft_moe_bad_t *bad) {
  memset(p, 0, sizeof *p);
  p->nranks = nranks, p->local = experts / nranks, p->k = k, p->tokens = tokens;
  for (size_t t = 0; t < tokens; t++)
    if (weft_moe_check_token(ids, index_type, t, k, experts, bad)) return -1;
  p->send_tok = calloc((size_t)nranks, sizeof *p->send_tok);
  p->send_off = calloc((size_t)nranks + 1, sizeof *p->send_off);
  unsigned char *to = calloc((size_t)nranks, 1);
  if (!p->send_tok || !p->send_off || !to) goto oom;
  /* two passes: count per rank, then place; a token counts once per rank however many of
   * its experts live there (`to` marks the ranks of the current token) */
  for (int pass = 0; pass < 2; pass++) {
    size_t *fill = pass ? calloc((size_t)nranks, sizeof *fill) : NULL;
    if (pass && !fill) goto oom;
    for (size_t t = 0; t < tokens; t++) {
      memset(to, 0, (size_t)nranks);
      for (int j = 0; j < k; j++) {
        int64_t e = weft_moe_id_at(ids, index_type, t * (size_t)k + (size_t)j);
        if (e < 0 || to[e / p->local]) continue;
        int d = (int)(e / p->local);
        to[d] = 1;
        if (!pass) {
          p->send_tok[d]++;
          continue;
        }
        size_t at = p->send_off[d] + fill[d]++;
        p->send_list[at] = t;
        for (int i = 0; i < k; i++)
          p->send_ids[at * (size_t)k + (size_t)i] =
              (int32_t)weft_moe_id_at(ids, index_type, t * (size_t)k + (size_t)i);
      }
    }
    free(fill);
    if (pass) break;
    for (int d = 0; d < nranks; d++)
      p->send_off[d + 1] = p->send_off[d] + p->send_tok[d];
    /* entries <= tokens * k, the length of the caller's ids array; in bytes it may not fit */
    size_t entries = p->send_off[nranks] ? p->send_off[nranks] : 1, idb, lb;
    if (!weft_mul_fits(entries, (size_t)k * sizeof *p->send_ids, &idb) ||
        !weft_mul_fits(entries, sizeof *p->send_list, &lb))
      goto oom;
    p->send_list = malloc(lb);
    p->send_ids = malloc(idb);
    if (!p->send_list || !p->send_ids) goto oom;
  }
  free(to);
  return 0;
oom:
  free(to);
  weft_moe_plan_free(p);
  return -2;
}

int weft_moe_plan_recv_alloc(weft_moe_plan_t *p) {
  p->recv_off = calloc((size_t)p->nranks + 1, sizeof *p->recv_off);
  p->count = calloc((size_t)p->local, sizeof *p->count);
  p->offset = calloc((size_t)p->local, sizeof *p->offset);
  if (!p->recv_off || !p->count || !p->offset) return -2;
  for (int s = 0; s < p->nranks; s++)
    if (!weft_add_fits(p->recv_off[s], p->recv_tok[s], &p->recv_off[s + 1])) return -2;
  size_t entries = p->recv_off[p->nranks], ids;
  if (!weft_mul_fits(entries ? entries : 1, (size_t)p->k * sizeof(size_t), &ids)) return -2;
  p->recv_ids = malloc(ids / sizeof(size_t) * sizeof *p->recv_ids);
  p->row_of = malloc(ids);
  return p->recv_ids && p->row_of ? 0 : -2;
}

/* offsets and the padded total from count (with block > 0: fixed blocks of that many rows,
 * each count fitting); -1 when they do not fit */
static int place_blocks(weft_moe_plan_t *p, size_t align, size_t block) {
  size_t at = 0, a = align ? align : 1;
  if (block) {
    for (int l = 0; l < p->local; l++) {
      if ((size_t)p->count[l] > block) return -1;
      p->offset[l] = (int64_t)((size_t)l * block);
    }
    p->rows = (size_t)p->local * block, p->fixed = 1; /* create checked that it fits */
    return 0;
  }
  for (int l = 0; l < p->local; l++) {
    p->offset[l] = (int64_t)at;
    size_t n = (size_t)p->count[l], padded;
    if (!weft_add_fits(n, a - 1, &padded) || !weft_add_fits(at, padded / a * a, &at)) return -1;
  }
  if (at > (size_t)INT64_MAX) return -1; /* offsets are reported as int64 */
  p->rows = at;
  return 0;
}

int weft_moe_plan_rows(weft_moe_plan_t *p, int rank, size_t align, size_t block) {
  size_t entries = p->recv_off[p->nranks], k = (size_t)p->k;
  int64_t first = (int64_t)rank * p->local;
  memset(p->count, 0, (size_t)p->local * sizeof *p->count);
  for (size_t i = 0; i < entries * k; i++) {
    int64_t e = p->recv_ids[i];
    if (e >= first && e < first + p->local) p->count[e - first]++;
  }
  if (place_blocks(p, align, block)) return -1;
  /* rows within a block in entry order: by source rank, then by the source's token order */
  int64_t *fill = calloc((size_t)p->local, sizeof *fill);
  if (!fill) return -2;
  for (size_t i = 0; i < entries * k; i++) {
    int64_t e = p->recv_ids[i];
    p->row_of[i] = WEFT_MOE_NO_ROW;
    if (e >= first && e < first + p->local)
      p->row_of[i] = (size_t)(p->offset[e - first] + fill[e - first]++);
  }
  free(fill);
  return 0;
}

int weft_moe_plan_from_counts(weft_moe_plan_t *p, int nranks, int experts, int k, size_t tokens,
                              int rank, const int64_t *all, size_t stride, size_t align,
                              size_t block, uint64_t *base) {
  memset(p, 0, sizeof *p);
  size_t n = (size_t)nranks, w = stride;
  p->nranks = nranks, p->local = experts / nranks, p->k = k, p->tokens = tokens;
  p->send_tok = calloc(n, sizeof *p->send_tok);
  p->send_off = calloc(n + 1, sizeof *p->send_off);
  p->recv_tok = calloc(n, sizeof *p->recv_tok);
  p->recv_off = calloc(n + 1, sizeof *p->recv_off);
  p->count = calloc((size_t)p->local, sizeof *p->count);
  p->offset = calloc((size_t)p->local, sizeof *p->offset);
  if (!p->send_tok || !p->send_off || !p->recv_tok || !p->recv_off || !p->count || !p->offset)
    return -2;
  const int64_t *first = all + (size_t)rank * (size_t)p->local; /* [s * w]: s's choices here */
  for (size_t s = 0; s < n; s++) {
    /* a peer's counts are at most its tokens * k; a sum that overflows is refused */
    int64_t sent = all[(size_t)rank * w + (size_t)experts + s], got = all[s * w + experts + rank];
    if (sent < 0 || got < 0) return -1;
    p->send_tok[s] = (size_t)sent, p->recv_tok[s] = (size_t)got;
    if (!weft_add_fits(p->send_off[s], p->send_tok[s], &p->send_off[s + 1]) ||
        !weft_add_fits(p->recv_off[s], p->recv_tok[s], &p->recv_off[s + 1]))
      return -1;
    for (int l = 0; l < p->local; l++) {
      int64_t c = first[s * w + (size_t)l];
      if (c < 0 || c > INT64_MAX - p->count[l]) return -1;
      p->count[l] += c;
    }
  }
  if (place_blocks(p, align, block)) return -1;
  for (int l = 0; l < p->local; l++) /* source s's choices of l follow those of s - 1 */
    for (size_t s = 0, at = (size_t)p->offset[l]; s < n; s++) {
      base[s * (size_t)p->local + (size_t)l] = at;
      at += (size_t)first[s * w + (size_t)l];
    }
  return 0;
}

void weft_moe_plan_counts(const weft_moe_plan_t *p, int recv, size_t per, size_t *counts,
                          size_t *displs) {
  const size_t *tok = recv ? p->recv_tok : p->send_tok, *off = recv ? p->recv_off : p->send_off;
  for (int r = 0; r < p->nranks; r++)
    counts[r] = tok[r] * per, displs[r] = off[r] * per;
}

/* x rounded up to a multiple of a (a power of two); 0 when that overflows */
static size_t up_to(size_t x, size_t a) {
  return x > SIZE_MAX - (a - 1) ? 0 : (x + a - 1) & ~(a - 1);
}

int weft_moe_ll_geometry(int nranks, int local, int k, size_t row_bytes, size_t bound,
                         struct weft_moe_k_geom_s *g) {
  memset(g, 0, sizeof *g);
  size_t n = (size_t)nranks, slots, stage, cstage, at;
  if (nranks < 1 || local < 1 || k < 1 || !row_bytes || !bound || bound > INT32_MAX) return -1;
  g->sig_bytes = up_to(sizeof(weft_moe_k_rec_t) + 4 * (size_t)local, 64);
  g->hdr_bytes = up_to(12 * (size_t)k, 16);
  g->row_bytes = row_bytes;
  g->row_pad = up_to(row_bytes, 16);
  if (!g->row_pad || !weft_add_fits(g->hdr_bytes, g->row_pad, &at)) return -1;
  g->slot_bytes = at;
  g->csig = n * g->sig_bytes;
  g->dack = g->csig + n * WEFT_MOE_K_FLAG_STRIDE;
  g->cack = g->dack + n * WEFT_MOE_K_FLAG_STRIDE;
  g->dstage = up_to(g->cack + n * WEFT_MOE_K_FLAG_STRIDE, 256);
  if (!weft_mul_fits(n, bound, &slots) || !weft_mul_fits(slots, g->slot_bytes, &stage) ||
      !weft_mul_fits(slots, g->row_pad, &cstage) || !weft_add_fits(g->dstage, stage, &at))
    return -1;
  if (slots > INT32_MAX / (size_t)(k < nranks ? k : nranks)) return -1; /* a block a row */
  g->cstage = at;
  if (!weft_add_fits(at, cstage, &at)) return -1;
  g->total = at;
  return 0;
}

uint64_t weft_moe_direct_geometry(int nranks, int k, size_t row_bytes, size_t bytes,
                                  struct weft_moe_k_geom_s *g) {
  memset(g, 0, sizeof *g);
  size_t n = (size_t)nranks, flags = 4 * n * WEFT_MOE_K_FLAG_STRIDE, per, rest, c;
  if (nranks < 1 || nranks > WEFT_DEV_MAX_RANKS || k < 1 || k > WEFT_MOE_K_MAX_TOPK || !row_bytes)
    return 0;
  g->sig_bytes = WEFT_MOE_K_FLAG_STRIDE;
  g->csig = n * WEFT_MOE_K_FLAG_STRIDE;
  g->dack = 2 * n * WEFT_MOE_K_FLAG_STRIDE;
  g->cack = 3 * n * WEFT_MOE_K_FLAG_STRIDE;
  g->dstage = up_to(flags, 256);
  g->hdr_bytes = up_to(4 * (size_t)k, 16); /* k f32 weights */
  g->row_bytes = row_bytes;
  g->row_pad = up_to(row_bytes, 16);
  if (!g->row_pad || !weft_add_fits(g->hdr_bytes, g->row_pad, &g->slot_bytes) ||
      !weft_add_fits(g->slot_bytes, g->row_pad, &per) || !weft_mul_fits(per, n, &per) ||
      bytes < g->dstage)
    return 0;
  rest = bytes - g->dstage;
  c = rest / per < WEFT_MOE_DIRECT_MAX_CHUNK ? rest / per : WEFT_MOE_DIRECT_MAX_CHUNK;
  if (!c) return 0;
  g->cstage = g->dstage + n * c * g->slot_bytes; /* below bytes: c * per fits in rest */
  g->total = g->cstage + n * c * g->row_pad;
  return c;
}
