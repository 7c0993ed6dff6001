/* The MoE layout's pure functions (src/moe/layout.c): which tokens go to which rank (once
 * per rank, in token order), the rows of received choices (expert-major, by source then
 * token, blocks padded), ids refused with the token and slot that break the rules, and the
 * device layout's plan from counts alone agreeing with the host's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moe.h"
#include "moe_kernels.h"

/* 2 ranks, 4 experts (2 each), k 2; token 1 goes to rank 0 twice (experts 0 and 1) */
static const int32_t IDS[] = {3, 0, 1, 0, -1, -1, 2, -1};

static void send_side(void **st) {
  (void)st;
  weft_moe_plan_t p;
  weft_moe_bad_t bad;
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, IDS, WEFT_I32, 4, &bad), 0);
  assert_int_equal(p.send_tok[0], 2); /* tokens 0 and 1, token 1 once */
  assert_int_equal(p.send_tok[1], 2); /* tokens 0 and 3 */
  size_t want[] = {0, 1, 0, 3};
  for (int e = 0; e < 4; e++)
    assert_int_equal(p.send_list[e], want[e]);
  assert_int_equal(p.send_off[2], 4);
  assert_int_equal(p.send_ids[2 * 2 + 0], 3); /* entry 2 carries token 0's whole row */
  assert_int_equal(p.send_ids[2 * 2 + 1], 0);
  weft_moe_plan_free(&p);
}

/* Rank 0's plan receiving IDS's entries for itself from both ranks (the same ids on each),
 * before its rows are placed. */
static void both_sources(weft_moe_plan_t *p) {
  weft_moe_bad_t bad;
  assert_int_equal(weft_moe_plan_send(p, 2, 4, 2, IDS, WEFT_I32, 4, &bad), 0);
  p->recv_tok = calloc(2, sizeof *p->recv_tok);
  p->recv_tok[0] = p->recv_tok[1] = 2;
  assert_int_equal(weft_moe_plan_recv_alloc(p), 0);
  for (int s = 0; s < 2; s++) /* both sources send tokens 0 and 1: {3, 0} and {1, 0} */
    memcpy(p->recv_ids + s * 4, p->send_ids, 4 * sizeof *p->recv_ids);
}

/* Rank 0's rows, blocks padded to 4. */
static void rows_padded(void **st) {
  (void)st;
  weft_moe_plan_t p;
  both_sources(&p);
  assert_int_equal(weft_moe_plan_rows(&p, 0, 4, 0), 0);
  /* expert 0: 4 choices (each token of each source), expert 1: 2 (token 1 of each) */
  assert_int_equal(p.count[0], 4);
  assert_int_equal(p.count[1], 2);
  assert_int_equal(p.offset[1], 4);
  assert_int_equal(p.rows, 8); /* 4 + 2 padded to 4 */
  size_t N = WEFT_MOE_NO_ROW;
  /* entry order: s0 t0 {3,0}, s0 t1 {1,0}, s1 t0, s1 t1; expert 0's rows in that order */
  size_t want[] = {N, 0, 4, 1, N, 2, 5, 3};
  for (int i = 0; i < 8; i++)
    assert_int_equal(p.row_of[i], want[i]);
  weft_moe_plan_free(&p);
}

/* Low-latency blocks: the same entries in fixed blocks of 5 rows (expert 1's from row 5),
 * no padding; a block too small for its count is refused. */
static void rows_fixed(void **st) {
  (void)st;
  weft_moe_plan_t p;
  both_sources(&p);
  assert_int_equal(weft_moe_plan_rows(&p, 0, 1, 5), 0);
  assert_int_equal(p.count[0], 4);
  assert_int_equal(p.count[1], 2);
  assert_int_equal(p.offset[1], 5);
  assert_int_equal(p.rows, 10);
  assert_int_equal(p.fixed, 1);
  size_t N = WEFT_MOE_NO_ROW, want[] = {N, 0, 5, 1, N, 2, 6, 3};
  for (int i = 0; i < 8; i++)
    assert_int_equal(p.row_of[i], want[i]);
  assert_int_equal(weft_moe_plan_rows(&p, 0, 1, 3), -1); /* expert 0 has 4 rows */
  weft_moe_plan_free(&p);
}

/* A low-latency block exactly full: every one of R ranks sends its bound of T tokens, and
 * every token chooses expert 0 (with k 1, and with k 3 beside two other experts), as decode
 * steps often do. Expert 0's count is then the block, R * T rows: the layout must take it,
 * its rows filling the block in source order with none left over, and a block one row
 * smaller must refuse it. The device layout's plan from the counts alone must agree. */
