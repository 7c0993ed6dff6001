/* NCCL's enums onto weft's (results, data types, reduction ops), the last-error text, the
 * caller's ncclConfig_t, and the NCCL_* variables that mean something to weft. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "shim.h"

static _Thread_local char last_error[1024];

ncclResult_t shim_error(ncclResult_t r, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  WEFT_WARN(WEFT_SUB_ALL, "nccl: %s", last_error);
  return r;
}

const char *shim_last_error(void) { return last_error; }

ncclResult_t shim_result(weft_result_t r) {
  if (r == WEFT_SUCCESS) return ncclSuccess;
  snprintf(last_error, sizeof last_error, "%s", weft_get_last_error(NULL));
  switch (r) {
  case WEFT_ERR_INVALID_ARG: return ncclInvalidArgument;
  case WEFT_ERR_NO_MEMORY:
  case WEFT_ERR_SYSTEM: return ncclSystemError;
  /* a peer died, hung past the timeout or spoke garbage: NCCL's "remote" class */
  case WEFT_ERR_TIMEOUT:
  case WEFT_ERR_PEER_LOST:
  case WEFT_ERR_PROTOCOL: return ncclRemoteError;
  case WEFT_ERR_MISMATCH:
  case WEFT_ERR_ABORTED:
  case WEFT_ERR_UNSUPPORTED: return ncclInvalidUsage;
  case WEFT_ERR_IN_PROGRESS: return ncclInProgress;
  default: return ncclInternalError;
  }
}

ncclResult_t shim_ready(const struct ncclComm *comm, const char *fn) {
  if (!comm) return shim_error(ncclInvalidArgument, "%s: comm is NULL", fn);
  if (comm->magic != SHIM_MAGIC)
    return shim_error(ncclInvalidArgument, "%s: comm %p is not a communicator of this library", fn,
                      (const void *)comm);
  int st = atomic_load(&comm->state);
  if (st == ncclInProgress)
    return shim_error(ncclInvalidUsage,
                      "%s: the communicator's non-blocking init has not finished (poll "
                      "ncclCommGetAsyncError until ncclSuccess)",
                      fn);
  if (st != ncclSuccess || (!comm->w && !comm->real))
    return shim_error(ncclInvalidUsage, "%s: the communicator's init failed", fn);
  return ncclSuccess;
}

ncclResult_t shim_dtype(ncclDataType_t t, const char *fn, weft_dtype_t *out) {
  static const weft_dtype_t map[ncclNumTypes] = {[ncclInt8] = WEFT_I8,
                                                 [ncclUint8] = WEFT_U8,
                                                 [ncclInt32] = WEFT_I32,
                                                 [ncclUint32] = WEFT_U32,
                                                 [ncclInt64] = WEFT_I64,
                                                 [ncclUint64] = WEFT_U64,
                                                 [ncclFloat16] = WEFT_F16,
                                                 [ncclFloat32] = WEFT_F32,
                                                 [ncclFloat64] = WEFT_F64,
                                                 [ncclBfloat16] = WEFT_BF16,
                                                 [ncclFloat8e4m3] = WEFT_FP8_E4M3,
                                                 [ncclFloat8e5m2] = WEFT_FP8_E5M2};
  if ((int)t < 0 || (int)t >= ncclNumTypes)
    return shim_error(ncclInvalidArgument, "%s: data type %d is not an ncclDataType_t", fn, (int)t);
  *out = map[t];
  return ncclSuccess;
}

