/* The device launch planner (src/gpu/dev_plan.c) without a GPU: the two ends of every message
 * must land on the same channels whatever the grouping on each side, alltoallv must agree
 * on its blocks although each rank sees other sizes, a group's collectives get disjoint
 * channels (with and without split roles), groups too large for one launch continue in
 * further ones, a refused group changes nothing, which operations on windows run straight
 * between the peers' buffers, and which run as rings; and all of it under a shared GPU's
 * block budget, whose launches never pass it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev_plan.h"
#include "dev_task.h"
#include "param.h"
#include "slots.h"

static weft_dev_planner_t planner(int rank, int n) {
  weft_dev_planner_t p = {
      .rank = rank, .nranks = n, .max_channels = 64, .block_bytes = 32768, .p2p_sets = 8};
  weft_dev_slots_make(rank, n, &p.slots);
  return p;
}

/* The same under a shared GPU's budget of `blocks` (budget.c: at least one send and one
 * receive per peer), as share.c sets it: channels within it, one role. */
static weft_dev_planner_t budgeted(weft_dev_planner_t p, int blocks) {
  p.max_blocks = blocks;
  if (p.max_channels > blocks) p.max_channels = blocks;
  p.split = 0;
  return p;
}

static int random_budget(int n) { return 2 * (n - 1) + rand() % 70; }

/* One past the last channel an item uses. */
static int chan_end(const weft_dev_item_t *it) {
  int nch = it->nblocks / it->roles;
  return it->chan0 + nch;
}

static weft_task_t p2p(weft_coll_t k, int peer, uint64_t count) {
  weft_task_t t = {.args = {.coll = k, .count = count, .root = peer},
                   .dtype = WEFT_F32,
                   .sendbuf = (void *)16,
                   .recvbuf = (void *)32};
  return t;
}

/* One launch for the whole group, as collectives always get. */
static weft_result_t plan1(weft_dev_planner_t *p, const weft_task_t *t, int n, weft_dev_launch_t *L,
                           int *nb) {
  uint8_t placed[64] = {0};
  int more = 0;
  weft_result_t rc = weft_dev_plan(p, t, n, placed, L, nb, &more);
  if (rc == WEFT_SUCCESS) assert_int_equal(more, 0);
  return rc;
}

/* Every launch of a group: for each task the launch it went to (-1: nothing moves) and its
 * channel range; every launch holds at most WEFT_DEV_MAX_ITEMS items. Returns the launches. */
static int plan_all(weft_dev_planner_t *p, const weft_task_t *t, int n, int *launch, int *chan0,
                    int *nblocks) {
  uint8_t placed[512] = {0};
  int more = 1, k = 0;
  for (; more; k++) {
    uint8_t before[512];
    weft_dev_launch_t L;
    int nb = 0, item = 0;
    memcpy(before, placed, sizeof before);
    assert_int_equal(weft_dev_plan(p, t, n, placed, &L, &nb, &more), WEFT_SUCCESS);
    assert_true(L.nitems <= WEFT_DEV_MAX_ITEMS);
    assert_true(L.nitems > 0 || !more);
    if (p->max_blocks) { /* a shared GPU's budget: blocks, items, collectives apart */
      int colls = 0, msgs = 0;
      for (int j = 0; j < L.nitems; j++)
        *(L.items[j].kind == WEFT_DEV_SEND || L.items[j].kind == WEFT_DEV_RECV ? &msgs : &colls) +=
            1;
      assert_true(nb <= p->max_blocks);
      assert_true(L.nitems <= weft_dev_plan_items(p));
      assert_false(colls && msgs);
    }
    for (int i = 0; i < n; i++) {
      if (before[i] || !placed[i]) continue;
      if (t[i].args.count == 0) {
        launch[i] = -1;
        continue;
      }
      launch[i] = k;
      chan0[i] = L.items[item].chan0;
      nblocks[i] = L.items[item].nblocks;
      item++;
    }
    assert_int_equal(item, L.nitems);
  }
  for (int i = 0; i < n; i++)
    assert_true(placed[i]);
  return k;
}

/* Random messages between n ranks; senders post theirs in random groups, receivers in
 * other random groups: every (sender, receiver, k-th message) must use one channel range. */
