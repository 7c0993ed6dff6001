/* The device engine's parameters (WEFT_P2P_*, WEFT_LL*, WEFT_DIRECT_*, WEFT_CE_MIN_BYTES,
 * WEFT_ONESHOT_MAX_BYTES, WEFT_MOE_WINDOW_BYTES): read and checked once at init, the defaults
 * measured for this many ranks, the agreement every rank must reach on them, and the limits that
 * follow from the mapping (host-staged regions) and from the 128-byte kernel's fate. */
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "gpu.h"
#include "slots.h"
#include "param.h"

weft_result_t weft_dev_read_params(const struct weft_comm *c, struct weft_dev *d) {
  const char *ll128s = weft_param_get_str(WEFT_PARAM_LL128_MAX_BYTES),
             *ces = weft_param_get_str(WEFT_PARAM_CE_MIN_BYTES);
  /* past WEFT_DEV_MAX_RANKS no 128-byte kernel runs (slots.h): its limit is only checked, as
   * on 2 ranks, then turned off at setup */
  int ll_ranks = c->nranks <= WEFT_DEV_MAX_RANKS ? c->nranks : 2;
  int64_t chunk = weft_param_get_int(WEFT_PARAM_P2P_CHUNK_BYTES),
          stages = weft_param_get_int(WEFT_PARAM_P2P_STAGES),
          ch = weft_param_get_int(WEFT_PARAM_P2P_CHANNELS),
          bb = weft_param_get_int(WEFT_PARAM_P2P_BLOCK_BYTES),
          split = weft_param_get_int(WEFT_PARAM_P2P_SPLIT),
          llb = weft_param_get_int(WEFT_PARAM_LL_BLOCK_BYTES),
          rounds = weft_param_get_int(WEFT_PARAM_P2P_ROUNDS),
          oneshot = weft_param_get_int(WEFT_PARAM_ONESHOT_MAX_BYTES),
          llmax = weft_param_get_int(WEFT_PARAM_LL_MAX_BYTES),
          rooted = weft_param_get_int(WEFT_PARAM_LL_ROOTED_BYTES),
          sets = weft_param_get_int(WEFT_PARAM_P2P_SETS),
          ll128 = weft_dev_ll128_max(ll128s, ll_ranks, 0),
          ll128r = weft_dev_ll128_max(ll128s, ll_ranks, 1),
          cemin = weft_dev_ce_min(ces, c->nranks, 0),
          dmin = weft_param_get_int(WEFT_PARAM_DIRECT_MIN_BYTES),
          dch = weft_param_get_int(WEFT_PARAM_DIRECT_CHANNELS),
          dread = weft_param_get_int(WEFT_PARAM_DIRECT_READ_MAX_BYTES);
  if (chunk < 1024 || chunk > (64 << 20) || chunk % 16)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_P2P_CHUNK_BYTES=%lld: use a multiple of 16 in [1 KiB, 64 MiB]",
                          (long long)chunk);
  if (stages < 2 || stages > 16)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_STAGES=%lld: use 2-16",
                          (long long)stages);
  if (ch < 1 || ch > WEFT_DEV_COLL_CHANNELS)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_CHANNELS=%lld: use 1-%d", (long long)ch,
                          WEFT_DEV_COLL_CHANNELS);
  if (llmax < 0 || llmax > WEFT_DEV_LL_MAX_BYTES)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_LL_MAX_BYTES=%lld: use 0-%d",
                          (long long)llmax, WEFT_DEV_LL_MAX_BYTES);
  if (rooted < 0 || rooted > WEFT_DEV_LL_MAX_BYTES)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_LL_ROOTED_BYTES=%lld: use 0-%d",
                          (long long)rooted, WEFT_DEV_LL_MAX_BYTES);
  if (ll128 < 0 && weft_dev_ll128_ring(ll_ranks))
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_LL128_MAX_BYTES=%s: use auto, 0 (never) or a byte count", ll128s);
  if (ll128 < 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_LL128_MAX_BYTES=%s: use auto, 0 (never) or a byte count up to "
                          "%llu (the 128-byte kernel's buffers on %d ranks)",
                          ll128s, (unsigned long long)weft_dev_ll128_capacity(ll_ranks), c->nranks);
  if (cemin < 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_CE_MIN_BYTES=%s: use 0 (never, the default), auto or a byte count",
                          ces);
  if (dmin < 0 || dread < 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s=%lld: use 0 or a byte count",
                          dmin < 0 ? "WEFT_DIRECT_MIN_BYTES" : "WEFT_DIRECT_READ_MAX_BYTES",
                          (long long)(dmin < 0 ? dmin : dread));
  if (dch < 1 || dch > WEFT_DEV_DIRECT_CHANNELS)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_DIRECT_CHANNELS=%lld: use 1-%d",
                          (long long)dch, WEFT_DEV_DIRECT_CHANNELS);
  if (sets != 1 && sets != 2 && sets != 4 && sets != 8)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_SETS=%lld: use 1, 2, 4 or 8",
                          (long long)sets);
  if (rounds < 1 || rounds > 64)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_ROUNDS=%lld: use 1-64",
                          (long long)rounds);
  if (split != 0 && split != 1)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_P2P_SPLIT=%lld: use 0 or 1",
                          (long long)split);
  if (llb < 512 || llb > WEFT_DEV_LL_SLOT_BYTES / 2 || llb % 16)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_LL_BLOCK_BYTES=%lld: use a multiple of 16 in [512, %d]",
                          (long long)llb, WEFT_DEV_LL_SLOT_BYTES / 2);
  d->chunk_bytes = (uint32_t)chunk;
  d->stages = (uint32_t)stages;
  d->ll_block = (uint32_t)llb;
  /* One-shot moves (n-1) x the buffer into each rank in one exchange; two-shot moves
   * 2(n-1)/n x in two. On 2 ranks that is the same traffic, so one-shot wins everywhere:
   * on 2 H200s it beat two-shot from 2 MiB (20.0 vs 24.9 us) to 1 GiB (3.06 vs 3.31 ms;
   * bench/results/2026-11-30-h200x2-tuning-5.txt). On 4 H200s it won up to 1 MiB (29.5
   * against 35.6 us) and lost from 2 MiB (56.4 against 46.3; bench/results/
   * 2026-11-30-h200x4.txt); 3 ranks, where its share of the traffic is smaller, keep that
   * limit. More ranks multiply it: 256 KiB there is a guess, not a measurement. */
  d->oneshot_max = oneshot > 0      ? (uint64_t)oneshot
                   : c->nranks <= 2 ? UINT64_MAX
                   : c->nranks <= 4 ? 1 << 20
                                    : 256 * 1024;
  d->ll_max = llmax > 0 ? (uint64_t)llmax : WEFT_DEV_LL_MAX_BYTES;
  d->ll_max_set = llmax > 0;
  d->ll_rooted = (uint64_t)rooted;
  d->ll128_max[0] = (uint64_t)ll128;
  d->ll128_max[1] = (uint64_t)ll128r;
  d->ll128_fit = weft_dev_ll128_fit(c->nranks);
  d->direct_min = (uint64_t)dmin;
  d->direct_read_max = (uint64_t)dread;
  d->direct_channels = (int)dch;
  d->moe_window_bytes = (uint64_t)weft_param_get_int(WEFT_PARAM_MOE_WINDOW_BYTES);
  d->launch.rounds = (uint32_t)rounds;
  d->plan.split = (int)split;
  d->plan.rank = c->rank;
  d->plan.nranks = c->nranks;
  weft_dev_slots_make(c->rank, c->nranks, &d->plan.slots);
  d->plan.max_channels = (int)ch;
  d->plan.p2p_sets = (int)sets;
  d->plan.block_bytes = bb > 0 ? (size_t)bb : 8192;
  return WEFT_SUCCESS;
}

