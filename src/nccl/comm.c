/* Communicators of the NCCL ABI: unique ids, init (blocking, or on a thread of its own for a
 * non-blocking config), split, finalize, destroy, abort, and the queries. Each one wraps a
 * device communicator of weft on the GPU current at init. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "shim.h"

/* NCCL waits for a peer as long as it takes and leaves hangs to the caller's watchdog
 * (PyTorch's: 10 minutes by default); weft's 5-minute default would end a job whose rank
 * spends longer in, say, a checkpoint. Unless WEFT_TIMEOUT_MS says otherwise, 30 minutes. */
enum { SHIM_TIMEOUT_MS = 30 * 60 * 1000 };

static struct ncclComm *comm_new(int device, int blocking) {
  struct ncclComm *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->magic = SHIM_MAGIC;
  c->device = device;
  c->blocking = blocking;
  c->joined = 1;
  atomic_init(&c->state, ncclInProgress);
  pthread_mutex_init(&c->mu, NULL);
  weft_config_t wc = WEFT_CONFIG_INIT;
  wc.device = device;
  const char *t = getenv("WEFT_TIMEOUT_MS");
  wc.timeout_ms = t && *t ? 0 : SHIM_TIMEOUT_MS;
  c->wconfig = wc;
  return c;
}

static void comm_free(struct ncclComm *c) {
  c->magic = 0;
  pthread_mutex_destroy(&c->mu);
  free(c->ops);
  free(c);
}

static ncclResult_t current_device(const char *fn, int *dev) {
  cudaError_t e = cudaGetDevice(dev);
  if (e != cudaSuccess) {
    cudaGetLastError();
    return shim_error(ncclUnhandledCudaError, "%s: no usable GPU: %s", fn, cudaGetErrorString(e));
  }
  return ncclSuccess;
}

/* What a communicator's (possibly background) creation does. */
typedef struct {
  struct ncclComm *c, *parent;
  int nranks, rank, color, key;
} job_t;

static void *run_job(void *arg) {
  job_t *j = arg;
  struct ncclComm *c = j->c;
  weft_result_t r;
  if (j->parent)
    r = weft_comm_split(j->parent->w, j->color, j->key, &c->w, &c->wconfig);
  else
    r = weft_comm_init(&c->w, j->nranks, c->id, j->rank, &c->wconfig);
  ncclResult_t nr = shim_result(r);
  if (nr == ncclSuccess && c->w) {
    weft_comm_rank(c->w, &c->rank);
    weft_comm_count(c->w, &c->nranks);
    WEFT_INFO(WEFT_SUB_INIT, "nccl: rank %d of %d on GPU %d runs on weft %d (%s)", c->rank,
              c->nranks, c->device, weft_get_version(), c->blocking ? "blocking" : "non-blocking");
  }
  atomic_store(&c->state, nr);
  free(j);
  return NULL;
}

/* Runs job now (blocking) or on a thread; *out gets the comm either way unless the blocking
 * creation failed. */
static ncclResult_t start(job_t *j, ncclComm_t *out) {
  struct ncclComm *c = j->c;
  if (c->blocking) {
    run_job(j);
    ncclResult_t r = (ncclResult_t)atomic_load(&c->state);
    if (r != ncclSuccess) {
      comm_free(c);
      return r;
    }
    *out = c;
    return ncclSuccess;
  }
  c->joined = 0;
  if (pthread_create(&c->init_thread, NULL, run_job, j) != 0) {
    free(j);
    comm_free(c);
    return shim_error(ncclSystemError, "cannot start the thread of a non-blocking init");
  }
  *out = c;
  return ncclInProgress;
}

static void join(struct ncclComm *c) {
  if (!c->joined) {
    pthread_join(c->init_thread, NULL);
    c->joined = 1;
  }
}

