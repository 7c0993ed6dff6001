/* The region proxy (region.h). Each frame names where it lands in the receiving rank's own
 * region: a chunk (bytes at a staging slot, then the ready flag it raises), a flag alone (a
 * done credit) or a block of the small kernel's lines (their flags inside); or it is a failure
 * notice, the last frame on a stream (the sender's
 * communicator failed or was aborted). A chunk carries the length its
 * kernel wrote beside the flag, not the whole slot. Chunks go in order per channel; credits go
 * first. The pending credits and one chunk leave as one batch (one send), and the receiver reads
 * ahead of the frame it parses, so a small step costs a send and a read or two, not one per frame.
 * The receiver checks every offset and length against the layout before writing, and that the
 * flag is one the sender may raise. Channels are dealt to worker threads, each with connections
 * of its own, so that several chunks cross at once; both ends deal them alike. */
#include "region.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "clock.h"
#include "dev.h"
#include "err.h"
#include "pump.h"
#include "topo.h"

enum {
  CHUNK = 1,
  FLAG = 2,
  NOTICE = 3,
  LINES = 4, /* flag_off: channel * 2 + parity; value: the operation's seq */
  MAX_WATCH = WEFT_DEV_COLL_CHANNELS + WEFT_DEV_P2P_CHANNELS
};
/* A batch: a credit per watched channel at most, then one chunk. Read-ahead: a few frame
 * headers and small chunks; a large chunk's rest goes straight into its slot. */
enum { MAX_OUT = MAX_WATCH + 1, RX_BYTES = 4096 };

/* A notice: off its origin rank, value its op (0 with no text: a bare abort), flag_off its
 * code, and its text as the payload. */
typedef struct {
  uint64_t off, flag_off, value;
  uint32_t bytes, kind;
} frame_t;

typedef struct {
  uint64_t ready_sent[MAX_WATCH], done_sent[MAX_WATCH]; /* flags carried so far, per channel */
  int scan;                                             /* where the next chunk is looked for */
  int nout; /* frames of the batch going out (0: none); a chunk is the last */
  frame_t out[MAX_OUT];
  size_t at;            /* of the batch's headers and its chunk together, sent */
  uint8_t rx[RX_BYTES]; /* read ahead: rx[rx_pos, rx_len) is the stream's next bytes */
  uint32_t rx_pos, rx_len;
  int rbody; /* the payload of rf is coming in */
  frame_t rf;
  uint32_t rgot;
  char note[WEFT_NOTICE_TEXT];                   /* a notice's text, coming in */
  int heard;                                     /* its notice came: the stream ends there */
  uint64_t lines_sent[WEFT_DEV_LL_CHANNELS][2];  /* per channel and parity: the seq carried */
  uint64_t lines_in[WEFT_DEV_LL_SLOT_BYTES / 8]; /* a block of lines, coming in */
} peer_t;

/* One thread and its connections: the channels it carries, and its state with each peer. */
typedef struct {
  struct weft_rproxy *P;
  weft_proxy_link_t link; /* the proxy's, on this worker's connections */
  int watch[MAX_WATCH], nwatch;
  uint8_t mine[WEFT_DEV_MAX_CHANNELS]; /* the channels dealt to this worker */
  int llw[WEFT_DEV_LL_CHANNELS], nllw; /* ... and the small kernel's */
  uint8_t llmine[WEFT_DEV_LL_CHANNELS];
  peer_t *peers;
  weft_pump_t pump;
} worker_t;

/* What holds keep (weft_rproxy_hold): the count the pumps read, shared with tokens that may
 * outlive the proxy; the last reference frees it. */
typedef struct {
  _Atomic int64_t holds;
  _Atomic int refs;
} awake_t;

static void awake_put(awake_t *a) {
  if (a && atomic_fetch_sub(&a->refs, 1) == 1) free(a);
}

/* Peers are slots of this rank's table (dev.h's weft_dev_slots_t); the transport names them
 * by rank (slots.rank). */
struct weft_rproxy {
  weft_rproxy_init_t in; /* slots, remote and region point at the copies below */
  weft_dev_slots_t slots;
  uint8_t remote[WEFT_DEV_MAX_RANKS];
  char *region[WEFT_DEV_MAX_RANKS];
  worker_t workers[WEFT_RPROXY_MAX_LINKS];
  int nworkers;
  _Atomic uint64_t kicks;             /* weft_rproxy_kick's, read by the workers' pumps */
  awake_t *awake;                     /* weft_rproxy_hold's, read by them too */
  int kick_fd[WEFT_RPROXY_MAX_LINKS]; /* each worker's (-1: none) */
};

