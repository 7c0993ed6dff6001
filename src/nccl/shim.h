/* What the NCCL-ABI library's files share: its communicator (a weft communicator plus what
 * NCCL's API keeps per comm: device, blocking mode, the state of a non-blocking init, the
 * PreMulSum operations), the mapping of NCCL's enums onto weft's, and the last-error text.
 * Built on weft's public API; only logging comes from weft's internals. */
#ifndef WEFT_NCCL_SHIM_H
#define WEFT_NCCL_SHIM_H

#include <nccl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "fallback.h"
#include "premul.h"
#include "weft.h"

/* Ranks up to which weft's device communicators reach every peer (src/gpu/slots.h); past it
 * they run rings alone, and WEFT_NCCL_FALLBACK takes them. */
enum { WEFT_NCCL_ALL_PEERS = 8 };

/* comm is served by the real NCCL (SHIM_FORWARD forwards its calls). */
#define SHIM_IS_REAL(comm) ((comm) && (comm)->magic == SHIM_MAGIC && (comm)->real)

/* Marks every exported function: the NCCL name is a weak alias of the profiling one
 * (pnccl*), as in NCCL itself, so a profiler can wrap one and call the other. */
#define NCCL_EXPORT(ret, name, ...)                                                                \
  __attribute__((visibility("default"), weak, alias("p" #name))) ret name(__VA_ARGS__);            \
  __attribute__((visibility("default"))) ret p##name(__VA_ARGS__)

enum { SHIM_MAGIC = 0x77656674u }; /* "weft": a ncclComm_t that is not ours is refused */

struct ncclComm {
  uint32_t magic;
  weft_comm_t w;
  int device, rank, nranks, blocking;
  /* a non-blocking init runs on its own thread: ncclInProgress until it ends */
  _Atomic int state; /* ncclResult_t */
  pthread_t init_thread;
  int joined;
  weft_unique_id_t id;
  weft_config_t wconfig;
  pthread_mutex_t mu; /* ops */
  shim_premul_t *ops;
  int nops;
  /* served by the real NCCL (WEFT_NCCL_FALLBACK): its comm, and its library; w is NULL */
  ncclComm_t real;
  const shim_real_t *fb;
};

/* NCCL's result for a weft result, recording weft's message as this thread's last error. */
ncclResult_t shim_result(weft_result_t r);
/* Records this thread's last error (also logged at WARN) and returns r. */
ncclResult_t shim_error(ncclResult_t r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *shim_last_error(void);
/* Validates comm for a call; ncclInvalidArgument / ncclInvalidUsage with a message if it is
 * NULL, not ours, or its non-blocking init has not succeeded. */
ncclResult_t shim_ready(const struct ncclComm *comm, const char *fn);
ncclResult_t shim_dtype(ncclDataType_t t, const char *fn, weft_dtype_t *out);
/* A built-in op's weft_op_t, or the PreMulSum entry op names (*premul set, *op = WEFT_SUM). */
ncclResult_t shim_op(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dtype, const char *fn,
                     weft_op_t *out, shim_premul_t *premul);
/* NCCL_* variables with a weft meaning become WEFT_* ones (unless set); once per process. */
void shim_env_once(void);
/* Reads the caller's ncclConfig_t (any size from the oldest field set on): blocking. */
ncclResult_t shim_config(const ncclConfig_t *config, int *blocking);

#endif
