/* Host-staged regions for device communicators whose GPUs cannot map each other: each
 * rank's region is a POSIX shared-memory segment that every process of its host maps and
 * registers with CUDA, so the same kernels read and write it, over PCIe instead of NVLink. A
 * rank on another host gets a mirror here instead, private to this process (the proxy carries
 * what lands in it), whether the local regions are host-staged or on the devices. */
#include <cuda_runtime_api.h>
#include <string.h>
#include <sys/mman.h>

#include "err.h"
#include "ipc_state.h"
#include "shmseg.h"

#define HINT "lower WEFT_P2P_CHANNELS or WEFT_P2P_CHUNK_BYTES"

/* Zeroed, like a fresh segment; never another process's. */
static weft_result_t private_seg(size_t bytes, const char *what, int r, char **seg) {
  void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED)
    return weft_set_error(WEFT_ERR_NO_MEMORY,
                          "cuda_ipc (host-staged): no memory for %s rank %d (%zu bytes); " HINT,
                          what, r, bytes);
  *seg = m;
  return WEFT_SUCCESS;
}

/* Portable: one process may drive several GPUs, each of which must reach every region. */
static weft_result_t register_seg(char *seg, size_t bytes, int r, char *registered, char **dev) {
  cudaError_t e = cudaHostRegister(seg, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (e != cudaSuccess)
    return weft_set_error(WEFT_ERR_SYSTEM,
                          "cuda_ipc (host-staged): registering rank %d's region: %s", r,
                          cudaGetErrorString(e));
  *registered = 1;
  e = cudaHostGetDevicePointer((void **)dev, seg, 0);
  if (e != cudaSuccess)
    return weft_set_error(WEFT_ERR_SYSTEM,
                          "cuda_ipc (host-staged): device address of rank %d's region: %s", r,
                          cudaGetErrorString(e));
  return WEFT_SUCCESS;
}

weft_result_t weft_hoststage_map(weft_bootstrap_t *boot, size_t bytes, const int *local_rank,
                                 weft_ipc_t *out) {
  weft_result_t rc = WEFT_SUCCESS;
  int rank = out->rank, self = out->self;
  out->host = 1;
  out->bytes = bytes;
  weft_shm_name(out->name, sizeof out->name, boot->magic, rank, "-dev");
  CHECK_GOTO(weft_shm_map(out->name, bytes, 1, HINT, &out->seg[self]), rc, fail);
  out->linked = 1;
  /* Every segment exists after this barrier; after the second, all are mapped and the names
   * can go, so a crash later leaves nothing in /dev/shm. */
  CHECK_GOTO(weft_bootstrap_barrier(boot), rc, fail);
  for (int s = 0; s < out->nslots; s++) {
    int p = out->slot_rank[s];
    if (p == rank) continue;
    if (local_rank[p] < 0) {
      CHECK_GOTO(private_seg(bytes, "a mirror of the region of", p, &out->seg[s]), rc, fail);
      out->remote[s] = 1;
      continue;
    }
    char name[64];
    weft_shm_name(name, sizeof name, boot->magic, p, "-dev");
    CHECK_GOTO(weft_shm_map(name, bytes, 0, HINT, &out->seg[s]), rc, fail);
  }
  CHECK_GOTO(weft_bootstrap_barrier(boot), rc, fail);
  shm_unlink(out->name);
  out->linked = 0;
  for (int s = 0; s < out->nslots; s++)
    CHECK_GOTO(
        register_seg(out->seg[s], bytes, out->slot_rank[s], &out->registered[s], &out->region[s]),
        rc, fail);
  WEFT_INFO(WEFT_SUB_INIT, "rank %d: GPU %d stages through host memory (%zu bytes per rank)", rank,
            out->device, bytes);
  return WEFT_SUCCESS;
fail:
  weft_hoststage_unmap(out);
  return rc;
}

weft_result_t weft_hoststage_remote(const int *local_rank, weft_ipc_t *out) {
  for (int s = 0; s < out->nslots; s++) {
    int p = out->slot_rank[s];
    if (local_rank[p] >= 0) continue;
    CHECK(private_seg(out->bytes, "a mirror of the region of", p, &out->seg[s]));
    out->remote[s] = 1;
    CHECK(register_seg(out->seg[s], out->bytes, p, &out->registered[s], &out->region[s]));
  }
  CHECK(private_seg(out->bytes, "what comes from other hosts to", out->rank, &out->inbox_seg));
  return register_seg(out->inbox_seg, out->bytes, out->rank, &out->inbox_registered, &out->inbox);
}

void weft_hoststage_unmap(weft_ipc_t *p) {
  for (int r = 0; r < p->nslots; r++) {
    if (p->registered[r]) cudaHostUnregister(p->seg[r]);
    if (p->seg[r]) munmap(p->seg[r], p->bytes);
    p->seg[r] = NULL;
    p->registered[r] = 0;
    p->remote[r] = 0;
    p->region[r] = NULL;
  }
  if (p->inbox_registered) cudaHostUnregister(p->inbox_seg);
  if (p->inbox_seg) munmap(p->inbox_seg, p->bytes);
  p->inbox_seg = p->inbox = NULL;
  p->inbox_registered = 0;
  if (p->linked) shm_unlink(p->name);
  p->linked = 0;
}
