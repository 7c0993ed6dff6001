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
#include "slots.h"

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
  const uint64_t run = (uint64_t)g->stages * g->chunk_bytes;
  for (int c = 0; c < g->coll_channels + WEFT_DEV_P2P_CHANNELS; c++) {
    int ch = c < g->coll_channels ? c : WEFT_DEV_COLL_CHANNELS + c - g->coll_channels;
    for (int j = 0; j < g->nsrc; j++) {
      uint64_t off =
          weft_dev_stage_off(ch, g->coll_channels, g->nsrc, j, g->stages, g->chunk_bytes, 0);
      if (mine[j]) {
        assert_true(holder(sp, k, off, run) >= 0); /* every stage of it */
        continue;
      }
      /* another sender's: only the pages it shares with a neighbour's may be pinned */
      for (uint64_t at = (off + PAGE - 1) / PAGE * PAGE; at + PAGE <= off + run; at += PAGE)
        assert_false(covers(sp, k, at));
    }
  }
  /* so that a wider choice cannot pass: at most the flags, the senders' runs and the
   * low-latency buffers, each widened to pages */
  uint64_t total = 0, bound = (WEFT_DEV_STAGE_OFF + PAGE - 1) / PAGE * PAGE;
  bound += (uint64_t)(g->coll_channels + WEFT_DEV_P2P_CHANNELS) * n * (run + 2 * PAGE);
  if (g->end > g->ll_off) bound += g->end - g->ll_off + 2 * PAGE;
  for (int i = 0; i < k; i++)
    total += sp[i].bytes;
  assert_true(total <= bound);
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

/* Across every rank's slot table (identity to 8 ranks, ring neighbours past it) and a host
 * layout: a rank's mirror of a remote peer pins where that peer's kernels read this rank's
 * chunks (the peer's stage_in for it), and its inbox where each remote peer writes (the
 * peer's stage_out for it); nothing for local slots, nor an inbox no remote slot writes. */
static void slots_pin_where_peers_read_and_write(void **st) {
  (void)st;
  enum { PER = 2 + WEFT_DEV_MAX_CHANNELS * WEFT_DEV_MAX_RANKS };
  static weft_span_t out[WEFT_DEV_MAX_RANKS * PER], peer_out[WEFT_DEV_MAX_RANKS * PER];
  for (int nranks = 2; nranks <= 12; nranks++)
    for (int hosts = 2; hosts <= 3; hosts++) {
      weft_dev_slots_t all[12];
      for (int r = 0; r < nranks; r++)
        weft_dev_slots_make(r, nranks, &all[r]);
      for (int r = 0; r < nranks; r++) {
        const weft_dev_slots_t *me = &all[r];
        weft_dev_geometry_t g = {
            .coll_channels = 4, .nsrc = me->nsrc, .stages = 3, .chunk_bytes = 16384};
        g.ll_off = g.end = layout_end(&g);
        uint8_t remote[WEFT_DEV_MAX_RANKS] = {0};
        int n[WEFT_DEV_MAX_RANKS], any = 0;
        for (int s = 0; s < me->nslots; s++)
          any |= remote[s] = (uint8_t)(me->rank[s] % hosts != r % hosts);
        assert_int_equal(weft_dev_pinned_slots(&g, me, remote, PAGE, out, PER, n), 0);
        if (!any) assert_int_equal(n[me->self], 0);
        for (int s = 0; s < me->nslots; s++) {
          if (s == me->self) continue;
          if (!remote[s]) {
            assert_int_equal(n[s], 0);
            continue;
          }
          const weft_dev_slots_t *peer = &all[me->rank[s]];
          int t = weft_dev_slot_of(peer, r);
          uint64_t mine = weft_dev_stage_off(1, 4, g.nsrc, peer->stage_in[t], 3, 16384, 2);
          assert_true(holder(out + s * PER, n[s], mine, 16384) >= 0);
          uint64_t theirs = weft_dev_stage_off(WEFT_DEV_COLL_CHANNELS + 31, 4, g.nsrc,
                                               peer->stage_out[t], 3, 16384, 1);
          assert_true(holder(out + me->self * PER, n[me->self], theirs, 16384) >= 0);
          /* and the peer's own mirror of this rank holds what this rank's inbox expects */
          uint8_t pr[WEFT_DEV_MAX_RANKS] = {0};
          int pn[WEFT_DEV_MAX_RANKS];
          pr[t] = 1;
          assert_int_equal(weft_dev_pinned_slots(&g, peer, pr, PAGE, peer_out, PER, pn), 0);
          uint64_t at = weft_dev_stage_off(0, 4, g.nsrc, me->stage_in[s], 3, 16384, 0);
          assert_true(holder(peer_out + t * PER, pn[t], at, 3 * 16384) >= 0);
        }
      }
    }
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
      cmocka_unit_test(slots_pin_where_peers_read_and_write),
      cmocka_unit_test(too_many_runs_for_out),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
