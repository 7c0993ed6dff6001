/* Shared-memory transport: each rank owns a small POSIX shared-memory segment (a doorbell,
 * liveness, a failure notice) that every local rank maps at init, and a single-producer
 * single-consumer ring per local sender, which that sender creates on its first send, so
 * memory follows the pairs that talk (a ring's neighbours, not all N^2). The fast path is
 * memcpy and an acquire/release counter update; a rank that has nothing to do sleeps on its
 * doorbell with a futex, so idle ranks burn no core. */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "err.h"
#include "param.h"
#include "shmseg.h"
#include "transport.h"

#define HINT "lower WEFT_SHM_RING_BYTES"

typedef struct {
  _Atomic uint64_t head; /* bytes written, by the producer */
  char pad0[56];
  _Atomic uint64_t tail; /* bytes consumed, by the consumer */
  char pad1[56];
} ring_ctl_t;

typedef struct {
  _Atomic uint32_t bell;     /* bumped by every peer that wrote to us or read from us */
  _Atomic uint32_t sleeping; /* owner is (about to be) in futex_wait */
  int32_t pid;
  uint32_t nlocal;
  uint64_t magic;
  /* local index + 1 of the first peer that told us of a failure; its notice, with its
   * message, is in its own segment (so a local notice says as much as one over the ring) */
  _Atomic int32_t notice;
  _Atomic int32_t left;       /* the owner destroyed its communicator: its exit is no failure */
  _Atomic uint32_t heartbeat; /* bumped every 100 ms by the owner's heartbeat thread */
  char pad0[4];
  uint64_t ring_bytes; /* of the rings into the owner: each sender must make them alike */
  char pad[16];
} seg_hdr_t;

_Static_assert(sizeof(seg_hdr_t) == 64, "the segment header is one cache line");

/* After the header: the owner's own failure notice, written once before it tells anyone;
 * then one byte per local sender, set once that sender's ring into this rank exists. */
#define NOTICE_AREA 256
_Static_assert(sizeof(weft_notice_t) <= NOTICE_AREA, "a notice fits its area");
#define READY_OFF (sizeof(seg_hdr_t) + NOTICE_AREA)

typedef struct {
  int rank, nranks, nlocal, my_local;
  const int *local_rank;
  int64_t next_liveness_ms;     /* pid checks of local peers are rate-limited */
  int64_t heartbeat_ms;         /* a local peer silent this long is stopped or frozen; 0: off */
  uint32_t *beat_seen;          /* per local index: last heartbeat value seen ... */
  int64_t *beat_when;           /* ... and when it last changed */
  size_t ring_bytes, seg_bytes; /* seg_bytes: of a header segment */
  char **segs;                  /* header segments by local index; the own one included */
  char **out, **in; /* by local index: the ring into that rank, and the one from it (or NULL) */
  int *rank_of;     /* by local index */
  uint64_t magic;
  char name[64];
  int own_linked;
} shm_t;