/* Where chunk seq on channel ch of the sender with staging index idx lies in the receiver's
 * region (prims.cuh's Chan::stage). */
static uint64_t stage_off(const weft_rproxy_t *P, int idx, int ch, uint64_t seq) {
  return weft_dev_stage_off(ch, P->in.coll_channels, P->slots.nsrc, idx, P->in.stages,
                            P->in.chunk_bytes, seq);
}

static uint64_t load(const char *region, uint64_t off) {
  return __atomic_load_n((const uint64_t *)(region + off), __ATOMIC_ACQUIRE);
}

/* The small kernel's place for rank `from` in rank to's region: among to's n - 1 others. */
static int ll_idx(int from, int to) { return from < to ? from : from - 1; }

/* The next block of the small kernel's lines this rank posted in peer's mirror, if any: a
 * frame of them (channels and parities in turn). */
static int next_lines(worker_t *W, int peer, peer_t *q) {
  const weft_rproxy_t *P = W->P;
  const char *m = P->in.region[peer];
  const int n = P->in.link.nranks, idx = ll_idx(P->in.link.rank, P->slots.rank[peer]);
  for (int j = 0; j < W->nllw; j++) {
    int ch = W->llw[j];
    for (int par = 0; par < 2; par++) {
      uint64_t po = P->in.ll_post_off + WEFT_DEV_LL_POST_OFF(ch, par, idx, n), v = load(m, po);
      if (v <= q->lines_sent[ch][par]) continue;
      /* read after the seq (acquire), written before it */
      uint64_t lines = __atomic_load_n((const uint64_t *)(m + po + 8), __ATOMIC_RELAXED);
      if (!lines || lines > WEFT_DEV_LL_SLOT_BYTES / 16) lines = WEFT_DEV_LL_SLOT_BYTES / 16;
      q->lines_sent[ch][par] = v;
      q->out[q->nout++] = (frame_t){.off = P->in.ll_off + WEFT_DEV_LL_OFF(ch, par, idx, n),
                                    .flag_off = (uint64_t)ch * 2 + (uint64_t)par,
                                    .value = v,
                                    .bytes = (uint32_t)(lines * 16),
                                    .kind = LINES};
      return 1;
    }
  }
  return 0;
}

/* The next batch for peer, from the flags this rank's kernels raised in its mirror and not yet
 * carried: every new credit, then one chunk (channels in turn). Returns its frames. */
static int next_batch(worker_t *W, int peer, peer_t *q) {
  const weft_rproxy_t *P = W->P;
  const char *m = P->in.region[peer];
  int me = P->slots.flag_out[peer]; /* our flags in the peer's region */
  q->nout = 0;
  for (int i = 0; i < W->nwatch; i++) {
    uint64_t off = WEFT_DEV_DONE_OFF(W->watch[i], me), v = load(m, off);
    if (v > q->done_sent[i]) {
      q->done_sent[i] = v;
      q->out[q->nout++] = (frame_t){.flag_off = off, .value = v, .kind = FLAG};
    }
  }
  if (W->nllw && next_lines(W, peer, q)) return q->nout; /* small operations go first */
  for (int j = 0; j < W->nwatch; j++) {
    int i = (q->scan + j) % W->nwatch, ch = W->watch[i];
    uint64_t off = WEFT_DEV_READY_OFF(ch, me), s = q->ready_sent[i];
    if (load(m, off) > s) {
      /* read after the flag (acquire), written before it: this chunk's; a length out of
       * bounds (a stand-in that wrote none) sends the whole slot */
      uint32_t bytes =
          __atomic_load_n((const uint32_t *)(m + WEFT_DEV_SIZE_OFF(off, s)), __ATOMIC_RELAXED);
      if (!bytes || bytes > P->in.chunk_bytes) bytes = P->in.chunk_bytes;
      q->ready_sent[i] = s + 1;
      q->out[q->nout++] = (frame_t){.off = stage_off(P, P->slots.stage_out[peer], ch, s),
                                    .flag_off = off,
                                    .value = s + 1,
                                    .bytes = bytes,
                                    .kind = CHUNK};
      q->scan = i + 1;
      break;
    }
  }
  return q->nout;
}

