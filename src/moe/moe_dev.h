/* MoE device internals shared by device_layout.c (which builds a handle's plan on the GPU)
 * and device.c (dispatch and combine over it): the plan's device arrays and the staging
 * helpers. CUDA builds only. */
#ifndef WEFT_MOE_DEV_H
#define WEFT_MOE_DEV_H

#include <cuda_runtime_api.h>

#include "comm.h"
#include "dev_view.h"
#include "moe.h"
#include "moe_kernels.h"

typedef struct {
  /* send side (block): from the ids, by route.cu */
  uint64_t *send_list; /* [entries sent] the token of each */
  uint64_t *entries;   /* [tokens][width] each token's sent entries in rank order, NO_ROW after */
  int32_t *send_meta;  /* [entries sent][WEFT_MOE_K_META(k)][2] (moe_kernels.h) */
  int32_t *pos;        /* [tokens][nranks] a token's index among those sent to r, or -1 */
  int width;
  /* receive side (block2): rows from the peers' meta, and the padding rows */
  uint64_t *row_of;    /* [entries received][k] */
  uint32_t *tok_of;    /* [entries received] each one's token at its source */
  uint64_t *recv_off;  /* [nranks + 1] on the GPU: first entry received from each source */
  uint64_t max_tokens; /* the most tokens any rank passed to the layout */
  uint64_t *pad;       /* [npad] */
  uint64_t npad;
  const int64_t *counts; /* [local] rows of each local expert, after the padding rows */
  void *block, *block2;
  uint64_t *tables; /* host copy of what went up to block2 (kept until the copy is surely done) */
  /* the handle's calls run in the order made, whatever their streams: each waits for the
   * last one's event when its stream differs; the blocks are freed in the last stream's order */
  cudaEvent_t done;
  cudaStream_t last;
  cudaEvent_t packed; /* where ranks share a GPU (only there): a staged call's packing kernel */
} moe_dev_t;

/* What the device engine shows of m's communicator (never NULL for a device layer). */
static inline weft_dev_view_t *moe_dev(weft_moe_t m) { return weft_comm_device_view(m->comm); }

/* The kernels' code (WEFT_MOE_K_*) for a payload type. */
static inline int32_t moe_kcode(weft_dtype_t t) {
  return t == WEFT_F32 ? WEFT_MOE_K_F32 : t == WEFT_F16 ? WEFT_MOE_K_F16 : WEFT_MOE_K_BF16;
}

/* Collective, at a window's end (ll.c, direct.c): this rank's kernels finished, then every
 * rank's (the peers' last acks land in our window after our own kernels end), then the window
 * deregistered; the caller frees its memory. */
void weft_moe_dev_window_close(weft_moe_t m, weft_window_t win);

/* direct.c, with the layer's GPU current: orders a call on st after the layer's last direct
 * call (nonzero on a CUDA error), and launches a dispatch or combine (a cudaError_t). */
int weft_moe_direct_order(weft_moe_t m, cudaStream_t st);
int weft_moe_direct_dispatch(weft_moe_handle_t h, const void *x, const float *w, void *recv_x,
                             float *recv_w, float *recv_s, cudaStream_t st);
int weft_moe_direct_combine(weft_moe_handle_t h, const void *rows, const float *w, void *y,
                            cudaStream_t st);

/* *out = sum of the n sizes, each rounded up to 256 bytes; 0 when that overflows. */
int weft_moe_dev_staged(const size_t *bytes, int n, size_t *out);
/* Carves block into n pieces of those sizes (256-byte aligned; NULL for size 0). */
void weft_moe_dev_carve(void *block, const size_t *bytes, int n, void **pieces);

#endif