/* Ranks that set the device parameters differently would size their regions apart or run
 * kernels that cannot talk to each other, and hang or corrupt: every rank checks all those
 * params.def marks AGREED. The 128-byte kernel's and the copy engines' limits are compared as
 * they apply on this many ranks ("auto" and the byte count it means agree), the former for
 * copies and for reductions (one more value at the end). */
weft_result_t weft_dev_agree_params(struct weft_comm *c, const struct weft_dev *d) {
  enum { N = WEFT_PARAM_NAGREED, M = N + 1 };
  uint64_t *all = calloc((size_t)c->nranks, sizeof(uint64_t) * M), *mine;
  if (!all) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  mine = all + (size_t)c->rank * M;
  weft_param_agreed(mine, N);
  int effective[M] = {0};
  for (int i = 0; i < N; i++) {
    const weft_param_def_t *p = weft_param_agreed_def(i);
    if (p == weft_param_def(WEFT_PARAM_LL128_MAX_BYTES))
      mine[i] = d->ll128_max[0], effective[i] = 1;
    if (p == weft_param_def(WEFT_PARAM_CE_MIN_BYTES))
      mine[i] =
          (uint64_t)weft_dev_ce_min(weft_param_get_str(WEFT_PARAM_CE_MIN_BYTES), c->nranks, 0),
      effective[i] = 1;
  }
  mine[N] = d->ll128_max[1];
  effective[N] = 1;
  weft_result_t rc = weft_bootstrap_allgather(c->boot, all, sizeof(uint64_t) * M);
  int r = 0, i = rc == WEFT_SUCCESS ? weft_param_differ(all, c->nranks, M, &r) : -1;
  const weft_param_def_t *p = i < 0    ? NULL
                              : i == N ? weft_param_def(WEFT_PARAM_LL128_MAX_BYTES)
                                       : weft_param_agreed_def(i);
  if (p && (p->kind == WEFT_PARAM_KIND_INT || effective[i]))
    rc = weft_set_error(WEFT_ERR_INVALID_ARG,
                        "weft_comm_init: %s differs between ranks (rank 0 read %lld, rank %d "
                        "%lld): set it alike on every rank of a device communicator",
                        p->name, (long long)all[i], r, (long long)all[(size_t)r * M + i]);
  else if (p)
    rc = weft_set_error(WEFT_ERR_INVALID_ARG,
                        "weft_comm_init: %s differs between ranks (rank 0 and rank %d read "
                        "different values; here \"%s\"): set it alike on every rank of a device "
                        "communicator",
                        p->name, r,
                        getenv(p->name) && getenv(p->name)[0] ? getenv(p->name) : p->dflt);
  free(all);
  return rc;
}