/* The batch's headers, then its chunk (if any) straight from the mirror's slot: one message. */
static size_t batch_bytes(const peer_t *q, size_t *body) {
  const frame_t *last = &q->out[q->nout - 1];
  *body = last->kind == CHUNK || last->kind == LINES ? last->bytes : 0;
  return sizeof(frame_t) * (size_t)q->nout;
}

static weft_result_t give_batch(worker_t *W, int peer, peer_t *q, int *moved) {
  size_t bn, hn = batch_bytes(q, &bn);
  return weft_proxy_give(&W->link, W->P->slots.rank[peer], q->out, hn,
                         W->P->in.region[peer] + q->out[q->nout - 1].off, bn, &q->at, moved);
}

static weft_result_t send_frames(worker_t *W, int peer, peer_t *q, int *moved) {
  for (;;) {
    if (!q->nout) {
      if (!next_batch(W, peer, q)) return WEFT_SUCCESS;
      q->at = 0;
    }
    size_t bn, hn = batch_bytes(q, &bn);
    CHECK(give_batch(W, peer, q, moved));
    if (q->at < hn + bn) return WEFT_SUCCESS;
    atomic_fetch_add(&W->pump.sent, (uint64_t)q->nout);
    q->nout = 0;
    *moved = 1;
  }
}

static int watched(const worker_t *W, uint64_t ch) {
  return ch < WEFT_DEV_MAX_CHANNELS && W->mine[ch];
}

/* A block of lines: exactly where the peer's lines on a channel of this worker lie in this
 * rank's region, whole lines, at most a slot. */
static int lines_fit(const worker_t *W, int peer, const frame_t *f) {
  const weft_rproxy_t *P = W->P;
  uint64_t ch = f->flag_off / 2, par = f->flag_off % 2;
  int idx = ll_idx(P->slots.rank[peer], P->in.link.rank);
  return P->in.ll_post_off && ch < WEFT_DEV_LL_CHANNELS && W->llmine[ch] && f->value >= 1 &&
         (f->value & 1) == par && f->bytes >= 16 && f->bytes <= WEFT_DEV_LL_SLOT_BYTES &&
         f->bytes % 16 == 0 &&
         f->off == P->in.ll_off + WEFT_DEV_LL_OFF(ch, par, idx, P->in.link.nranks);
}

/* Whether f is what peer may send: a chunk exactly where its next chunk on a watched channel
 * lies, raising its own ready flag; or a credit of its own (a done flag). */
static weft_result_t check_frame(const worker_t *W, int peer, const frame_t *f) {
  const weft_rproxy_t *P = W->P;
  if (f->kind == NOTICE && f->bytes < WEFT_NOTICE_TEXT && f->off < (uint64_t)P->in.link.nranks &&
      f->flag_off >= 1 && f->flag_off <= WEFT_ERR_IN_PROGRESS)
    return WEFT_SUCCESS;
  if (f->kind == LINES && lines_fit(W, peer, f)) return WEFT_SUCCESS;
  uint64_t idx = f->flag_off / WEFT_DEV_FLAG_STRIDE,
           done0 = WEFT_DEV_DONE_OFF(0, 0) / WEFT_DEV_FLAG_STRIDE, ch;
  int ok = f->flag_off % WEFT_DEV_FLAG_STRIDE == 0 && f->kind != LINES;
  if (f->kind == CHUNK) {
    ch = idx / WEFT_DEV_MAX_RANKS;
    ok = ok && idx < done0 && idx % WEFT_DEV_MAX_RANKS == (uint64_t)peer && watched(W, ch) &&
         f->value >= 1 && f->bytes >= 1 && f->bytes <= P->in.chunk_bytes &&
         f->off == stage_off(P, P->slots.stage_in[peer], (int)ch, f->value - 1);
  } else {
    ch = (idx - done0) / WEFT_DEV_MAX_RANKS;
    ok = ok && f->kind == FLAG && f->bytes == 0 && idx >= done0 &&
         idx < done0 + (uint64_t)WEFT_DEV_MAX_CHANNELS * WEFT_DEV_MAX_RANKS &&
         (idx - done0) % WEFT_DEV_MAX_RANKS == (uint64_t)peer && watched(W, ch);
  }
  if (ok) return WEFT_SUCCESS;
  return weft_set_error(WEFT_ERR_PROTOCOL,
                        "proxy: rank %d sent a frame that does not fit this rank's region (kind "
                        "%u, %u bytes at %llu, flag at %llu)",
                        (int)P->slots.rank[peer], f->kind, f->bytes, (unsigned long long)f->off,
                        (unsigned long long)f->flag_off);
}

