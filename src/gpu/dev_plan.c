/* Planning a device launch: which blocks and channels each operation of a call or group
 * gets. Pure: every rank must derive the same channels for the same message from what it
 * knows alone, and tests/unit/test_dev_plan.c checks that without a GPU. */
#include "dev_plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "dtype.h"
#include "err.h"
#include "op.h"

static uint64_t round_len(int nranks, const weft_task_t *t, int kind) {
  const weft_coll_args_t *a = &t->args;
  uint64_t n = (uint64_t)nranks, m = 0;
  switch (kind) {
  case WEFT_DEV_ALLREDUCE_TWOSHOT: return (a->count + n - 1) / n;
  case WEFT_DEV_ALLTOALLV:
    for (int p = 0; p < nranks; p++) {
      if (a->sendcounts[p] > m) m = a->sendcounts[p];
      if (a->recvcounts[p] > m) m = a->recvcounts[p];
    }
    return m;
  default: return a->count;
  }
}

/* Blocks per channel when steps get blocks of their own (see weft_dev_item_t). Rooted
 * collectives keep one: a rank there only sends or only receives. So does two-shot
 * allreduce: split, its reduced chunks took channels of their own, half of them, and on 4
 * H200s one block per channel on all of them took 9-22% less time from 8 to 128 MiB (128
 * MiB 836 us against 1076; bench/results/2026-11-30-h200x4.txt). On 2 ranks two-shot runs
 * only when forced. */
static int split_roles(int kind) {
  switch (kind) {
  case WEFT_DEV_ALLREDUCE_ONESHOT:
  case WEFT_DEV_REDUCE_SCATTER:
  case WEFT_DEV_ALLGATHER:
  case WEFT_DEV_ALLTOALL:
  case WEFT_DEV_ALLTOALLV: return 2;
  default: return 1;
  }
}

static int dev_kind(const weft_task_t *t) {
  return weft_dev_op_kind(weft_dev_op_of(t, WEFT_PROTO_SIMPLE));
}

int weft_dev_extents(int rank, int nranks, const weft_task_t *t, size_t *in, size_t *out) {
  size_t es = weft_dtype_size(t->dtype), n = (size_t)nranks, cnt, all, end;
  const weft_coll_args_t *a = &t->args;
  if (!weft_mul_fits(a->count, es, &cnt) || !weft_mul_fits(cnt, n, &all)) return 0;
  *in = *out = cnt;
  switch (a->coll) {
  case WEFT_COLL_REDUCE_SCATTER: *in = all; break;
  case WEFT_COLL_ALLGATHER: *out = all; break;
  case WEFT_COLL_ALLTOALL: *in = *out = all; break;
  case WEFT_COLL_ALLTOALLV:
    *in = *out = 0;
    for (size_t p = 0; p < n; p++) {
      /* an empty block reaches no byte, wherever its displacement points (as in coll.c) */
      if (!weft_extent_fits(a->sdispls[p], a->sendcounts[p], es, &end)) return 0;
      if (a->sendcounts[p] && end > *in) *in = end;
      if (!weft_extent_fits(a->rdispls[p], a->recvcounts[p], es, &end)) return 0;
      if (a->recvcounts[p] && end > *out) *out = end;
    }
    break;
  case WEFT_COLL_BROADCAST:
    if (rank != a->root) *in = 0;
    break;
  case WEFT_COLL_REDUCE:
    if (rank != a->root) *out = 0;
    break;
  case WEFT_COLL_SEND: *out = 0; break;
  case WEFT_COLL_RECV: *in = 0; break;
  default: break;
  }
  return 1;
}

