/* MoE internals: the layer (weft_moe), one batch's plan (who sends which token where, which
 * row each received choice lands in) and handle. layout.c computes plans (pure functions),
 * moe.c runs the API and the ranks' agreement, exchange.c tells each rank what it receives,
 * host.c and device.c move the data of host and device buffers. */
#ifndef WEFT_MOE_INTERNAL_H
#define WEFT_MOE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "moe_kernels.h"
#include "weft_moe.h"

#define WEFT_MOE_NO_ROW SIZE_MAX

struct weft_moe {
  weft_comm_t comm;
  int rank, nranks, local; /* local: experts per rank */
  int device;              /* a device communicator: buffers on its GPU (device.c) */
  weft_moe_config_t cfg;
  int handles;                       /* live handles (destroy refuses while any is) */
  struct weft_moe_verdict *verdicts; /* [nranks] weft_moe_agree's scratch */
  int64_t *routes;        /* device layouts' scratch: [nranks][moe_route_stride], host-mapped */
  void *pool;             /* device layers: the CUDA memory pool their staging comes from */
  struct weft_moe_ll *ll; /* low-latency mode on windows (ll.c), else NULL */
  /* normal mode's direct path (direct.c): the communicator's window, or NULL; where this
   * layer's rounds keep what in it, and how many tokens a round */
  struct weft_moe_window *direct;
  weft_moe_k_geom_t direct_g;
  uint64_t direct_chunk;
};
/* A rank's record in a device layout's exchange: its verdict (4 values), its counts of
 * choices per expert and tokens per rank, the lowest bad choice the GPU found, then its
 * tokens. */
#define MOE_ROUTE_HEAD                    4
#define MOE_ROUTE_TOKENS(experts, nranks) ((size_t)MOE_ROUTE_HEAD + (experts) + (nranks) + 1)
static inline size_t moe_route_stride(int experts, int nranks) {
  return MOE_ROUTE_TOKENS((size_t)experts, (size_t)nranks) + 1;
}

/* A token's ids that break the rules, found by weft_moe_plan_send. */
typedef struct {
  int64_t token, slot, id; /* id: the offending value */
  int repeated;            /* 1: the id appeared earlier in the token's row */
} weft_moe_bad_t;

typedef struct {
  int nranks, local, k;
  size_t tokens;
  /* send side: entries grouped by destination rank, in token order within */
  size_t *send_tok;  /* [nranks] tokens sent to each rank */
  size_t *send_off;  /* [nranks + 1] first entry of each rank */
  size_t *send_list; /* [entries] the token of each entry */
  int32_t *send_ids; /* [entries][k] the token's ids, as sent (global expert ids or -1) */
  /* receive side: entries grouped by source rank, in the source's token order */
  size_t *recv_tok;  /* [nranks] */
  size_t *recv_off;  /* [nranks + 1] */
  int32_t *recv_ids; /* [entries][k] */
  size_t *row_of;    /* [entries][k] the row of each choice, WEFT_MOE_NO_ROW if not here */
  int64_t *count;    /* [local] rows of each local expert */
  int64_t *offset;   /* [local] its first row */
  size_t rows;       /* padded total */
  int fixed;         /* low-latency: blocks of a fixed size, rows past a count untouched */
} weft_moe_plan_t;

struct weft_moe_handle {
  weft_moe_t moe;
  weft_moe_plan_t plan;
  void *dev;      /* device.c's copy of the plan, device communicators only */
  int busy;       /* a split call started and not finished (weft_moe_finish) */
  void *pending;  /* host.c's state of that call (host communicators) */
  int ll;         /* low-latency mode on windows: 1 + its slot (ll.c), else 0 */
  int dispatched; /* ... and a dispatch was issued (its counts exist on the GPU) */
};

/* Why a rank refuses a call (a, b, c: what the message names), shared with every rank so
 * that all of them fail with the same reason. */
enum {
  MOE_OK = 0,
  MOE_BAD_ID,
  MOE_REPEATED_ID,
  MOE_NULL_BUF,
  MOE_MISALIGNED,
  MOE_NOT_DEVICE,
  MOE_TOO_BIG,
  MOE_NO_MEM,
  MOE_OVER_BOUND,  /* more tokens than the low-latency bound */
  MOE_FAILED,      /* a CUDA call failed there: its own error says which */
  MOE_BUSY,        /* the handle's split call is not finished */
  MOE_NO_SLOT,     /* low-latency mode on windows: every handle slot is taken */
  MOE_FP8_MISMATCH /* ... and ranks disagree on fp8 dispatch (a: rank 0's choice) */
};
typedef struct weft_moe_verdict {
  int64_t code, a, b, c;
} weft_moe_verdict_t;

/* moe.c. Collective over the bootstrap ring: WEFT_SUCCESS when every rank's verdict is
 * MOE_OK, else the lowest refusing rank's reason as everyone's error. */