/* Peer's notice in rf and note came: the error to report, from the communicator's words
 * where it has them. */
static weft_result_t heard(worker_t *W, int peer, peer_t *q) {
  const weft_proxy_link_t *l = &W->link;
  const int from = W->P->slots.rank[peer];
  weft_notice_t n = {
      .origin = (int)q->rf.off, .code = weft_net_code((int32_t)q->rf.flag_off), .seq = q->rf.value};
  memcpy(n.text, q->note, q->rf.bytes);
  n.text[q->rf.bytes] = 0;
  weft_net_text(n.text, sizeof n.text);
  q->heard = 1;
  atomic_store(&W->pump.heard, 1);
  /* this rank's own failure, passed back: the communicator has it, in its own words */
  if (n.origin == l->rank)
    return weft_set_error(n.code, "proxy: rank %d passed back this rank's own failure", from);
  if (l->heard) return l->heard(l->ctx, &n); /* a bare abort too: op 0, no text */
  if (n.code == WEFT_ERR_ABORTED && !n.seq && !n.text[0])
    return weft_set_error(WEFT_ERR_ABORTED,
                          "proxy: rank %d aborted the communicator (its proxy told rank %d)", from,
                          l->rank);
  return weft_set_error(
      n.code, "proxy: rank %d failed (%s, op %llu; rank %d's proxy told rank %d): %s", n.origin,
      weft_result_string(n.code), (unsigned long long)n.seq, from, l->rank, n.text);
}

static weft_result_t recv_frames(worker_t *W, int peer, peer_t *q, int *moved) {
  char *own = W->P->in.region[W->P->slots.self];
  const int from = W->P->slots.rank[peer];
  size_t n;
  if (q->heard) return WEFT_SUCCESS; /* nothing follows a notice */
  for (;;) {
    if (!q->rbody) {
      if (q->rx_len - q->rx_pos < sizeof q->rf) { /* a partial header moves to the front */
        memmove(q->rx, q->rx + q->rx_pos, q->rx_len - q->rx_pos);
        q->rx_len -= q->rx_pos, q->rx_pos = 0;
        CHECK(weft_proxy_take(&W->link, from, q->rx + q->rx_len, sizeof q->rx - q->rx_len, &n));
        if (!n) return WEFT_SUCCESS;
        q->rx_len += (uint32_t)n;
        *moved = 1;
        continue;
      }
      memcpy(&q->rf, q->rx + q->rx_pos, sizeof q->rf);
      q->rx_pos += (uint32_t)sizeof q->rf;
      CHECK(check_frame(W, peer, &q->rf));
      q->rbody = 1, q->rgot = 0;
    }
    char *dst = q->rf.kind == NOTICE  ? q->note
                : q->rf.kind == LINES ? (char *)q->lines_in
                                      : own + q->rf.off;
    uint32_t ahead = q->rx_len - q->rx_pos; /* the payload read ahead, then the stream's */
    if (ahead > q->rf.bytes - q->rgot) ahead = q->rf.bytes - q->rgot;
    if (ahead) {
      memcpy(dst + q->rgot, q->rx + q->rx_pos, ahead);
      q->rx_pos += ahead, q->rgot += ahead;
    }
    while (q->rgot < q->rf.bytes) { /* straight into the staging slot */
      CHECK(weft_proxy_take(&W->link, from, dst + q->rgot, q->rf.bytes - q->rgot, &n));
      if (!n) return WEFT_SUCCESS;
      q->rgot += (uint32_t)n;
      *moved = 1;
    }
    q->rbody = 0;
    if (q->rf.kind == NOTICE) return heard(W, peer, q);
    /* whole 8-byte words, each released: the kernel polls each for its flag (and a host
     * stand-in that acquires one may reuse what this thread sent before) */
    if (q->rf.kind == LINES) {
      uint64_t *to = (uint64_t *)(own + q->rf.off);
      for (uint32_t i = 0; i < q->rf.bytes / 8; i++)
        __atomic_store_n(&to[i], q->lines_in[i], __ATOMIC_RELEASE);
      atomic_fetch_add(&W->pump.received, 1);
      *moved = 1;
      continue;
    }
    /* the chunk's bytes before its flag (release): the kernel reads them after seeing it */
    __atomic_store_n((uint64_t *)(own + q->rf.flag_off), q->rf.value, __ATOMIC_RELEASE);
    atomic_fetch_add(&W->pump.received, 1);
    *moved = 1;
  }
}