weft_result_t weft_dev_plan_reaches(const weft_dev_planner_t *d, const weft_task_t *t) {
  weft_coll_t k = t->args.coll;
  if (d->slots.identity) return WEFT_SUCCESS;
  if (k == WEFT_COLL_SEND || k == WEFT_COLL_RECV) {
    if (weft_dev_slot_of(&d->slots, t->args.root) >= 0) return WEFT_SUCCESS;
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "%s between ranks %d and %d: on a device communicator of %d ranks "
                          "(more than %d) a rank's kernels reach only ranks %d and %d, its ring "
                          "neighbours",
                          weft_coll_name(k), d->rank, t->args.root, d->nranks, WEFT_DEV_MAX_RANKS,
                          d->slots.rank[0], d->slots.rank[2]);
  }
  if (k != WEFT_COLL_ALLTOALL && k != WEFT_COLL_ALLTOALLV) return WEFT_SUCCESS;
  return weft_set_error(WEFT_ERR_UNSUPPORTED,
                        "%s on a device communicator of %d ranks: past %d ranks only the ring "
                        "algorithms run (allreduce, reduce_scatter, allgather, broadcast, reduce, "
                        "send/recv between ring neighbours)",
                        weft_coll_name(k), d->nranks, WEFT_DEV_MAX_RANKS);
}

weft_result_t weft_dev_plan_check(const weft_dev_planner_t *d, const weft_task_t *tasks, int ntasks,
                                  int *ncoll) {
  int na2av = 0;
  *ncoll = 0;
  for (int i = 0; i < ntasks; i++) {
    weft_coll_t k = tasks[i].args.coll;
    CHECK(weft_dev_plan_reaches(d, &tasks[i]));
    if (k == WEFT_COLL_SEND || k == WEFT_COLL_RECV) {
      if (tasks[i].args.root == d->rank)
        return weft_set_error(WEFT_ERR_INTERNAL,
                              "device planner: a send/recv of rank %d to itself (submit.c copies "
                              "those)",
                              d->rank);
      continue;
    }
    ++*ncoll;
    na2av += k == WEFT_COLL_ALLTOALLV;
  }
  if (*ncoll > WEFT_DEV_MAX_ITEMS || *ncoll > d->max_channels)
    return weft_set_error(
        WEFT_ERR_UNSUPPORTED,
        "a group on a device communicator holds at most %d collectives (%d given)%s",
        WEFT_DEV_MAX_ITEMS < d->max_channels ? WEFT_DEV_MAX_ITEMS : d->max_channels, *ncoll,
        d->max_blocks ? ": each rank's kernels on this shared GPU hold that many channels "
                        "(WEFT_SHARED_SM_PERCENT, docs/gpu.md)"
                      : "");
  if (na2av > WEFT_DEV_MAX_A2AV)
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "a group on a device communicator holds at most %d alltoallv",
                          WEFT_DEV_MAX_A2AV);
  return WEFT_SUCCESS;
}

/* A send or receive on the channel set its place in the (peer, direction) order gives. */
static void place_p2p(const weft_dev_planner_t *d, int set, uint64_t want, weft_dev_item_t *it) {
  int per_set = WEFT_DEV_P2P_CHANNELS / d->p2p_sets;
  it->chan0 = (uint16_t)(WEFT_DEV_COLL_CHANNELS + set * per_set);
  it->roles = 1;
  uint64_t most = (uint64_t)weft_dev_plan_p2p_channels(d);
  it->nblocks = (uint16_t)(want < most ? want : most);
}

int weft_dev_plan_items(const weft_dev_planner_t *d) {
  return d->max_blocks > 0 && d->max_blocks < WEFT_DEV_MAX_ITEMS ? d->max_blocks
                                                                 : WEFT_DEV_MAX_ITEMS;
}

/* A message's channels follow from the message alone, so that both of its ends agree. */
int weft_dev_plan_p2p_channels(const weft_dev_planner_t *d) {
  int per_set = WEFT_DEV_P2P_CHANNELS / (d->p2p_sets > 0 ? d->p2p_sets : 1);
  if (d->max_blocks <= 0) return per_set;
  int k = d->max_blocks / weft_dev_plan_items(d);
  return k < 1 ? 1 : k > per_set ? per_set : k;
}

/* A collective on its share of the collective channels; slot is its place among the
 * group's collectives, the same on every rank whatever the sizes. */
