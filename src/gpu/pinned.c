/* The stretches of a staging region pinned across hosts (pinned.h): a sender's staging on one
 * channel is stages x chunk_bytes in a row (dev.h's weft_dev_stage_off), so a mirror pins one
 * run per channel, not the other senders' slots between them. */
#include "pinned.h"

#include <stdlib.h>

#include "dev.h"

static int by_off(const void *a, const void *b) {
  const weft_span_t *x = a, *y = b;
  return x->off < y->off ? -1 : x->off > y->off;
}

static int add(weft_span_t *out, int *n, int max, uint64_t off, uint64_t bytes, uint64_t page) {
  if (!bytes) return 0;
  if (*n == max) return -1;
  uint64_t lo = off & ~(page - 1), hi = (off + bytes + page - 1) & ~(page - 1);
  out[(*n)++] = (weft_span_t){.off = lo, .bytes = hi - lo};
  return 0;
}

int weft_dev_pinned_spans(const weft_dev_geometry_t *g, const uint8_t *idx, int n, uint64_t page,
                          weft_span_t *out, int max) {
  int k = 0;
  if (add(out, &k, max, 0, WEFT_DEV_STAGE_OFF, page)) return -1;
  uint64_t run = (uint64_t)g->stages * g->chunk_bytes;
  for (int c = 0; c < g->coll_channels + WEFT_DEV_P2P_CHANNELS; c++) {
    int ch = c < g->coll_channels ? c : WEFT_DEV_COLL_CHANNELS + c - g->coll_channels;
    for (int i = 0; i < n; i++) {
      uint64_t off =
          weft_dev_stage_off(ch, g->coll_channels, g->nsrc, idx[i], g->stages, g->chunk_bytes, 0);
      if (add(out, &k, max, off, run, page)) return -1;
    }
  }
  if (g->end > g->ll_off && add(out, &k, max, g->ll_off, g->end - g->ll_off, page)) return -1;
  qsort(out, (size_t)k, sizeof *out, by_off);
  int m = 0;
  for (int i = 0; i < k; i++) {
    if (m && out[i].off <= out[m - 1].off + out[m - 1].bytes) {
      uint64_t end = out[i].off + out[i].bytes;
      if (end > out[m - 1].off + out[m - 1].bytes) out[m - 1].bytes = end - out[m - 1].off;
    } else {
      out[m++] = out[i];
    }
  }
  return m;
}

int weft_dev_pinned_slots(const weft_dev_geometry_t *g, const weft_dev_slots_t *sl,
                          const uint8_t *remote, uint64_t page, weft_span_t *out, int per, int *n) {
  uint8_t in[WEFT_DEV_MAX_RANKS];
  int nin = 0;
  for (int s = 0; s < sl->nslots; s++) {
    n[s] = 0;
    if (s == sl->self || !remote[s]) continue;
    in[nin++] = sl->stage_in[s];
    n[s] = weft_dev_pinned_spans(g, &sl->stage_out[s], 1, page, out + (size_t)s * per, per);
    if (n[s] < 0) return -1;
  }
  if (!nin) return 0;
  n[sl->self] = weft_dev_pinned_spans(g, in, nin, page, out + (size_t)sl->self * per, per);
  return n[sl->self] < 0 ? -1 : 0;
}
