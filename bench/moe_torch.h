/* moebench --compare torch: PyTorch's baseline (scripts/gpu/moe_torch.py) run in the same
 * job on the same shape, one process per GPU, and its per-phase times read back. */
#ifndef WEFT_BENCH_MOE_TORCH_H
#define WEFT_BENCH_MOE_TORCH_H

#include <stddef.h>

typedef struct {
  double us[3];     /* layout, dispatch, combine: the slowest rank's mean */
  double max_error; /* of its combine against the input (identity experts) */
  char version[32];
} moe_torch_t;

/* 0 with *out filled, -1 with a message on stderr. */
int moe_torch_run(int ranks, size_t tokens, size_t hidden, int topk, int experts, const char *dtype,
                  int iters, int warmup, moe_torch_t *out);

#endif
