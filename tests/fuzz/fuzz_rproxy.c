/* Fuzz target: arbitrary bytes from a remote rank's proxy into the region proxy
 * (src/proxy/region.c): frames of chunks, credits, the small kernel's lines and notices, each
 * checked against this rank's region before anything lands. Rank 0 of 2 reads them, on a
 * stand-in transport that serves the input. The proxy must take the stream, refuse it as a
 * protocol violation, or report the notice it carries; every byte it writes must lie where
 * rank 1 may write (a staging slot, a flag or the lines of its own), and the region is sized
 * exactly, so ASan sees any write past it. Never a crash or a hang. */
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "outcome.h"
#include "region.h"
#include "slots.h"
#include "transport.h"

enum { COLL = 2, STAGES = 2, CHUNK = 4096, LLCH = 2, PEER = 1 };

typedef struct {
  const uint8_t *d;
  size_t n, at;
  atomic_int idle; /* reads that found the input all consumed */
} feed_t;

static weft_result_t feed_send(void *s, int peer, const void *src, size_t n, size_t *acc) {
  (void)s, (void)peer, (void)src;
  *acc = n;
  return WEFT_SUCCESS;
}
static weft_result_t feed_recv(void *s, int peer, void *dst, size_t n, size_t *got) {
  feed_t *f = s;
  size_t k = f->n - f->at < n ? f->n - f->at : n;
  (void)peer;
  memcpy(dst, f->d + f->at, k);
  f->at += k;
  *got = k;
  if (!k) atomic_fetch_add(&f->idle, 1);
  return WEFT_SUCCESS;
}
static uint64_t feed_arm(void *s) { return (void)s, 0; }
static weft_result_t feed_wait(void *s, uint64_t t, int ms) {
  (void)s, (void)t, (void)ms;
  return WEFT_SUCCESS;
}
static const weft_transport_t feed_tr = {.size = sizeof(weft_transport_t),
                                         .name = "fuzz",
                                         .send = feed_send,
                                         .recv_into = feed_recv,
                                         .arm = feed_arm,
                                         .wait = feed_wait};

/* Whether rank 1 may write byte off of rank 0's region (the layout region.c checks). */
static int allowed(const weft_dev_slots_t *sl, uint64_t ll_off, uint64_t off) {
  for (int i = 0; i < WEFT_DEV_COLL_CHANNELS + WEFT_DEV_P2P_CHANNELS; i++) {
    int ch = i < COLL ? i : i < WEFT_DEV_COLL_CHANNELS ? -1 : i;
    if (ch < 0) continue;
    uint64_t r = WEFT_DEV_READY_OFF(ch, PEER), d = WEFT_DEV_DONE_OFF(ch, PEER),
             s = weft_dev_stage_off(ch, COLL, sl->nsrc, sl->stage_in[PEER], STAGES, CHUNK, 0);
    if ((off >= r && off < r + 8) || (off >= d && off < d + 8) ||
        (off >= s && off < s + (uint64_t)STAGES * CHUNK))
      return 1;
  }
  for (int ch = 0; ch < LLCH; ch++)
    for (int par = 0; par < 2; par++) {
      uint64_t l = ll_off + WEFT_DEV_LL_OFF(ch, par, 0, 2);
      if (off >= l && off < l + WEFT_DEV_LL_SLOT_BYTES) return 1;
    }
  return 0;
}

void fuzz_outcome(const uint8_t *data, size_t size, char *out, size_t len) {
  snprintf(out, len, "skip");
  if (size > 1 << 18) return;
  weft_dev_slots_t sl;
  weft_dev_slots_make(0, 2, &sl);
  const uint64_t ll_off =
      WEFT_DEV_STAGE_OFF + (uint64_t)(COLL + WEFT_DEV_P2P_CHANNELS) * sl.nsrc * STAGES * CHUNK;
  const uint64_t post_off = ll_off + WEFT_DEV_LL_OFF(LLCH, 0, 0, 2);
  const size_t bytes = post_off + WEFT_DEV_LL_POST_OFF(LLCH, 0, 0, 2);
  char *region[2] = {calloc(1, bytes), calloc(1, bytes)};
  feed_t feed = {.d = data, .n = size};
  atomic_int aborted = 0;
  int32_t kabort = 0;
  uint8_t remote[2] = {0, 1};
  weft_rproxy_init_t in = {.link = {.rank = 0,
                                    .nranks = 2,
                                    .tr = &feed_tr,
                                    .tr_state = &feed,
                                    .abort_flag = &aborted,
                                    .kernel_abort = &kabort,
                                    .timeout_ms = 10000},
                           .numa = -1,
                           .slots = &sl,
                           .remote = remote,
                           .region = region,
                           .region_bytes = bytes,
                           .chunk_bytes = CHUNK,
                           .stages = STAGES,
                           .coll_channels = COLL,
                           .ll_off = ll_off,
                           .ll_post_off = post_off,
                           .ll_channels = LLCH};
  weft_rproxy_t *px = NULL;
  if (!region[0] || !region[1] || weft_rproxy_start(&in, &px) != WEFT_SUCCESS) {
    fprintf(stderr, "fuzz_rproxy: could not start the proxy: %s\n", weft_get_last_error(NULL));
    abort();
  }
  /* until the proxy failed, or read past the input's end twice (a whole pass after it) */
  while (weft_rproxy_status(px) == WEFT_SUCCESS && atomic_load(&feed.idle) < 2)
    sched_yield();
  weft_result_t rc = weft_rproxy_status(px);
  char msg[256];
  snprintf(msg, sizeof msg, "%s", rc ? weft_get_last_error(NULL) : "");
  uint64_t sent = 0, got = 0;
  weft_rproxy_counts(px, &sent, &got);
  weft_rproxy_stop(px);
  for (uint64_t off = 0; off < bytes; off++)
    if (region[0][off] && !allowed(&sl, ll_off, off)) {
      fprintf(stderr, "fuzz_rproxy: byte %llu of the region written, where rank 1 may not\n",
              (unsigned long long)off);
      abort();
    }
  free(region[0]);
  free(region[1]);
  if (rc == WEFT_SUCCESS)
    snprintf(out, len, "took %llu frames", (unsigned long long)got);
  else if (rc == WEFT_ERR_PROTOCOL && strstr(msg, "rank 1 sent a frame that does not fit"))
    snprintf(out, len, "refuse %s after %llu frames", fuzz_result_name(rc),
             (unsigned long long)got);
  else if (strstr(msg, "proxy: rank 1"))
    snprintf(out, len, "notice %s after %llu frames", fuzz_result_name(rc),
             (unsigned long long)got);
  else {
    fprintf(stderr, "fuzz_rproxy: unexpected result %d: %s\n", (int)rc, msg);
    abort();
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[512];
  fuzz_outcome(data, size, out, sizeof out);
  return 0;
}