static void p2p_ends_agree(void **st) {
  (void)st;
  srand(7);
  for (int trial = 0; trial < 400; trial++) {
    int n = 2 + rand() % 7, nmsg = 1 + rand() % 40, budget = trial % 2 ? random_budget(n) : 0;
    int src[40], dst[40];
    uint64_t cnt[40];
    for (int m = 0; m < nmsg; m++) {
      src[m] = rand() % n;
      dst[m] = (src[m] + 1 + rand() % (n - 1)) % n;
      cnt[m] = (uint64_t)(rand() % 3 ? rand() % 5000 : rand() % 2000000);
    }
    weft_dev_planner_t pl[8];
    int sets = 1 << (rand() % 4);
    for (int r = 0; r < n; r++) {
      pl[r] = planner(r, n);
      pl[r].p2p_sets = sets;
      if (budget) pl[r] = budgeted(pl[r], budget);
    }
    uint16_t send_ch[40], send_nb[40], recv_ch[40], recv_nb[40];
    for (int side = 0; side < 2; side++)
      for (int r = 0; r < n; r++) {
        /* this rank's messages on this side, in order, cut into random groups (some larger
         * than a launch holds, or than the sets a peer gets) */
        int idx[40], k = 0;
        for (int m = 0; m < nmsg; m++)
          if ((side ? dst[m] : src[m]) == r) idx[k++] = m;
        for (int i = 0; i < k;) {
          int g = 1 + rand() % (rand() % 4 ? 4 : 24);
          if (i + g > k) g = k - i;
          weft_task_t tasks[24];
          int launch[24], ch[24], nb[24];
          for (int j = 0; j < g; j++) {
            int m = idx[i + j];
            tasks[j] = p2p(side ? WEFT_COLL_RECV : WEFT_COLL_SEND, side ? src[m] : dst[m], cnt[m]);
          }
          plan_all(&pl[r], tasks, g, launch, ch, nb);
          for (int j = 0; j < g; j++) {
            int m = idx[i + j];
            if (cnt[m] == 0) continue; /* nothing moves: no item on either side */
            assert_true(ch[j] >= WEFT_DEV_COLL_CHANNELS);
            assert_true(ch[j] + nb[j] <= WEFT_DEV_MAX_CHANNELS);
            assert_true(nb[j] <= WEFT_DEV_P2P_CHANNELS / sets);
            assert_true(nb[j] <= weft_dev_plan_p2p_channels(&pl[r]));
            (side ? recv_ch : send_ch)[m] = (uint16_t)ch[j];
            (side ? recv_nb : send_nb)[m] = (uint16_t)nb[j];
          }
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
    assert_int_equal(plan1(&p0, &t, 1, &L, &nb0), WEFT_SUCCESS);
    sc[1] = 1; /* another rank, other sizes */
    rc[3] = 4;
    assert_int_equal(plan1(&p1, &t, 1, &L, &nb1), WEFT_SUCCESS);
    assert_int_equal(nb0, nb1);
    assert_int_equal(L.items[0].roles, split ? 2 : 1);
    assert_int_equal(L.items[0].nblocks, 64 * L.items[0].roles);
    assert_int_equal(L.a2av[0].recvcounts[3], 4);
  }
}

/* Five two-shot allreduces of growing size in one group: items follow each other in blocks
 * and own disjoint channel ranges. Two-shot keeps one block per channel, split or not, and
 * sends its reduced chunks on the channels of its input. */
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
    assert_int_equal(plan1(&p, t, 5, &L, &nb), WEFT_SUCCESS);
    assert_int_equal(L.nitems, 5);
    int blocks = 0;
    for (int i = 0; i < 5; i++) {
      const weft_dev_item_t *it = &L.items[i];
      assert_int_equal(it->kind, WEFT_DEV_ALLREDUCE_TWOSHOT);
      assert_int_equal(it->roles, 1);
      assert_int_equal(it->block0, blocks);
      assert_int_equal(it->nblocks % it->roles, 0);
      int nch = it->nblocks / it->roles;
      assert_true(nch >= 1 && chan_end(it) <= 64);
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
  assert_int_equal(plan1(&p, &big, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 2);
  assert_int_equal(nb, 128); /* 64 channels x 2 roles */
  weft_task_t small = big;
  small.args.count = 100; /* 400 bytes: one channel */
  assert_int_equal(plan1(&p, &small, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(nb, 2);
  weft_task_t a2a = big;
  a2a.args.coll = WEFT_COLL_ALLTOALL;
  assert_int_equal(plan1(&p, &a2a, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 2);
  /* in place too: the kernel orders receivers after their channel's sender */
  a2a.sendbuf = a2a.recvbuf = (void *)64;
  assert_int_equal(plan1(&p, &a2a, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 2);
  weft_task_t bc = big; /* root 0: this rank only receives */
  bc.args.coll = WEFT_COLL_BROADCAST;
  assert_int_equal(plan1(&p, &bc, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 1);
  assert_int_equal(nb, 64);
  bc.args.root = 1; /* the root out of place also copies: blocks of their own */
  assert_int_equal(plan1(&p, &bc, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 2);
  assert_int_equal(nb, 128);
  bc.sendbuf = bc.recvbuf; /* in place: nothing to copy */
  assert_int_equal(plan1(&p, &bc, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].roles, 1);
  p.max_channels = 3;
  weft_task_t g[3];
  for (int i = 0; i < 3; i++)
    g[i] = (weft_task_t){.args = {.coll = WEFT_COLL_ALLREDUCE, .count = (uint64_t)1 << 24},
                         .algo = WEFT_ALGO_TWOSHOT,
                         .dtype = WEFT_F32};
  assert_int_equal(plan1(&p, g, 3, &L, &nb), WEFT_SUCCESS);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(L.items[i].roles, 1);
    assert_int_equal(L.items[i].chan0, i);
  }
  assert_int_equal(nb, 3);
}

/* Messages beyond a peer's sets, or beyond a launch's items, wait for the next launch; the
 * group's collectives all go in the first, on the channels the group's count gives them. */
static void groups_split_into_launches(void **st) {
  (void)st;
  for (int sets = 1; sets <= 8; sets *= 2) {
    weft_dev_planner_t p = planner(0, 4);
    p.p2p_sets = sets;
    weft_task_t t[40];
    int n = 0, launch[40], ch[40], nb[40];
    for (int i = 0; i < 10; i++) /* ten sends to rank 1 and ten receives from it */
      t[n++] = p2p(i % 2 ? WEFT_COLL_RECV : WEFT_COLL_SEND, 1, 1 << 20);
    t[n++] =
        (weft_task_t){.args = {.coll = WEFT_COLL_ALLGATHER, .count = 1 << 20}, .dtype = WEFT_F32};
    for (int i = 0; i < 12; i++) /* twelve sends to ranks 2 and 3 in turn */
      t[n++] = p2p(WEFT_COLL_SEND, 2 + i % 2, 4096);
    t[n++] = (weft_task_t){.args = {.coll = WEFT_COLL_ALLREDUCE, .count = 1 << 20},
                           .dtype = WEFT_F32,
                           .algo = WEFT_ALGO_TWOSHOT};
    int launches = plan_all(&p, t, n, launch, ch, nb);
    assert_int_equal(launch[10], 0);
    assert_int_equal(launch[n - 1], 0);
    assert_int_equal(ch[10], 0);
    assert_int_equal(ch[n - 1], 32); /* second of two collectives: half the 64 channels */
    /* five messages each way to rank 1, six to ranks 2 and 3: sets per launch at most */
    int expect = (6 + sets - 1) / sets;
    assert_true(launches >= expect);
    for (int i = 0; i < n; i++) {
      if (t[i].args.coll != WEFT_COLL_SEND && t[i].args.coll != WEFT_COLL_RECV) continue;
      for (int j = i + 1; j < n; j++) /* one (peer, direction): in order, sets not shared */
        if (t[j].args.coll == t[i].args.coll && t[j].args.root == t[i].args.root) {
          assert_true(launch[j] >= launch[i]);
          if (launch[j] == launch[i]) assert_int_not_equal(ch[j], ch[i]);
        }
    }
    assert_int_equal(p.p2p_sent[1], 5);
    assert_int_equal(p.p2p_recv[1], 5);
    assert_int_equal(p.p2p_sent[2], 6);
  }
}

/* Every rank's group holds the same messages (its sends to and receives from each peer, in
 * one order per pair but interleaved at random) and the same collectives: whatever the
 * interleaving, both ends of each message go in launches of the same rank order, unless one
 * end's group took a single launch. Otherwise a send could wait for a receive queued
 * behind a launch that waits for it (seen as a hang on 3 ranks before this rule). */
static void matching_groups_cut_alike(void **st) {
  (void)st;
  srand(11);
  for (int trial = 0; trial < 600; trial++) {
    int n = 2 + rand() % 7, sets = 1 << (rand() % 4), ncoll = rand() % 4;
    int budget = trial % 2 ? random_budget(n) : 0;
    int cnt[8][8]; /* messages r -> q */
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++)
        cnt[r][q] = r == q ? 0 : rand() % (rand() % 3 ? 3 : 13);
    /* launch of message k from r to q, as its sender and its receiver planned it */
    static int at_send[8][8][16], at_recv[8][8][16], single[8];
    for (int r = 0; r < n; r++) {
      weft_task_t t[64 * 8];
      int nt = 0, next[8][2] = {{0}}, left = 0, peer_of[64 * 8], k_of[64 * 8];
      for (int q = 0; q < n; q++)
        left += cnt[r][q] + cnt[q][r];
      int coll_at[4];
      for (int c = 0; c < ncoll; c++)
        coll_at[c] = left ? rand() % (left + 1) : 0;
      for (int done = 0; done <= left; done++) {
        for (int c = 0; c < ncoll; c++)
          if (coll_at[c] == done) {
            peer_of[nt] = -1;
            t[nt++] = (weft_task_t){.args = {.coll = WEFT_COLL_ALLGATHER, .count = 64},
                                    .dtype = WEFT_F32};
          }
        if (done == left) break;
        for (;;) { /* a random pair with messages left, its next message */
          int q = rand() % n, dir = rand() % 2;
          int have = dir ? cnt[q][r] : cnt[r][q];
          if (q == r || next[q][dir] >= have) continue;
          peer_of[nt] = q * 2 + dir;
          k_of[nt] = next[q][dir]++;
          t[nt++] = p2p(dir ? WEFT_COLL_RECV : WEFT_COLL_SEND, q, 1000);
          break;
        }
      }
      weft_dev_planner_t p = planner(r, n);
      p.p2p_sets = sets;
      if (budget) p = budgeted(p, budget);
      int launch[64 * 8], ch[64 * 8], nb[64 * 8];
      single[r] = plan_all(&p, t, nt, launch, ch, nb) == 1;
      for (int i = 0; i < nt; i++) {
        if (peer_of[i] < 0) {
          assert_int_equal(launch[i], 0);
          continue;
        }
        int q = peer_of[i] / 2, dir = peer_of[i] % 2;
        if (dir)
          at_recv[q][r][k_of[i]] = launch[i];
        else
          at_send[r][q][k_of[i]] = launch[i];
      }
    }
    for (int r = 0; r < n; r++)
      for (int q = 0; q < n; q++)
        for (int k = 0; k < cnt[r][q]; k++)
          if (!single[r] && !single[q]) assert_int_equal(at_send[r][q][k], at_recv[r][q][k]);
  }
}

/* Under the budget of 8 ranks sharing an H100 (16 blocks of the general kernel): a group's
 * collective takes the first launch alone, on the budget's channels, and its sends and
 * receives to every peer follow, one channel a message and fourteen messages a launch; a
 * budget of 66 (2 ranks) gives a message 4 channels. More collectives than the budget's
 * channels are refused, naming the shared GPU. */
static void budget_launches(void **st) {
  (void)st;
  weft_dev_planner_t p = budgeted(planner(3, 8), 16);
  p.p2p_sets = 2;
  weft_task_t t[15];
  int n = 0, launch[15], ch[15], nb[15];
  t[n++] = (weft_task_t){.args = {.coll = WEFT_COLL_ALLREDUCE, .count = 1 << 24},
                         .dtype = WEFT_F32,
                         .algo = WEFT_ALGO_TWOSHOT};
  for (int q = 0; q < 8; q++)
    if (q != 3) {
      t[n++] = p2p(WEFT_COLL_SEND, q, 1 << 20);
      t[n++] = p2p(WEFT_COLL_RECV, q, 1 << 20);
    }
  assert_int_equal(plan_all(&p, t, n, launch, ch, nb), 2);
  assert_int_equal(launch[0], 0);
  assert_int_equal(nb[0], 16);
  for (int i = 1; i < n; i++) {
    assert_int_equal(launch[i], 1);
    assert_int_equal(nb[i], 1);
  }
  weft_dev_planner_t two = budgeted(planner(0, 2), 66), alone = planner(0, 2);
  assert_int_equal(weft_dev_plan_p2p_channels(&two), 4);
  assert_int_equal(weft_dev_plan_p2p_channels(&alone), WEFT_DEV_P2P_CHANNELS / 8);
  weft_dev_planner_t small = budgeted(planner(0, 2), 10);
  weft_task_t g[11];
  weft_dev_launch_t L;
  uint8_t placed[11] = {0};
  int blocks = 0, more = 0;
  for (int i = 0; i < 11; i++)
    g[i] = (weft_task_t){.args = {.coll = WEFT_COLL_ALLGATHER, .count = 10}, .dtype = WEFT_F32};
  assert_int_equal(weft_dev_plan(&small, g, 11, placed, &L, &blocks, &more), WEFT_ERR_UNSUPPORTED);
  assert_non_null(strstr(weft_get_last_error(NULL), "shared GPU"));
  assert_int_equal(weft_dev_plan(&small, g, 10, placed, &L, &blocks, &more), WEFT_SUCCESS);
  assert_int_equal(blocks, 10);
}

static void refusals_change_nothing(void **st) {
  (void)st;
  weft_dev_planner_t p = planner(0, 2), before = p;
  weft_task_t t[17];
  weft_dev_launch_t L;
  uint8_t placed[17] = {0};
  int nb = 0, more = 0;
  for (int i = 0; i < 9; i++)
    t[i] = p2p(WEFT_COLL_SEND, 1, 100);
  t[4] = p2p(WEFT_COLL_SEND, 0, 100); /* to itself */
  /* submit.c copies those; reaching the planner is a bug */
  assert_int_equal(weft_dev_plan(&p, t, 9, placed, &L, &nb, &more), WEFT_ERR_INTERNAL);
  assert_memory_equal(&p, &before, sizeof p);
  for (int i = 0; i < 9; i++)
    assert_int_equal(placed[i], 0);
  for (int i = 0; i < 17; i++) /* more collectives than a launch holds */
    t[i] = (weft_task_t){.args = {.coll = WEFT_COLL_ALLGATHER, .count = 10}, .dtype = WEFT_F32};
  assert_int_equal(weft_dev_plan(&p, t, 17, placed, &L, &nb, &more), WEFT_ERR_UNSUPPORTED);
  assert_memory_equal(&p, &before, sizeof p);
  t[0] = t[1] = t[2] = (weft_task_t){.args = {.coll = WEFT_COLL_ALLTOALLV}, .dtype = WEFT_F32};
  assert_int_equal(weft_dev_plan(&p, t, 3, placed, &L, &nb, &more), WEFT_ERR_UNSUPPORTED);
  assert_memory_equal(&p, &before, sizeof p);
}

/* What running on windows changes of the planner's item: reductions get one role and channels
 * by their segment up to the cap, allreduce becomes two-shot, copies only the mark. */
static void direct_placement(void **st) {
  (void)st;
  weft_dev_planner_t p = planner(0, 2);
  p.split = 1;
  weft_dev_launch_t L;
  int nb = 0;
  weft_task_t t = coll(WEFT_COLL_ALLGATHER, 1 << 20, 1 << 30, 2u << 30);
  assert_int_equal(plan1(&p, &t, 1, &L, &nb), WEFT_SUCCESS);
  weft_dev_item_t before = L.items[0];
  assert_int_equal(weft_dev_place_direct(&p, &t, 128, &L.items[0]), nb);
  assert_int_equal(L.items[0].direct, 1);
  assert_int_equal(L.items[0].roles, before.roles);
  assert_int_equal(L.items[0].nblocks, before.nblocks);
  t = coll(WEFT_COLL_REDUCE_SCATTER, 16 << 20, 1 << 30, 2u << 30); /* 64 MiB blocks */
  assert_int_equal(plan1(&p, &t, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(weft_dev_place_direct(&p, &t, 128, &L.items[0]), 128);
  assert_int_equal(L.items[0].roles, 1);
  assert_int_equal(L.items[0].nblocks, 128);
  assert_int_equal(weft_dev_place_direct(&p, &t, 16, &L.items[0]), 16);
  assert_int_equal(weft_dev_place_direct(&p, &t, 0, &L.items[0]), WEFT_DEV_DIRECT_CHANNELS);
  assert_int_equal(weft_dev_place_direct(&p, &t, 1000, &L.items[0]), WEFT_DEV_DIRECT_CHANNELS);
  t = coll(WEFT_COLL_REDUCE_SCATTER, 1, 1 << 30, 2u << 30); /* 4 bytes: one channel */
  assert_int_equal(plan1(&p, &t, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(weft_dev_place_direct(&p, &t, 128, &L.items[0]), 1);
  t = coll(WEFT_COLL_ALLREDUCE, 1 << 20, 1 << 30, 1 << 30); /* 4 MiB: 2 MiB a segment */
  t.algo = WEFT_ALGO_ONESHOT;
  assert_int_equal(plan1(&p, &t, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].kind, WEFT_DEV_ALLREDUCE_ONESHOT);
  assert_int_equal(weft_dev_place_direct(&p, &t, 128, &L.items[0]), 64); /* 2 MiB / 32 KiB */
  assert_int_equal(L.items[0].kind, WEFT_DEV_ALLREDUCE_TWOSHOT);
}

/* WEFT_CE_MIN_BYTES: off when unset or empty (the default), a byte count as given, auto only
 * where it was measured (2 ranks on 2 GPUs), anything else refused (-1: the caller says so). */
static void ce_threshold(void **st) {
  (void)st;
  const uint64_t a = WEFT_DEV_CE_AUTO_BYTES;
  assert_int_equal(weft_dev_ce_min(NULL, 2, 0), 0);
  assert_int_equal(weft_dev_ce_min("", 2, 0), 0);
  assert_int_equal(weft_dev_ce_min("auto", 2, 0), a);
  assert_int_equal(weft_dev_ce_min("auto", 3, 0), 0);
  assert_int_equal(weft_dev_ce_min("auto", 8, 0), 0);
  assert_int_equal(weft_dev_ce_min("auto", 2, 1), 0);
  assert_int_equal(weft_dev_ce_min("0", 2, 0), 0);
  assert_int_equal(weft_dev_ce_min("1048576", 4, 1), 1048576);
  assert_int_equal(weft_dev_ce_min("0x100", 2, 0), 256);
  assert_int_equal(weft_dev_ce_min("-5", 2, 0), -1);
  assert_int_equal(weft_dev_ce_min("12abc", 2, 0), -1);
  assert_int_equal(weft_dev_ce_min("many", 3, 0), -1);
  assert_int_equal(weft_dev_ce_min("99999999999999999999999", 2, 0), -1);
}

/* The 128-byte kernel's buffers: about 18 MiB on any number of ranks, slots and credits that
 * tile them exactly; a ring of whole steps, at least two, where the slot holds two (2-5
 * ranks), else a capacity the kernel's split of lines over its blocks really fits (and one
 * byte more does not); WEFT_LL128_MAX_BYTES read (auto: on 2 ranks only). */
static void ll128_sizing(void **st) {
  (void)st;
  assert_int_equal(weft_dev_ll128_lines(1), 0);
  assert_int_equal(weft_dev_ll128_capacity(1), 0);
  assert_int_equal(weft_dev_ll128_ring(1), 0);
  assert_true(weft_dev_ll128_fit(2) >= (uint64_t)8 << 20); /* an 8 MiB allreduce fits */
  for (int n = 2; n <= WEFT_DEV_MAX_RANKS; n++) {
    uint64_t lines = weft_dev_ll128_lines(n), bytes = weft_dev_ll128_bytes(n);
    assert_true(lines > 0);
    /* 18 MiB of lines, the credits at most 112 KiB (16 KiB on 2 ranks) */
    assert_true(bytes <= ((uint64_t)18 << 20) + (112 << 10) && bytes > (uint64_t)17 << 20);
    assert_int_equal(bytes % WEFT_DEV_LL128_LINE_BYTES, 0);
    uint64_t last = WEFT_DEV_LL128_OFF(WEFT_DEV_LL128_CHANNELS - 1, 1, n - 2, n, lines);
    uint64_t credits = last + lines * WEFT_DEV_LL128_LINE_BYTES;
    assert_int_equal(WEFT_DEV_LL128_CREDIT_OFF(0, 0, 0, n, lines), credits);
    uint64_t top = WEFT_DEV_LL128_CREDIT_OFF(WEFT_DEV_LL128_CHANNELS - 1, WEFT_DEV_THREADS / 32 - 1,
                                             n - 2, n, lines);
    assert_true(top + 8 <= bytes && bytes - (top + 8) < WEFT_DEV_LL128_LINE_BYTES);
    uint64_t ring = weft_dev_ll128_ring(n), cap = weft_dev_ll128_capacity(n);
    /* the kernel: lines of payload, ceil over its blocks, fit a slot up to fit, not past it */
    uint64_t fit = weft_dev_ll128_fit(n);
    uint64_t need = (fit + WEFT_DEV_LL128_DATA_BYTES - 1) / WEFT_DEV_LL128_DATA_BYTES;
    assert_true((need + WEFT_DEV_LL128_CHANNELS - 1) / WEFT_DEV_LL128_CHANNELS <= lines);
    need = (fit + 1 + WEFT_DEV_LL128_DATA_BYTES - 1) / WEFT_DEV_LL128_DATA_BYTES;
    assert_true((need + WEFT_DEV_LL128_CHANNELS - 1) / WEFT_DEV_LL128_CHANNELS > lines);
    for (int r = 0; r < 2; r++) { /* copies, reductions */
      assert_int_equal(ring != 0, n <= 5);
      if (ring) {
        assert_int_equal(ring % WEFT_DEV_LL128_STEP, 0);
        assert_true(ring >= 2 * WEFT_DEV_LL128_STEP && ring <= lines);
        assert_true(lines - ring < WEFT_DEV_LL128_STEP);
        assert_true(cap == UINT64_MAX);
        assert_int_equal(weft_dev_ll128_max("17179869184", n, r), (int64_t)1 << 34);
      } else {
        assert_int_equal(cap, fit);
        char buf[32];
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)cap);
        assert_int_equal(weft_dev_ll128_max(buf, n, r), (int64_t)cap);
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)cap + 1);
        assert_int_equal(weft_dev_ll128_max(buf, n, r), -1);
      }
      int64_t a = n == 2   ? r ? WEFT_DEV_LL128_AUTO_REDUCE_BYTES : WEFT_DEV_LL128_AUTO_BYTES
                  : n == 4 ? r ? WEFT_DEV_LL128_AUTO4_REDUCE_BYTES : WEFT_DEV_LL128_AUTO4_BYTES
                           : 0;
      assert_true((uint64_t)a <= weft_dev_ll128_capacity(n)); /* auto always fits */
      assert_int_equal(weft_dev_ll128_max(NULL, n, r), a);
      assert_int_equal(weft_dev_ll128_max("auto", n, r), a);
      assert_int_equal(weft_dev_ll128_max("0", n, r), 0);
      assert_int_equal(weft_dev_ll128_max("4096", n, r), 4096);
      assert_int_equal(weft_dev_ll128_max("0x1000", n, r), 4096);
      assert_int_equal(weft_dev_ll128_max("-1", n, r), -1);
      assert_int_equal(weft_dev_ll128_max("1M", n, r), -1);
      assert_int_equal(weft_dev_ll128_max("many", n, r), -1);
      assert_int_equal(weft_dev_ll128_max("99999999999999999999999", n, r), -1);
    }
  }
  assert_int_equal(weft_dev_ll128_ring(2), WEFT_DEV_LL128_LINES); /* 9 steps on 2 ranks */
}

/* WEFT_ALGO=ring: allreduce (on two-shot's segments), reduce_scatter and allgather become ring
 * items on one block per channel even with split roles, on the same channels as otherwise, and
 * so does broadcast (a chain; past 8 ranks, slots.h); alltoall, and allreduce forced
 * otherwise, do not. */
static void ring_items(void **st) {
  (void)st;
  weft_dev_planner_t p = planner(0, 4);
  p.split = 1;
  weft_dev_launch_t L, plain;
  int nb = 0, nb_plain = 0;
  const weft_coll_t kinds[] = {WEFT_COLL_ALLREDUCE, WEFT_COLL_REDUCE_SCATTER, WEFT_COLL_ALLGATHER,
                               WEFT_COLL_ALLTOALL, WEFT_COLL_BROADCAST};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
    weft_task_t t = {.args = {.coll = kinds[i], .count = (uint64_t)1 << 22},
                     .algo = WEFT_ALGO_RING,
                     .dtype = WEFT_F32,
                     .sendbuf = (void *)16,
                     .recvbuf = (void *)32};
    assert_int_equal(plan1(&p, &t, 1, &L, &nb), WEFT_SUCCESS);
    int ring = kinds[i] != WEFT_COLL_ALLTOALL;
    assert_int_equal(L.items[0].ring, ring);
    if (kinds[i] == WEFT_COLL_ALLREDUCE)
      assert_int_equal(L.items[0].kind, WEFT_DEV_ALLREDUCE_TWOSHOT);
    t.algo = kinds[i] == WEFT_COLL_ALLREDUCE ? WEFT_ALGO_TWOSHOT : WEFT_ALGO_DIRECT;
    assert_int_equal(plan1(&p, &t, 1, &plain, &nb_plain), WEFT_SUCCESS);
    assert_int_equal(plain.items[0].ring, 0);
    assert_int_equal(L.items[0].chan0, plain.items[0].chan0);
    assert_int_equal(L.items[0].nblocks / L.items[0].roles,
                     plain.items[0].nblocks / plain.items[0].roles);
    if (ring) {
      assert_int_equal(L.items[0].roles, 1);
      assert_int_equal(nb, L.items[0].nblocks);
    }
  }
  /* one-shot stays one-shot */
  weft_task_t one = {.args = {.coll = WEFT_COLL_ALLREDUCE, .count = 1000},
                     .algo = WEFT_ALGO_ONESHOT,
                     .dtype = WEFT_F32};
  assert_int_equal(plan1(&p, &one, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].ring, 0);
  assert_int_equal(L.items[0].kind, WEFT_DEV_ALLREDUCE_ONESHOT);
}

/* The bytes a call touches per buffer, as the device engine checks its pointers against
 * them; an extent that does not fit in size_t is reported, never wrapped into a small one
 * (issue 20: alltoallv displacements near SIZE_MAX). */
static void extents(void **st) {
  (void)st;
  size_t in = 0, out = 0;
  weft_task_t t = {.args = {.coll = WEFT_COLL_ALLGATHER, .count = 10}, .dtype = WEFT_F32};
  assert_true(weft_dev_extents(0, 4, &t, &in, &out));
  assert_int_equal(in, 40);
  assert_int_equal(out, 160);
  t.args.coll = WEFT_COLL_BROADCAST;
  t.args.root = 1;
  assert_true(weft_dev_extents(0, 4, &t, &in, &out));
  assert_int_equal(in, 0); /* only the root reads */
  assert_int_equal(out, 40);
  t.args.count = SIZE_MAX / 2;
  assert_false(weft_dev_extents(0, 4, &t, &in, &out));
  t.args.coll = WEFT_COLL_ALLTOALL;
  t.args.count = SIZE_MAX / 8; /* x 4 bytes fits, x 4 ranks does not */
  assert_false(weft_dev_extents(0, 4, &t, &in, &out));
  size_t counts[2] = {1, 1}, displs[2] = {0, 3}, wrap[2] = {SIZE_MAX, SIZE_MAX},
         quarter[2] = {SIZE_MAX / 4 + 1, SIZE_MAX / 4 + 1};
  weft_task_t v = {.args = {.coll = WEFT_COLL_ALLTOALLV,
                            .sendcounts = counts,
                            .sdispls = displs,
                            .recvcounts = counts,
                            .rdispls = displs},
                   .dtype = WEFT_F32};
  assert_true(weft_dev_extents(0, 2, &v, &in, &out));
  assert_int_equal(in, 16);
  assert_int_equal(out, 16);
  v.args.sdispls = wrap;
  assert_false(weft_dev_extents(0, 2, &v, &in, &out));
  v.args.sdispls = displs;
  v.args.rdispls = quarter;
  assert_false(weft_dev_extents(0, 2, &v, &in, &out));
  /* empty blocks reach no byte, wherever they point: no buffer needed, as on host buffers */
  size_t none[2] = {0, 0}, far[2] = {10, 20};
  v.args.sendcounts = v.args.recvcounts = none;
  v.args.sdispls = v.args.rdispls = far;
  assert_true(weft_dev_extents(0, 2, &v, &in, &out));
  assert_int_equal(in, 0);
  assert_int_equal(out, 0);
}

/* Past WEFT_DEV_MAX_RANKS ranks a rank's kernels reach its ring neighbours alone: alltoall(v)
 * and messages to any other rank are refused with the reason, nothing placed; a message to a
 * neighbour names the neighbour's slot, and the group of one message each way to both
 * neighbours fits one launch. */
static void beyond_eight_ranks(void **st) {
  (void)st;
  const int n = 12, me = 5;
  weft_dev_planner_t p = planner(me, n), before = p;
  assert_int_equal(p.slots.identity, 0);
  weft_dev_launch_t L;
  int nb = 0;
  weft_task_t a2a = {.args = {.coll = WEFT_COLL_ALLTOALL, .count = 64},
                     .algo = WEFT_ALGO_DIRECT,
                     .dtype = WEFT_F32,
                     .sendbuf = (void *)16,
                     .recvbuf = (void *)32};
  assert_int_equal(plan1(&p, &a2a, 1, &L, &nb), WEFT_ERR_UNSUPPORTED);
  assert_non_null(strstr(weft_get_last_error(NULL), "only the ring algorithms run"));
  weft_task_t far = {.args = {.coll = WEFT_COLL_SEND, .count = 64, .root = 9},
                     .dtype = WEFT_F32,
                     .sendbuf = (void *)16,
                     .recvbuf = (void *)16};
  assert_int_equal(plan1(&p, &far, 1, &L, &nb), WEFT_ERR_UNSUPPORTED);
  assert_non_null(strstr(weft_get_last_error(NULL), "reach only ranks 4 and 6"));
  assert_memory_equal(&p, &before, sizeof p);
  weft_task_t msgs[4];
  for (int i = 0; i < 4; i++) {
    msgs[i] = far;
    msgs[i].args.coll = i % 2 ? WEFT_COLL_RECV : WEFT_COLL_SEND;
    msgs[i].args.root = i < 2 ? me - 1 : me + 1;
  }
  assert_int_equal(plan1(&p, msgs, 4, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.nitems, 4);
  for (int i = 0; i < 4; i++)
    assert_int_equal(L.items[i].root, i < 2 ? 0 : 2); /* rank 4 is slot 0, rank 6 slot 2 */
  weft_task_t bc = {.args = {.coll = WEFT_COLL_BROADCAST, .count = 1 << 20, .root = 7},
                    .algo = WEFT_ALGO_RING,
                    .dtype = WEFT_F32,
                    .sendbuf = (void *)16,
                    .recvbuf = (void *)16};
  assert_int_equal(plan1(&p, &bc, 1, &L, &nb), WEFT_SUCCESS);
  assert_int_equal(L.items[0].ring, 1);
  assert_int_equal(L.items[0].root, 7); /* a collective's root stays a rank */
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(p2p_ends_agree),
      cmocka_unit_test(alltoallv_blocks_agree),
      cmocka_unit_test(group_channels_disjoint),
      cmocka_unit_test(split_roles_layout),
      cmocka_unit_test(ring_items),
      cmocka_unit_test(beyond_eight_ranks),
      cmocka_unit_test(groups_split_into_launches),
      cmocka_unit_test(matching_groups_cut_alike),
      cmocka_unit_test(budget_launches),
      cmocka_unit_test(refusals_change_nothing),
      cmocka_unit_test(direct_placement),
      cmocka_unit_test(ce_threshold),
      cmocka_unit_test(ll128_sizing),
      cmocka_unit_test(extents),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
