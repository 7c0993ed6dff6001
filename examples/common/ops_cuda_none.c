/* The CUDA back end's entry point in a build without CUDA: a clear refusal (ops.h). */
#include <stdio.h>

#include "ops.h"

int gpt_ops_cuda_open(gpt_ops_t *ops, int device, int bf16, char *why, size_t size) {
  (void)ops, (void)bf16;
  snprintf(why, size, "no CUDA device %d: weft was built without CUDA (meson -Dcuda=enabled)",
           device);
  return -1;
}

int gpt_cuda_devices(void) { return 0; }