static size_t ring_seg_bytes(const shm_t *s) { return sizeof(ring_ctl_t) + s->ring_bytes; }
static ring_ctl_t *ring_ctl(char *ring) { return (ring_ctl_t *)ring; }
static char *ring_data(char *ring) { return ring + sizeof(ring_ctl_t); }
static seg_hdr_t *hdr(const shm_t *s, int local) { return (seg_hdr_t *)s->segs[local]; }
/* In owner's header: whether the ring from sender exists. */
static _Atomic uint8_t *ready(const shm_t *s, int owner_local, int sender_local) {
  return (_Atomic uint8_t *)(s->segs[owner_local] + READY_OFF) + sender_local;
}
static void ring_name(char *buf, size_t len, const shm_t *s, int owner, int sender) {
  char suffix[24];
  snprintf(suffix, sizeof suffix, "-from-%d", sender);
  weft_shm_name(buf, len, s->magic, owner, suffix);
}
static weft_notice_t *own_notice(const shm_t *s, int local) {
  return (weft_notice_t *)(s->segs[local] + sizeof(seg_hdr_t));
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts) {
  return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static void ring_bell(const shm_t *s, int local) {
  seg_hdr_t *h = hdr(s, local);
  atomic_fetch_add(&h->bell, 1);
  if (atomic_load(&h->sleeping)) futex(&h->bell, FUTEX_WAKE, 1, NULL);
}

/* A process that is gone, or a zombie nobody reaped yet. */
static int pid_dead(int32_t pid) {
  if (pid <= 0) return 0;
  if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
  char path[64], buf[256];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  size_t len = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[len] = 0;
  const char *close_paren = strrchr(buf, ')');
  return close_paren && close_paren[1] == ' ' && close_paren[2] == 'Z';
}

static void shm_teardown(void *state) {
  shm_t *s = state;
  if (!s) return;
  /* Peers may still be reading what this rank sent (the rings outlive it): tell them its
   * process ending next is not a failure. */
  if (s->segs && s->segs[s->my_local]) atomic_store(&hdr(s, s->my_local)->left, 1);
  if (s->own_linked) shm_unlink(s->name);
  char name[96];
  for (int l = 0; l < s->nlocal && s->segs && s->out && s->in && s->rank_of; l++) {
    /* A ring's name goes when its receiver maps it. Rings into us we never mapped have no
     * other reader; ours into a rank that left or died will be mapped by no one. */
    if (!s->in[l] && s->segs[s->my_local] && atomic_load(ready(s, s->my_local, l))) {
      ring_name(name, sizeof name, s, s->rank, s->rank_of[l]);
      shm_unlink(name);
    }
    if (s->out[l] && s->segs[l] && (atomic_load(&hdr(s, l)->left) || pid_dead(hdr(s, l)->pid))) {
      ring_name(name, sizeof name, s, s->rank_of[l], s->rank);
      shm_unlink(name);
    }
    if (s->out[l]) munmap(s->out[l], ring_seg_bytes(s));
    if (s->in[l]) munmap(s->in[l], ring_seg_bytes(s));
  }
  for (int i = 0; i < s->nlocal && s->segs; i++)
    if (s->segs[i]) munmap(s->segs[i], s->seg_bytes);
  free(s->segs);
  free(s->out);
  free(s->in);
  free(s->rank_of);
  free(s->beat_seen);
  free(s->beat_when);
  free(s);
}

static weft_result_t shm_setup(const weft_transport_init_t *in, void **state) {
  weft_result_t rc = WEFT_SUCCESS;
  shm_t *s = calloc(1, sizeof *s);
  if (!s) { /* the others still meet this rank at the first agreement, and fail there */
    weft_set_error(WEFT_ERR_NO_MEMORY, "shm: out of memory");
    return weft_bootstrap_agree(in->boot, WEFT_ERR_NO_MEMORY, "shm",
                                "could not create its shared memory");
  }
  s->rank = in->rank;
  s->nranks = in->nranks;
  s->nlocal = in->nlocal;
  s->my_local = in->local_rank[in->rank];
  s->local_rank = in->local_rank;
  int64_t rb = weft_param_get_int(WEFT_PARAM_SHM_RING_BYTES);
  if (rb < 4096) rb = 4096;
  s->ring_bytes = ((size_t)rb + 4095) & ~(size_t)4095;
  s->seg_bytes = (READY_OFF + (size_t)s->nlocal + 4095) & ~(size_t)4095;
  s->magic = in->magic;
  s->segs = calloc((size_t)s->nlocal, sizeof *s->segs);
  s->out = calloc((size_t)s->nlocal, sizeof *s->out);
  s->in = calloc((size_t)s->nlocal, sizeof *s->in);
  s->rank_of = calloc((size_t)s->nlocal, sizeof *s->rank_of);
  s->beat_seen = calloc((size_t)s->nlocal, sizeof *s->beat_seen);
  s->beat_when = calloc((size_t)s->nlocal, sizeof *s->beat_when);
  s->heartbeat_ms = weft_param_get_int(WEFT_PARAM_HEARTBEAT_MS);
  weft_shm_name(s->name, sizeof s->name, in->magic, in->rank, "");
  /* Everyone's header exists after the first agreement; after the second, all are mapped
   * and the names can go, so a crash later leaves no header behind in /dev/shm (a ring's
   * name lives from its first send to its receiver's first look). A rank that failed takes
   * part in both, and every rank then fails with its reason. */
  if (!s->segs || !s->out || !s->in || !s->rank_of || !s->beat_seen || !s->beat_when)
    rc = weft_set_error(WEFT_ERR_NO_MEMORY, "shm: out of memory");
  for (int p = 0; p < in->nranks && rc == WEFT_SUCCESS; p++) {
    if (in->local_rank[p] >= 0) s->rank_of[in->local_rank[p]] = p;
  }
  if (rc == WEFT_SUCCESS) rc = weft_shm_map(s->name, s->seg_bytes, 1, HINT, &s->segs[s->my_local]);
  if (rc == WEFT_SUCCESS) {
    s->own_linked = 1;
    seg_hdr_t *h = hdr(s, s->my_local);
    h->pid = (int32_t)getpid();
    h->nlocal = (uint32_t)s->nlocal;
    h->magic = in->magic;
    h->ring_bytes = s->ring_bytes;
  }
  CHECK_GOTO(weft_bootstrap_agree(in->boot, rc, "shm", "could not create its shared memory"), rc,
             fail);
  for (int p = 0; p < in->nranks && rc == WEFT_SUCCESS; p++) {
    int l = in->local_rank[p];
    if (p == in->rank || l < 0 || !in->use[p]) continue;
    char name[64];
    weft_shm_name(name, sizeof name, in->magic, p, "");
    rc = weft_shm_map(name, s->seg_bytes, 0, HINT, &s->segs[l]);
    if (rc == WEFT_SUCCESS &&
        (hdr(s, l)->magic != in->magic || hdr(s, l)->nlocal != (uint32_t)s->nlocal))
      rc = weft_set_error(WEFT_ERR_PROTOCOL, "shm: segment of rank %d does not match", p);
    /* a ring is made by its sender and read by its receiver: both must size it alike */
    if (rc == WEFT_SUCCESS && hdr(s, l)->ring_bytes != s->ring_bytes)
      rc = weft_set_error(WEFT_ERR_INVALID_ARG,
                          "shm: WEFT_SHM_RING_BYTES differs between local ranks (rank %d: %llu "
                          "bytes, rank %d: %zu): set it alike on every rank of a host",
                          p, (unsigned long long)hdr(s, l)->ring_bytes, in->rank, s->ring_bytes);
  }
  CHECK_GOTO(weft_bootstrap_agree(in->boot, rc, "shm", "could not map its peers' shared memory"),
             rc, fail);
  shm_unlink(s->name);
  s->own_linked = 0;
  WEFT_INFO(WEFT_SUB_SHM,
            "rank %d: %d local ranks, rings of %zu bytes made on first use (%zu bytes mapped "
            "here)",
            in->rank, s->nlocal, s->ring_bytes, s->seg_bytes * (size_t)s->nlocal);
  *state = s;
  return WEFT_SUCCESS;
fail:
  shm_teardown(s);
  return rc;
}

/* The ring into local rank pl, made on the first send there: created (every byte reserved,
 * so a full /dev/shm fails this send with its reason), then announced in pl's header. */
static weft_result_t out_ring(shm_t *s, int peer, int pl, char **ring) {
  if (!s->out[pl]) {
    char name[96];
    ring_name(name, sizeof name, s, peer, s->rank);
    CHECK(weft_shm_map(name, ring_seg_bytes(s), 1, HINT, &s->out[pl]));
    /* sequentially consistent: a receiver tearing down stores `left`, then reads ready; we
     * store ready, then (at our teardown) read `left`: one of us sees the other's and
     * unlinks the name */
    atomic_store(ready(s, pl, s->my_local), 1);
  }
  *ring = s->out[pl];
  return WEFT_SUCCESS;
}

/* The ring from local rank pl once its sender made it (else NULL): mapped, and its name
 * gone, since no one else opens it. */
static weft_result_t in_ring(shm_t *s, int peer, int pl, char **ring) {
  if (!s->in[pl] && atomic_load_explicit(ready(s, s->my_local, pl), memory_order_acquire)) {
    char name[96];
    ring_name(name, sizeof name, s, s->rank, peer);
    CHECK(weft_shm_map(name, ring_seg_bytes(s), 0, HINT, &s->in[pl]));
    shm_unlink(name);
  }
  *ring = s->in[pl];
  return WEFT_SUCCESS;
}

static weft_result_t shm_send(void *state, int peer, const void *src, size_t n, size_t *accepted) {
  shm_t *s = state;
  int pl = s->local_rank[peer];
  char *ring;
  CHECK(out_ring(s, peer, pl, &ring));
  ring_ctl_t *c = ring_ctl(ring);
  char *data = ring_data(ring);
  uint64_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
  uint64_t tail = atomic_load_explicit(&c->tail, memory_order_acquire);
  size_t space = s->ring_bytes - (size_t)(head - tail), w = n < space ? n : space;
  *accepted = w;
  if (w == 0) return WEFT_SUCCESS;
  size_t pos = (size_t)(head % s->ring_bytes), first = s->ring_bytes - pos;
  if (first > w) first = w;
  memcpy(data + pos, src, first);
  memcpy(data, (const char *)src + first, w - first);
  atomic_store_explicit(&c->head, head + w, memory_order_release);
  ring_bell(s, pl);
  return WEFT_SUCCESS;
}

static weft_result_t shm_peek(void *state, int peer, const void **p, size_t *contig,
                              size_t *total) {
  shm_t *s = state;
  int pl = s->local_rank[peer];
  char *ring;
  CHECK(in_ring(s, peer, pl, &ring));
  if (!ring) { /* nothing sent yet */
    *p = s->segs[s->my_local];
    *contig = *total = 0;
    return WEFT_SUCCESS;
  }
  ring_ctl_t *c = ring_ctl(ring);
  uint64_t head = atomic_load_explicit(&c->head, memory_order_acquire);
  uint64_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
  size_t pos = (size_t)(tail % s->ring_bytes);
  *total = (size_t)(head - tail);
  *contig = s->ring_bytes - pos < *total ? s->ring_bytes - pos : *total;
  *p = ring_data(ring) + pos;
  return WEFT_SUCCESS;
}

static void shm_consume(void *state, int peer, size_t n) {
  shm_t *s = state;
  int pl = s->local_rank[peer];
  if (!s->in[pl]) return; /* nothing was peeked: nothing to consume */
  ring_ctl_t *c = ring_ctl(s->in[pl]);
  atomic_fetch_add_explicit(&c->tail, n, memory_order_release);
  ring_bell(s, pl); /* the producer may be waiting for room */
}

static uint64_t shm_arm(void *state) {
  shm_t *s = state;
  return atomic_load(&hdr(s, s->my_local)->bell);
}

static weft_result_t shm_wait(void *state, uint64_t token, int timeout_ms) {
  shm_t *s = state;
  seg_hdr_t *h = hdr(s, s->my_local);
  atomic_store(&h->sleeping, 1);
  if (atomic_load(&h->bell) == (uint32_t)token) {
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    futex(&h->bell, FUTEX_WAIT, (uint32_t)token, &ts);
  }
  atomic_store(&h->sleeping, 0);
  return WEFT_SUCCESS;
}

static void shm_wake(void *state) {
  shm_t *s = state;
  ring_bell(s, s->my_local);
}

/* Called once per communicator: the notice is complete in this rank's segment before any
 * peer's header points to it (the compare-exchange publishes it). */
static void shm_notify(void *state, const weft_notice_t *n) {
  shm_t *s = state;
  *own_notice(s, s->my_local) = *n;
  for (int l = 0; l < s->nlocal; l++) {
    if (l == s->my_local || !s->segs[l]) continue;
    int32_t none = 0;
    atomic_compare_exchange_strong(&hdr(s, l)->notice, &none, s->my_local + 1);
    ring_bell(s, l);
  }
}

static void shm_beat(void *state) {
  shm_t *s = state;
  atomic_fetch_add(&hdr(s, s->my_local)->heartbeat, 1);
}

static weft_result_t shm_check(void *state, weft_notice_t *n) {
  shm_t *s = state;
  seg_hdr_t *h = hdr(s, s->my_local);
  int32_t teller = atomic_load(&h->notice) - 1;
  if (teller >= 0 && teller < s->nlocal && s->segs[teller]) {
    *n = *own_notice(s, teller);
    n->text[sizeof n->text - 1] = 0; /* written by another process: bound it here */
    return n->code;
  }
  int64_t now = weft_now_ms();
  if (now < s->next_liveness_ms) return WEFT_SUCCESS;
  s->next_liveness_ms = now + 100;
  for (int p = 0; p < s->nranks; p++) {
    int l = s->local_rank[p];
    if (p == s->rank || l < 0 || !s->segs[l] || atomic_load(&hdr(s, l)->left)) continue;
    /* A peer that leaves on purpose sets `left` before its process ends, so `left` is read
     * again once a loss is seen: the read above may predate a clean exit that then ended the
     * process before the pid was looked at (a rank done with its part of an alltoallv leaves
     * while its peers still read; under load this once failed moe_4_shm, "rank 2 is gone"). */
    if (pid_dead(hdr(s, l)->pid)) {
      if (atomic_load(&hdr(s, l)->left)) continue;
      *n = (weft_notice_t){.origin = p, .code = WEFT_ERR_PEER_LOST};
      return WEFT_ERR_PEER_LOST;
    }
    uint32_t beat = atomic_load(&hdr(s, l)->heartbeat);
    if (beat != s->beat_seen[l] || s->beat_when[l] == 0) {
      s->beat_seen[l] = beat;
      s->beat_when[l] = now;
    } else if (s->heartbeat_ms > 0 && now - s->beat_when[l] > s->heartbeat_ms &&
               !atomic_load(&hdr(s, l)->left)) {
      /* The notice's text is what the user reads (failure.c quotes it): say stopped. */
      *n = (weft_notice_t){.origin = p, .code = WEFT_ERR_PEER_LOST};
      snprintf(n->text, sizeof n->text,
               "rank %d (pid %d) has not run for %lld ms: stopped (SIGSTOP, a debugger) or frozen",
               p, (int)hdr(s, l)->pid, (long long)(now - s->beat_when[l]));
      return WEFT_ERR_PEER_LOST;
    }
  }
  return WEFT_SUCCESS;
}

static int shm_reaches(int same_host) { return same_host; }

const weft_transport_t weft_transport_shm = {
    .size = sizeof(weft_transport_t),
    .name = "shm",
    .priority = 20,
    .reaches = shm_reaches,
    /* a futex sleep that a bell ends at once; the bound only limits how stale a look at the
     * deadline and the failure notices gets */
    .wait_ms = 20,
    /* Calibrated with scripts/host/tune.sh on a 32-core host (2026-11-30, 4 and 8 ranks):
     * shm moves and reduces about 4 GB/s per rank once the data leaves the cache, and a ring
     * step costs ~50 us of synchronisation, which is why rhd beats ring up to ~8 MiB there. */
    .cost = {.alpha = 2.0e-6, .beta = 0.24e-9, .gamma = 0.24e-9, .ring_step = 50e-6},
    .setup = shm_setup,
    .teardown = shm_teardown,
    .send = shm_send,
    .peek = shm_peek,
    .consume = shm_consume,
    .arm = shm_arm,
    .wait = shm_wait,
    .wake = shm_wake,
    .notify = shm_notify,
    .check = shm_check,
    .beat = shm_beat,
};
