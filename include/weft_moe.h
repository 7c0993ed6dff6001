/* weft MoE: expert-parallel dispatch and combine. A layer's plan (weft_moe_t) is made once
 * per communicator and shape; each batch's layout (weft_moe_handle_t) says which rank and
 * expert every token goes to, and serves its dispatch and the matching combine.
 * Plain C11 beside weft.h, no CUDA types. */
#ifndef WEFT_MOE_H
#define WEFT_MOE_H

#include "weft.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  WEFT_MOE_NORMAL = 0,     /* counts exchanged at layout, outputs of the exact size */
  WEFT_MOE_LOW_LATENCY = 1 /* fixed shapes from a token bound (config.max_tokens): each local
                              expert's block is max_tokens * nranks rows. On device
                              communicators whose GPUs map each other, no call waits for the
                              host, so CUDA graphs can capture them (see "Low-latency mode on
                              device communicators" below) */
} weft_moe_mode_t;

/* Experts are spread evenly: expert e lives on rank e / (num_experts / nranks), as local
 * expert e % (num_experts / nranks). Start from WEFT_MOE_CONFIG_INIT; every rank must pass
 * the same values (weft_moe_create checks). */
typedef struct {
  size_t size;             /* sizeof(weft_moe_config_t), set by WEFT_MOE_CONFIG_INIT */
  int num_experts;         /* over all ranks; a multiple of the rank count */
  int topk;                /* experts per token, 1..WEFT_MOE_MAX_TOPK */
  size_t hidden;           /* elements per token */
  weft_dtype_t dtype;      /* payload: WEFT_F32, WEFT_F16 or WEFT_BF16 */
  weft_dtype_t index_type; /* top-k ids: WEFT_I32 or WEFT_I64 */
  weft_moe_mode_t mode;
  size_t align;      /* rows of each expert's block rounded up to a multiple of this (0, 1: none;
                        at most WEFT_MOE_MAX_ALIGN), for grouped GEMMs; padding rows are zeros.
                        Normal mode only */
  size_t max_tokens; /* low-latency mode: the most tokens any rank passes to a layout */
} weft_moe_config_t;

#define WEFT_MOE_MAX_TOPK  32
#define WEFT_MOE_MAX_ALIGN 65536
#define WEFT_MOE_CONFIG_INIT                                                                       \
  { sizeof(weft_moe_config_t), 0, 0, 0, WEFT_BF16, WEFT_I64, WEFT_MOE_NORMAL, 1, 0 }

typedef struct weft_moe *weft_moe_t;
typedef struct weft_moe_handle *weft_moe_handle_t;

/* Collective over comm (host or device communicator): every rank checks the configuration
 * and compares it with the others'; any difference fails on every rank with a message naming
 * the field. On a device communicator every buffer below is device memory of its GPU and the
 * stream is a cudaStream_t cast to weft_stream_t. */
WEFT_API weft_result_t weft_moe_create(weft_comm_t comm, const weft_moe_config_t *config,
                                       weft_moe_t *moe);
/* Local, except where the layer's destroy frees a window: the last normal-mode layer of a
 * device communicator whose GPUs map each other (the layers share one window), and a
 * low-latency layer there; collective then. Handles made from moe must be destroyed first. */
WEFT_API weft_result_t weft_moe_destroy(weft_moe_t moe);

/* Collective: the layout of one batch. topk_ids is [tokens][topk] of config.index_type,
 * -1 for a dropped choice; a token's ids are distinct. Exchanges the counts (in normal mode
 * the call returns once they are known), so that the queries below answer at once. An id
 * out of range or repeated on any rank fails the call on every rank, the message naming the
 * rank, token and id, and so do more tokens than config.max_tokens in low-latency mode;
 * nothing is made then. Calls on the handle run in the order made. */
WEFT_API weft_result_t weft_moe_layout(weft_moe_t moe, const void *topk_ids, size_t tokens,
                                       weft_moe_handle_t *handle, weft_stream_t stream);
WEFT_API weft_result_t weft_moe_handle_destroy(weft_moe_handle_t handle);

/* Rows this rank receives, expert-major (local expert 0's rows, then 1's, ...), each
 * expert's block padded to config.align: the size of dispatch's outputs and combine's input,
 * in rows of config.hidden elements. Low-latency mode: always local experts * nranks *
 * max_tokens, expert l's block starting at row l * nranks * max_tokens, its rows past its
 * count left as they were by dispatch (and not read by combine). */
WEFT_API weft_result_t weft_moe_recv_rows(weft_moe_handle_t handle, size_t *rows);
/* counts[l] = rows of local expert l (without padding); offsets[l] = its first row. Either
 * may be NULL; each holds num_experts / nranks entries. */
WEFT_API weft_result_t weft_moe_expert_counts(weft_moe_handle_t handle, int64_t *counts,
                                              int64_t *offsets);
/* Device communicators: *counts = the same counts in device memory (int64, num_experts /
 * nranks of them), for kernels that must not wait for the host (a grouped GEMM in a CUDA
 * graph); valid until the handle is destroyed. Normal mode: written by the layout. Low-latency
 * mode: written by each dispatch, in its stream's order. */
WEFT_API weft_result_t weft_moe_device_counts(weft_moe_handle_t handle, const int64_t **counts);

