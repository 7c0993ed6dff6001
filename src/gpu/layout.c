/* The device engine's memory layout: each rank's staging region (flags, staging slots, the
 * low-latency kernels' buffers) that every peer maps, and the rank's private counters; and
 * the pointers into them that every launch passes. */
#include <stdlib.h>
#include <unistd.h>

#include "err.h"
#include "gpu.h"
#include "pinned.h"

/* Channel counters, the low-latency kernels' sequence numbers, a few bytes for weft_barrier's
 * one-byte allreduce, the in-place rounds' progress, then the direct operations' counts. */
#define COUNTER_BYTES (sizeof(uint64_t) * WEFT_DEV_MAX_CHANNELS * WEFT_DEV_MAX_RANKS * 2)
#define LLSEQ_OFF     COUNTER_BYTES
#define LL128SEQ_OFF  (LLSEQ_OFF + sizeof(uint64_t) * WEFT_DEV_LL_CHANNELS)
#define SCRATCH_OFF   (LL128SEQ_OFF + sizeof(uint64_t) * WEFT_DEV_LL128_CHANNELS)
#define PROGRESS_OFF  (SCRATCH_OFF + 256)
#define DSEQ_OFF      (PROGRESS_OFF + WEFT_DEV_COLL_CHANNELS * WEFT_DEV_FLAG_STRIDE)
#define PRIVATE_BYTES (DSEQ_OFF + WEFT_DEV_DIRECT_CHANNELS * WEFT_DEV_FLAG_STRIDE)

/* flags, staging slots (one per sending peer: weft_dev_slots_t.nsrc), the low-latency
 * buffers, then the 128-byte kernel's (where it runs) */
static size_t ll_offset(const struct weft_dev *d) {
  size_t chans = (size_t)d->plan.max_channels + WEFT_DEV_P2P_CHANNELS;
  return WEFT_DEV_STAGE_OFF + chans * (size_t)d->plan.slots.nsrc * d->stages * d->chunk_bytes;
}
/* lines on 128-byte boundaries, whatever chunk size the staging slots have: a line must be
 * one store to land whole */
static size_t ll128_offset(const struct weft_dev *d, int nranks) {
  size_t end = ll_offset(d) + WEFT_DEV_LL_OFF(WEFT_DEV_LL_CHANNELS, 0, 0, nranks > 1 ? nranks : 2);
  return (end + WEFT_DEV_LL128_LINE_BYTES - 1) / WEFT_DEV_LL128_LINE_BYTES *
         WEFT_DEV_LL128_LINE_BYTES;
}
/* Across hosts the small kernel runs on its ll_channels blocks alone (agreed), whose buffers
 * are all there is of it; its posted counts (WEFT_DEV_LL_POST_OFF) follow them, and the
 * 128-byte kernel's buffers never exist. */
static size_t ll_post_offset(const struct weft_dev *d, int nranks) {
  size_t end = ll_offset(d) + WEFT_DEV_LL_OFF(d->ll_channels, 0, 0, nranks > 1 ? nranks : 2);
  return (end + WEFT_DEV_FLAG_STRIDE - 1) / WEFT_DEV_FLAG_STRIDE * WEFT_DEV_FLAG_STRIDE;
}
/* with_ll128: the 128-byte kernel's buffers too */
size_t weft_dev_region_bytes(const struct weft_dev *d, int nranks, int with_ll128) {
  /* no low-latency kernel (past 8 ranks): their buffers would only take memory */
  if (!d->ll_max && !with_ll128) return ll_offset(d);
  if (d->net)
    return ll_post_offset(d, nranks) +
           WEFT_DEV_LL_POST_OFF(d->ll_channels, 0, 0, nranks > 1 ? nranks : 2);
  return ll128_offset(d, nranks) + (with_ll128 ? weft_dev_ll128_bytes(nranks) : 0);
}

size_t weft_dev_private_bytes(void) { return PRIVATE_BYTES; }

