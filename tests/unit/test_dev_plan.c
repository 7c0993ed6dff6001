/* The device launch planner (src/dev_plan.c) without a GPU: the two ends of every message
 * must land on the same channels whatever the grouping on each side, alltoallv must agree
 * on its blocks although each rank sees other sizes, a group's collectives get disjoint
 * channels (with and without split roles), and a refused group changes nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dev_plan.h"

static weft_dev_planner_t planner(int rank, int n) {
  weft_dev_planner_t p = {.rank = rank, .nranks = n, .max_channels = 64, .block_bytes = 32768};
  return p;
}

/* One past the last channel an item uses. */
static int chan_end(const weft_dev_item_t *it) {
  int nch = it->nblocks / it->roles;
  return (it->chan1 > it->chan0 ? it->chan1 : it->chan0) + nch;
}

static weft_task_t p2p(weft_coll_t k, int peer, uint64_t count) {
  weft_task_t t = {.args = {.coll = k, .count = count, .root = peer},
                   .dtype = WEFT_F32,
                   .sendbuf = (void *)16,
                   .recvbuf = (void *)32};
  return t;
}

/* Random messages between n ranks; senders post theirs in random groups, receivers in
 * other random groups: every (sender, receiver, k-th message) must use one channel range. */
static void p2p_ends_agree(void **st) {
  (void)st;
  srand(7);
  for (int trial = 0; trial < 200; trial++) {
    int n = 2 + rand() % 7, nmsg = 1 + rand() % 40;
    int src[40], dst[40];
    uint64_t cnt[40];
    for (int m = 0; m < nmsg; m++) {
      src[m] = rand() % n;
      dst[m] = (src[m] + 1 + rand() % (n - 1)) % n;
      cnt[m] = (uint64_t)(rand() % 3 ? rand() % 5000 : rand() % 2000000);
    }
    weft_dev_planner_t pl[8];
    for (int r = 0; r < n; r++)
      pl[r] = planner(r, n);
    uint16_t send_ch[40], send_nb[40], recv_ch[40], recv_nb[40];
    for (int side = 0; side < 2; side++)
      for (int r = 0; r < n; r++) {
        /* this rank's messages on this side, in order, cut into random groups */
        int idx[40], k = 0;
        for (int m = 0; m < nmsg; m++)
          if ((side ? dst[m] : src[m]) == r) idx[k++] = m;
        for (int i = 0; i < k;) {
          int g = 1 + rand() % 4;
          if (i + g > k) g = k - i;
          weft_task_t tasks[4];
          for (int j = 0; j < g; j++) {
            int m = idx[i + j];
            tasks[j] = p2p(side ? WEFT_COLL_RECV : WEFT_COLL_SEND, side ? src[m] : dst[m], cnt[m]);
          }
          weft_dev_launch_t L;
          int nb = 0;
          assert_int_equal(weft_dev_plan(&pl[r], tasks, g, &L, &nb), WEFT_SUCCESS);
          int item = 0;
          for (int j = 0; j < g; j++) {
            int m = idx[i + j];
            if (cnt[m] == 0) continue; /* nothing moves: no item on either side */
            assert_true(L.items[item].chan0 >= WEFT_DEV_COLL_CHANNELS);
            assert_true(L.items[item].chan0 + L.items[item].nblocks <= WEFT_DEV_MAX_CHANNELS);
            (side ? recv_ch : send_ch)[m] = L.items[item].chan0;
            (side ? recv_nb : send_nb)[m] = L.items[item].nblocks;
            item++;
          }
          assert_int_equal(item, L.nitems);
          i += g;
        }
      }
    for (int m = 0; m < nmsg; m++)
      if (cnt[m]) {
        assert_int_equal(send_ch[m], recv_ch[m]);
        assert_int_equal(send_nb[m], recv_nb[m]);
      }
  }
}

static void alltoallv_blocks_agree(void **st) {
  (void)st;
  for (int split = 0; split < 2; split++) {
    size_t sc[4] = {1, 100000, 0, 7}, rc[4] = {5, 3, 9, 2000000}, d[4] = {0};
    weft_task_t t = {.args = {.coll = WEFT_COLL_ALLTOALLV,
                              .sendcounts = sc,
                              .sdispls = d,
                              .recvcounts = rc,
                              .rdispls = d},
                     .dtype = WEFT_F32};
    weft_dev_launch_t L;
    int nb0 = 0, nb1 = 0;
    weft_dev_planner_t p0 = planner(0, 4), p1 = planner(1, 4);
    p0.split = p1.split = split;
    assert_int_equal(weft_dev_plan(&p0, &t, 1, &L, &nb0), WEFT_SUCCESS);
    sc[1] = 1; /* another rank, other sizes */
    rc[3] = 4;
    assert_int_equal(weft_dev_plan(&p1, &t, 1, &L, &nb1), WEFT_SUCCESS);
    assert_int_equal(nb0, nb1);
    assert_int_equal(L.items[0].roles, split ? 2 : 1);
    assert_int_equal(L.items[0].nblocks, 64 * L.items[0].roles);
    assert_int_equal(L.a2av[0].recvcounts[3], 4);
  }
}

/* Five two-shot allreduces of growing size in one group: items follow each other in blocks
 * and own disjoint channel ranges, the reduced chunks' channels included. */
