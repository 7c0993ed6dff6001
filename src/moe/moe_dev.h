/* MoE device internals shared by device_layout.c (which builds a handle's plan on the GPU)
 * and device.c (dispatch and combine over it): the plan's device arrays and the staging
 * helpers. CUDA builds only. */
#ifndef WEFT_MOE_DEV_H
#define WEFT_MOE_DEV_H

#include <cuda_runtime_api.h>

#include "gpu.h"
#include "moe.h"

typedef struct {
  /* send side (block): from the ids, by route.cu */
  uint64_t *send_list; /* [entries sent] the token of each */
  uint64_t *entries;   /* [tokens][width] each token's sent entries in rank order, NO_ROW after */
  int32_t *send_meta;  /* [entries sent][k][2] each choice's local expert there and index */
  int width;
  /* receive side (block2): rows from the peers' meta, and the padding rows */
  uint64_t *row_of; /* [entries received][k] */
  uint64_t *pad;    /* [npad] */
  uint64_t npad;
  const int64_t *counts; /* [local] rows of each local expert, after the padding rows */
  void *block, *block2;
  uint64_t *tables; /* host copy of what went up to block2 (kept until the copy is surely done) */
  /* the handle's calls run in the order made, whatever their streams: each waits for the
   * last one's event when its stream differs; the blocks are freed in the last stream's order */
  cudaEvent_t done;
  cudaStream_t last;
} moe_dev_t;

static inline struct weft_dev *moe_dev(weft_moe_t m) { return dev_of(m->comm); }

/* *out = sum of the n sizes, each rounded up to 256 bytes; 0 when that overflows. */
int weft_moe_dev_staged(const size_t *bytes, int n, size_t *out);
/* Carves block into n pieces of those sizes (256-byte aligned; NULL for size 0). */
void weft_moe_dev_carve(void *block, const size_t *bytes, int n, void **pieces);

#endif
