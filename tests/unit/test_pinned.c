/* Pinned runs across hosts (src/gpu/pinned.c): every byte a sender at the given staging
 * indices may write lies in one run, the runs are page-aligned, sorted and apart, and the
 * other senders' staging stays out of them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>

#include "dev.h"
#include "pinned.h"

enum { PAGE = 4096, MAX = 2 + WEFT_DEV_MAX_CHANNELS * WEFT_DEV_MAX_RANKS };

/* The run holding [off, off + bytes) whole, or -1. */
static int holder(const weft_span_t *sp, int n, uint64_t off, uint64_t bytes) {
  for (int i = 0; i < n; i++)
    if (off >= sp[i].off && off + bytes <= sp[i].off + sp[i].bytes) return i;
  return -1;
}

static int covers(const weft_span_t *sp, int n, uint64_t at) { return holder(sp, n, at, 1) >= 0; }

static uint64_t layout_end(const weft_dev_geometry_t *g) {
  uint64_t chans = (uint64_t)g->coll_channels + WEFT_DEV_P2P_CHANNELS;
  return WEFT_DEV_STAGE_OFF + chans * (uint64_t)g->nsrc * g->stages * g->chunk_bytes;
}

static void check(const weft_dev_geometry_t *g, const uint8_t *idx, int n) {
  weft_span_t sp[MAX];
  int k = weft_dev_pinned_spans(g, idx, n, PAGE, sp, MAX);
  assert_true(k >= 1);
  for (int i = 0; i < k; i++) {
    assert_int_equal(sp[i].off % PAGE, 0);
    assert_int_equal(sp[i].bytes % PAGE, 0);
    assert_true(sp[i].bytes > 0);
    if (i) assert_true(sp[i].off > sp[i - 1].off + sp[i - 1].bytes); /* merged where they touch */
  }
  assert_true(holder(sp, k, 0, WEFT_DEV_STAGE_OFF) >= 0); /* every flag */
  if (g->end > g->ll_off) assert_true(holder(sp, k, g->ll_off, g->end - g->ll_off) >= 0);
  uint8_t mine[WEFT_DEV_MAX_RANKS] = {0};
  for (int i = 0; i < n; i++)
    mine[idx[i]] = 1;
  for (int c = 0; c < g->coll_channels + WEFT_DEV_P2P_CHANNELS; c++) {
    int ch = c < g->coll_channels ? c : WEFT_DEV_COLL_CHANNELS + c - g->coll_channels;
    for (int j = 0; j < g->nsrc; j++)
      for (uint64_t seq = 0; seq < g->stages; seq++) {
        uint64_t off =
            weft_dev_stage_off(ch, g->coll_channels, g->nsrc, j, g->stages, g->chunk_bytes, seq);
        if (mine[j]) {
          assert_true(holder(sp, k, off, g->chunk_bytes) >= 0);
        } else if (g->chunk_bytes >= 3 * PAGE) {
          /* another sender's slot: only the pages it shares with a neighbour's may be pinned */
          assert_false(covers(sp, k, off + g->chunk_bytes / 2) && seq > 0 && seq + 1 < g->stages);
        }
      }
  }
}

static void runs_cover_their_senders(void **st) {
  (void)st;
  srand(7);
  const uint32_t chunks[] = {4096, 4112, 65536, 12288 + 48, 262144};
  for (int t = 0; t < 300; t++) {
    weft_dev_geometry_t g = {.coll_channels = 1 + rand() % 16,
                             .nsrc = 1 + rand() % (WEFT_DEV_MAX_RANKS - 1),
                             .stages = 2 + (uint32_t)(rand() % 13),
                             .chunk_bytes = chunks[rand() % 5]};
    g.ll_off = g.end = layout_end(&g);
    if (rand() % 2) g.end += 4 * 2 * (uint64_t)g.nsrc * WEFT_DEV_LL_SLOT_BYTES + 4096;
    uint8_t one = (uint8_t)(rand() % g.nsrc);
    check(&g, &one, 1); /* a mirror: this rank's index there */
    uint8_t some[WEFT_DEV_MAX_RANKS];
    int n = 0;
    for (int j = 0; j < g.nsrc; j++)
      if (rand() % 2) some[n++] = (uint8_t)j;
    if (n) check(&g, some, n); /* an inbox: the remote senders' */
  }
}

/* 2 hosts x 4 ranks, the default proxy geometry: a mirror pins about one sender's share of
 * the region, not all seven. */
static void a_mirror_pins_one_senders_share(void **st) {
  (void)st;
  weft_dev_geometry_t g = {.coll_channels = 16, .nsrc = 7, .stages = 8, .chunk_bytes = 262144};
  g.ll_off = g.end = layout_end(&g);
  weft_span_t sp[MAX];
  uint8_t idx = 3;
  int k = weft_dev_pinned_spans(&g, &idx, 1, PAGE, sp, MAX);
  uint64_t total = 0;
  for (int i = 0; i < k; i++)
    total += sp[i].bytes;
  uint64_t share = (16 + WEFT_DEV_P2P_CHANNELS) * 8ull * 262144;
  assert_int_equal(total, share + (WEFT_DEV_STAGE_OFF + PAGE - 1) / PAGE * PAGE);
  assert_int_equal(k, 1 + 16 + WEFT_DEV_P2P_CHANNELS);
  uint8_t all[3] = {2, 3, 4}; /* consecutive senders' runs on a channel merge */
  assert_int_equal(weft_dev_pinned_spans(&g, all, 3, PAGE, sp, MAX),
                   1 + 16 + WEFT_DEV_P2P_CHANNELS);
}

static void too_many_runs_for_out(void **st) {
  (void)st;
  weft_dev_geometry_t g = {.coll_channels = 4, .nsrc = 2, .stages = 2, .chunk_bytes = 65536};
  g.ll_off = g.end = layout_end(&g);
  weft_span_t sp[8];
  uint8_t idx = 1;
  assert_int_equal(weft_dev_pinned_spans(&g, &idx, 1, PAGE, sp, 8), -1);
  assert_int_equal(weft_dev_pinned_spans(&g, &idx, 1, PAGE, sp, 0), -1);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(runs_cover_their_senders),
      cmocka_unit_test(a_mirror_pins_one_senders_share),
      cmocka_unit_test(too_many_runs_for_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