/* A peer's connection was lost: often the echo of a failure or an abort elsewhere. A rank
 * that fails sends notices, then closes (resetting what others still send it), and the ranks
 * told stop and close too, maybe before this one read its own notice, which may still be on
 * the way: a notice on any peer's stream within LOST_GRACE_MS is the better report. Each
 * stream is read until it fails once (a closed one would fail, and log, on every read).
 * Returns the notice's error with its message, or rc with the message it came with. */
enum { LOST_GRACE_MS = 100 };
static weft_result_t lost_or_told(worker_t *W, weft_result_t rc, int *moved) {
  char why[1024];
  uint8_t dead[WEFT_DEV_MAX_RANKS] = {0};
  snprintf(why, sizeof why, "%s", weft_thread_error());
  const int64_t end = weft_now_us() + LOST_GRACE_MS * 1000;
  do {
    for (int p = 0; p < W->P->slots.nslots; p++) {
      if (!W->P->in.remote[p] || dead[p]) continue;
      weft_result_t r = recv_frames(W, p, &W->peers[p], moved);
      if (W->peers[p].heard) return r;
      dead[p] = r != WEFT_SUCCESS;
    }
    sched_yield();
  } while (weft_now_us() < end);
  return weft_set_error(rc, "%s", why);
}

static weft_result_t pass(void *self, int peer, int *moved, int *busy) {
  worker_t *W = self;
  if (!W->P->in.remote[peer]) return WEFT_SUCCESS;
  peer_t *q = &W->peers[peer];
  weft_result_t rc = send_frames(W, peer, q, moved);
  if (rc == WEFT_SUCCESS) rc = recv_frames(W, peer, q, moved);
  if (rc == WEFT_ERR_PEER_LOST) return lost_or_told(W, rc, moved);
  CHECK(rc);
  *busy = q->nout || q->rbody || q->rx_len > q->rx_pos;
  return WEFT_SUCCESS;
}

/* Failed or aborted here: notice n (NULL: a bare abort) to every remote rank but its origin
 * and those it came from, after the batch under way to it (else the notice would land inside
 * it), the peers in turn, all within BYE_MS (a stopped peer's full socket holds up no other).
 * A stream still cut mid-batch, or reset by the close before the peer read it, reads as this
 * rank gone instead. */
enum { BYE_MS = 200 };
static void bye(void *self, const weft_notice_t *n) {
  worker_t *W = self;
  const int64_t end = weft_now_us() + BYE_MS * 1000;
  const int ns = W->P->slots.nslots;
  size_t at[WEFT_DEV_MAX_RANKS] = {0}, whole[WEFT_DEV_MAX_RANKS] = {0};
  int mid[WEFT_DEV_MAX_RANKS] = {0}, left[WEFT_DEV_MAX_RANKS] = {0}, nleft = 0;
  frame_t f = {.kind = NOTICE, .off = (uint64_t)W->link.rank, .flag_off = WEFT_ERR_ABORTED};
  const char *text = n ? n->text : "";
  if (n) {
    f = (frame_t){.kind = NOTICE,
                  .off = (uint64_t)n->origin,
                  .flag_off = (uint64_t)n->code,
                  .value = n->seq,
                  .bytes = (uint32_t)strnlen(n->text, sizeof n->text - 1)};
  }
  for (int p = 0; p < ns; p++) {
    const peer_t *q = &W->peers[p];
    if (!W->P->in.remote[p] || q->heard || (n && W->P->slots.rank[p] == n->origin)) continue;
    size_t bn = 0;
    whole[p] = q->nout ? batch_bytes(q, &bn) + bn : 0;
    mid[p] = q->nout && q->at;
    left[p] = 1, nleft++;
  }
  while (nleft && weft_now_us() < end) {
    int moved = 0;
    for (int p = 0; p < ns; p++) {
      if (!left[p]) continue;
      peer_t *q = &W->peers[p];
      weft_result_t rc = WEFT_SUCCESS;
      if (mid[p] && q->at < whole[p]) /* the batch under way first */
        rc = give_batch(W, p, q, &moved);
      else
        rc = weft_proxy_give(&W->link, W->P->slots.rank[p], &f, sizeof f, text, f.bytes, &at[p],
                             &moved);
      if (rc != WEFT_SUCCESS || at[p] == sizeof f + f.bytes) left[p] = 0, nleft--;
    }
    if (!moved) sched_yield();
  }
}