weft_result_t weft_moe_agree(weft_moe_t m, const char *fn, weft_moe_verdict_t mine);
/* moe.c. Collective: every rank's word on a step it took alone (mine: its result), so that all
 * go on or none; a rank whose own step failed keeps its own message. */
weft_result_t weft_moe_settle(weft_moe_t m, const char *fn, weft_result_t mine);
/* Local: the same judgement over records already gathered, each starting with a verdict,
 * `stride` bytes apart. */
weft_result_t weft_moe_judge(weft_moe_t m, const char *fn, const void *all, size_t stride);

/* exchange.c. Collective over a host communicator: fills p's receive side (recv_tok,
 * recv_off, recv_ids) from what every rank sends here. */
weft_result_t weft_moe_exchange(weft_moe_t m, weft_moe_plan_t *p, const char *fn);

/* layout.c. Id i of an ids array of index_type (WEFT_I32 or WEFT_I64). */
int64_t weft_moe_id_at(const void *ids, weft_dtype_t t, size_t i);
/* Token `token` of ids ([tokens][k] of t): each id in [-1, experts), none repeated; -1 and
 * *bad otherwise. */
int weft_moe_check_token(const void *ids, weft_dtype_t t, size_t token, int k, int experts,
                         weft_moe_bad_t *bad);
/* Fills the send side from ids ([tokens][k] of index_type); returns -1 and *bad
 * when an id is out of [-1, experts) or repeated in its token, -2 when out of memory. */
int weft_moe_plan_send(weft_moe_plan_t *p, int nranks, int experts, int k, const void *ids,
                       weft_dtype_t index_type, size_t tokens, weft_moe_bad_t *bad);
/* Allocates the receive side once recv_tok holds what each rank sends here; 0 or -2. */
int weft_moe_plan_recv_alloc(weft_moe_plan_t *p);
/* With recv_ids filled: rows of this rank (rank of nranks) for each choice, counts, offsets
 * and the padded total; with block > 0 (low-latency mode) every expert's block is that many
 * rows instead (the counts must fit). 0, or -1 when the rows do not fit. */
int weft_moe_plan_rows(weft_moe_plan_t *p, int rank, size_t align, size_t block);
/* A device layout's plan from every rank's counts: all + s * stride is rank s's choices of
 * each expert, then its tokens for each rank. Fills the counts and
 * offsets of both sides, count, offset and rows (no per-entry arrays: those stay on the GPU;
 * block as for weft_moe_plan_rows), and base[s][l] ([nranks][local]): the row of source s's first
 * choice of local expert l. 0, -1 when the counts are negative or their sums do not fit, -2 when
 * out of memory. */
int weft_moe_plan_from_counts(weft_moe_plan_t *p, int nranks, int experts, int k, size_t tokens,
                              int rank, const int64_t *all, size_t stride, size_t align,
                              size_t block, uint64_t *base);
void weft_moe_plan_free(weft_moe_plan_t *p);
/* Where a low-latency layer's window keeps what (moe_kernels.h's weft_moe_k_geom_t), for
 * nranks ranks of `local` experts, k choices, tokens of row_bytes and at most bound tokens a
 * rank; 0, or -1 when an argument is out of range or a size overflows. */
struct weft_moe_k_geom_s;
int weft_moe_ll_geometry(int nranks, int local, int k, size_t row_bytes, size_t bound,
                         struct weft_moe_k_geom_s *g);
/* Where normal mode's direct path (direct.c) keeps what in a window of `bytes` shared by
 * every layer of a communicator: the flags (records, then acks, a cache line each for every
 * rank) at the same offsets whatever the layer, then this layer's dispatch slots (k weights and
 * a row) and combine rows, [nranks][chunk] each. Returns the chunk, the most tokens a round
 * that fit (at most WEFT_MOE_DIRECT_MAX_CHUNK); 0 when not one does or an argument is out of
 * range. */
#define WEFT_MOE_DIRECT_MAX_CHUNK 8192 /* a DeepSeek-V3 batch (4096 tokens) in one round */
uint64_t weft_moe_direct_geometry(int nranks, int k, size_t row_bytes, size_t bytes,
                                  struct weft_moe_k_geom_s *g);
/* The row after local expert l's block (its padding included). */
size_t weft_moe_block_end(const weft_moe_plan_t *p, int l);
/* The alltoallv counts and displacements of the send (recv = 0) or receive side, in units of
 * `per` elements an entry (its rows, its weights); the plan's sizes were checked to fit. */
void weft_moe_plan_counts(const weft_moe_plan_t *p, int recv, size_t per, size_t *counts,
                          size_t *displs);