static void rows_block_full(void **st) {
  (void)st;
  enum { R = 3, T = 5, E = 6, L = E / R, W = E + R };
  for (int k = 1; k <= 3; k += 2) {
    int32_t ids[T * 3];
    for (int t = 0; t < T; t++)
      for (int j = 0; j < k; j++) /* expert 0 first, then experts of the other ranks */
        ids[t * k + j] = j == 0 ? 0 : (int32_t)(j * L + t % L);
    weft_moe_plan_t send, p;
    weft_moe_bad_t bad;
    assert_int_equal(weft_moe_plan_send(&send, R, E, k, ids, WEFT_I32, T, &bad), 0);
    assert_int_equal(send.send_tok[0], T);
    /* rank 0 receives every rank's T tokens, the same ids from each */
    memset(&p, 0, sizeof p);
    p.nranks = R, p.local = L, p.k = k, p.tokens = T;
    p.recv_tok = calloc(R, sizeof *p.recv_tok);
    for (int s = 0; s < R; s++)
      p.recv_tok[s] = T;
    assert_int_equal(weft_moe_plan_recv_alloc(&p), 0);
    for (int s = 0; s < R; s++)
      memcpy(p.recv_ids + (size_t)s * T * k, send.send_ids, (size_t)T * k * sizeof *p.recv_ids);
    const size_t block = (size_t)R * T;
    assert_int_equal(weft_moe_plan_rows(&p, 0, 1, block), 0);
    assert_int_equal(p.count[0], block); /* count == block */
    assert_int_equal(p.offset[0], 0);
    assert_int_equal(p.offset[1], block);
    assert_int_equal(p.rows, L * block);
    for (size_t i = 0; i < block; i++) /* entry i's choice of expert 0 is row i */
      assert_int_equal(p.row_of[i * k], i);
    assert_int_equal(weft_moe_plan_rows(&p, 0, 1, block - 1), -1);
    /* from the counts alone: rank s chose expert 0 T times; its tokens go to rank 0 */
    int64_t all[R][W] = {{0}};
    for (int s = 0; s < R; s++) {
      for (int i = 0; i < T * k; i++)
        all[s][ids[i]]++;
      for (int r = 0; r < R; r++)
        all[s][E + r] = (int64_t)send.send_tok[r];
    }
    weft_moe_plan_t dev;
    uint64_t base[R][L];
    assert_int_equal(
        weft_moe_plan_from_counts(&dev, R, E, k, T, 0, &all[0][0], W, 1, block, &base[0][0]), 0);
    assert_int_equal(dev.count[0], block);
    assert_int_equal(dev.rows, p.rows);
    for (int s = 0; s < R; s++)
      assert_int_equal(base[s][0], (uint64_t)s * T);
    weft_moe_plan_free(&dev);
    assert_int_equal(
        weft_moe_plan_from_counts(&dev, R, E, k, T, 0, &all[0][0], W, 1, block - 1, &base[0][0]),
        -1);
    weft_moe_plan_free(&dev);
    weft_moe_plan_free(&p);
    weft_moe_plan_free(&send);
  }
}

static void bad_ids(void **st) {
  (void)st;
  weft_moe_plan_t p;
  weft_moe_bad_t bad;
  int64_t out[] = {0, 1, 2, 4};
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, out, WEFT_I64, 2, &bad), -1);
  assert_int_equal(bad.token, 1);
  assert_int_equal(bad.slot, 1);
  assert_int_equal(bad.id, 4);
  assert_int_equal(bad.repeated, 0);
  int64_t neg[] = {-2, 1};
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, neg, WEFT_I64, 1, &bad), -1);
  assert_int_equal(bad.id, -2);
  int32_t rep[] = {1, -1, 2, 2};
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, rep, WEFT_I32, 2, &bad), -1);
  assert_int_equal(bad.token, 1);
  assert_int_equal(bad.repeated, 1);
  int32_t drops[] = {-1, -1};
  assert_int_equal(weft_moe_plan_send(&p, 2, 4, 2, drops, WEFT_I32, 1, &bad), 0);
  assert_int_equal(p.send_off[2], 0);
  weft_moe_plan_free(&p);
}

/* Random routes of R ranks (T tokens each, k of E experts, some dropped): what the device
 * layout derives from counts alone must match the host plan built from the ids, for every
 * rank, and base[s][l] plus a choice's index among its source's choices of that expert must
 * be the host's row of it. */
enum { R = 3, T = 40, K = 3, E = 6, L = E / R, W = E + R };