NCCL_EXPORT(ncclResult_t, ncclGetVersion, int *version) {
  if (!version) return shim_error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_EXPORT(ncclResult_t, ncclGetUniqueId, ncclUniqueId *id) {
  shim_env_once();
  if (!id) return shim_error(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
  _Static_assert(sizeof(ncclUniqueId) == sizeof(weft_unique_id_t), "ids have one size");
  weft_unique_id_t w;
  weft_result_t r = weft_get_unique_id(&w);
  if (r == WEFT_SUCCESS) memcpy(id, &w, sizeof w);
  return shim_result(r);
}

NCCL_EXPORT(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *newcomm, int nranks,
            ncclUniqueId commId, int rank, ncclConfig_t *config) {
  const char *fn = "ncclCommInitRankConfig";
  int blocking = 1, dev = -1;
  shim_env_once();
  if (!newcomm) return shim_error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return shim_error(ncclInvalidArgument, "%s: rank %d of %d ranks", fn, rank, nranks);
  ncclResult_t r = shim_config(config, &blocking);
  if (r == ncclSuccess) r = current_device(fn, &dev);
  if (r != ncclSuccess) return r;
  struct ncclComm *c = comm_new(dev, blocking);
  job_t *j = calloc(1, sizeof *j);
  if (!c || !j) {
    free(j);
    if (c) comm_free(c);
    return shim_error(ncclSystemError, "%s: out of memory", fn);
  }
  memcpy(&c->id, &commId, sizeof c->id);
  *j = (job_t){.c = c, .nranks = nranks, .rank = rank};
  return start(j, newcomm);
}

NCCL_EXPORT(ncclResult_t, ncclCommInitRank, ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
            int rank) {
  return pncclCommInitRankConfig(newcomm, nranks, commId, rank, NULL);
}

/* Several ids spread NCCL's rendezvous over several roots; weft's one root serves all ranks,
 * so every rank takes the first. */
NCCL_EXPORT(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
            int nId, ncclUniqueId *commIds, ncclConfig_t *config) {
  if (nId < 1 || !commIds)
    return shim_error(ncclInvalidArgument, "ncclCommInitRankScalable: %d ids at %p", nId,
                      (void *)commIds);
  return pncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}

typedef struct {
  ncclComm_t *slot;
  ncclUniqueId id;
  int ndev, rank, device;
  ncclResult_t r;
} all_arg_t;

static void *init_one(void *p) {
  all_arg_t *a = p;
  cudaError_t e = cudaSetDevice(a->device);
  a->r = e != cudaSuccess ? shim_error(ncclUnhandledCudaError, "ncclCommInitAll: GPU %d: %s",
                                       a->device, cudaGetErrorString(e))
                          : pncclCommInitRank(a->slot, a->ndev, a->id, a->rank);
  return NULL;
}

/* One process, ndev ranks: each rank's blocking init on a thread of its own. */
NCCL_EXPORT(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist) {
  const char *fn = "ncclCommInitAll";
  if (!comms || ndev < 1) return shim_error(ncclInvalidArgument, "%s: %d ranks", fn, ndev);
  ncclUniqueId id;
  ncclResult_t r = pncclGetUniqueId(&id);
  if (r != ncclSuccess) return r;
  all_arg_t *a = calloc((size_t)ndev, sizeof *a);
  pthread_t *t = calloc((size_t)ndev, sizeof *t);
  int started = 0;
  if (!a || !t) r = shim_error(ncclSystemError, "%s: out of memory", fn);
  for (int i = 0; i < ndev && r == ncclSuccess; i++) {
    a[i] = (all_arg_t){
        .slot = &comms[i], .id = id, .ndev = ndev, .rank = i, .device = devlist ? devlist[i] : i};
    if (pthread_create(&t[i], NULL, init_one, &a[i]) != 0)
      r = shim_error(ncclSystemError, "%s: cannot start thread %d", fn, i);
    else
      started++;
  }
  for (int i = 0; i < started; i++) {
    pthread_join(t[i], NULL);
    if (r == ncclSuccess) r = a[i].r;
  }
  if (r != ncclSuccess) /* all or nothing */
    for (int i = 0; i < started; i++)
      if (a[i].r == ncclSuccess) pncclCommDestroy(comms[i]);
  free(a);
  free(t);
  return r;
}

NCCL_EXPORT(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
            ncclConfig_t *config) {
  const char *fn = "ncclCommSplit";
  ncclResult_t r = shim_ready(comm, fn);
  if (r != ncclSuccess) return r;
  if (!newcomm) return shim_error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  int blocking = comm->blocking; /* inherited unless config says */
  if (config && (r = shim_config(config, &blocking)) != ncclSuccess) return r;
  if (config && config->blocking == NCCL_CONFIG_UNDEF_INT) blocking = comm->blocking;
  struct ncclComm *c = comm_new(comm->device, blocking);
  job_t *j = calloc(1, sizeof *j);
  if (!c || !j) {
    free(j);
    if (c) comm_free(c);
    return shim_error(ncclSystemError, "%s: out of memory", fn);
  }
  c->wconfig.timeout_ms = comm->wconfig.timeout_ms;
  *j = (job_t){.c = c,
               .parent = comm,
               .color = color == NCCL_SPLIT_NOCOLOR ? WEFT_SPLIT_NOCOLOR : color,
               .key = key};
  if (color == NCCL_SPLIT_NOCOLOR) c->blocking = 1; /* nothing is kept: no handle to poll */
  r = start(j, newcomm);
  if (r == ncclSuccess && *newcomm && !(*newcomm)->w) { /* not a member */
    comm_free(*newcomm);
    *newcomm = NULL;
  }
  return r;
}

/* The excluded ranks do not take part in NCCL's shrink; weft's split needs every rank. */
NCCL_EXPORT(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
            int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  (void)excludeRanksList, (void)config, (void)shrinkFlags;
  if (newcomm) *newcomm = NULL;
  return shim_error(ncclInvalidUsage,
                    "ncclCommShrink (excluding %d ranks of comm %p) is not supported by weft: its "
                    "split needs every rank; call ncclCommSplit on all ranks instead",
                    excludeRanksCount, (void *)comm);
}

/* Every operation issued so far ends on the GPU: weft runs them on the callers' streams. */
NCCL_EXPORT(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  ncclResult_t r = shim_ready(comm, "ncclCommFinalize");
  if (r != ncclSuccess) return r;
  int saved = 0;
  cudaGetDevice(&saved);
  cudaError_t e = cudaSetDevice(comm->device);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  cudaSetDevice(saved);
  weft_result_t async = WEFT_SUCCESS;
  weft_comm_get_async_error(comm->w, &async);
  if (async != WEFT_SUCCESS) return shim_result(async);
  return e == cudaSuccess
             ? ncclSuccess
             : shim_error(ncclUnhandledCudaError, "ncclCommFinalize: %s", cudaGetErrorString(e));
}

static ncclResult_t release(ncclComm_t comm, const char *fn, int abort) {
  if (!comm) return ncclSuccess; /* NCCL accepts NULL here */
  if (comm->magic != SHIM_MAGIC)
    return shim_error(ncclInvalidArgument, "%s: comm %p is not a communicator of this library", fn,
                      (void *)comm);
  join(comm); /* a non-blocking init still running ends within its timeout */
  weft_result_t r = WEFT_SUCCESS;
  if (comm->w) {
    if (abort) weft_comm_abort(comm->w);
    r = weft_comm_destroy(comm->w);
  }
  comm_free(comm);
  return abort ? ncclSuccess : shim_result(r);
}

NCCL_EXPORT(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  return release(comm, "ncclCommDestroy", 0);
}

NCCL_EXPORT(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  return release(comm, "ncclCommAbort", 1);
}

/* Ends every operation in flight (they fail); the comm must still be destroyed. */
NCCL_EXPORT(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  ncclResult_t r = shim_ready(comm, "ncclCommRevoke");
  if (r != ncclSuccess) return r;
  if (revokeFlags != 0)
    return shim_error(ncclInvalidArgument, "ncclCommRevoke: flags %#x (must be 0)", revokeFlags);
  return shim_result(weft_comm_abort(comm->w));
}

NCCL_EXPORT(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError) {
  if (!asyncError)
    return shim_error(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  if (!comm || comm->magic != SHIM_MAGIC)
    return shim_error(ncclInvalidArgument, "ncclCommGetAsyncError: comm %p is not ours",
                      (void *)comm);
  int st = atomic_load(&comm->state);
  if (st != ncclSuccess) {
    *asyncError = (ncclResult_t)st; /* init in progress, or how it failed */
    return ncclSuccess;
  }
  weft_result_t e = WEFT_SUCCESS;
  weft_result_t r = weft_comm_get_async_error(comm->w, &e);
  if (r != WEFT_SUCCESS) return shim_result(r);
  *asyncError = e == WEFT_SUCCESS ? ncclSuccess : shim_result(e);
  if (e != WEFT_SUCCESS) shim_error(*asyncError, "%s", weft_get_last_error(comm->w));
  return ncclSuccess;
}

NCCL_EXPORT(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count) {
  ncclResult_t r = shim_ready(comm, "ncclCommCount");
  if (r == ncclSuccess && !count) r = shim_error(ncclInvalidArgument, "ncclCommCount: NULL");
  if (r == ncclSuccess) *count = comm->nranks;
  return r;
}

NCCL_EXPORT(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device) {
  ncclResult_t r = shim_ready(comm, "ncclCommCuDevice");
  if (r == ncclSuccess && !device) r = shim_error(ncclInvalidArgument, "ncclCommCuDevice: NULL");
  if (r == ncclSuccess) *device = comm->device;
  return r;
}

NCCL_EXPORT(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank) {
  ncclResult_t r = shim_ready(comm, "ncclCommUserRank");
  if (r == ncclSuccess && !rank) r = shim_error(ncclInvalidArgument, "ncclCommUserRank: NULL");
  if (r == ncclSuccess) *rank = comm->rank;
  return r;
}

NCCL_EXPORT(const char *, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the weft developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  default: return "unknown result code";
  }
}

NCCL_EXPORT(const char *, ncclGetLastError, ncclComm_t comm) {
  if (comm && comm->magic == SHIM_MAGIC && comm->w) {
    weft_result_t e = WEFT_SUCCESS;
    if (weft_comm_get_async_error(comm->w, &e) == WEFT_SUCCESS && e != WEFT_SUCCESS)
      return weft_get_last_error(comm->w);
  }
  return shim_last_error();
}