/* Host-staged regions live in /dev/shm and carry PCIe's bandwidth, not NVLink's. On 2 H200s
 * (bench/results/2026-11-30-h200x2-tuning-9.txt) 16 channels of 64 KiB chunks beat 4 and 8
 * channels and 128 KiB from 4 MiB up (allreduce 64 MiB: 2.10 ms against 2.54 with 8 x 128
 * KiB), and the low-latency kernel, which doubles the bytes crossing PCIe, won only up to
 * 256 KiB per peer (allreduce 1 MiB: 57.8 us against 77.9). Each rank's segment holds
 * about 10 MiB per peer. */
enum { HOST_CHANNELS = 16, HOST_CHUNK_BYTES = 64 * 1024, HOST_LL_MAX_BYTES = 256 * 1024 };
void weft_dev_host_sizing(struct weft_dev *d) {
  if (d->plan.max_channels > HOST_CHANNELS) d->plan.max_channels = HOST_CHANNELS;
  if (d->chunk_bytes > HOST_CHUNK_BYTES) d->chunk_bytes = HOST_CHUNK_BYTES;
  if (!d->ll_max_set && d->ll_max > HOST_LL_MAX_BYTES) d->ll_max = HOST_LL_MAX_BYTES;
  d->ll128_max[0] = d->ll128_max[1] = 0; /* host memory over PCIe may split a 128-byte store */
}

