/* The region proxy (src/proxy/region.c) over TCP between fake hosts, a host thread standing
 * in for the kernels with their protocol (prims.cuh): a sender waits for done credits in its
 * own region, writes a chunk into the receiver's region (here: this host's mirror of it) and
 * raises ready there; a receiver waits for ready in its own region, reads the chunk, and
 * raises done in the sender's region (mirror). Peers are slots (src/gpu/slots.h): every
 * other rank up to 8 ranks, the two ring neighbours past that (NRANKS up to 16), each flag
 * and chunk where the peer's table says. Every rank sends K chunks to every peer on
 * collective and send/recv channels, each of its own length (written beside the flag, as the
 * kernels do; the slot is filled whole) and every byte and every credit is checked, and that
 * no more than the length travelled. Up to 8 ranks the stand-in also runs the small low-latency
 * kernel's protocol (ll.cu) on LLCH channels: each operation writes a block of lines (8 bytes
 * of data, each 4 with a copy of the operation's seq) into every peer's region, posts their
 * count and seq beside them, and polls its own region for every peer's block, which it checks
 * word by word, that none came past its count, and that its parity buffer is reused only as
 * the kernel would. With LINKS > 1 the proxy runs that many workers, each on
 * connections of its own (weft_comm_transport_again), the channels dealt among them. With
 * "abort", rank 1 aborts its communicator a quarter of the way through: its proxy tells the
 * others, whose proxies must fail saying rank 1 aborted (not that it is gone). With
 * "abort-stop", rank 1 stops its proxy at once after the abort (a communicator destroyed right
 * after weft_comm_abort): workers that never saw the abort must still tell the others. With
 * "fail", rank 1's communicator fails a quarter of the way through (weft_comm_fail): its
 * proxy passes the notice on, and the others' must report it as the communicator words a
 * notice, its origin, code, op and words, not a lost rank; each communicator told fails and
 * has its proxy pass the notice on in turn (with 4 ranks, some hear it second-hand first). With
 * "kill", the last rank is SIGKILLed a quarter of the way through: every survivor's proxy must
 * fail within 5 s (scaled) saying that rank (and its host) is gone, the survivors keeping
 * their connections until all have seen it. With "cut" (2 ranks in tests/fault/netns.sh's
 * namespaces), rank 1 sets its end of the link down a quarter of the way through, and both
 * proxies must fail within 5 s (scaled) naming the other rank and its host, though no socket
 * closes (WEFT_TCP_DEAD_MS). Under netns.sh's loss and rate (WEFT_TEST_LOSS, WEFT_TEST_RATE) the
 * plain run checks every byte through a lossy, slow link.
 * usage: test_rproxy NRANKS [K] [LINKS] [abort|abort-stop|fail|kill|cut] */
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "comm.h"
#include "dev.h"
#include "err.h"
#include "launch.h"
#include "proxy_test.h"
#include "region.h"
#include "slots.h"

enum { COLL = 3, STAGES = 4, CHUNK = 8192, MAXR = 16, MAXS = WEFT_DEV_MAX_RANKS, LLCH = 3 };
enum { SLOT_LINES = WEFT_DEV_LL_SLOT_BYTES / 16 };
static const int CHANS[] = {0, 1, 2, WEFT_DEV_COLL_CHANNELS, WEFT_DEV_COLL_CHANNELS + 5};
enum { NCH = sizeof CHANS / sizeof CHANS[0] };