static void place_coll(const weft_dev_planner_t *d, const weft_task_t *t, int kind, int per_coll,
                       int slot, uint64_t want, weft_dev_launch_t *L, int *na2av,
                       weft_dev_item_t *it) {
  if (kind == WEFT_DEV_ALLTOALLV) {
    weft_dev_a2av_t *v = &L->a2av[*na2av];
    for (int p = 0; p < d->nranks; p++) {
      v->sendcounts[p] = t->args.sendcounts[p];
      v->sdispls[p] = t->args.sdispls[p];
      v->recvcounts[p] = t->args.recvcounts[p];
      v->rdispls[p] = t->args.rdispls[p];
    }
    it->a2av = (int16_t)(*na2av)++;
  }
  /* In place, one-shot's reducers and alltoall's receivers overwrite input that the
   * senders of the same channel may not have read yet; the kernel makes them wait for
   * their sender's round (weft_dev_launch_t.progress), so split roles stay. */
  int roles = d->split && !it->ring ? split_roles(kind) : 1;
  /* An out-of-place broadcast root also copies its input to its output: on blocks of their
   * own that copy does not hold up its NVLink writes (1 GiB: 345 GB/s against 359 in place,
   * bench/results/2026-11-30-h200x2-rooted-p2p.txt). Roles are a rank's own business; its
   * peers' blocks see the same channels. */
  if (d->split && !it->ring && kind == WEFT_DEV_BROADCAST && t->args.root == d->rank &&
      t->sendbuf != t->recvbuf)
    roles = 2;
  /* alltoallv's sizes differ per rank: only a fixed count agrees everywhere */
  uint64_t avail = (uint64_t)per_coll,
           nch = kind == WEFT_DEV_ALLTOALLV || want > avail ? avail : want;
  int chan = slot * per_coll;
  it->roles = (uint8_t)roles;
  it->chan0 = (uint16_t)chan;
  it->nblocks = (uint16_t)(nch * (uint64_t)roles);
}

/* Whether one launch holds the whole group: at most WEFT_DEV_MAX_ITEMS operations that
 * move data, and at most one message per set for each (peer, direction). */
static int group_fits(const weft_dev_planner_t *d, const weft_task_t *tasks, int ntasks, int ncoll,
                      int limit) {
  int per[WEFT_DEV_MAX_RANKS][2], items = ncoll;
  memset(per, 0, sizeof per);
  for (int i = 0; i < ntasks; i++) {
    int kind = dev_kind(&tasks[i]);
    if ((kind != WEFT_DEV_SEND && kind != WEFT_DEV_RECV) || tasks[i].args.count == 0) continue;
    if (++per[weft_dev_slot_of(&d->slots, tasks[i].args.root)][kind == WEFT_DEV_RECV] > d->p2p_sets)
      return 0;
    items++;
  }
  return items <= limit;
}