/* Collective: each token goes once to every rank holding one of its experts, and lands in
 * one row per such expert. x is [tokens][hidden]; topk_weights ([tokens][topk] f32, may be
 * NULL) travel with it into recv_weights (one per row, may be NULL; 0 for padding rows).
 * recv_x has weft_moe_recv_rows rows. Rows within an expert's block are ordered by source
 * rank, then by token. */
WEFT_API weft_result_t weft_moe_dispatch(weft_moe_handle_t handle, const void *x,
                                         const float *topk_weights, void *recv_x,
                                         float *recv_weights, weft_stream_t stream);

/* Collective: weft_moe_dispatch with the rows arriving in fp8 (e4m3), for expert products
 * that read fp8: recv_x8 is weft_moe_recv_rows x hidden bytes, and recv_scales one f32 per
 * WEFT_MOE_FP8_BLOCK elements of each row (WEFT_MOE_FP8_BLOCKS(hidden) a row), so that
 * element i of a row is about recv_x8[i] * recv_scales[i / WEFT_MOE_FP8_BLOCK]. The sender
 * quantizes each block of a token (finite values of config.dtype) with the scale amax / 448
 * (448: e4m3's largest finite value; 1 where that is 0, as for zeros) and each element as
 * e4m3(x / scale), rounded to nearest even: the same bits on host and device buffers. Padding
 * rows are zeros with scale 0; the handle's combine is unchanged (config.dtype). */
#define WEFT_MOE_FP8_BLOCK     128
#define WEFT_MOE_FP8_BLOCKS(h) (((h) + WEFT_MOE_FP8_BLOCK - 1) / WEFT_MOE_FP8_BLOCK)
WEFT_API weft_result_t weft_moe_dispatch_fp8(weft_moe_handle_t handle, const void *x,
                                             const float *topk_weights, uint8_t *recv_x8,
                                             float *recv_scales, float *recv_weights,
                                             weft_stream_t stream);

/* Collective, dispatch reversed: y[t] = sum over the rows r of token t of w[r] * rows[r],
 * accumulated in f32, with w = row_weights (one per row, typically dispatch's recv_weights)
 * or 1 when NULL. Each rank first sums the rows of a token it holds, then sends that partial
 * home once, in config.dtype. y is [tokens][hidden]; a token with no expert gets zeros.
 * Combine with weights 1 is dispatch's adjoint (its backward), and dispatch followed by
 * scaling each row by w is the adjoint of combine with weights w. */
WEFT_API weft_result_t weft_moe_combine(weft_moe_handle_t handle, const void *rows,
                                        const float *row_weights, void *y, weft_stream_t stream);

/* Split halves, so that compute runs while the data travels. weft_moe_dispatch_start and
 * weft_moe_combine_start take the arguments, checks and agreement of weft_moe_dispatch and
 * weft_moe_combine and return once the exchange is under way: on a host communicator their
 * inputs (x and topk_weights, or rows and row_weights) may be reused at once, and their
 * outputs are written by the time weft_moe_finish(handle) returns, which also returns the
 * exchange's error; until then the outputs must not be touched. A handle holds one call at a
 * time: any other call on it first fails on every rank (WEFT_ERR_INVALID_ARG) and changes
 * nothing; finishing with nothing started succeeds. Calls on several handles may be in
 * flight together, started in the same order on every rank (as every collective); destroying
 * a handle finishes its call first. On a device communicator every call is stream-ordered
 * already: the start is the plain call, the stream orders its inputs and outputs, and
 * weft_moe_finish only ends the split. */
WEFT_API weft_result_t weft_moe_dispatch_start(weft_moe_handle_t handle, const void *x,
                                               const float *topk_weights, void *recv_x,
                                               float *recv_weights, weft_stream_t stream);
WEFT_API weft_result_t weft_moe_combine_start(weft_moe_handle_t handle, const void *rows,
                                              const float *row_weights, void *y,
                                              weft_stream_t stream);
WEFT_API weft_result_t weft_moe_finish(weft_moe_handle_t handle);

/* Low-latency mode on device communicators whose GPUs map each other: the layer holds a
 * window every peer writes into (the tokens go straight there from the senders' kernels) and
 * four handle slots (a fifth live handle is refused); layout, dispatch and combine are kernels
 * on the stream alone, with no host wait and no allocation, and can be captured in a CUDA
 * graph. The layout is local: the counts travel with the dispatch, so weft_moe_expert_counts
 * answers (waiting for the GPU) once a dispatch was issued, and weft_moe_device_counts at
 * once. A refusal (an id out of range or repeated, more tokens than max_tokens, a bad buffer)
 * fails the refusing rank's call at once, where the host can see it; it reaches every other
 * rank through the GPU: their dispatch (or combine) writes nothing, a combine after a refused
 * dispatch does nothing, and weft_moe_finish, which then waits for the handle's calls, returns
 * the refusal with the refusing rank's reason. Every rank issues its dispatches and combines
 * in the same order, each handle's dispatch before its combines; a refused layout takes that
 * rank's next dispatch round at once, so a refusal pairs with the right call when each
 * layout's dispatch comes before the next layout. Ranks must agree on fp8 in each dispatch
 * (a disagreement is refused). weft_moe_destroy is collective for such a layer. */

#ifdef __cplusplus
}
#endif

#endif