/* Where chunk seq on ch of the sender with staging index idx lies (prims.cuh's stage). */
static uint64_t stage_off(const weft_dev_slots_t *sl, int idx, int ch, uint64_t seq) {
  return weft_dev_stage_off(ch, COLL, sl->nsrc, idx, STAGES, CHUNK, seq);
}
static uint64_t ld(const char *r, uint64_t off) {
  return __atomic_load_n((const uint64_t *)(r + off), __ATOMIC_ACQUIRE);
}
static void st(char *r, uint64_t off, uint64_t v) {
  __atomic_store_n((uint64_t *)(r + off), v, __ATOMIC_RELEASE);
}
static uint8_t pat(int src, int dst, int ch, uint64_t seq, uint32_t i) {
  return (uint8_t)(src * 29 + dst * 7 + ch * 3 + seq * 101 + i * 13 + (i >> 8));
}
/* The length of chunk seq: 1 byte to the whole slot, often less. */
static uint32_t len_of(int src, int dst, int ch, uint64_t seq) {
  uint32_t h = (uint32_t)(src * 7919 + dst * 104729 + ch * 31 + seq * 2654435761u);
  return h % 4 == 0 ? CHUNK : 1 + (h >> 3) % CHUNK;
}
/* The small kernel's lines: how many op seq of src carries on ch, and the word i of each. */
static uint32_t lines_of(int src, int ch, uint64_t seq) {
  uint32_t h = (uint32_t)(src * 131 + ch * 17 + seq * 2654435761u);
  return h % 3 == 0 ? SLOT_LINES : 1 + (h >> 4) % SLOT_LINES;
}
static uint64_t line_word(int src, int dst, int ch, uint64_t seq, uint32_t i, int half) {
  uint32_t data = (uint32_t)(src * 0x9e3779b9u + dst * 7 + ch * 31 + seq * 104729 + i * 2 + half);
  return (uint64_t)data | (uint64_t)(uint32_t)seq << 32;
}
static int ll_idx(int from, int to) { return from < to ? from : from - 1; }

/* One step of the small kernel's stand-in on channel ch: post op llop + 1 to every peer if not
 * yet, then take each peer's block of it where whole; the op ends when every peer's came.
 * Returns 1 when the op ended, -1 on a wrong word (said), else 0. */
typedef struct {
  uint64_t op;       /* ops done */
  int posted;        /* op + 1 posted */
  uint8_t got[MAXR]; /* op + 1's block came from that rank */
} llch_t;
static int ll_step(llch_t *s, int ch, int rank, int n, char *const *region, uint64_t ll_off,
                   uint64_t post_off) {
  const uint64_t seq = s->op + 1;
  const int par = (int)(seq & 1);
  char *own = region[rank];
  if (!s->posted) {
    for (int p = 0; p < n; p++) {
      if (p == rank) continue;
      uint64_t *dst =
          (uint64_t *)(region[p] + ll_off + WEFT_DEV_LL_OFF(ch, par, ll_idx(rank, p), n));
      uint32_t lines = lines_of(rank, ch, seq);
      for (uint32_t i = 0; i < 2 * lines; i++)
        __atomic_store_n(&dst[i], line_word(rank, p, ch, seq, i / 2, i % 2), __ATOMIC_RELAXED);
      uint64_t po = post_off + WEFT_DEV_LL_POST_OFF(ch, par, ll_idx(rank, p), n);
      __atomic_store_n((uint64_t *)(region[p] + po + 8), lines, __ATOMIC_RELAXED);
      st(region[p], po, seq);
    }
    s->posted = 1;
  }
  int all = 1;
  for (int p = 0; p < n; p++) {
    if (p == rank || s->got[p]) continue;
    const uint64_t *w =
        (const uint64_t *)(own + ll_off + WEFT_DEV_LL_OFF(ch, par, ll_idx(p, rank), n));
    uint32_t lines = lines_of(p, ch, seq), i;
    for (i = 0; i < 2 * lines; i++)
      if (__atomic_load_n(&w[i], __ATOMIC_ACQUIRE) >> 32 != (uint32_t)seq) break;
    if (i < 2 * lines) {
      all = 0;
      continue;
    }
    for (i = 0; i < 2 * lines; i++) {
      uint64_t v = __atomic_load_n(&w[i], __ATOMIC_RELAXED);
      if (v != line_word(p, rank, ch, seq, i / 2, i % 2))
        return printf("test_rproxy: rank %d: op %llu of the small kernel from rank %d on channel "
                      "%d: word %u is %#llx, want %#llx\n",
                      rank, (unsigned long long)seq, p, ch, i, (unsigned long long)v,
                      (unsigned long long)line_word(p, rank, ch, seq, i / 2, i % 2)),
               -1;
    }
    if (lines < SLOT_LINES &&
        __atomic_load_n(&w[2 * lines], __ATOMIC_RELAXED) >> 32 == (uint32_t)seq)
      return printf("test_rproxy: rank %d: op %llu from rank %d on channel %d: lines past its "
                    "%u came too\n",
                    rank, (unsigned long long)seq, p, ch, lines),
             -1;
    s->got[p] = 1;
  }
  if (!all) return 0;
  memset(s->got, 0, sizeof s->got);
  s->op++, s->posted = 0;
  return 1;
}

