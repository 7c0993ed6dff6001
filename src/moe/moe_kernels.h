/* What the MoE device code (device.c, device_layout.c) and its kernels (kernels.cu,
 * route.cu) share: the launchers (each returns a cudaError_t as int) and their constants.
 * Plain C, included by .c and .cu files. */
#ifndef WEFT_MOE_KERNELS_H
#define WEFT_MOE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "dev.h"

#define WEFT_MOE_K_NO_ROW   UINT64_MAX
#define WEFT_MOE_K_MAX_TOPK 32 /* WEFT_MOE_MAX_TOPK; width <= topk */
enum { WEFT_MOE_K_F32, WEFT_MOE_K_F16, WEFT_MOE_K_BF16 };

#ifdef __cplusplus
extern "C" {
#endif

/* A layout's send side on the GPU (route.cu): ids [tokens][k] of id_bytes (4 or 8) in,
 * every array below out. Tokens go in tiles of WEFT_MOE_K_TILE, a bit each in a mask per
 * bin (an expert, or a destination rank), so a token's place in a bin's list is the bits
 * below its own plus the earlier tiles' counts: no per-bin pass over all the ids. */
#define WEFT_MOE_K_TILE    64
#define WEFT_MOE_K_META(k) ((uint64_t)(k) + 1) /* int2 of meta an entry: k choices, its token */
typedef struct {
  const void *ids;
  int id_bytes, k, experts, nranks, local, width; /* width: min(k, nranks) */
  uint64_t tokens;
  unsigned long long *bad; /* the lowest t * k + j whose id breaks the rules; all ones if none */
  int64_t *counts;         /* [experts + nranks] choices of each expert, tokens for each rank */
  int32_t *pos;            /* [tokens][nranks] the token's index among those for rank r, or -1 */
  uint64_t *send_off;      /* [nranks + 1] first entry of each rank's list */
  uint64_t *send_list;     /* [entries] the token of each entry */
  uint64_t *entries;       /* [tokens][width] a token's entries in rank order, NO_ROW after */
  int32_t *meta;        /* [entries][WEFT_MOE_K_META(k)][2] per choice: local expert there (or -1),
                           index; then (the entry's token, 0) */
  int64_t *host_counts; /* NULL, or host-mapped [experts + nranks + 1]: counts, then bad */
  /* scratch (weft_moe_k_route_scratch gives the bytes) */
  unsigned long long *mask; /* [tiles][experts + nranks] the tile's tokens in the bin, then
                               [tiles] the tile's lowest bad choice */
  uint32_t *before; /* [tiles][experts + nranks] the tile's count in the bin, then the earlier
                       tiles' sum */
} weft_moe_k_route_t;

/* The bytes of route's scratch (mask, then before) for `tokens`; 0 if they overflow. */
static inline int weft_moe_k_route_scratch(uint64_t tokens, int experts, int nranks,
                                           size_t *mask_bytes, size_t *before_bytes) {
  uint64_t tiles = tokens / WEFT_MOE_K_TILE + (tokens % WEFT_MOE_K_TILE != 0);
  uint64_t bins = (uint64_t)experts + (uint64_t)nranks;
  if (tiles > SIZE_MAX / 8 / (bins + 1)) return 0;
  *mask_bytes = (size_t)(tiles * (bins + 1) * 8), *before_bytes = (size_t)(tiles * bins * 4);
  return 1;
}

int weft_moe_k_route(const weft_moe_k_route_t *a, void *stream);
/* ... in two halves: the counts and *bad (and host_counts), then the rest, so that the host
 * can wait for the counts alone. */
int weft_moe_k_route_counts(const weft_moe_k_route_t *a, void *stream);
int weft_moe_k_route_place(const weft_moe_k_route_t *a, void *stream);
/* row_of[c] = base[s][l] + index for received choice c = (l, index) of meta from source s
 * (recv_off gives each source's entries), NO_ROW where l is -1, and tok_of[entry] = its
 * token at the source; the received entries in [own_lo, own_hi), this rank's own, read theirs
 * from own_meta instead. */
typedef struct {
  const int32_t *meta, *own_meta; /* [entries][WEFT_MOE_K_META(k)][2] */
  uint64_t own_lo, own_hi, choices;
  int k, nranks, local;
  const uint64_t *recv_off, *base;
  uint64_t *row_of;
  uint32_t *tok_of; /* [entries] */
} weft_moe_k_rows_t;
int weft_moe_k_rows(const weft_moe_k_rows_t *a, void *stream);

/* The entries a rank sends itself, received as entries [lo, hi): they skip the staging and
 * the alltoallv. Dispatch reads them from the tokens x (list: their tokens, w: the weights,
 * may be NULL); combine writes their partials to out. */
typedef struct {
  uint64_t lo, hi;
  const void *x;
  const uint64_t *list;
  const float *w;
  void *out;
} weft_moe_k_self_t;

/* out[e] = x[list[e]] (rows of `row` bytes) and wout[e][j] = w[list[e]][j] (1 if w NULL), for
 * the entries outside [lo, hi). */
int weft_moe_k_gather(const void *x, const uint64_t *list, uint64_t n, uint64_t lo, uint64_t hi,
                      size_t row, void *out, const float *w, float *wout, int k, void *stream);
/* Received entry i into each row row_of[i][j] (with its weight when wout), the own entries
 * from their tokens, and the padding rows `pad` zeroed (weight 0). */
int weft_moe_k_scatter(const void *in, const float *win, const uint64_t *row_of, uint64_t n, int k,
                       size_t row, void *out, float *wout, const uint64_t *pad, uint64_t npad,
                       weft_moe_k_self_t own, void *stream);
/* out[i] = sum_j w[r] * rows[r], r = row_of[i][j] (w NULL: 1), accumulated in f32; the own
 * entries' sums into own.out instead. */
int weft_moe_k_partials(int dtype, const void *rows, const float *w, const uint64_t *row_of,
                        uint64_t n, int k, size_t hidden, void *out, weft_moe_k_self_t own,
                        void *stream);
/* y[t] = sum of back[e] over t's entries (width each, NO_ROW-terminated), in f32. */
int weft_moe_k_home(int dtype, const void *back, const uint64_t *entries, int width,
                    uint64_t tokens, size_t hidden, void *y, void *stream);

/* fp8 dispatch on the normal path (fp8.cu): the n sent entries' tokens quantized into out,
 * `wire` bytes an entry (its scales, then its e4m3 bytes), with their weights into wout; the
 * received entries' bytes and scales into each row of row_of (out: hidden bytes a row,
 * out_s: WEFT_MOE_FP8_BLOCKS(hidden) a row), and the padding rows zeroed. */
int weft_moe_k_gather_fp8(int dtype, const void *x, const uint64_t *list, uint64_t n,
                          uint64_t hidden, uint64_t wire, void *out, const float *w, float *wout,
                          int k, void *stream);
int weft_moe_k_scatter_fp8(const void *in, const float *win, const uint64_t *row_of, uint64_t n,
                           int k, uint64_t hidden, uint64_t wire, uint8_t *out, float *out_s,
                           float *wout, const uint64_t *pad, uint64_t npad, void *stream);

/* ---- low-latency mode on windows (ll.cu, driven by ll.c) ----
 * Each rank's window, mapped by every peer, holds at these offsets: a dispatch record from
 * every source (a rec_t, then its count for each of our local experts), a combine record
 * from every source, the acks every peer gives back for our writes into it (dispatch, then
 * combine: the last round it read), and the staging the peers write into: dispatch slots
 * [source][max_tokens] (a header of k choices, then the token) and combine rows
 * [source][max_tokens]. A record's round is stored last, with release. */
typedef struct {
  uint64_t round;
  int32_t code, ntok; /* a refusal (the caller's MOE_* code) or 0; tokens sent here */
  int64_t a, b, c;    /* what a refusal's message names */
  int32_t fp8, pad_;  /* dispatch: the rows travel in fp8 (every rank must agree) */
} weft_moe_k_rec_t;

typedef struct weft_moe_k_geom_s {
  uint64_t dsig, csig, dack, cack, dstage, cstage, total; /* offsets in a window, its size */
  uint64_t sig_bytes; /* stride of the dispatch records (rec_t and int32 counts) */
  uint64_t hdr_bytes; /* a slot's header: k x (int32 local expert or -1, int32 index, f32 weight) */
  uint64_t row_bytes; /* hidden x element size */
  uint64_t row_pad;   /* ... rounded up to 16 */
  uint64_t slot_bytes; /* hdr_bytes + row_pad */
} weft_moe_k_geom_t;
#define WEFT_MOE_K_FLAG_STRIDE 64 /* combine records and acks: one per cache line */

/* A handle's state on the GPU, written by the kernels alone (so that graphs replay it). */
typedef struct {
  uint64_t round;   /* its last dispatch's round */
  uint64_t cround;  /* its last combine's round, 0 when that combine was skipped */
  int32_t refused;  /* the last dispatch: 1 a rank refused it (nothing written), 2 a wait failed */
  int32_t cfailed;  /* the last combine's wait failed */
  uint32_t ticket;  /* blocks done in the running kernel; the last one posts */
  int32_t own_code; /* this rank's layout: a bad id (MOE code) found on the GPU, or 0 */
  int64_t own_a, own_b, own_c;
  int32_t ntok_from[WEFT_DEV_MAX_RANKS]; /* tokens each source sent in the last dispatch */
} weft_moe_k_llh_t;

/* Rounds so far, every rank counting the same calls. */
typedef struct {
  uint64_t round, cround;
} weft_moe_k_llstate_t;

/* A handle slot's outcome, in host-mapped memory: the last call's refusal (lowest refusing
 * rank) or failure, read by weft_moe_finish. phase: 1 dispatch, 2 combine. */
typedef struct {
  int64_t code, rank, a, b, c, phase;
} weft_moe_k_status_t;

typedef struct {
  char *win[WEFT_DEV_MAX_RANKS]; /* every rank's window as mapped here */
  weft_moe_k_geom_t g;
  int32_t rank, nranks, local, k, experts, dtype; /* dtype: WEFT_MOE_K_* */
  uint64_t bound;                                 /* max_tokens */
  uint64_t hidden, tokens;
  weft_moe_k_llstate_t *state;
  weft_moe_k_llh_t *h;
  weft_moe_k_status_t *status; /* host-mapped */
  int32_t failed_code;         /* MOE_FAILED, for a wait that ran out */
  int32_t fp8_code;            /* MOE_FP8_MISMATCH, for ranks that disagree on fp8 */
  /* the slot's layout (route.cu) and receive side */
  const int64_t *counts;
  const int32_t *pos, *meta;
  const uint64_t *send_off, *send_list;
  int64_t *row_of;     /* [nranks][bound][k] row of each received choice, -1 if none */
  int64_t *counts_out; /* [local] rows of each local expert in the last dispatch */
  /* the call */
  const void *in;    /* dispatch: x; combine: rows */
  const float *in_w; /* topk_weights, row_weights */
  void *out;         /* recv_x (fp8: e4m3 rows of hidden bytes), y */
  float *out_w;      /* recv_weights */
  float *out_s;      /* fp8 dispatch: the rows' scales (WEFT_MOE_FP8_BLOCKS(hidden) a row) */
  int32_t fp8;       /* dispatch: quantize each token (fp8.cuh) and deliver e4m3 rows */
  int32_t code;      /* this rank refuses the call (a MOE code), else 0 */
  int64_t a, b, c;
  volatile int32_t *abort_flag;
  weft_dev_error_t *error, *waiting; /* as weft_dev_view_t's */
  uint64_t timeout_ns, report_ns;
} weft_moe_k_ll_t;

/* After a layout's route: the handle's own verdict from route's bad choice (bad_code for an
 * id out of range, repeated_code for one repeated). */
int weft_moe_k_ll_stamp(weft_moe_k_llh_t *h, weft_moe_k_status_t *status,
                        const unsigned long long *bad, const void *ids, int id_bytes, int k,
                        int experts, int bad_code, int repeated_code, void *stream);
/* The four kernels of each phase: wait for the acks of the last round, write into the peers
 * and post the records, wait for every source's record, read (and ack). */
int weft_moe_k_ll_dispatch(const weft_moe_k_ll_t *a, void *stream);
int weft_moe_k_ll_combine(const weft_moe_k_ll_t *a, void *stream);

/* ---- normal mode's direct path on windows (direct.cu, driven by direct.c) ----
 * The layer's window has the low-latency layout (weft_moe_k_geom_t, bound = chunk): records,
 * acks, dispatch slots [source][chunk] (the token's k weights, then its row) and combine rows
 * [expert rank][chunk]. A call moves its tokens in rounds: round i carries every source's
 * tokens [i * chunk, (i + 1) * chunk), each into slot [source][token - i * chunk] of every
 * rank it goes to; combine takes each partial back into slot [expert rank][token - i * chunk]
 * of its home, so that a token's partials all arrive in one round and are summed at once.
 * A rank's own entries never pass through a window: dispatch writes their rows from x, and
 * the home sums their rows itself. */
typedef struct {
  uint64_t round, cround; /* rounds so far, every rank counting alike */
  uint32_t ticket;        /* blocks done in the running kernel; the last one posts */
  int32_t failed;         /* a wait of the running call failed: the rest of it does nothing */
  uint64_t lo[WEFT_DEV_MAX_RANKS], hi[WEFT_DEV_MAX_RANKS]; /* this round's entries of each source */
} weft_moe_k_dstate_t;

typedef struct {
  char *win[WEFT_DEV_MAX_RANKS]; /* every rank's window as mapped here */
  weft_moe_k_geom_t g;
  int32_t rank, nranks, k, dtype;      /* dtype: WEFT_MOE_K_* */
  uint64_t chunk;                      /* tokens of a source a round */
  uint64_t hidden, tokens, max_tokens; /* tokens: this rank's; max_tokens: any rank's most */
  weft_moe_k_dstate_t *state;
  /* the handle's plan (device_layout.c) */
  const int32_t *pos;       /* [tokens][nranks] */
  const uint64_t *recv_off; /* [nranks + 1] */
  const uint64_t *row_of;   /* [entries received][k] */
  const uint32_t *tok_of;   /* [entries received] */
  /* the call */
  const void *in;    /* dispatch: x; combine: rows */
  const float *in_w; /* topk_weights, row_weights (may be NULL) */
  void *out;         /* recv_x (fp8: e4m3 rows of hidden bytes), y */
  float *out_w;      /* recv_weights (may be NULL) */
  float *out_s;      /* fp8 dispatch: the rows' scales (WEFT_MOE_FP8_BLOCKS(hidden) a row) */
  int32_t fp8;       /* dispatch: each token quantized once, its scales then bytes in a slot */
  volatile int32_t *abort_flag;
  weft_dev_error_t *error, *waiting; /* as weft_dev_view_t's */
  uint64_t timeout_ns, report_ns;
} weft_moe_k_direct_t;

/* Every round's kernels of a dispatch or a combine (ceil(max_tokens / chunk) rounds). */
int weft_moe_k_direct_dispatch(const weft_moe_k_direct_t *a, void *stream);
int weft_moe_k_direct_combine(const weft_moe_k_direct_t *a, void *stream);

#ifdef __cplusplus
}
#endif

#endif