/* Across hosts every chunk crosses PCIe into host memory, then the network, as one frame of the
 * proxy's: WEFT_PROXY_* size the slots (chunk, channels, stages) for that path. The small
 * low-latency kernel runs up to WEFT_PROXY_LL_BYTES per peer (8 KiB: on one H200 as 2 fake
 * hosts it took 2 ranks' allreduce of 8 B from 24 us to 16, equal at 8 KiB, slower at 32
 * KiB) on at most NET_LL_CHANNELS blocks, each block's lines one frame of the proxy's (a
 * count it posts beside them says when); the 128-byte one stays off (no proxy follows its
 * flags). Defaults from one H100 split into 2 fake hosts (device run 13): 256 KiB chunks, 8
 * stages and 4 threads took allreduce of 256 MiB from 52.2 ms (64 KiB, 2, 2) to 20.9, and
 * alltoall from 25.4 to 11.3; 4 stages alone did little (59.2 ms), 256 KiB with them 33.7. */
enum { NET_LL_CHANNELS = 4 };
weft_result_t weft_dev_net_sizing(struct weft_dev *d) {
  int64_t chunk = weft_param_get_int(WEFT_PARAM_PROXY_CHUNK_BYTES),
          ch = weft_param_get_int(WEFT_PARAM_PROXY_CHANNELS),
          stages = weft_param_get_int(WEFT_PARAM_PROXY_STAGES);
  if (chunk % 16)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "WEFT_PROXY_CHUNK_BYTES=%lld: use a multiple of 16 in [4 KiB, 4 MiB]",
                          (long long)chunk);
  d->chunk_bytes = (uint32_t)chunk;
  if (d->plan.max_channels > (int)ch) d->plan.max_channels = (int)ch; /* a GPU's share first */
  d->stages = (uint32_t)(stages < WEFT_DEV_SIZE_WORDS ? stages : WEFT_DEV_SIZE_WORDS);
  d->net = 1;
  d->ll128_max[0] = d->ll128_max[1] = 0;
  d->ll_max = (uint64_t)weft_param_get_int(WEFT_PARAM_PROXY_LL_BYTES), d->ll_max_set = 1;
  if (d->ll_channels > NET_LL_CHANNELS) d->ll_channels = NET_LL_CHANNELS;
  return WEFT_SUCCESS;
}

void weft_dev_ll_off(struct weft_dev *d) {
  d->ll_max = 0, d->ll_max_set = 1;
  d->ll128_max[0] = d->ll128_max[1] = 0;
}

/* The low-latency kernel's limits per peer, for copies and for reductions, fixed once the
 * 128-byte kernel's fate is known (not per call: queueing is what small operations cost).
 * The general kernel's fixed cost (a fence and two flag hops, 7 us as graph replays on 2
 * H200s, against 2.7; *-tuning-6.txt) outweighs sending every 8 bytes as 16 up to there.
 * Reductions use its whole 2 MiB per peer (allreduce of 2 MiB: 17.1 against 20.4 us); copies
 * stop at 1 MiB, past which they gained nothing or lost (alltoall of 4 MiB: 17.4 against 16.8
 * us; *-tuning-11.txt). Where the 128-byte kernel runs (NVLink between every pair), it takes
 * over from 256 KiB per peer: it drew there and won above (allreduce of 512 KiB 6.4 against
 * 7.6 us, of 2 MiB 12.8 against 17.2; alltoall of 2 MiB 9.3 against 11.3; *-tuning-18.txt).
 * WEFT_LL_MAX_BYTES sets one limit for the small kernel's every collective. */
enum { LL_COPY_MAX_BYTES = 1 << 20, LL_UNDER_LL128_BYTES = 256 << 10 };
void weft_dev_ll_limits(struct weft_dev *d) {
  /* a block carries at most half its slot: fewer blocks (a shared GPU's budget), fewer bytes */
  uint64_t fits = (uint64_t)d->ll_channels * (WEFT_DEV_LL_SLOT_BYTES / 2);
  for (int reduces = 0; reduces < 2; reduces++) {
    d->ll_lim[reduces] = d->ll_max_set                                   ? d->ll_max
                         : d->ll128_max[reduces] >= LL_UNDER_LL128_BYTES ? LL_UNDER_LL128_BYTES
                         : reduces || d->ll_max < LL_COPY_MAX_BYTES      ? d->ll_max
                                                                         : LL_COPY_MAX_BYTES;
    if (d->ll_lim[reduces] > fits) d->ll_lim[reduces] = fits;
  }
}