/* As the device engine explains (src/gpu/setup.c): no transport checks, whose state is the
 * heartbeat thread's, since several workers may explain at once. */
static weft_result_t explain_cb(void *ctx, weft_result_t rc, int peer) {
  if (rc != WEFT_ERR_PEER_LOST) return rc;
  char first[512];
  snprintf(first, sizeof first, "%s", weft_thread_error());
  return weft_fail_peer_gone(ctx, peer, first);
}
/* ... and fails the communicator, which then has its proxy pass the notice on. */
static void fail_cb(void *ctx, weft_result_t rc, const char *msg) {
  weft_comm_fail(ctx, rc, msg, 1);
}

/* As the device engine has its proxy carry its communicator's failure notices. */
static int told_others_cb(void *ctx, weft_notice_t *n) { return weft_fail_told_others(ctx, n); }
static weft_result_t heard_cb(void *ctx, const weft_notice_t *n) { return weft_fail_heard(ctx, n); }

enum { ABORT = 1, ABORT_STOP = 2, KILL = 3, FAIL = 4, CUT = 5 };
typedef struct {
  uint64_t K;
  int links, abort;        /* 0, ABORT, ABORT_STOP, KILL, FAIL or CUT */
  atomic_int *noted;       /* kill, cut: survivors that saw it (shared by the ranks) */
  atomic_int *verdicts;    /* kill, cut: survivors whose report was right */
  _Atomic int64_t *t_kill; /* kill, cut: when (launch_now_ms, one clock for all ranks) */
} arg_t;

/* After rank 1 aborted (code WEFT_ERR_ABORTED) or its communicator failed: every proxy
 * stopped on it, and the others' report holds want (not that rank 1 is gone; a failure's
 * notice whole, its op too, whether from rank 1 or passed on by another). Returns nonzero on
 * a failure. */
static int told_of(weft_rproxy_t *px, int rank, weft_result_t code, const char *want) {
  int64_t t = launch_now_ms();
  while (weft_rproxy_status(px) == WEFT_SUCCESS && launch_now_ms() - t < 10000)
    usleep(1000);
  weft_result_t st = weft_rproxy_status(px);
  const char *msg = weft_get_last_error(NULL);
  if (st != code || (rank != 1 && !strstr(msg, want)))
    return printf("test_rproxy: rank %d: after rank 1's %s the proxy says %d: %s\n", rank,
                  code == WEFT_ERR_ABORTED ? "abort" : "failure", (int)st,
                  st ? msg : "running") != 0;
  if (rank == 0) printf("test_rproxy: rank 0 told: %s\n", msg);
  return 0;
}

/* After the last rank's SIGKILL (or the link cut: the other rank): this survivor's proxy failed
 * within the bound naming that rank and its host. The survivors keep their connections until
 * all saw it: a closing one would be news of its own. Returns nonzero on a failure. */
