/* Loading the real NCCL named by WEFT_NCCL_FALLBACK. RTLD_DEEPBIND, not dlmopen: the real
 * library must share the process's CUDA (one libcuda, one context per GPU, so that the
 * caller's streams and buffers mean the same to it), which a new link-map namespace would load
 * a second time; deep binding is what keeps its own calls of nccl* functions inside it while
 * weft's libnccl.so.2 is preloaded under the same names. The library stays loaded for the
 * process's life: comms of it may outlive any one of ours. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "shim.h"

/* Process-wide by nature (a library is loaded into the process, not into a communicator):
 * set once under the lock, then only read. */
static pthread_mutex_t load_mu = PTHREAD_MUTEX_INITIALIZER;
static shim_real_t *_Atomic loaded;

/* Only weft's libnccl.so.2 exports it: a fallback path that leads back to weft is refused
 * (its forwarding would recurse into itself). */
__attribute__((visibility("default"))) const char weft_nccl_marker[] = "weft";

const shim_real_t *shim_real_loaded(void) { return atomic_load(&loaded); }

static ncclResult_t load(const char *path, shim_real_t **out) {
  dlerror();
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!h) {
    const char *e = dlerror();
    return shim_error(ncclSystemError, "WEFT_NCCL_FALLBACK=%s does not load: %s", path,
                      e ? e : "(no reason given)");
  }
  if (dlsym(h, "weft_nccl_marker")) {
    dlclose(h);
    return shim_error(ncclInvalidUsage,
                      "WEFT_NCCL_FALLBACK=%s is weft's own libnccl.so.2: name NVIDIA's NCCL "
                      "library (for one, the one PyTorch's wheel ships in nvidia/nccl/lib)",
                      path);
  }
  shim_real_t *r = calloc(1, sizeof *r);
  if (!r) {
    dlclose(h);
    return shim_error(ncclSystemError, "WEFT_NCCL_FALLBACK: out of memory");
  }
  r->handle = h;
  snprintf(r->path, sizeof r->path, "%s", path);
  const char *missing = NULL;
#define SHIM_REAL_SYM(name, required)                                                              \
  *(void **)&r->name = dlsym(h, #name);                                                            \
  if (!r->name && (required) && !missing) missing = #name;
  SHIM_REAL_FNS(SHIM_REAL_SYM)
#undef SHIM_REAL_SYM
  if (missing) {
    dlclose(h);
    free(r);
    return shim_error(ncclInvalidUsage,
                      "WEFT_NCCL_FALLBACK=%s is not an NCCL library: it has no %s", path, missing);
  }
  int version = 0;
  if (r->ncclGetVersion) r->ncclGetVersion(&version);
  WEFT_INFO(WEFT_SUB_INIT, "nccl: fallback NCCL %d loaded from %s", version, path);
  *out = r;
  return ncclSuccess;
}

ncclResult_t shim_real_load(const char *path, const shim_real_t **out) {
  ncclResult_t rc = ncclSuccess;
  pthread_mutex_lock(&load_mu);
  shim_real_t *r = atomic_load(&loaded);
  if (!r) {
    rc = load(path, &r);
    if (rc == ncclSuccess) atomic_store(&loaded, r);
  } else if (strcmp(r->path, path) != 0) {
    rc = shim_error(ncclInvalidUsage,
                    "WEFT_NCCL_FALLBACK=%s: this process loaded %s already (one fallback a "
                    "process)",
                    path, r->path);
  }
  pthread_mutex_unlock(&load_mu);
  if (rc == ncclSuccess) *out = r;
  return rc;
}

ncclResult_t shim_real_error(const shim_real_t *real, ncclComm_t real_comm, ncclResult_t r,
                             const char *fn) {
  const char *why = real->ncclGetLastError(real_comm);
  return shim_error(r, "%s (fallback NCCL %s): %s", fn, real->path, why && *why ? why : "failed");
}
