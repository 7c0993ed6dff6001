/* The proxy (src/proxy) over TCP between fake hosts, with a host thread standing in for the
 * kernels on the same FIFO code: every rank streams to every other on each channel, in chunks
 * of pseudo-random sizes (empty ones too) through FIFOs of 8 small slots, so that credits,
 * wrap-around, frames split by the stream and backed-up receivers all happen; every byte is
 * checked. abort: rank 0 aborts its communicator a third of the way in; kill: the last rank
 * is SIGKILLed there. Every survivor's proxy must then stop on an error within 5 s (times
 * WEFT_TEST_TIME_SCALE) that names the rank (a killed one with its host), and its stand-in
 * must see the abort word. cut (2 ranks in tests/fault/netns.sh's namespaces): rank 1 sets its
 * end of the link down, and both must stop within 5 s naming the other and its host, though
 * no socket closes (WEFT_TCP_DEAD_MS).
 * usage: test_proxy NRANKS [data|abort|kill|cut] [--chan=C] [--slot=BYTES] [--kib=K] */
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "comm.h"
#include "launch.h"
#include "proxy.h"
#include "proxy_test.h"

enum { MAXR = 8, MSG = 512 };
typedef enum { DATA, ABORT, KILL, CUT } mode_t_;

typedef struct {
  int rc[MAXR];
  int64_t t_fail[MAXR]; /* when its proxy had stopped on the failure (ms) */
  int64_t t_event;      /* when the abort or the kill happened */
  int noted;            /* survivors that recorded their failure */
  char msg[MAXR][MSG];
  double mbps[MAXR];
} shared_t;

typedef struct {
  mode_t_ mode;
  int nchan;
  uint32_t slot;
  uint64_t kib;
  shared_t *sh;
} arg_t;

/* One stream (src -> dst on chan) as the stand-in sees it. */
typedef struct {
  weft_fifo_t *fifo;
  char *buf;
  uint64_t total, done; /* bytes in all, and posted (send) or checked (receive) so far */
  uint64_t chunks, rng;
  int peer, chan;
} stream_t;

static uint8_t byte_at(int src, int dst, int chan, uint64_t off) {
  return (uint8_t)(src * 37 + dst * 11 + chan * 5 + off * 131 + (off >> 9));
}