static int saw_lost(weft_rproxy_t *px, const arg_t *a, int rank, int lost, int survivors,
                    weft_result_t code, const char *why) {
  int64_t bound = (int64_t)(5000 * launch_time_scale()), t = launch_now_ms();
  while (weft_rproxy_status(px) == WEFT_SUCCESS && launch_now_ms() - t < 2 * bound)
    usleep(1000);
  int64_t dt = launch_now_ms() - atomic_load(a->t_kill);
  weft_result_t st = weft_rproxy_status(px);
  char want[48], msg[512];
  snprintf(want, sizeof want, "rank %d (host ", lost);
  snprintf(msg, sizeof msg, "%s", st ? weft_get_last_error(NULL) : "running");
  int ok = st == code && strstr(msg, want) && strstr(msg, why) && dt <= bound;
  printf("test_rproxy: rank %d: %s after %lld ms: %s\n", rank, ok ? "ok" : "WRONG", (long long)dt,
         msg);
  atomic_fetch_add(a->verdicts, ok);
  atomic_fetch_add(a->noted, 1);
  for (t = launch_now_ms(); atomic_load(a->noted) < survivors && launch_now_ms() - t < bound;)
    usleep(1000);
  return !ok;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *argp) {
  const arg_t *a = argp;
  uint64_t K = a->K;
  weft_comm_t comm;
  int tcp;
  if (proxy_test_comm("test_rproxy", rank, n, id, &comm, &tcp)) return 1;
  void *states[WEFT_RPROXY_MAX_LINKS] = {NULL};
  weft_dev_slots_t sl;
  weft_dev_slots_make(rank, n, &sl);
  const int ns = sl.nslots, self = sl.self;
  uint8_t others[MAXR] = {0};
  for (int s = 0; s < ns; s++)
    others[sl.rank[s]] = s != self;
  for (int w = 0; w < a->links; w++) /* as the device engine: every worker's made at setup */
    if (weft_comm_transport_again(comm, tcp, others, -1, &states[w]) != WEFT_SUCCESS)
      return printf("test_rproxy: rank %d: links: %s\n", rank, weft_get_last_error(NULL)), 1;
  size_t bytes =
      WEFT_DEV_STAGE_OFF + (size_t)(COLL + WEFT_DEV_P2P_CHANNELS) * sl.nsrc * STAGES * CHUNK;
  /* the small kernel's lines and posts after the staging, up to 8 ranks (slots are ranks) */
  const int ll = sl.identity;
  const uint64_t ll_off = bytes, post_off = ll_off + WEFT_DEV_LL_OFF(LLCH, 0, 0, n);
  if (ll) bytes = post_off + WEFT_DEV_LL_POST_OFF(LLCH, 0, 0, n);
  char *region[MAXS];
  uint8_t remote[MAXS];
  for (int s = 0; s < ns; s++) {
    region[s] = calloc(1, bytes);
    remote[s] = s != self;
    if (!region[s]) return printf("test_rproxy: out of memory\n"), 1;
  }
  int32_t kabort = 0;
  weft_proxy_link_t link = proxy_test_link(comm, tcp, &kabort);
  link.tr_state = states[0];
  link.explain = explain_cb;
  link.told_others = told_others_cb;
  link.heard = heard_cb;
  link.fail = fail_cb;
  weft_rproxy_init_t in = {.link = link,
                           .nlinks = a->links,
                           .numa = a->links > 1 ? 0 : -1, /* pinned there: node 0 */
                           .tr_states = states,
                           .slots = &sl,
                           .remote = remote,
                           .region = region,
                           .region_bytes = bytes,
                           .chunk_bytes = CHUNK,
                           .stages = STAGES,
                           .coll_channels = COLL,
                           .ll_off = ll ? ll_off : 0,
                           .ll_post_off = ll ? post_off : 0,
                           .ll_channels = ll ? LLCH : 0};
  weft_rproxy_t *px = NULL;
  if (weft_rproxy_start(&in, &px) != WEFT_SUCCESS)
    return printf("test_rproxy: rank %d: %s\n", rank, weft_get_last_error(NULL)), 1;
  uint64_t sent[MAXS][NCH] = {{0}}, recvd[MAXS][NCH] = {{0}},
           left = 2 * (uint64_t)(ns - 1) * NCH * K + (ll ? LLCH * K : 0);
  llch_t llc[LLCH] = {{0}};
  char *own = region[self];
  int bad = 0, failed = 0;
  int64_t deadline = launch_now_ms() + (int64_t)(60000 * launch_time_scale());
  uint64_t total = left;
  while (left && !bad && !__atomic_load_n(&kabort, __ATOMIC_ACQUIRE) &&
         launch_now_ms() < deadline) {
    if (a->abort == KILL && rank == n - 1 && left < total * 3 / 4) {
      atomic_store(a->t_kill, launch_now_ms());
      raise(SIGKILL);
    }
    if (a->abort == CUT && rank == 1 && left < total * 3 / 4 && !failed) {
      failed = 1;
      atomic_store(a->t_kill, launch_now_ms());
      bad = launch_cut_link(rank) != 0;
    }
    if ((a->abort == ABORT || a->abort == ABORT_STOP) && rank == 1 && left < total * 3 / 4) {
      atomic_store(&comm->aborted, 1);
      if (a->abort == ABORT_STOP) break;
    }
    if (a->abort == FAIL && rank == 1 && left < total * 3 / 4 && !failed)
      failed = 1,
      weft_comm_fail(comm, WEFT_ERR_TIMEOUT, "rank 1: its stand-in kernel waited \x01 too long", 7);
    for (int c = 0; c < LLCH && ll && !bad; c++) {
      int r = llc[c].op < K ? ll_step(&llc[c], c, rank, n, region, ll_off, post_off) : 0;
      bad = r < 0;
      left -= r > 0;
    }
    for (int q = 0; q < ns; q++)
      for (int c = 0; c < NCH && q != self && !bad; c++) {
        int ch = CHANS[c], p = sl.rank[q];
        uint64_t s = sent[q][c], r = recvd[q][c];
        if (s < K && ld(own, WEFT_DEV_DONE_OFF(ch, q)) >= (s + 1 > STAGES ? s + 1 - STAGES : 0)) {
          char *dst = region[q] + stage_off(&sl, sl.stage_out[q], ch, s);
          for (uint32_t i = 0; i < CHUNK; i++)
            dst[i] = (char)pat(rank, p, ch, s, i);
          uint64_t f = WEFT_DEV_READY_OFF(ch, sl.flag_out[q]);
          *(uint32_t *)(region[q] + WEFT_DEV_SIZE_OFF(f, s)) = len_of(rank, p, ch, s);
          st(region[q], f, ++sent[q][c]);
          left--;
        }
        if (r < K && ld(own, WEFT_DEV_READY_OFF(ch, q)) >= r + 1) {
          const char *src = own + stage_off(&sl, sl.stage_in[q], ch, r);
          uint32_t len = len_of(p, rank, ch, r), same = 0;
          for (uint32_t i = 0; i < len && !bad; i++)
            if ((uint8_t)src[i] != pat(p, rank, ch, r, i))
              bad = printf("test_rproxy: rank %d: chunk %llu from rank %d on channel %d: byte %u "
                           "is %u, want %u\n",
                           rank, (unsigned long long)r, p, ch, i, (uint8_t)src[i],
                           pat(p, rank, ch, r, i));
          for (uint32_t i = len; i < CHUNK; i++) /* the rest is an older chunk's, or zeros */
            same += (uint8_t)src[i] == pat(p, rank, ch, r, i);
          if (!bad && CHUNK - len >= 64 && same == CHUNK - len)
            bad = printf("test_rproxy: rank %d: chunk %llu from rank %d on channel %d: all %u "
                         "bytes past its length %u came too\n",
                         rank, (unsigned long long)r, p, ch, CHUNK - len, len);
          st(region[q], WEFT_DEV_DONE_OFF(ch, sl.flag_out[q]), ++recvd[q][c]);
          left--;
        }
      }
  }
  int rc;
  uint64_t s = 0, r = 0;
  if (a->abort == ABORT_STOP && rank == 1) {
    rc = 0; /* stopped below, before its workers may have looked at the abort word */
  } else if (a->abort == KILL) {
    rc = saw_lost(px, a, rank, n - 1, n - 1, WEFT_ERR_PEER_LOST, "is gone");
  } else if (a->abort == CUT) {
    /* docs/hosts.md's Errors: a cut link is no dead rank, on either end */
    rc = bad || saw_lost(px, a, rank, 1 - rank, 2, WEFT_ERR_TIMEOUT, "the link to it is cut");
  } else if (a->abort == FAIL) {
    /* the words carry a byte that is not printable, made '?' */
    rc = told_of(px, rank, WEFT_ERR_TIMEOUT,
                 ": rank 1 timed out in op 7 waiting for a peer: rank 1: its stand-in kernel "
                 "waited ? too long");
  } else if (a->abort) {
    char want[48];
    snprintf(want, sizeof want, "rank %d: rank 1 aborted the communicator", rank);
    rc = told_of(px, rank, WEFT_ERR_ABORTED, want);
  } else {
    /* the last credits reach the peers before anyone stops (the ring is not the stream) */
    rc = bad || left;
    for (int64_t t = launch_now_ms(); !rc && launch_now_ms() - t < 5000;) {
      int all = 1;
      for (int q = 0; q < ns; q++)
        for (int c = 0; c < NCH && q != self; c++)
          all &= ld(own, WEFT_DEV_DONE_OFF(CHANS[c], q)) == K;
      if (all) break;
    }
    weft_rproxy_counts(px, &s, &r);
    if (left || weft_rproxy_status(px) != WEFT_SUCCESS)
      rc = 1,
      printf("test_rproxy: rank %d: %llu steps left, proxy: %s\n", rank, (unsigned long long)left,
             weft_rproxy_status(px) ? weft_get_last_error(NULL) : "running");
    if (weft_bootstrap_barrier(comm->boot) != WEFT_SUCCESS) rc = 1;
  }
  /* a CUDA graph's hold outlives the proxy (ASan: freed once, by the last of the two) */
  void *hold = weft_rproxy_hold(px);
  if (!hold) rc = 1, printf("test_rproxy: rank %d: no hold\n", rank);
  weft_rproxy_stop(px);
  weft_rproxy_release(hold);
  for (int w = 0; w < a->links; w++)
    if (states[w]) comm->tr[tcp]->teardown(states[w]);
  if (rank == 0 && !rc && !a->abort)
    printf("test_rproxy: %d ranks, %llu chunks of up to %d bytes to each of %d peers on %d "
           "channels%s, %d proxy threads: every byte and credit arrived (rank 0's proxy: %llu "
           "frames out, %llu in)\n",
           n, (unsigned long long)K, CHUNK, ns - 1, NCH,
           ll ? " and as many small-kernel operations on 3 more" : "", a->links,
           (unsigned long long)s, (unsigned long long)r);
  weft_comm_destroy(comm);
  for (int s = 0; s < ns; s++)
    free(region[s]);
  return rc;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  arg_t a = {.K = argc > 2 ? (uint64_t)atoll(argv[2]) : 200,
             .links = argc > 3 ? atoi(argv[3]) : 1,
             .abort = argc <= 4                        ? 0
                      : !strcmp(argv[4], "abort")      ? ABORT
                      : !strcmp(argv[4], "abort-stop") ? ABORT_STOP
                      : !strcmp(argv[4], "kill")       ? KILL
                      : !strcmp(argv[4], "fail")       ? FAIL
                      : !strcmp(argv[4], "cut")        ? CUT
                                                       : -1};
  if (n < 2 || n > MAXR || a.K < 1 || a.links < 1 || a.links > WEFT_RPROXY_MAX_LINKS ||
      a.abort < 0 || (a.abort == KILL && n < 3) || (a.abort == CUT && n != 2))
    return printf("usage: test_rproxy NRANKS(2-16; kill: 3-16; cut: 2) [K] [LINKS(1-8)] "
                  "[abort|abort-stop|fail|kill|cut]\n"),
           2;
  struct {
    atomic_int noted, verdicts;
    _Atomic int64_t t_kill;
  } *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return printf("test_rproxy: mmap failed\n"), 1;
  atomic_init(&sh->noted, 0);
  atomic_init(&sh->verdicts, 0);
  atomic_init(&sh->t_kill, 0);
  a.noted = &sh->noted, a.verdicts = &sh->verdicts, a.t_kill = &sh->t_kill;
  proxy_test_hosts(n);
  int rc = launch_local(n, rank_main, &a, (int)(120 * launch_time_scale()));
  if (a.abort == CUT) {
    int good = atomic_load(a.verdicts);
    printf("test_rproxy: 2 ranks, the link cut: %d of 2 told in time: %s\n", good,
           good == 2 && !rc ? "ok" : "FAILED");
    return good != 2 || rc;
  }
  if (a.abort != KILL) return rc != 0;
  /* the killed rank's own end is the launcher's failure; the survivors' verdicts count */
  int good = atomic_load(a.verdicts);
  printf("test_rproxy: %d ranks, the last one killed: %d of %d survivors told in time: %s\n", n,
         good, n - 1, good == n - 1 ? "ok" : "FAILED");
  return good != n - 1;
}