static void group_channels_disjoint(void **st) {
  (void)st;
  for (int split = 0; split < 2; split++) {
    weft_task_t t[5];
    for (int i = 0; i < 5; i++)
      t[i] =
          (weft_task_t){.args = {.coll = WEFT_COLL_ALLREDUCE, .count = (uint64_t)1 << (10 + 4 * i)},
                        .algo = WEFT_ALGO_TWOSHOT,
                        .dtype = WEFT_BF16};
    weft_dev_planner_t p = planner(0, 2);
    p.split = split;
    weft_dev_launch_t L;
    int nb = 0;
    assert_int_equal(weft_dev_plan(&p, t, 5, &L, &nb), WEFT_SUCCESS);
    assert_int_equal(L.nitems, 5);
    int blocks = 0;
    for (int i = 0; i < 5; i++) {
      const weft_dev_item_t *it = &L.items[i];
      assert_int_equal(it->kind, WEFT_DEV_ALLREDUCE_TWOSHOT);
      assert_int_equal(it->roles, split ? 3 : 1);
      assert_int_equal(it->block0, blocks);
      assert_int_equal(it->nblocks % it->roles, 0);
      int nch = it->nblocks / it->roles;
      assert_true(nch >= 1 && chan_end(it) <= 64);
      /* split: the reduced chunks follow the input channels; else they share them */
      assert_int_equal(it->chan1, split ? it->chan0 + nch : it->chan0);
      if (i) assert_true(it->chan0 >= chan_end(&L.items[i - 1]));
      blocks += it->nblocks;
    }
    assert_int_equal(nb, blocks);
  }
}

/* Sizes decide the channels, the same way on every rank; a group with more collectives
 * than two-shot can split channels for gives it one role. */
static void split_roles_layout(void **st) {
  (void)st;
  weft_dev_planner_t p = planner(1, 2);
  p.split = 1;
  weft_dev_launch_t L;
  int nb = 0;
  weft_task_t big = {.args = {.coll = WEFT_COLL_REDUCE_SCATTER, .count = (uint64_t)1 << 26},
                     .dtype = WEFT_F32,
                     .sendbuf = (void *)16,
                     .recvbuf = (void *)32};
  assert_int_equal(weft_dev_plan(&p, &big, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 2);
  assert_int_equal(nb, 128); /* 64 channels x 2 roles */
  weft_task_t small = big;
  small.args.count = 100; /* 400 bytes: one channel */
  assert_int_equal(weft_dev_plan(&p, &small, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(nb, 2);
  weft_task_t a2a = big;
  a2a.args.coll = WEFT_COLL_ALLTOALL;
  assert_int_equal(weft_dev_plan(&p, &a2a, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 2);
  /* in place too: the kernel orders receivers after their channel's sender */
  a2a.sendbuf = a2a.recvbuf = (void *)64;
  assert_int_equal(weft_dev_plan(&p, &a2a, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 2);
  weft_task_t bc = big;
  bc.args.coll = WEFT_COLL_BROADCAST;
  assert_int_equal(weft_dev_plan(&p, &bc, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 1);
  assert_int_equal(nb, 64);
  p.max_channels = 3;
  weft_task_t g[3];
  for (int i = 0; i < 3; i++)
    g[i] = (weft_task_t){.args = {.coll = WEFT_COLL_ALLREDUCE, .count = (uint64_t)1 << 24},
                         .algo = WEFT_ALGO_TWOSHOT,
                         .dtype = WEFT_F32};
  assert_int_equal(weft_dev_plan(&p, g, 3, &L, &nb), WEFT_SUCCESS);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(L.items[i].roles, 1);
    assert_int_equal(L.items[i].chan0, i);
    assert_int_equal(L.items[i].chan1, i);
  }
  assert_int_equal(nb, 3);
}

static void refusals_change_nothing(void **st) {
  (void)st;
  weft_dev_planner_t p = planner(0, 2), before;
  weft_task_t t[17];
  weft_dev_launch_t L;
  int nb = 0;
  for (int i = 0; i < 9; i++)
    t[i] = p2p(WEFT_COLL_SEND, 1, 100);
  t[0] = p2p(WEFT_COLL_RECV, 1, 100); /* a receive first: it counts too, on its own side */
  before = p;
  assert_int_equal(weft_dev_plan(&p, t, 9, &L, &nb), WEFT_SUCCESS); /* 8 sends: fits */
  p = before;
  t[0] = p2p(WEFT_COLL_SEND, 1, 100);
  assert_int_equal(weft_dev_plan(&p, t, 9, &L, &nb), WEFT_ERR_UNSUPPORTED); /* 9 sends */
  assert_memory_equal(&p, &before, sizeof p);
  t[0] = p2p(WEFT_COLL_SEND, 0, 100); /* to itself */
  assert_int_equal(weft_dev_plan(&p, t, 1, &L, &nb), WEFT_ERR_UNSUPPORTED);
  assert_memory_equal(&p, &before, sizeof p);
  for (int i = 0; i < 17; i++)
    t[i] = p2p(WEFT_COLL_RECV, 1, 1);
  assert_int_equal(weft_dev_plan(&p, t, 17, &L, &nb), WEFT_ERR_UNSUPPORTED);
  assert_memory_equal(&p, &before, sizeof p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(p2p_ends_agree),          cmocka_unit_test(alltoallv_blocks_agree),
      cmocka_unit_test(group_channels_disjoint), cmocka_unit_test(split_roles_layout),
      cmocka_unit_test(refusals_change_nothing),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