weft_result_t weft_dev_plan(weft_dev_planner_t *d, const weft_task_t *tasks, int ntasks,
                            uint8_t *placed, weft_dev_launch_t *L, int *nblocks, int *more) {
  int ncoll = 0, na2av = 0, blocks = 0, slot = 0, first = 1;
  uint8_t taken[WEFT_DEV_MAX_RANKS][2];
  *nblocks = 0;
  *more = 0;
  for (int i = 0; i < ntasks && first; i++)
    first = !placed[i];
  if (first) { /* later launches of the group passed these already; ncoll serves the first */
    CHECK(weft_dev_plan_check(d, tasks, ntasks, &ncoll));
    if (d->p2p_sets < 1 || d->p2p_sets > WEFT_DEV_P2P_MAX_SETS ||
        WEFT_DEV_P2P_CHANNELS % d->p2p_sets)
      return weft_set_error(WEFT_ERR_INVALID_ARG, "device planner: %d send/recv sets", d->p2p_sets);
  }
  memset(taken, 0, sizeof taken);
  int sets = d->p2p_sets, per_coll = ncoll ? d->max_channels / ncoll : 0;
  /* Under a block budget the first launch of a group with collectives holds them alone, and
   * messages take the launches after it, which hold collectives no more. */
  int items = weft_dev_plan_items(d), budget = d->max_blocks > 0;
  int p2p_here = !(budget && first && ncoll > 0), coll_items = budget ? 0 : ncoll;
  /* Messages of one (peer, direction) this launch takes. A group that fits takes all at
   * once. One that does not is cut by a rule both ends of every message apply alike when
   * their groups hold the same messages: each launch takes the next `quota` of each (peer,
   * direction), quota being what the items left after the collectives allow if every peer
   * had messages both ways. Cutting by how full this rank's launch happens to be could put
   * one end of a message in a rank's first launch and the other in its peer's second, and
   * a send that waits for a receive queued behind it deadlocks. */
  int quota = sets;
  int peers = d->slots.nslots - 1;
  if (peers > 0 && (!first || !group_fits(d, tasks, ntasks, coll_items, items))) {
    int room = (items - (first ? coll_items : 0)) / (2 * peers);
    quota = room < sets ? room : sets;
    if (quota < 1 && !first) /* budget.c refuses such a budget at init */
      return weft_set_error(WEFT_ERR_INTERNAL,
                            "device planner: %d items a launch hold no message to and from "
                            "each of %d peers",
                            items, peers);
  }
  L->nitems = 0;
  for (int i = 0; i < ntasks; i++) {
    const weft_task_t *t = &tasks[i];
    int kind = dev_kind(t), p2p = kind == WEFT_DEV_SEND || kind == WEFT_DEV_RECV;
    if (placed[i] || (!p2p && !first)) continue; /* collectives go in the first launch */
    uint64_t len = round_len(d->nranks, t, kind);
    if (len == 0 && kind != WEFT_DEV_ALLTOALLV) { /* nothing moves */
      placed[i] = 1;
      slot += !p2p;
      continue;
    }
    int peer = p2p ? weft_dev_slot_of(&d->slots, t->args.root) : -1, dir = kind == WEFT_DEV_RECV,
        set = 0;
    if (p2p) {
      if (!p2p_here || taken[peer][dir] >= quota) {
        *more = 1;
        continue;
      }
      /* both ends pair a message with the same set: the count of earlier ones decides */
      uint64_t *msgs = dir ? d->p2p_recv : d->p2p_sent;
      set = (int)(msgs[peer]++ % (uint64_t)sets);
      taken[peer][dir]++;
    }
    size_t es = weft_dtype_size(t->dtype);
    weft_dev_item_t *it = &L->items[L->nitems];
    memset(it, 0, sizeof *it);
    it->kind = (uint8_t)kind;
    it->dtype = (uint8_t)t->dtype;
    it->op = (uint8_t)t->op;
    it->root = (int16_t)(p2p ? peer : t->args.root); /* a message's peer as its slot */
    it->count = t->args.count;
    it->send = t->sendbuf;
    it->recv = t->recvbuf;
    it->ring = (uint8_t)weft_dev_op_ring(weft_dev_op_of(t, WEFT_PROTO_SIMPLE));
    uint64_t want = (len * es + d->block_bytes - 1) / d->block_bytes;
    if (want < 1) want = 1;
    if (p2p)
      place_p2p(d, set, want, it);
    else
      place_coll(d, t, kind, per_coll, slot++, want, L, &na2av, it);
    it->block0 = (uint16_t)blocks;
    blocks += it->nblocks;
    placed[i] = 1;
    L->nitems++;
  }
  *nblocks = blocks;
  return WEFT_SUCCESS;
}

/* A byte count (decimal, or 0x... hex) up to most, else -1. */
static int64_t parse_bytes(const char *s, uint64_t most) {
  char *end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (end == s || *end != 0 || s[0] == '-' || errno || v > most || v > INT64_MAX) return -1;
  return (int64_t)v;
}

