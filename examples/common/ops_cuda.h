/* What the CUDA back end's files share (C++, internal to examples/common): the context's
 * stream, its one double of device memory for a sum the host waits for, and the mixture of
 * experts' vtable (moe_ops_cuda.cu). */
#ifndef WEFT_EXAMPLES_OPS_CUDA_H
#define WEFT_EXAMPLES_OPS_CUDA_H

#include <cuda_runtime.h>

extern "C" {
#include "moe_ops.h"
}

cudaStream_t gpt_cuda_stream(void *ctx);
double *gpt_cuda_scalar(void *ctx);
/* Waits for the stream: 0, or -1 with the error on stderr (what any failed operation left). */
int gpt_cuda_finish(void *ctx);
extern const moe_ops_vt_t moe_ops_cuda;

#endif
