/* Which stretches of a staging region a rank uses across hosts, so that the proxy pins those
 * alone (weft_regions_pin), not whole regions: in a remote rank's mirror what this rank's
 * kernels write there, in its own inbox what the remote ranks write. Pure, unit-tested. */
#ifndef WEFT_GPU_PINNED_H
#define WEFT_GPU_PINNED_H

#include <stdint.h>

#include "dev.h"
#include "regions.h"

/* A region's layout (layout.c, dev.h): the flags, then staging per channel and sender, then
 * the low-latency buffers to the end. */
typedef struct {
  int coll_channels; /* collective channels in use; the send/recv ones follow them */
  int nsrc;          /* staging slots per channel: one per sending peer */
  uint32_t stages, chunk_bytes;
  uint64_t ll_off, end; /* where the low-latency buffers start and the layout ends */
} weft_dev_geometry_t;

/* The spans of a region that the senders at staging indices idx[0..n) write (all the flags,
 * their staging on every channel, the low-latency buffers), widened to pages (page: a power
 * of two), sorted and merged into out[]. Returns their count, or -1 where they would be more
 * than max. */
int weft_dev_pinned_spans(const weft_dev_geometry_t *g, const uint8_t *idx, int n, uint64_t page,
                          weft_span_t *out, int max);

/* Per slot of a rank's table sl: the runs of the mirror of each slot on another host
 * (remote[s]), what this rank's kernels write there (its stage_out), and of the inbox at
 * sl->self, what every remote slot writes (their stage_in); n[s] 0 elsewhere, and for the
 * inbox where no slot is remote. out holds per spans a slot. Returns 0, or -1 where per is
 * too small. */
int weft_dev_pinned_slots(const weft_dev_geometry_t *g, const weft_dev_slots_t *sl,
                          const uint8_t *remote, uint64_t page, weft_span_t *out, int per, int *n);

#endif