static uint64_t next_rng(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

static uint64_t stream_bytes(const arg_t *a, int src, int chan) {
  return a->kib * 1024 + (uint64_t)src * 7 + (uint64_t)chan; /* odd, distinct sizes */
}

static void *alloc_zero(size_t bytes) {
  void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (p) memset(p, 0, (bytes + 63) / 64 * 64);
  return p;
}

/* Posts the stream's next chunk when a slot is free; 1 when it moved. */
static int produce(stream_t *s, int rank, uint32_t slot_bytes) {
  if (s->done == s->total || !weft_fifo_room(s->fifo)) return 0;
  uint64_t r = next_rng(&s->rng), left = s->total - s->done;
  uint64_t n = r % 17 == 0 ? 0 : 1 + r % slot_bytes; /* an empty chunk now and then */
  if (n > left) n = left;
  char *dst = s->buf + (size_t)(s->fifo->head % WEFT_FIFO_SLOTS) * slot_bytes;
  for (uint64_t i = 0; i < n; i++)
    dst[i] = (char)byte_at(rank, s->peer, s->chan, s->done + i);
  weft_fifo_post(s->fifo, (uint32_t)n);
  s->done += n;
  s->chunks++;
  return 1;
}

/* Checks the stream's oldest chunk when one came; 1 when it moved, -1 on wrong bytes. */
static int consume(stream_t *s, int rank, uint32_t slot_bytes) {
  if (!weft_fifo_ready(s->fifo)) return 0;
  uint32_t n = weft_fifo_size(s->fifo);
  const char *src = s->buf + (size_t)weft_fifo_slot(s->fifo) * slot_bytes;
  if (n > slot_bytes || s->done + n > s->total) {
    printf("test_proxy: rank %d: a chunk of %u bytes from rank %d (channel %d) after %llu of "
           "%llu bytes\n",
           rank, n, s->peer, s->chan, (unsigned long long)s->done, (unsigned long long)s->total);
    return -1;
  }
  for (uint32_t i = 0; i < n; i++)
    if ((uint8_t)src[i] != byte_at(s->peer, rank, s->chan, s->done + i)) {
      printf("test_proxy: rank %d: byte %llu from rank %d (channel %d) is %u, want %u\n", rank,
             (unsigned long long)(s->done + i), s->peer, s->chan, (uint8_t)src[i],
             byte_at(s->peer, rank, s->chan, s->done + i));
      return -1;
    }
  s->done += n;
  s->chunks++;
  weft_fifo_pop(s->fifo);
  return 1;
}

/* Notices come over the bootstrap ring between hosts: the proxy thread reads them (here no
 * other thread uses the ring while it runs). */
/* Sets this rank's end of the namespaces' veth pair down (tests/fault/netns.sh). */
static int cut_link(int rank) {
  const char *links = getenv("WEFT_TEST_NETNS_LINKS");
  char names[2][32], cmd[128];
  if (!links || sscanf(links, "%31[^,],%31s", names[0], names[1]) != 2)
    return printf("test_proxy: cut needs tests/fault/netns.sh (WEFT_TEST_NETNS_LINKS)\n"), 1;
  snprintf(cmd, sizeof cmd, "ip link set dev %s down", names[rank % 2]);
  if (system(cmd) != 0) return printf("test_proxy: '%s' failed\n", cmd), 1;
  return 0;
}

static weft_result_t check_cb(void *ctx) { return weft_fail_check(ctx); }
static weft_result_t explain_cb(void *ctx, weft_result_t rc, int peer) {
  return weft_fail_root_cause(ctx, rc, peer, "proxy", 1);
}
static void fail_cb(void *ctx, weft_result_t rc, const char *msg) {
  weft_comm_fail(ctx, rc, msg, 1);
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *argp) {
  const arg_t *a = argp;
  weft_comm_t comm;
  int tcp;
  if (proxy_test_comm("test_proxy", rank, n, id, &comm, &tcp)) return 1;
  int ns = (n - 1) * a->nchan, k = 0;
  stream_t *out = calloc((size_t)ns, sizeof *out), *in = calloc((size_t)ns, sizeof *in);
  weft_proxy_conn_t *cs = calloc((size_t)ns, sizeof *cs), *cr = calloc((size_t)ns, sizeof *cr);
  if (!out || !in || !cs || !cr) return printf("test_proxy: out of memory\n"), 1;
  for (int p = 0; p < n; p++)
    for (int ch = 0; ch < a->nchan && p != rank; ch++, k++) {
      stream_t *s[2] = {&out[k], &in[k]};
      weft_proxy_conn_t *c[2] = {&cs[k], &cr[k]};
      for (int d = 0; d < 2; d++) {
        *s[d] = (stream_t){.fifo = alloc_zero(sizeof(weft_fifo_t)),
                           .buf = alloc_zero((size_t)WEFT_FIFO_SLOTS * a->slot),
                           .total = stream_bytes(a, d ? p : rank, ch),
                           .rng = 0x9e3779b97f4a7c15ull ^ (uint64_t)(rank * 64 + p * 8 + ch),
                           .peer = p,
                           .chan = ch};
        if (!s[d]->fifo || !s[d]->buf) return printf("test_proxy: out of memory\n"), 1;
        *c[d] = (weft_proxy_conn_t){
            .peer = p, .chan = ch, .fifo = s[d]->fifo, .buf = s[d]->buf, .slot_bytes = a->slot};
      }
    }
  int32_t kabort = 0;
  weft_proxy_link_t link = proxy_test_link(comm, tcp, &kabort);
  link.check = check_cb, link.explain = explain_cb, link.fail = fail_cb;
  weft_proxy_init_t pin = {
      .link = link, .nchan = a->nchan, .send = cs, .recv = cr, .nsend = ns, .nrecv = ns};
  weft_proxy_t *px = NULL;
  if (weft_proxy_start(&pin, &px) != WEFT_SUCCESS)
    return printf("test_proxy: rank %d: %s\n", rank, weft_get_last_error(NULL)), 1;
  /* the stand-in: every stream in turn, as a kernel's blocks would */
  uint64_t all = 0, moved_bytes = 0;
  for (int i = 0; i < ns; i++)
    all += out[i].total + in[i].total;
  int64_t t0 = launch_now_ms(), deadline = t0 + (int64_t)(60000 * launch_time_scale());
  int bad = 0, event_done = 0, victim = a->mode == ABORT ? 0 : n - 1;
  while (!bad && !__atomic_load_n(&kabort, __ATOMIC_ACQUIRE) && launch_now_ms() < deadline) {
    uint64_t got = 0, sent = 0;
    for (int i = 0; i < ns && !bad; i++) {
      produce(&out[i], rank, a->slot);
      bad = consume(&in[i], rank, a->slot) < 0;
      got += out[i].done + in[i].done;
      sent += out[i].done;
    }
    moved_bytes = got;
    /* cut: a rank may post its last chunks into socket buffers after the cut and receive the
     * rest that came before it; its proxy must still find the dead link, so it waits for that */
    if (got == all && a->mode != CUT) break;
    /* a third of the victim's bytes posted: the others cannot have all of theirs yet */
    if (a->mode != DATA && rank == victim && !event_done && sent * 6 > all) {
      event_done = 1;
      a->sh->t_event = launch_now_ms();
      if (a->mode == KILL) raise(SIGKILL);
      if (a->mode == ABORT) weft_comm_abort(comm);
      if (a->mode == CUT && cut_link(rank)) bad = 1;
    }
  }
  double secs = (double)(launch_now_ms() - t0) / 1000;
  a->sh->mbps[rank] = secs > 0 ? (double)moved_bytes / 2 / secs / 1e6 : 0;
  int rc = 0;
  if (bad) rc = 1;
  if (a->mode == DATA && !bad) {
    /* every chunk went out of the proxy and came in once */
    uint64_t sent = 0, recvd = 0, want_s = 0, want_r = 0;
    for (int i = 0; i < ns; i++)
      want_s += out[i].chunks, want_r += in[i].chunks;
    for (int64_t t = launch_now_ms(); launch_now_ms() - t < 5000;) {
      weft_proxy_counts(px, &sent, &recvd);
      if (sent == want_s) break;
    }
    if (moved_bytes != all || sent != want_s || recvd != want_r ||
        weft_proxy_status(px) != WEFT_SUCCESS)
      rc = 1, printf("test_proxy: rank %d: %llu of %llu bytes, proxy sent %llu of %llu chunks and "
                     "received %llu of %llu (%s)\n",
                     rank, (unsigned long long)moved_bytes, (unsigned long long)all,
                     (unsigned long long)sent, (unsigned long long)want_s,
                     (unsigned long long)recvd, (unsigned long long)want_r,
                     weft_proxy_status(px) ? weft_get_last_error(NULL) : "running");
  } else if (a->mode != DATA && !bad) {
    /* the stand-in ended on the abort word; the proxy's error says why */
    weft_result_t prc = weft_proxy_status(px);
    a->sh->t_fail[rank] = launch_now_ms();
    a->sh->rc[rank] = prc;
    snprintf(a->sh->msg[rank], MSG, "%s", prc ? weft_get_last_error(NULL) : "no failure");
    /* a survivor keeps its communicator until the others saw the failure too: its closing
     * sockets would be news of their own */
    __atomic_add_fetch(&a->sh->noted, 1, __ATOMIC_SEQ_CST);
    int want = a->mode == KILL ? n - 1 : n;
    for (int64_t t = launch_now_ms(); __atomic_load_n(&a->sh->noted, __ATOMIC_SEQ_CST) < want &&
                                      launch_now_ms() - t < 5000 * launch_time_scale();)
      sched_yield();
  }
  weft_proxy_stop(px);
  /* the stream goes on serving the communicator once no proxy reads it (the bootstrap ring
   * says when: it is not the stream) */
  if (a->mode == DATA && !rc && weft_bootstrap_barrier(comm->boot) != WEFT_SUCCESS)
    rc = 1, printf("test_proxy: rank %d: bootstrap barrier: %s\n", rank, weft_get_last_error(NULL));
  if (a->mode == DATA && !rc && weft_barrier(comm, NULL) != WEFT_SUCCESS)
    rc = 1,
    printf("test_proxy: rank %d: barrier after the proxy: %s\n", rank, weft_get_last_error(comm));
  weft_comm_destroy(comm);
  for (int i = 0; i < ns; i++)
    free(out[i].fifo), free(out[i].buf), free(in[i].fifo), free(in[i].buf);
  free(out), free(in), free(cs), free(cr);
  return rc;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  arg_t a = {.mode = DATA, .nchan = 2, .slot = 4096, .kib = 1024};
  for (int i = 2; i < argc; i++) {
    if (!strcmp(argv[i], "abort"))
      a.mode = ABORT;
    else if (!strcmp(argv[i], "kill"))
      a.mode = KILL;
    else if (!strcmp(argv[i], "cut"))
      a.mode = CUT;
    else if (!strncmp(argv[i], "--chan=", 7))
      a.nchan = atoi(argv[i] + 7);
    else if (!strncmp(argv[i], "--slot=", 7))
      a.slot = (uint32_t)atoi(argv[i] + 7);
    else if (!strncmp(argv[i], "--kib=", 6))
      a.kib = (uint64_t)atoll(argv[i] + 6);
  }
  if (n < 2 || n > MAXR || a.nchan < 1 || a.slot < 1 || (a.mode == CUT && n != 2))
    return printf(
               "usage: test_proxy NRANKS(2-8) [data|abort|kill|cut(2 ranks)] [--chan=C] [--slot=B] "
               "[--kib=K]\n"),
           2;
  a.sh = mmap(NULL, sizeof *a.sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (a.sh == MAP_FAILED) return 1;
  memset(a.sh, 0, sizeof *a.sh);
  proxy_test_hosts(n);
  int rc = launch_local(n, rank_main, &a, (int)(120 * launch_time_scale()));
  if (a.mode == DATA) {
    double lo = 1e30;
    for (int r = 0; r < n; r++)
      lo = a.sh->mbps[r] < lo ? a.sh->mbps[r] : lo;
    printf("test_proxy: %d ranks, %d channels, %u-byte slots, %llu KiB a stream: %s (slowest "
           "rank %.0f MB/s each way)\n",
           n, a.nchan, a.slot, (unsigned long long)a.kib, rc ? "FAILED" : "every byte arrived", lo);
    return rc != 0;
  }
  /* abort, kill: every survivor's proxy failed in time, naming the rank (and, lost, its
   * host); cut: each names the other and its host */
  int victim = a.mode == ABORT ? 0 : n - 1, fails = 0;
  int64_t bound = (int64_t)(5000 * launch_time_scale());
  for (int r = 0; r < n; r++) {
    if (a.mode == KILL && r == victim) continue;
    int64_t dt = a.sh->t_fail[r] - a.sh->t_event;
    char want[32]; /* a lost rank is named with its host */
    snprintf(want, sizeof want, a.mode == ABORT ? "rank %d" : "rank %d (host ",
             a.mode == CUT ? 1 - r : victim);
    int ok = a.sh->rc[r] != WEFT_SUCCESS && a.sh->t_fail[r] && dt <= bound &&
             ((r == victim && a.mode != CUT) || strstr(a.sh->msg[r], want));
    printf("test_proxy: rank %d: %s after %lld ms: %s\n", r, ok ? "ok" : "WRONG", (long long)dt,
           a.sh->msg[r]);
    fails += !ok;
  }
  if (a.mode == ABORT && rc) fails++;
  printf("test_proxy: %d ranks, %s: %s\n", n,
         a.mode == ABORT  ? "abort"
         : a.mode == KILL ? "kill"
                          : "link cut",
         fails ? "FAILED" : "every survivor stopped in time");
  return fails != 0;
}