int64_t weft_dev_ce_min(const char *param, int nranks, int gpu_shared) {
  if (!param || !param[0]) return 0; /* the default: off */
  if (strcmp(param, "auto") == 0)
    return nranks == 2 && !gpu_shared ? (int64_t)WEFT_DEV_CE_AUTO_BYTES : 0;
  return parse_bytes(param, UINT64_MAX);
}

uint32_t weft_dev_ll128_lines(int nranks) {
  return nranks < 2 ? 0 : WEFT_DEV_LL128_LINES / (uint32_t)(nranks - 1);
}

uint64_t weft_dev_ll128_bytes(int nranks) {
  if (nranks < 2) return 0;
  uint64_t end = WEFT_DEV_LL128_CREDIT_OFF(WEFT_DEV_LL128_CHANNELS, 0, 0, nranks,
                                           weft_dev_ll128_lines(nranks));
  return (end + WEFT_DEV_LL128_LINE_BYTES - 1) / WEFT_DEV_LL128_LINE_BYTES *
         WEFT_DEV_LL128_LINE_BYTES;
}

uint64_t weft_dev_ll128_ring(int nranks) {
  uint64_t ring = weft_dev_ll128_lines(nranks) / WEFT_DEV_LL128_STEP * WEFT_DEV_LL128_STEP;
  return ring >= 2 * WEFT_DEV_LL128_STEP ? ring : 0;
}

uint64_t weft_dev_ll128_fit(int nranks) {
  return (uint64_t)WEFT_DEV_LL128_CHANNELS * weft_dev_ll128_lines(nranks) *
         WEFT_DEV_LL128_DATA_BYTES;
}

uint64_t weft_dev_ll128_capacity(int nranks) {
  return weft_dev_ll128_ring(nranks) ? UINT64_MAX : weft_dev_ll128_fit(nranks);
}

int64_t weft_dev_ll128_max(const char *param, int nranks, int reduces) {
  /* auto: where it was measured against the general kernel, 2 ranks on 2 GPUs and 4 on 4;
   * other counts take a byte count */
  if (!param || !param[0] || strcmp(param, "auto") == 0)
    return nranks == 2   ? reduces ? WEFT_DEV_LL128_AUTO_REDUCE_BYTES : WEFT_DEV_LL128_AUTO_BYTES
           : nranks == 4 ? reduces ? WEFT_DEV_LL128_AUTO4_REDUCE_BYTES : WEFT_DEV_LL128_AUTO4_BYTES
                         : 0;
  return parse_bytes(param, weft_dev_ll128_capacity(nranks));
}

/* Reads want more requests in flight than writes: 4 GiB reduce_scatter ran at 290 GB/s on 64
 * channels, 329 on 128, no more on 192 or 256 (bench/results/2026-11-30-h200x2-tuning-16.txt). */
int weft_dev_place_direct(const weft_dev_planner_t *d, const weft_task_t *t, int64_t most,
                          weft_dev_item_t *it) {
  it->direct = 1;
  weft_coll_t k = t->args.coll;
  if (k != WEFT_COLL_ALLREDUCE && k != WEFT_COLL_REDUCE_SCATTER) return it->nblocks;
  uint64_t n = (uint64_t)d->nranks, bytes = t->args.count * weft_dtype_size(t->dtype);
  uint64_t seg = k == WEFT_COLL_ALLREDUCE ? (bytes + n - 1) / n : bytes;
  uint64_t want = (seg + d->block_bytes - 1) / d->block_bytes;
  if (most < 1 || most > WEFT_DEV_DIRECT_CHANNELS) most = WEFT_DEV_DIRECT_CHANNELS;
  if (want < 1) want = 1;
  if (want > (uint64_t)most) want = (uint64_t)most;
  if (k == WEFT_COLL_ALLREDUCE) it->kind = WEFT_DEV_ALLREDUCE_TWOSHOT;
  it->roles = 1;
  it->nblocks = (uint16_t)want;
  return it->nblocks;
}