/* device.c and device_layout.c in CUDA builds (device_none.c otherwise): device buffers. */
int weft_moe_dev_owns(weft_moe_t m, const void *p, size_t bytes); /* 1: device memory here */
/* 1 where comm's kernels reach only ring neighbours (past 8 ranks): no MoE there. */
int weft_moe_dev_ring_only(struct weft_comm *comm);
/* The layer's memory pool on its GPU, and its release; NULL when none could be made. */
void *weft_moe_dev_pool(weft_moe_t m);
void weft_moe_dev_pool_free(void *pool);
/* n int64 of zeroed pinned host memory that kernels write (the GPU's route leaves its counts
 * in the layout's record with no copy), and its release; NULL when none could be had. */
int64_t *weft_moe_dev_routes(weft_moe_t m, size_t n);
void weft_moe_dev_routes_free(int64_t *routes);
/* Collective: the layout of h (h->moe set; NULL when this rank could not make it, which
 * mine then says) from device ids, mine being this rank's verdict on the arguments so far;
 * fills h->plan's counts and h->dev. Every rank takes the same exchanges, whatever fails. */
weft_result_t weft_moe_dev_layout(weft_moe_t m, weft_moe_handle_t h, const void *ids, size_t tokens,
                                  weft_moe_verdict_t mine, weft_stream_t s);
/* recv_s non-NULL: fp8 dispatch (recv_x e4m3 rows, recv_s their scales) */
weft_result_t weft_moe_dev_dispatch(weft_moe_handle_t h, const void *x, const float *w,
                                    void *recv_x, float *recv_w, float *recv_s, weft_stream_t s);
weft_result_t weft_moe_dev_combine(weft_moe_handle_t h, const void *rows, const float *w, void *y,
                                   weft_stream_t s);
void weft_moe_dev_free(weft_moe_handle_t h);
/* [local] rows of each local expert, on the GPU. */
const int64_t *weft_moe_dev_counts(weft_moe_handle_t h);

/* fp8.c: a token of hidden elements of t quantized for fp8 dispatch: q[hidden] e4m3 and
 * one scale per WEFT_MOE_FP8_BLOCK elements (weft_moe.h says how). */
void weft_moe_fp8_row(weft_dtype_t t, const void *x, size_t hidden, uint8_t *q, float *scales);

/* ll.c in CUDA builds (device_none.c otherwise): low-latency mode on device communicators
 * whose GPUs map each other, every call kernels alone on the caller's stream. A rank's
 * refusal (v, or one the GPU finds) travels to every rank with the data, which then writes
 * nothing; the refusing rank returns it at once, the others from weft_moe_finish. */
weft_result_t weft_moe_ll_create(weft_moe_t m); /* collective; m->ll NULL without windows */
void weft_moe_ll_destroy(weft_moe_t m);         /* collective */
weft_result_t weft_moe_ll_layout(weft_moe_t m, weft_moe_handle_t h, const void *ids, size_t tokens,
                                 weft_moe_verdict_t v, weft_stream_t s);
weft_result_t weft_moe_ll_dispatch(weft_moe_handle_t h, weft_moe_verdict_t v, const char *fn,
                                   const void *x, const float *w, void *recv_x, float *recv_w,
                                   float *recv_s, weft_stream_t s);
weft_result_t weft_moe_ll_combine(weft_moe_handle_t h, weft_moe_verdict_t v, const char *fn,
                                  const void *rows, const float *w, void *y, weft_stream_t s);
/* Waits for the handle's calls; their refusal or failure, if any rank met one. */
weft_result_t weft_moe_ll_finish(weft_moe_handle_t h);
weft_result_t weft_moe_ll_counts(weft_moe_handle_t h, int64_t *counts, int64_t *offsets);
const int64_t *weft_moe_ll_device_counts(weft_moe_handle_t h);
void weft_moe_ll_free(weft_moe_handle_t h);

/* direct.c in CUDA builds (device_none.c otherwise): normal mode's direct path on device
 * communicators whose GPUs map each other. create and destroy are collective (m->direct stays
 * NULL where the staged path serves). */
weft_result_t weft_moe_direct_create(weft_moe_t m);
void weft_moe_direct_destroy(weft_moe_t m);

/* host.c: the host path's data movement (buffers checked by moe.c), in halves: a start packs
 * the inputs and queues the exchange on the handle's own host stream (h->pending holds the
 * rest), and weft_moe_host_finish waits for it and writes the outputs (nothing pending:
 * WEFT_SUCCESS at once). The starts are collective; a failed one leaves nothing pending. */
weft_result_t weft_moe_host_dispatch(weft_moe_handle_t h, const void *x, const float *w,
                                     void *recv_x, float *recv_w, float *recv_s);
weft_result_t weft_moe_host_combine(weft_moe_handle_t h, const void *rows, const float *w, void *y);
weft_result_t weft_moe_host_finish(weft_moe_handle_t h);

#endif