static void stop_workers(weft_rproxy_t *P) {
  /* all told at once: after an abort each says bye on its connections (up to BYE_MS), and a
   * worker told late would leave its peers to read another rank's close first */
  for (int w = 0; w < P->nworkers; w++)
    atomic_store(&P->workers[w].pump.stop, 1);
  for (int w = 0; w < P->nworkers; w++) {
    weft_pump_stop(&P->workers[w].pump);
    free(P->workers[w].peers);
  }
  awake_put(P->awake);
  free(P);
}

weft_result_t weft_rproxy_start(const weft_rproxy_init_t *in, weft_rproxy_t **out) {
  int nlinks = in && in->nlinks > 1 ? in->nlinks : 1;
  const weft_dev_slots_t *sl = in ? in->slots : NULL;
  if (!in || !out || !in->link.tr || !sl || !in->remote || !in->region || in->link.nranks < 2 ||
      in->link.rank < 0 || in->link.rank >= in->link.nranks || sl->nslots < 2 ||
      sl->nslots > WEFT_DEV_MAX_RANKS || sl->self >= sl->nslots ||
      sl->rank[sl->self] != in->link.rank || in->coll_channels < 1 ||
      in->coll_channels > WEFT_DEV_COLL_CHANNELS || !in->chunk_bytes || !in->stages ||
      in->stages > WEFT_DEV_SIZE_WORDS || in->link.timeout_ms <= 0 ||
      nlinks > WEFT_RPROXY_MAX_LINKS || (nlinks > 1 && !in->tr_states))
    return weft_set_error(WEFT_ERR_INVALID_ARG, "proxy: invalid arguments");
  uint64_t chans = (uint64_t)in->coll_channels + WEFT_DEV_P2P_CHANNELS;
  uint64_t need =
      WEFT_DEV_STAGE_OFF + chans * (uint64_t)sl->nsrc * in->stages * (uint64_t)in->chunk_bytes;
  if (in->ll_post_off) {
    int n = in->link.nranks;
    uint64_t lines_end = in->ll_off + WEFT_DEV_LL_OFF(in->ll_channels, 0, 0, n),
             posts_end = in->ll_post_off + WEFT_DEV_LL_POST_OFF(in->ll_channels, 0, 0, n);
    if (!sl->identity || in->ll_channels < 1 || in->ll_channels > WEFT_DEV_LL_CHANNELS ||
        in->ll_off < need || in->ll_post_off % 8 || in->ll_off % 16)
      return weft_set_error(WEFT_ERR_INVALID_ARG, "proxy: invalid low-latency layout");
    if (lines_end > need) need = lines_end;
    if (posts_end > need) need = posts_end;
  }
  if (need > in->region_bytes)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "proxy: regions of %zu bytes cannot hold the staging (%llu bytes)",
                          in->region_bytes, (unsigned long long)need);
  weft_rproxy_t *P = calloc(1, sizeof *P);
  if (P && !(P->awake = calloc(1, sizeof *P->awake))) free(P), P = NULL;
  if (!P) return weft_set_error(WEFT_ERR_NO_MEMORY, "proxy: out of memory");
  atomic_store(&P->awake->refs, 1);
  P->in = *in;
  P->slots = *sl;
  memcpy(P->remote, in->remote, (size_t)sl->nslots);
  memcpy(P->region, in->region, sizeof *P->region * (size_t)sl->nslots);
  P->in.slots = &P->slots, P->in.remote = P->remote, P->in.region = P->region;
  P->in.tr_states = NULL;
  P->in.kick_fds = NULL;
  for (int w = 0; w < WEFT_RPROXY_MAX_LINKS; w++)
    P->kick_fd[w] = in->kick_fds && w < nlinks ? in->kick_fds[w] : -1;
  /* the channels with staging, dealt in turn: both ends deal the same list alike */
  int all[MAX_WATCH], nall = 0;
  for (int ch = 0; ch < in->coll_channels; ch++)
    all[nall++] = ch;
  for (int ch = WEFT_DEV_COLL_CHANNELS; ch < WEFT_DEV_MAX_CHANNELS; ch++)
    all[nall++] = ch;
  weft_result_t rc = WEFT_SUCCESS;
  for (int w = 0; w < nlinks && rc == WEFT_SUCCESS; w++) {
    worker_t *W = &P->workers[w];
    W->P = P;
    W->link = in->link;
    if (nlinks > 1) W->link.tr_state = in->tr_states[w];
    for (int i = w; i < nall; i += nlinks) {
      W->watch[W->nwatch++] = all[i];
      W->mine[all[i]] = 1;
    }
    for (int ch = w; in->ll_post_off && ch < in->ll_channels; ch += nlinks) {
      W->llw[W->nllw++] = ch;
      W->llmine[ch] = 1;
    }
    W->peers = calloc((size_t)sl->nslots, sizeof *W->peers);
    if (!W->peers) {
      rc = weft_set_error(WEFT_ERR_NO_MEMORY, "proxy: out of memory");
      break;
    }
    weft_pump_init_t pin = {.link = W->link,
                            .pass = pass,
                            .bye = bye,
                            .self = W,
                            .npeers = sl->nslots,
                            .peer_rank = P->slots.rank,
                            .kicks = &P->kicks,
                            .holds = &P->awake->holds,
                            .kick_fd = P->kick_fd[w]};
    rc = weft_pump_start(&W->pump, &pin);
    P->nworkers = w + 1; /* stopped and freed with the others, started or not */
    /* near the GPU and the pinned memory they copy; where it cannot be, anywhere will do */
    if (rc == WEFT_SUCCESS && in->numa >= 0 &&
        weft_topo_pin_thread(W->pump.thread, "/", in->numa) != WEFT_SUCCESS)
      WEFT_INFO(WEFT_SUB_INIT, "proxy: %s", weft_thread_error());
  }
  if (rc != WEFT_SUCCESS) {
    stop_workers(P);
    return rc;
  }
  *out = P;
  return WEFT_SUCCESS;
}

