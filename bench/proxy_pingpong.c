/* proxy_pingpong: the one-way latency of the region proxy (src/proxy/region.c) between 2 fake
 * hosts on this machine, against the tcp transport it runs on, with host threads standing in
 * for the kernels (their protocol: chunk, length and ready flag into the peer's mirror; done
 * credit once read). Rank 1 echoes each message; rank 0 checks every echoed byte. Without the
 * GPU's side, so the proxy's own cost shows (docs/hosts.md). With "lines", messages go as the
 * small low-latency kernel's do across hosts instead: 8 bytes a line with two copies of the
 * operation's seq, their count and seq posted beside them, the lines polled where they land.
 * With gap=MS both ranks idle MS milliseconds before each message (longer than
 * WEFT_PROXY_SPIN_US, the workers nap), then kick their proxy as the device engine does when
 * it queues an operation (weft_rproxy_kick; "nokick": not), and the first message's time is
 * reported, mean and worst.
 * usage: proxy_pingpong [LINKS (1)] [BYTES (8)] [ITERS (20000)] [lines] [gap=MS] [nokick] */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "dev.h"
#include "err.h"
#include "launch.h"
#include "region.h"
#include "slots.h"

enum { COLL = 16, STAGES = 8, CHUNK = 262144, WARMUP = 100, CH = WEFT_DEV_COLL_CHANNELS };

typedef struct {
  int links, iters, lines, gap_ms, kick;
  uint32_t bytes;
} args_t;
enum { MAX_LINE_BYTES = WEFT_DEV_LL_SLOT_BYTES / 2 }; /* a block's payload at most */

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}
static uint64_t ld(const char *r, uint64_t off) {
  return __atomic_load_n((const uint64_t *)(r + off), __ATOMIC_ACQUIRE);
}
static void st(char *r, uint64_t off, uint64_t v) {
  __atomic_store_n((uint64_t *)(r + off), v, __ATOMIC_RELEASE);
}

/* 8-byte messages through the transport itself: the floor the proxy adds to. */
static double raw_one_way(const weft_transport_t *tr, void *ts, int rank, int iters) {
  char buf[8] = {0};
  double t0 = 0;
  for (int i = 0; i < iters + WARMUP; i++) {
    if (i == WARMUP) t0 = now_us();
    for (int leg = 0; leg < 2; leg++) {
      size_t done = 0, k = 0;
      if ((leg == 0) == (rank == 0)) {
        while (done < sizeof buf && tr->send(ts, 1 - rank, buf + done, sizeof buf - done, &k) == 0)
          done += k;
      } else {
        while (done < sizeof buf &&
               tr->recv_into(ts, 1 - rank, buf + done, sizeof buf - done, &k) == WEFT_SUCCESS)
          done += k;
      }
      if (done < sizeof buf) return -1;
    }
  }
  return (now_us() - t0) / iters / 2;
}

/* One message as the small kernel's lines: op seq's bytes (8 a line, each 4 with seq beside
 * them) into the mirror to, then their count and seq for the proxy. */
static void put_lines(char *to, uint64_t ll, uint64_t post, const uint64_t *data, uint32_t lines,
                      uint64_t seq) {
  uint64_t *w = (uint64_t *)(to + ll + WEFT_DEV_LL_OFF(0, seq & 1, 0, 2));
  for (uint32_t i = 0; i < lines; i++) {
    __atomic_store_n(&w[2 * i], (data[i] & 0xffffffffu) | (seq << 32), __ATOMIC_RELAXED);
    __atomic_store_n(&w[2 * i + 1], (data[i] >> 32) | (seq << 32), __ATOMIC_RELAXED);
  }
  uint64_t po = post + WEFT_DEV_LL_POST_OFF(0, seq & 1, 0, 2);
  __atomic_store_n((uint64_t *)(to + po + 8), lines, __ATOMIC_RELAXED);
  st(to, po, seq);
}
/* Polls op seq's lines where they land in own (a proxy failure: -1), into data. */
static int take_lines(weft_rproxy_t *px, const char *own, uint64_t ll, uint64_t *data,
                      uint32_t lines, uint64_t seq) {
  const uint64_t *w = (const uint64_t *)(own + ll + WEFT_DEV_LL_OFF(0, seq & 1, 0, 2));
  for (uint32_t i = 0; i < 2 * lines; i++)
    for (uint32_t spins = 1; __atomic_load_n(&w[i], __ATOMIC_ACQUIRE) >> 32 != (uint32_t)seq;
         spins++) {
      if ((spins & 255) == 0) sched_yield();
      if ((spins & 4095) == 0 && weft_rproxy_status(px) != WEFT_SUCCESS) return -1;
    }
  for (uint32_t i = 0; i < lines; i++)
    data[i] = (w[2 * i] & 0xffffffffu) | (w[2 * i + 1] & 0xffffffffu) << 32;
  return 0;
}

