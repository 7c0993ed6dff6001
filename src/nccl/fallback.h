/* WEFT_NCCL_FALLBACK: a real NCCL for the communicators weft cannot serve. Its library is
 * loaded once per process with its own symbols first (RTLD_DEEPBIND), and a communicator it
 * serves is a struct ncclComm of ours whose real field is the real library's handle: every
 * entry point forwards such a comm's calls (SHIM_FORWARD). */
#ifndef WEFT_NCCL_FALLBACK_H
#define WEFT_NCCL_FALLBACK_H

#include <nccl.h>

/* The entry points forwarded, by NCCL's name; X(name, required): a library without a
 * required one is refused at load, one without another fails the call that needs it. */
#define SHIM_REAL_FNS(X)                                                                           \
  X(ncclGetVersion, 0)                                                                             \
  X(ncclGetUniqueId, 1)                                                                            \
  X(ncclCommInitRankConfig, 1)                                                                     \
  X(ncclCommSplit, 0)                                                                              \
  X(ncclCommShrink, 0)                                                                             \
  X(ncclCommFinalize, 0)                                                                           \
  X(ncclCommDestroy, 1)                                                                            \
  X(ncclCommAbort, 1)                                                                              \
  X(ncclCommRevoke, 0)                                                                             \
  X(ncclCommGetAsyncError, 1)                                                                      \
  X(ncclCommCount, 0)                                                                              \
  X(ncclCommCuDevice, 0)                                                                           \
  X(ncclCommUserRank, 0)                                                                           \
  X(ncclGetLastError, 1)                                                                           \
  X(ncclCommRegister, 0)                                                                           \
  X(ncclCommDeregister, 0)                                                                         \
  X(ncclCommWindowRegister, 0)                                                                     \
  X(ncclCommWindowDeregister, 0)                                                                   \
  X(ncclAllReduce, 0)                                                                              \
  X(ncclReduceScatter, 0)                                                                          \
  X(ncclReduce, 0)                                                                                 \
  X(ncclBroadcast, 0)                                                                              \
  X(ncclBcast, 0)                                                                                  \
  X(ncclAllGather, 0)                                                                              \
  X(ncclAlltoAll, 0)                                                                               \
  X(ncclSend, 0)                                                                                   \
  X(ncclRecv, 0)                                                                                   \
  X(ncclGather, 0)                                                                                 \
  X(ncclScatter, 0)                                                                                \
  X(ncclGroupStart, 1)                                                                             \
  X(ncclGroupEnd, 1)                                                                               \
  X(ncclGroupSimulateEnd, 0)                                                                       \
  X(ncclRedOpCreatePreMulSum, 0)                                                                   \
  X(ncclRedOpDestroy, 0)

typedef struct shim_real {
  void *handle;
  char path[4096];
#define SHIM_REAL_FIELD(name, required) __typeof__(&name) name;
  SHIM_REAL_FNS(SHIM_REAL_FIELD)
#undef SHIM_REAL_FIELD
} shim_real_t;

/* The real library at path, loaded on first use (later calls must name the same path).
 * Refuses weft's own libnccl.so.2 (it exports weft_nccl_marker), a path that does not load
 * (the message names it and gives dlerror()) and one without NCCL's required functions. */
ncclResult_t shim_real_load(const char *path, const shim_real_t **out);
/* The library loaded so far, or NULL: groups forward to it. */
const shim_real_t *shim_real_loaded(void);
/* The real library's last error, as this thread's, with fn and what failed; returns r. */
ncclResult_t shim_real_error(const shim_real_t *real, ncclComm_t real_comm, ncclResult_t r,
                             const char *fn);

/* At the top of an entry point: a comm the real NCCL serves has its call forwarded, with its
 * handle (comm->real) in place of ours; a function the library lacks fails cleanly. */
#define SHIM_FORWARD(comm, name, ...)                                                              \
  do {                                                                                             \
    if (SHIM_IS_REAL(comm)) {                                                                      \
      if (!(comm)->fb->name)                                                                       \
        return shim_error(ncclInvalidUsage, "%s: the fallback NCCL (%s) has no such function",     \
                          #name, (comm)->fb->path);                                                \
      return (comm)->fb->name(__VA_ARGS__);                                                        \
    }                                                                                              \
  } while (0)

#endif