weft_result_t weft_rproxy_status(weft_rproxy_t *p) {
  /* a notice some worker heard explains the others' lost connections: it goes first */
  for (int w = 0; w < p->nworkers; w++)
    if (atomic_load(&p->workers[w].pump.heard) &&
        atomic_load(&p->workers[w].pump.status) != WEFT_SUCCESS)
      return weft_pump_status(&p->workers[w].pump);
  for (int w = 0; w < p->nworkers; w++)
    CHECK(weft_pump_status(&p->workers[w].pump));
  return WEFT_SUCCESS;
}

void weft_rproxy_kick(weft_rproxy_t *p) {
  if (!p) return;
  atomic_fetch_add(&p->kicks, 1); /* before the look at the nappers (pump.c) */
  for (int w = 0; w < p->nworkers; w++)
    if (p->kick_fd[w] >= 0 && atomic_load(&p->workers[w].pump.napping)) {
      uint64_t one = 1;
      ssize_t r = write(p->kick_fd[w], &one, sizeof one);
      (void)r; /* EAGAIN: the counter is full, a wake is pending anyway */
    }
}

void *weft_rproxy_hold(weft_rproxy_t *p) {
  if (!p) return NULL;
  atomic_fetch_add(&p->awake->refs, 1);
  atomic_fetch_add(&p->awake->holds, 1);
  return p->awake;
}

void weft_rproxy_release(void *token) {
  awake_t *a = token;
  if (!a) return;
  atomic_fetch_sub(&a->holds, 1);
  awake_put(a);
}

void weft_rproxy_counts(weft_rproxy_t *p, uint64_t *sent, uint64_t *received) {
  uint64_t s = 0, r = 0;
  for (int w = 0; w < p->nworkers; w++) {
    uint64_t a, b;
    weft_pump_counts(&p->workers[w].pump, &a, &b);
    s += a, r += b;
  }
  if (sent) *sent = s;
  if (received) *received = r;
}

weft_proxy_stats_t weft_rproxy_stats(weft_rproxy_t *p) {
  weft_proxy_stats_t s = {0};
  for (int w = 0; p && w < p->nworkers; w++)
    weft_pump_stats(&p->workers[w].pump, &s);
  return s;
}

void weft_rproxy_stop(weft_rproxy_t *p) {
  if (p) stop_workers(p);
}