weft_result_t weft_dev_pin(const struct weft_comm *c, struct weft_dev *d) {
  const weft_dev_slots_t *sl = &d->plan.slots;
  const weft_dev_geometry_t g = {.coll_channels = d->plan.max_channels,
                                 .nsrc = sl->nsrc,
                                 .stages = d->stages,
                                 .chunk_bytes = d->chunk_bytes,
                                 .ll_off = ll_offset(d),
                                 .end = weft_dev_region_bytes(d, c->nranks, 0)};
  const int per = 2 + WEFT_DEV_MAX_CHANNELS * sl->nslots;
  uint8_t remote[WEFT_DEV_MAX_RANKS] = {0};
  const weft_span_t *spans[WEFT_DEV_MAX_RANKS] = {0};
  int nspans[WEFT_DEV_MAX_RANKS] = {0};
  weft_span_t *buf = malloc(sizeof *buf * (size_t)per * (size_t)sl->nslots);
  if (!buf) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  for (int s = 0; s < sl->nslots; s++) {
    remote[s] = (uint8_t)weft_regions_remote(d->regions, s);
    spans[s] = buf + (size_t)s * (size_t)per;
  }
  weft_result_t rc =
      weft_dev_pinned_slots(&g, sl, remote, (uint64_t)sysconf(_SC_PAGESIZE), buf, per, nspans)
          ? weft_set_error(WEFT_ERR_INTERNAL, "weft_comm_init: more pinned runs than %d", per)
          : weft_regions_pin(d->regions, spans, nspans);
  free(buf);
  return rc;
}

void *weft_dev_scratch(struct weft_comm *c) { return (char *)dev_of(c)->counters + SCRATCH_OFF; }

void weft_dev_fill_launch(const struct weft_comm *c, struct weft_dev *d) {
  weft_dev_launch_t *L = &d->launch;
  weft_dev_ll_t *P = &d->ll;
  for (int s = 0; s < d->plan.slots.nslots; s++) {
    L->region[s] = P->region[s] = weft_regions_region(d->regions, s);
    L->inbox[s] = weft_regions_inbox(d->regions, s);
  }
  L->slots = d->plan.slots;
  L->counters = d->counters;
  L->progress = (uint64_t *)((char *)d->counters + PROGRESS_OFF);
  L->dseq = (uint64_t *)((char *)d->counters + DSEQ_OFF);
  L->abort_flag = P->abort_flag = d->abort_d;
  L->error = P->error = d->err_d;
  L->waiting = P->waiting = d->err_d + 1;
  /* a report due at or past the timeout would never come (and its ns could overflow) */
  int64_t report_ms = weft_log_wait_report_ms();
  if (report_ms >= c->timeout_ms) report_ms = 0;
  L->report_ns = P->report_ns = (uint64_t)report_ms * 1000000ull;
  L->rank = P->rank = c->rank;
  L->nranks = P->nranks = c->nranks;
  L->timeout_ns = P->timeout_ns = (uint64_t)c->timeout_ms * 1000000ull;
  L->chunk_bytes = d->chunk_bytes;
  L->stages = d->stages;
  L->coll_channels = d->plan.max_channels;
  P->seq = (uint64_t *)((char *)d->counters + LLSEQ_OFF);
  P->seq128 = (uint64_t *)((char *)d->counters + LL128SEQ_OFF);
  P->ll_off = ll_offset(d);
  P->ll128_off = ll128_offset(d, c->nranks);
  P->ll128_lines = weft_dev_ll128_lines(c->nranks);
  /* the small kernel across hosts reads each rank's lines from its inbox, and posts its own
   * for the proxy of each remote rank */
  P->remote = 0, P->post_off = 0;
  for (int s = 0; s < d->plan.slots.nslots; s++) {
    P->inbox[s] = L->inbox[s];
    if (d->net && d->ll_max && weft_regions_remote(d->regions, s)) P->remote |= 1u << s;
  }
  if (P->remote) P->post_off = ll_post_offset(d, c->nranks);
}