static void from_counts_matches(void **st) {
  (void)st;
  int32_t ids[R][T * K];
  uint64_t seed = 7;
  for (int s = 0; s < R; s++)
    for (int t = 0; t < T; t++)
      for (int j = 0; j < K; j++) { /* distinct per token: experts t+j.. shifted, or dropped */
        seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
        ids[s][t * K + j] = (seed >> 60) < 3 ? -1 : (int32_t)((t * 7 + s + j) % E);
      }
  weft_moe_plan_t send[R];
  weft_moe_bad_t bad;
  int64_t all[R][W] = {{0}};
  for (int s = 0; s < R; s++) {
    assert_int_equal(weft_moe_plan_send(&send[s], R, E, K, ids[s], WEFT_I32, T, &bad), 0);
    for (int i = 0; i < T * K; i++)
      all[s][ids[s][i] >= 0 ? ids[s][i] : 0] += ids[s][i] >= 0;
    for (int r = 0; r < R; r++)
      all[s][E + r] = (int64_t)send[s].send_tok[r];
  }
  for (int r = 0; r < R; r++) {
    weft_moe_plan_t host, dev;
    memset(&host, 0, sizeof host);
    host.nranks = R, host.local = L, host.k = K, host.tokens = T;
    host.recv_tok = calloc(R, sizeof *host.recv_tok);
    for (int s = 0; s < R; s++)
      host.recv_tok[s] = send[s].send_tok[r];
    assert_int_equal(weft_moe_plan_recv_alloc(&host), 0);
    for (int s = 0; s < R; s++) /* what alltoallv delivers: s's entries for r, in order */
      memcpy(host.recv_ids + host.recv_off[s] * K, send[s].send_ids + send[s].send_off[r] * K,
             send[s].send_tok[r] * K * sizeof *host.recv_ids);
    /* normal blocks padded to 4, then low-latency blocks of T * R rows */
    for (size_t block = 0; block <= T * R; block += T * R) {
      assert_int_equal(weft_moe_plan_rows(&host, r, 4, block), 0);
      uint64_t base[R][L];
      assert_int_equal(
          weft_moe_plan_from_counts(&dev, R, E, K, T, r, &all[0][0], W, 4, block, &base[0][0]), 0);
      assert_int_equal(dev.rows, host.rows);
      assert_int_equal(dev.fixed, block > 0);
      for (int l = 0; l < L; l++) {
        assert_int_equal(dev.count[l], host.count[l]);
        assert_int_equal(dev.offset[l], host.offset[l]);
      }
      for (int s = 0; s <= R; s++) {
        assert_int_equal(dev.recv_off[s], host.recv_off[s]);
        assert_int_equal(dev.send_off[s], send[r].send_off[s]);
      }
      for (int s = 0; s < R; s++) /* each received choice: base + index (route.cu's slot) */
        for (size_t i = host.recv_off[s]; i < host.recv_off[s + 1]; i++)
          for (int j = 0; j < K; j++) {
            int32_t e = host.recv_ids[i * K + j];
            if (e < r * L || e >= (r + 1) * L) continue;
            size_t tok = send[s].send_list[send[s].send_off[r] + (i - host.recv_off[s])], index = 0;
            for (size_t t = 0; t < tok; t++)
              for (int q = 0; q < K; q++)
                index += ids[s][t * K + q] == e;
            assert_int_equal(host.row_of[i * K + j], base[s][e - r * L] + index);
          }
      weft_moe_plan_free(&dev);
    }
    weft_moe_plan_free(&host);
  }
  for (int s = 0; s < R; s++)
    weft_moe_plan_free(&send[s]);
  /* a negative count (a corrupt record) is refused */
  weft_moe_plan_t bad_plan;
  uint64_t base[R][L];
  all[1][E + 0] = -1;
  assert_int_equal(
      weft_moe_plan_from_counts(&bad_plan, R, E, K, T, 0, &all[0][0], W, 1, 0, &base[0][0]), -1);
  weft_moe_plan_free(&bad_plan);
}

/* The low-latency window: regions in order, none overlapping, each where the kernels need
 * it aligned (records and acks on their own cache lines, staging rows on 16 bytes), and
 * sizes that overflow refused. */
