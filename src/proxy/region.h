/* The region proxy: how a device communicator's kernels reach ranks on other hosts today.
 * The kernels keep their one protocol (dev.h): a sender writes a chunk into a slot of the
 * receiver's region, then raises ready[ch][sender] there; the receiver raises done[ch][it] in
 * the sender's region once the slot is free again. For a rank on another host, the region the
 * kernels write into is a mirror in this host's memory; the proxy thread follows the flags
 * this rank's kernels raise in each mirror and carries them, each chunk before its flag, to
 * the proxy of that rank, which writes them into its own rank's region. The ready/done pair
 * is a FIFO per channel and peer in the kernels' layout: ready the head, done the tail that
 * credits a slot back, each chunk's length beside the head (WEFT_DEV_SIZE_OFF). No host step
 * runs per operation, so CUDA graphs replay as they are. */
#ifndef WEFT_PROXY_REGION_H
#define WEFT_PROXY_REGION_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dev.h"
#include "pump.h"

enum { WEFT_RPROXY_MAX_LINKS = 8 };

typedef struct {
  weft_proxy_link_t link; /* pump.h: the transport to the remote ranks, set up */
  /* nlinks > 1: that many worker threads, worker w on connections tr_states[w] of link.tr
   * (each set up alike on every rank; link.tr_state is then unused), the channels dealt to
   * them in turn; else one thread on link.tr_state */
  int nlinks;
  void *const *tr_states;
  int numa; /* >= 0: the workers run on this NUMA node's CPUs (the GPU's); -1: anywhere (0 is
               node 0: set it) */
  /* the peers the kernels reach, by slot (dev.h); the arrays below are indexed by slot */
  const weft_dev_slots_t *slots;
  const uint8_t *remote; /* 1 where the slot's rank is on another host */
  char *const *region;   /* host addresses: this rank's region, the remote ranks' mirrors */
  size_t region_bytes;
  uint32_t chunk_bytes, stages;
  int coll_channels; /* collective channels with staging (the send/recv sets follow them) */
  /* The small low-latency kernel (dev.h's weft_dev_ll_t; every rank in the slot of its number):
   * where its buffers and its posted counts start in a region, and the channels it runs on.
   * ll_post_off 0: it does not run across hosts. A block's lines go as one frame once its
   * count is posted, and land in the receiver's region 8 bytes at a time (each 8 bytes carry
   * their own flag, so they need no order, only whole words). */
  uint64_t ll_off, ll_post_off;
  int ll_channels;
  /* NULL, or an eventfd per worker (kick_fds[w], -1: none) in that worker's transport waits
   * (its wake_fd), written by weft_rproxy_kick while the worker naps; without one, kicks keep
   * the workers polling, but none is woken mid-nap. One each: a nap's end empties its own. */
  const int *kick_fds;
} weft_rproxy_init_t;

typedef struct weft_rproxy weft_rproxy_t;

/* Starts the thread (local: the peers' proxies need not run yet); in and its arrays are
 * copied. WEFT_ERR_INVALID_ARG when the layout does not fit region_bytes. */
weft_result_t weft_rproxy_start(const weft_rproxy_init_t *in, weft_rproxy_t **out);
/* WEFT_SUCCESS while it runs; else its failure (the message as the thread's error). */
weft_result_t weft_rproxy_status(weft_rproxy_t *p);
/* Work is coming: call it as an operation is queued for the kernels. Workers poll on for
 * WEFT_PROXY_SPIN_US, and those napping are woken (one eventfd write, only then), so that
 * the first chunk after a quiet spell does not wait out a nap. Any thread; NULL: nothing. */
void weft_rproxy_kick(weft_rproxy_t *p);
/* Keeps every worker polling, never napping, until the token returned is released
 * (weft_rproxy_release): for a CUDA graph holding work that the proxy carries, whose replays
 * queue nothing on the host to kick it. The token outlives the proxy (a graph may), so it
 * may be released from any thread, before or after weft_rproxy_stop. NULL for p NULL (and
 * releasing NULL does nothing). */
void *weft_rproxy_hold(weft_rproxy_t *p);
void weft_rproxy_release(void *token);
/* Frames (chunks and credits) sent and received so far (either may be NULL). */
void weft_rproxy_counts(weft_rproxy_t *p, uint64_t *sent, uint64_t *received);
/* Its workers' passes, naps and pauses so far (pump.h's weft_proxy_stats_t), summed, with the
 * longest gap of any; zeros for NULL. */
weft_proxy_stats_t weft_rproxy_stats(weft_rproxy_t *p);
/* Stops and frees (NULL: nothing); call it once this rank's kernels are done. */
void weft_rproxy_stop(weft_rproxy_t *p);

#endif
