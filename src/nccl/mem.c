/* Memory of the NCCL ABI: ncclMemAlloc (plain device memory: weft needs no special
 * allocation), local registration (a handle, nothing more: weft stages or reads peers'
 * windows, it pins nothing per buffer) and symmetric windows (weft's windows). */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "shim.h"

NCCL_EXPORT(ncclResult_t, ncclMemAlloc, void **ptr, size_t size) {
  if (!ptr) return shim_error(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
  *ptr = NULL;
  if (!size) return ncclSuccess;
  cudaError_t e = cudaMalloc(ptr, size);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *ptr = NULL;
    return shim_error(ncclUnhandledCudaError, "ncclMemAlloc of %zu bytes: %s", size,
                      cudaGetErrorString(e));
  }
  return ncclSuccess;
}

NCCL_EXPORT(ncclResult_t, ncclMemFree, void *ptr) {
  if (!ptr) return ncclSuccess;
  cudaError_t e = cudaFree(ptr);
  return e == cudaSuccess ? ncclSuccess
                          : shim_error(ncclUnhandledCudaError, "ncclMemFree(%p): %s", ptr,
                                       cudaGetErrorString(e));
}

typedef struct {
  uint32_t magic;
  void *buff;
  size_t size;
} reg_t;

enum { REG_MAGIC = 0x72656721u };

NCCL_EXPORT(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size,
            void **handle) {
  SHIM_FORWARD(comm, ncclCommRegister, comm->real, buff, size, handle);
  ncclResult_t r = shim_ready(comm, "ncclCommRegister");
  if (r != ncclSuccess) return r;
  if (!handle || !buff)
    return shim_error(ncclInvalidArgument, "ncclCommRegister: buff or handle is NULL");
  reg_t *g = malloc(sizeof *g);
  if (!g) return shim_error(ncclSystemError, "ncclCommRegister: out of memory");
  *g = (reg_t){REG_MAGIC, buff, size};
  *handle = g;
  return ncclSuccess;
}

NCCL_EXPORT(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle) {
  SHIM_FORWARD(comm, ncclCommDeregister, comm->real, handle);
  ncclResult_t r = shim_ready(comm, "ncclCommDeregister");
  if (r != ncclSuccess) return r;
  reg_t *g = handle;
  if (!g || g->magic != REG_MAGIC)
    return shim_error(ncclInvalidArgument, "ncclCommDeregister: %p is not a registration", handle);
  g->magic = 0;
  free(g);
  return ncclSuccess;
}

/* Collective, as in NCCL: every rank registers a buffer of the same size. */
NCCL_EXPORT(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size,
            ncclWindow_t *win, int winFlags) {
  SHIM_FORWARD(comm, ncclCommWindowRegister, comm->real, buff, size, win, winFlags);
  ncclResult_t r = shim_ready(comm, "ncclCommWindowRegister");
  if (r != ncclSuccess) return r;
  if (!win) return shim_error(ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
  if (winFlags & ~NCCL_WIN_COLL_SYMMETRIC)
    return shim_error(ncclInvalidArgument, "ncclCommWindowRegister: flags %#x", winFlags);
  weft_window_t w = NULL;
  r = shim_result(weft_window_register(comm->w, buff, size, &w));
  *win = r == ncclSuccess ? (ncclWindow_t)(void *)w : NULL;
  return r;
}

NCCL_EXPORT(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  SHIM_FORWARD(comm, ncclCommWindowDeregister, comm->real, win);
  ncclResult_t r = shim_ready(comm, "ncclCommWindowDeregister");
  if (r != ncclSuccess) return r;
  return shim_result(weft_window_deregister(comm->w, (weft_window_t)(void *)win));
}