static void ll_window(void **st) {
  (void)st;
  weft_moe_k_geom_t g;
  /* 3 ranks, 5 local experts, k 3, rows of 13 elements of 2 bytes, 7 tokens */
  assert_int_equal(weft_moe_ll_geometry(3, 5, 3, 26, 7, &g), 0);
  assert_int_equal(g.sig_bytes, 128); /* 48 bytes of record and 20 of counts */
  assert_int_equal(g.hdr_bytes, 48);  /* 3 x 12 bytes, to 16 */
  assert_int_equal(g.row_bytes, 26);
  assert_int_equal(g.row_pad, 32);
  assert_int_equal(g.slot_bytes, 80);
  assert_int_equal(g.dsig, 0);
  assert_int_equal(g.csig, 3 * 128);
  assert_int_equal(g.dack, g.csig + 3 * WEFT_MOE_K_FLAG_STRIDE);
  assert_int_equal(g.cack, g.dack + 3 * WEFT_MOE_K_FLAG_STRIDE);
  assert_true(g.dstage >= g.cack + 3 * WEFT_MOE_K_FLAG_STRIDE && g.dstage % 256 == 0);
  assert_int_equal(g.cstage, g.dstage + 3 * 7 * 80);
  assert_int_equal(g.total, g.cstage + 3 * 7 * 32);
  /* 64 local experts: the counts take the record past one line */
  assert_int_equal(weft_moe_ll_geometry(2, 64, 8, 14336, 128, &g), 0);
  assert_int_equal(g.sig_bytes, 320); /* 48 + 256 */
  assert_int_equal(g.hdr_bytes, 96);
  assert_int_equal(g.slot_bytes, 96 + 14336);
  /* out of range or overflowing */
  assert_int_equal(weft_moe_ll_geometry(2, 4, 2, 16, 0, &g), -1);
  assert_int_equal(weft_moe_ll_geometry(2, 4, 2, 0, 8, &g), -1);
  assert_int_equal(weft_moe_ll_geometry(2, 4, 2, 16, (size_t)INT32_MAX + 1, &g), -1);
  assert_int_equal(weft_moe_ll_geometry(8, 4, 2, SIZE_MAX - 8, 8, &g), -1);
  assert_int_equal(weft_moe_ll_geometry(8, 4, 2, 16, (size_t)1 << 28, &g), -1); /* grids */
  assert_int_equal(weft_moe_ll_geometry(8, 4, 1, 16, ((size_t)1 << 28) - 1, &g), 0);
  assert_int_equal(weft_moe_ll_geometry(8, 4, 2, SIZE_MAX / 16, 1 << 20, &g), -1);
}

/* The direct path's window, shared by layers of any shape: the flags at the same offsets for
 * all, the slots after them on 16 bytes, everything inside the window's bytes, as many tokens
 * a round as fit (one more would not), and none when not one fits. */
static void direct_window(void **st) {
  (void)st;
  weft_moe_k_geom_t g, h;
  /* 3 ranks, k 3, rows of 26 bytes, 64 KiB */
  uint64_t c = weft_moe_direct_geometry(3, 3, 26, 65536, &g);
  assert_int_equal(g.sig_bytes, WEFT_MOE_K_FLAG_STRIDE);
  assert_int_equal(g.dsig, 0);
  assert_int_equal(g.csig, 3 * 64);
  assert_int_equal(g.dack, 6 * 64);
  assert_int_equal(g.cack, 9 * 64);
  assert_int_equal(g.dstage, 768);
  assert_int_equal(g.hdr_bytes, 16); /* 3 weights */
  assert_int_equal(g.row_pad, 32);
  assert_int_equal(g.slot_bytes, 48);
  assert_int_equal(c, (65536 - 768) / (3 * (48 + 32)));
  assert_int_equal(g.cstage, 768 + 3 * c * 48);
  assert_int_equal(g.total, g.cstage + 3 * c * 32);
  assert_true(g.total <= 65536 && g.total + 3 * (48 + 32) > 65536);
  /* another layer on the same window: the same flags, its own slots */
  uint64_t c2 = weft_moe_direct_geometry(3, 8, 14336, 65536 * 4, &h);
  assert_int_equal(h.dsig, g.dsig), assert_int_equal(h.cack, g.cack);
  assert_int_equal(h.dstage, g.dstage);
  assert_int_equal(h.slot_bytes, 32 + 14336);
  assert_int_equal(c2, (65536 * 4 - 768) / (3 * (32 + 2 * 14336)));
  assert_true(h.total <= 65536 * 4);
  /* capped, too small, out of range, overflowing */
  assert_int_equal(weft_moe_direct_geometry(1, 1, 16, (size_t)1 << 40, &g),
                   WEFT_MOE_DIRECT_MAX_CHUNK);
  assert_int_equal(weft_moe_direct_geometry(2, 2, 16, 512 + 2 * 48 - 1, &g), 0);
  assert_int_equal(weft_moe_direct_geometry(2, 2, 16, 512 + 2 * 48, &g), 1);
  assert_int_equal(weft_moe_direct_geometry(9, 2, 16, 1 << 20, &g), 0);
  assert_int_equal(weft_moe_direct_geometry(2, 33, 16, 1 << 20, &g), 0);
  assert_int_equal(weft_moe_direct_geometry(2, 2, 0, 1 << 20, &g), 0);
  assert_int_equal(weft_moe_direct_geometry(8, 2, SIZE_MAX / 8, SIZE_MAX, &g), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(send_side),  cmocka_unit_test(rows_padded),
      cmocka_unit_test(rows_fixed), cmocka_unit_test(rows_block_full),
      cmocka_unit_test(bad_ids),    cmocka_unit_test(from_counts_matches),
      cmocka_unit_test(ll_window),  cmocka_unit_test(direct_window)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