/* Waits for the flag at off of region r to reach v, or the proxy to fail; yields now and then,
 * so that on a machine with fewer cores than spinning threads the proxies still run. */
static int wait_for(weft_rproxy_t *px, const char *r, uint64_t off, uint64_t v) {
  for (uint32_t spins = 1; ld(r, off) < v; spins++) {
    if ((spins & 255) == 0) sched_yield();
    if ((spins & 4095) == 0 && weft_rproxy_status(px) != WEFT_SUCCESS) return -1;
  }
  return 0;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *argp) {
  const args_t *a = argp;
  weft_comm_t comm;
  if (weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS)
    return printf("proxy_pingpong: init: %s\n", weft_get_last_error(NULL)), 1;
  int tcp = weft_comm_transport_index(comm, "tcp"), rc = 1;
  weft_dev_slots_t sl;
  weft_dev_slots_make(rank, n, &sl);
  void *states[WEFT_RPROXY_MAX_LINKS] = {NULL};
  uint8_t others[2] = {rank != 0, rank != 1};
  int links = 0; /* as the device engine: every worker's connections made at setup */
  char *region[2] = {NULL, NULL};
  int kick_fds[WEFT_RPROXY_MAX_LINKS]; /* one per worker, as the device engine's */
  for (int w = 0; w < WEFT_RPROXY_MAX_LINKS; w++)
    kick_fds[w] = w < a->links ? eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK) : -1;
  weft_rproxy_t *px = NULL;
  if (tcp < 0) {
    printf("proxy_pingpong: no tcp transport between the fake hosts\n");
    goto out;
  }
  for (; links < a->links; links++)
    if (weft_comm_transport_again(comm, tcp, others, kick_fds[links], &states[links]) !=
        WEFT_SUCCESS) {
      printf("proxy_pingpong: links: %s\n", weft_get_last_error(NULL));
      goto out;
    }
  double raw = raw_one_way(comm->tr[tcp], states[0], rank, a->iters);
  if (raw < 0) {
    printf("proxy_pingpong: rank %d: tcp: %s\n", rank, weft_get_last_error(NULL));
    goto out;
  }
  size_t rb =
      WEFT_DEV_STAGE_OFF + (size_t)(COLL + WEFT_DEV_P2P_CHANNELS) * sl.nsrc * STAGES * CHUNK;
  const uint64_t ll = rb, post = ll + WEFT_DEV_LL_OFF(1, 0, 0, 2);
  rb = post + WEFT_DEV_LL_POST_OFF(1, 0, 0, 2);
  uint8_t remote[2] = {sl.self != 0, sl.self != 1};
  for (int s = 0; s < 2; s++)
    if (!(region[s] = calloc(1, rb))) {
      printf("proxy_pingpong: out of memory\n");
      goto out;
    }
  int32_t kabort = 0;
  weft_rproxy_init_t in = {.link = {.rank = rank,
                                    .nranks = n,
                                    .tr = comm->tr[tcp],
                                    .tr_state = states[0],
                                    .abort_flag = &comm->aborted,
                                    .kernel_abort = &kabort,
                                    .timeout_ms = 20000},
                           .nlinks = a->links,
                           .numa = -1,
                           .tr_states = states,
                           .slots = &sl,
                           .remote = remote,
                           .region = region,
                           .region_bytes = rb,
                           .chunk_bytes = CHUNK,
                           .stages = STAGES,
                           .coll_channels = COLL,
                           .ll_off = ll,
                           .ll_post_off = post,
                           .ll_channels = 1,
                           .kick_fds = kick_fds};
  if (weft_rproxy_start(&in, &px) != WEFT_SUCCESS) {
    printf("proxy_pingpong: proxy: %s\n", weft_get_last_error(NULL));
    goto out;
  }
  const int q = 1 - sl.self; /* the peer's slot */
  char *own = region[sl.self];
  const uint64_t ready = WEFT_DEV_READY_OFF(CH, sl.flag_out[q]),
                 done = WEFT_DEV_DONE_OFF(CH, sl.flag_out[q]);
  uint64_t sent = 0, got = 0, data[MAX_LINE_BYTES / 8];
  const uint32_t lines = (a->bytes + 7) / 8;
  double t0 = 0, gap_sum = 0, gap_worst = 0, t_iter = 0;
  int bad = 0, warmup = a->gap_ms ? 3 : WARMUP;
  for (int i = 0; i < a->iters + warmup && !bad; i++) {
    if (i == warmup) t0 = now_us();
    if (a->gap_ms) { /* both ranks idle, then queue their "operation" */
      usleep((useconds_t)a->gap_ms * 1000);
      if (a->kick) weft_rproxy_kick(px);
      t_iter = now_us();
    }
    /* lines: each message is an operation of its own (rank 0's, then rank 1's echo) */
    for (int leg = 0; leg < 2 && !bad && a->lines; leg++) {
      uint64_t seq = 2 * (uint64_t)i + (uint64_t)leg + 1;
      if ((leg == 0) == (rank == 0)) {
        for (uint32_t l = 0; l < lines && rank == 0; l++)
          data[l] = (uint64_t)i * 0x9e3779b97f4a7c15ull + l;
        put_lines(region[q], ll, post, data, lines, seq); /* rank 1: what came, as it came */
      } else {
        bad |= take_lines(px, own, ll, data, lines, seq);
        for (uint32_t l = 0; rank == 0 && l < lines && !bad; l++)
          if (data[l] != (uint64_t)i * 0x9e3779b97f4a7c15ull + l)
            bad = printf("proxy_pingpong: message %d came back with line %u wrong\n", i, l) > 0;
      }
    }
    for (int leg = 0; leg < 2 && !bad && !a->lines; leg++) {
      if ((leg == 0) == (rank == 0)) { /* send: a free slot, the chunk, its length, then ready */
        bad |=
            wait_for(px, own, WEFT_DEV_DONE_OFF(CH, q), sent + 1 > STAGES ? sent + 1 - STAGES : 0);
        char *dst =
            region[q] + weft_dev_stage_off(CH, COLL, sl.nsrc, sl.stage_out[q], STAGES, CHUNK, sent);
        const char *src = rank == 1 ? own + weft_dev_stage_off(CH, COLL, sl.nsrc, sl.stage_in[q],
                                                               STAGES, CHUNK, got - 1)
                                    : NULL;
        for (uint32_t b = 0; b < a->bytes; b++)
          dst[b] = src ? src[b] : (char)(i * 31 + b); /* rank 1 echoes what came */
        *(uint32_t *)(region[q] + WEFT_DEV_SIZE_OFF(ready, sent)) = a->bytes;
        st(region[q], ready, ++sent);
      } else { /* receive: ready, then (rank 0) the echo checked, then the slot back */
        bad |= wait_for(px, own, WEFT_DEV_READY_OFF(CH, q), got + 1);
        const char *src =
            own + weft_dev_stage_off(CH, COLL, sl.nsrc, sl.stage_in[q], STAGES, CHUNK, got);
        for (uint32_t b = 0; rank == 0 && b < a->bytes && !bad; b++)
          if (src[b] != (char)(i * 31 + b))
            bad = printf("proxy_pingpong: message %d came back with byte %u wrong\n", i, b) > 0;
        got++;
        if (rank == 0) st(region[q], done, got); /* rank 1 returns it after echoing */
        if (rank == 1 && got > 1) st(region[q], done, got - 1);
      }
    }
    if (a->gap_ms && i >= warmup) { /* the round trip after the gap, halved */
      double dt = (now_us() - t_iter) / 2;
      gap_sum += dt;
      gap_worst = dt > gap_worst ? dt : gap_worst;
    }
  }
  double proxy = (now_us() - t0) / a->iters / 2;
  if (bad && weft_rproxy_status(px) != WEFT_SUCCESS)
    printf("proxy_pingpong: rank %d: %s\n", rank, weft_get_last_error(NULL));
  else if (bad) /* rank 0 stopped on a wrong byte: its proxy tells rank 1's, which stops too */
    atomic_store(&comm->aborted, 1);
  rc = bad;
  if (rank == 0 && !rc && !a->gap_ms)
    printf("proxy_pingpong: %d iterations: tcp transport %.2f us one way (8 bytes); region proxy "
           "%.2f us one way (%u bytes%s, %d worker thread%s)\n",
           a->iters, raw, proxy, a->bytes, a->lines ? " as the small kernel's lines" : "", a->links,
           a->links > 1 ? "s" : "");
  if (rank == 0 && !rc && a->gap_ms)
    printf("proxy_pingpong: %d messages, each after %d ms idle, %s: region proxy %.2f us one way "
           "(worst %.2f; %u bytes%s, %d worker thread%s); tcp transport %.2f us back to back\n",
           a->iters, a->gap_ms, a->kick ? "the proxy kicked" : "no kick", gap_sum / a->iters,
           gap_worst, a->bytes, a->lines ? " as the small kernel's lines" : "", a->links,
           a->links > 1 ? "s" : "", raw);
  if (weft_bootstrap_barrier(comm->boot) != WEFT_SUCCESS) rc = 1; /* last credits in */
