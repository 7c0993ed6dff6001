/* Host-staged regions for device communicators whose GPUs cannot map each other: each
 * rank's region is a POSIX shared-memory segment that every process of its host maps and
 * registers with CUDA, so the same kernels read and write it, over PCIe instead of NVLink. A
 * rank on another host gets a mirror here instead, private to this process (the proxy carries
 * what lands in it). */
#include <cuda_runtime_api.h>
#include <string.h>
#include <sys/mman.h>

#include "err.h"
#include "ipc_state.h"
#include "shmseg.h"

#define HINT "lower WEFT_P2P_CHANNELS or WEFT_P2P_CHUNK_BYTES"

weft_result_t weft_hoststage_map(weft_bootstrap_t *boot, int rank, int nranks, size_t bytes,
                                 const int *local_rank, weft_ipc_t *out) {
  weft_result_t rc = WEFT_SUCCESS;
  out->host = 1;
  out->bytes = bytes;
  weft_shm_name(out->name, sizeof out->name, boot->magic, rank, "-dev");
  CHECK_GOTO(weft_shm_map(out->name, bytes, 1, HINT, &out->seg[rank]), rc, fail);
  out->linked = 1;
  /* Every segment exists after this barrier; after the second, all are mapped and the names
   * can go, so a crash later leaves nothing in /dev/shm. */
  CHECK_GOTO(weft_bootstrap_barrier(boot), rc, fail);
  for (int p = 0; p < nranks; p++) {
    if (p == rank) continue;
    if (local_rank[p] < 0) { /* zeroed, like a fresh segment; never another process's */
      void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (m == MAP_FAILED)
        ERR_GOTO(rc, fail, WEFT_ERR_NO_MEMORY,
                 "cuda_ipc (host-staged): no memory for a mirror of rank %d's region (%zu bytes)",
                 p, bytes);
      out->seg[p] = m;
      out->remote[p] = 1;
      continue;
    }
    char name[64];
    weft_shm_name(name, sizeof name, boot->magic, p, "-dev");
    CHECK_GOTO(weft_shm_map(name, bytes, 0, HINT, &out->seg[p]), rc, fail);
  }
  CHECK_GOTO(weft_bootstrap_barrier(boot), rc, fail);
  shm_unlink(out->name);
  out->linked = 0;
  /* Portable: one process may drive several GPUs, each of which must reach every region. */
  for (int p = 0; p < nranks; p++) {
    cudaError_t e =
        cudaHostRegister(out->seg[p], bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
    if (e != cudaSuccess)
      ERR_GOTO(rc, fail, WEFT_ERR_SYSTEM,
               "cuda_ipc (host-staged): registering rank %d's region: %s", p,
               cudaGetErrorString(e));
    out->registered[p] = 1;
    e = cudaHostGetDevicePointer((void **)&out->region[p], out->seg[p], 0);
    if (e != cudaSuccess)
      ERR_GOTO(rc, fail, WEFT_ERR_SYSTEM,
               "cuda_ipc (host-staged): device address of rank %d's region: %s", p,
               cudaGetErrorString(e));
  }
  WEFT_INFO(WEFT_SUB_INIT, "rank %d: GPU %d stages through host memory (%zu bytes per rank)", rank,
            out->device, bytes);
  return WEFT_SUCCESS;
fail:
  weft_hoststage_unmap(out);
  return rc;
}

void weft_hoststage_unmap(weft_ipc_t *p) {
  for (int r = 0; r < p->nranks && r < WEFT_IPC_MAX_RANKS; r++) {
    if (p->registered[r]) cudaHostUnregister(p->seg[r]);
    if (p->seg[r]) munmap(p->seg[r], p->bytes);
    p->seg[r] = NULL;
    p->registered[r] = 0;
    p->region[r] = NULL;
  }
  if (p->linked) shm_unlink(p->name);
  p->linked = 0;
}
