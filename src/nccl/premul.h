/* A PreMulSum operation as the NCCL ABI creates it, and the kernel that applies it
 * (premul.cu); C and C++ both include this. */
#ifndef WEFT_NCCL_PREMUL_H
#define WEFT_NCCL_PREMUL_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  int used;
  ncclDataType_t dtype;
  ncclScalarResidence_t residence;
  uint64_t value;     /* the scalar's bytes when it was given on the host */
  const void *device; /* where it lives on the device otherwise, read when the op runs */
} shim_premul_t;

/* dst[i] = src[i] * scalar for count elements of weft_dtype on stream; a cudaError_t. */
int shim_premul_launch(void *dst, const void *src, size_t count, int weft_dtype,
                       const shim_premul_t *p, void *stream);

#ifdef __cplusplus
}
#endif
#endif