out:
  weft_rproxy_stop(px);
  for (int w = 0; w < links; w++)
    comm->tr[tcp]->teardown(states[w]);
  weft_comm_destroy(comm);
  for (int w = 0; w < WEFT_RPROXY_MAX_LINKS; w++)
    if (kick_fds[w] >= 0) close(kick_fds[w]);
  free(region[0]);
  free(region[1]);
  return rc;
}

int main(int argc, char **argv) {
  args_t a = {.links = argc > 1 ? atoi(argv[1]) : 1,
              .bytes = argc > 2 ? (uint32_t)atoi(argv[2]) : 8,
              .iters = argc > 3 ? atoi(argv[3]) : 20000,
              .kick = 1};
  int unknown = 0;
  for (int i = 4; i < argc; i++) {
    if (!strcmp(argv[i], "lines"))
      a.lines = 1;
    else if (!strncmp(argv[i], "gap=", 4))
      a.gap_ms = atoi(argv[i] + 4), unknown |= a.gap_ms < 1 || a.gap_ms > 10000;
    else if (!strcmp(argv[i], "nokick"))
      a.kick = 0;
    else
      unknown = 1;
  }
  if (a.links < 1 || a.links > WEFT_RPROXY_MAX_LINKS || a.bytes < 1 || a.bytes > CHUNK ||
      a.iters < 1 || unknown || (a.lines && a.bytes > MAX_LINE_BYTES))
    return printf("usage: proxy_pingpong [LINKS (1-%d)] [BYTES (1-%d; lines: 1-%d)] [ITERS] "
                  "[lines] [gap=MS (1-10000)] [nokick]\n",
                  WEFT_RPROXY_MAX_LINKS, CHUNK, MAX_LINE_BYTES),
           2;
  setenv("WEFT_TEST_HOSTS", "2", 0); /* each rank a fake host: launch_local */
  return launch_local(2, rank_main, &a, 300) != 0;
}