ncclResult_t shim_op(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dtype, const char *fn,
                     weft_op_t *out, shim_premul_t *premul) {
  static const weft_op_t map[ncclNumOps] = {[ncclSum] = WEFT_SUM,
                                            [ncclProd] = WEFT_PROD,
                                            [ncclMax] = WEFT_MAX,
                                            [ncclMin] = WEFT_MIN,
                                            [ncclAvg] = WEFT_AVG};
  premul->used = 0;
  if ((int)op >= 0 && (int)op < ncclNumOps) {
    *out = map[op];
    return ncclSuccess;
  }
  int k = (int)op - ncclNumOps;
  pthread_mutex_lock(&comm->mu);
  int ok = k >= 0 && k < comm->nops && comm->ops[k].used;
  if (ok) *premul = comm->ops[k];
  pthread_mutex_unlock(&comm->mu);
  if (!ok)
    return shim_error(ncclInvalidArgument,
                      "%s: reduction op %d is neither built in nor a live "
                      "ncclRedOpCreatePreMulSum op of this communicator",
                      fn, (int)op);
  if (premul->dtype != dtype)
    return shim_error(ncclInvalidArgument,
                      "%s: PreMulSum op %d was made for data type %d, the call passes %d", fn,
                      (int)op, (int)premul->dtype, (int)dtype);
  *out = WEFT_SUM;
  return ncclSuccess;
}

/* NCCL's config grew field by field; a caller built against an older nccl.h passes a
 * smaller size, and only the fields inside it are read. */
ncclResult_t shim_config(const ncclConfig_t *config, int *blocking) {
  const char *env = getenv("NCCL_COMM_BLOCKING");
  *blocking = env && *env ? atoi(env) != 0 : 1;
  if (!config) return ncclSuccess;
  if (config->magic != 0xcafebeef)
    return shim_error(ncclInvalidArgument,
                      "ncclConfig_t at %p was not set from NCCL_CONFIG_INITIALIZER (magic %#x)",
                      (const void *)config, config->magic);
  size_t need = offsetof(ncclConfig_t, blocking) + sizeof config->blocking;
  if (config->size < need || config->size > 4096)
    return shim_error(ncclInvalidArgument, "ncclConfig_t.size %zu is not a config's size",
                      config->size);
  if (config->blocking != NCCL_CONFIG_UNDEF_INT) *blocking = config->blocking != 0;
  return ncclSuccess;
}

/* NCCL_X with a weft meaning -> WEFT_X, unless the user set WEFT_X; other NCCL_* are listed
 * once at INFO as ignored. Runs before any weft call reads its parameters. */
static void env_map(void) {
  static const char *const pairs[][2] = {{"NCCL_DEBUG", "WEFT_DEBUG"},
                                         {"NCCL_DEBUG_SUBSYS", "WEFT_DEBUG_SUBSYS"},
                                         {"NCCL_DEBUG_FILE", "WEFT_DEBUG_FILE"},
                                         {"NCCL_SOCKET_IFNAME", "WEFT_SOCKET_IFNAME"},
                                         {"NCCL_P2P_DISABLE", "WEFT_P2P_DISABLE"},
                                         {"NCCL_HOSTID", "WEFT_HOSTID"}};
  /* read by this library itself */
  static const char *const own[] = {"NCCL_COMM_BLOCKING", "NCCL_NVLS_ENABLE"};
  for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
    const char *v = getenv(pairs[i][0]);
    if (!v || getenv(pairs[i][1])) continue;
    /* NCCL's VERSION level prints the version only; weft's quietest level is WARN */
    if (!strcmp(pairs[i][0], "NCCL_DEBUG") && !strcasecmp(v, "VERSION")) v = "WARN";
    setenv(pairs[i][1], v, 0);
  }
  extern char **environ;
  char ignored[1024] = "";
  size_t len = 0;
  for (char **e = environ; *e; e++) {
    if (strncmp(*e, "NCCL_", 5)) continue;
    size_t n = strcspn(*e, "=");
    int known = 0;
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0] && !known; i++)
      known = strlen(pairs[i][0]) == n && !strncmp(*e, pairs[i][0], n);
    for (size_t i = 0; i < sizeof own / sizeof own[0] && !known; i++)
      known = strlen(own[i]) == n && !strncmp(*e, own[i], n);
    if (!known && len + n + 2 < sizeof ignored)
      len += (size_t)snprintf(ignored + len, sizeof ignored - len, "%s%.*s", len ? " " : "", (int)n,
                              *e);
  }
  if (len) WEFT_INFO(WEFT_SUB_INIT, "nccl: ignored (no meaning in weft): %s", ignored);
}

void shim_env_once(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, env_map);
}
