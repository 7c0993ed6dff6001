/* Communicators of the NCCL ABI: unique ids, init (blocking, or on a thread of its own for a
 * non-blocking config), split, finalize, destroy, abort, and the queries. Each one wraps a
 * device communicator of weft on the GPU current at init. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "param.h"
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

/* What a communicator's (possibly background) creation does: an init (through the real
 * NCCL where weft refuses it and WEFT_NCCL_FALLBACK names one), a split or a shrink. */
typedef struct {
  struct ncclComm *c, *parent;
  int nranks, rank, color, key;
  int *exclude, nexclude, shrink_flags; /* a shrink when exclude is set or parent is shrunk */
  int shrink;
  char fallback[4096];      /* WEFT_NCCL_FALLBACK as init read it, or "" */
  ncclConfig_t real_config; /* the caller's, for the real NCCL (blocking: this job waits) */
} job_t;

static void job_free(job_t *j) {
  free(j->exclude);
  free(j);
}

/* The real NCCL makes the comm: rank 0's id reaches the others over h, weft's host comm. */
static ncclResult_t init_real(job_t *j, weft_comm_t h) {
  struct ncclComm *c = j->c;
  const shim_real_t *real = NULL;
  ncclResult_t mine = shim_real_load(j->fallback, &real);
  char why[1024];
  snprintf(why, sizeof why, "%s", shim_last_error());
  int32_t vote = mine != ncclSuccess, any = 0;
  weft_result_t w = weft_allreduce(&vote, &any, 1, WEFT_I32, WEFT_MAX, h, NULL);
  if (w != WEFT_SUCCESS) return shim_result(w);
  if (mine != ncclSuccess) return shim_error(mine, "%s", why);
  if (any)
    return shim_error(ncclInvalidUsage,
                      "ncclCommInitRank: another rank could not load WEFT_NCCL_FALLBACK (its "
                      "log says why); rank %d loaded %s",
                      j->rank, j->fallback);
  struct {
    int32_t status;
    ncclUniqueId id;
  } m = {0};
  if (j->rank == 0) m.status = (int32_t)real->ncclGetUniqueId(&m.id);
  w = weft_broadcast(&m, &m, sizeof m, WEFT_U8, 0, h, NULL);
  if (w != WEFT_SUCCESS) return shim_result(w);
  if (m.status != ncclSuccess)
    return j->rank == 0 ? shim_real_error(real, NULL, (ncclResult_t)m.status, "ncclGetUniqueId")
                        : shim_error((ncclResult_t)m.status,
                                     "ncclCommInitRank: rank 0 could not make the fallback "
                                     "NCCL's id (its log says why)");
  ncclComm_t rc = NULL;
  ncclResult_t r = real->ncclCommInitRankConfig(&rc, j->nranks, m.id, j->rank, &j->real_config);
  if (r != ncclSuccess) return shim_real_error(real, rc, r, "ncclCommInitRankConfig");
  c->real = rc;
  c->fb = real;
  c->rank = j->rank;
  c->nranks = j->nranks;
  WEFT_INFO(WEFT_SUB_INIT, "nccl: rank %d of %d on GPU %d runs on the fallback NCCL %s", c->rank,
            c->nranks, c->device, real->path);
  return ncclSuccess;
}

/* With WEFT_NCCL_FALLBACK set the ranks decide together who serves: a host comm of weft's
 * (which any set of ranks can make) carries a vote on the device comm's init, so that all
 * take weft or all the real NCCL, never a mix, and then rank 0's real id. */
static ncclResult_t init_or_fallback(job_t *j) {
  struct ncclComm *c = j->c;
  weft_config_t hc = WEFT_CONFIG_INIT;
  hc.timeout_ms = c->wconfig.timeout_ms;
  weft_comm_t h = NULL, d = NULL;
  weft_result_t w = weft_comm_init(&h, j->nranks, c->id, j->rank, &hc);
  if (w != WEFT_SUCCESS) return shim_result(w);
  w = weft_comm_split(h, 0, j->rank, &d, &c->wconfig);
  ncclResult_t mine = shim_result(w); /* keeps weft's reason as this thread's */
  char why[1024];
  snprintf(why, sizeof why, "%s", shim_last_error());
  /* 0: weft serves; 1: weft refuses (unsupported), or past WEFT_NCCL_ALL_PEERS ranks, where its
   * device communicators run rings alone (no alltoall, no message beyond a ring neighbour)
   * and the real NCCL serves every call; 2: another failure */
  int32_t vote = w == WEFT_SUCCESS ? 0 : w == WEFT_ERR_UNSUPPORTED ? 1 : 2, worst = 0;
  if (vote == 0 && j->nranks > WEFT_NCCL_ALL_PEERS) {
    vote = 1;
    snprintf(why, sizeof why,
             "past %d ranks weft's device communicators run only ring algorithms (docs/hosts.md)",
             WEFT_NCCL_ALL_PEERS);
  }
  weft_result_t aw = weft_allreduce(&vote, &worst, 1, WEFT_I32, WEFT_MAX, h, NULL);
  ncclResult_t r = ncclSuccess;
  if (aw != WEFT_SUCCESS) {
    r = shim_result(aw);
  } else if (worst == 0) {
    c->w = d;
    d = NULL;
  } else if (worst == 2) {
    r = vote == 2 ? shim_error(mine, "%s", why)
                  : shim_error(ncclInvalidUsage,
                               "ncclCommInitRank: another rank's init failed, not for want of "
                               "support (its log says why): no fallback");
  } else {
    WEFT_INFO(WEFT_SUB_INIT,
              "nccl: rank %d: weft cannot serve this communicator (%s); the "
              "fallback NCCL will",
              j->rank, vote ? why : "another rank's reason");
    if (d) weft_comm_destroy(d);
    d = NULL;
    r = init_real(j, h);
  }
  if (d) weft_comm_destroy(d);
  weft_comm_destroy(h);
  return r;
}

static void *run_job(void *arg) {
  job_t *j = arg;
  struct ncclComm *c = j->c;
  ncclResult_t nr;
  if (j->shrink)
    nr = shim_result(weft_comm_shrink(j->parent->w, j->exclude, j->nexclude, j->shrink_flags, &c->w,
                                      &c->wconfig));
  else if (j->parent)
    nr = shim_result(weft_comm_split(j->parent->w, j->color, j->key, &c->w, &c->wconfig));
  else if (j->fallback[0])
    nr = init_or_fallback(j);
  else
    nr = shim_result(weft_comm_init(&c->w, j->nranks, c->id, j->rank, &c->wconfig));
  if (nr == ncclSuccess && c->w) {
    weft_comm_rank(c->w, &c->rank);
    weft_comm_count(c->w, &c->nranks);
    WEFT_INFO(WEFT_SUB_INIT, "nccl: rank %d of %d on GPU %d runs on weft %d (%s)", c->rank,
              c->nranks, c->device, weft_get_version(), c->blocking ? "blocking" : "non-blocking");
  }
  atomic_store(&c->state, nr);
  job_free(j);
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
    job_free(j);
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
  if (r != ncclSuccess) return r;
  const char *fallback = weft_param_get_str(WEFT_PARAM_NCCL_FALLBACK);
  if (strlen(fallback) >= sizeof((job_t *)0)->fallback)
    return shim_error(ncclInvalidArgument, "WEFT_NCCL_FALLBACK: a path of %zu bytes",
                      strlen(fallback));
  r = current_device(fn, &dev);
  /* no usable GPU is one more thing weft cannot serve: its init says so on every rank */
  if (r != ncclSuccess && fallback[0]) dev = 0, r = ncclSuccess;
  if (r != ncclSuccess) return r;
  struct ncclComm *c = comm_new(dev, blocking);
  job_t *j = calloc(1, sizeof *j);
  if (!c || !j) {
    free(j);
    if (c) comm_free(c);
    return shim_error(ncclSystemError, "%s: out of memory", fn);
  }
  memcpy(&c->id, &commId, sizeof c->id);
  j->c = c;
  j->nranks = nranks;
  j->rank = rank;
  snprintf(j->fallback, sizeof j->fallback, "%s", fallback);
  /* the real NCCL gets the caller's fields (as many as its size holds), blocking: the job
   * already runs on a thread of its own where the caller asked for non-blocking */
  ncclConfig_t rc = NCCL_CONFIG_INITIALIZER;
  if (config) memcpy(&rc, config, config->size < sizeof rc ? config->size : sizeof rc);
  rc.size = sizeof rc;
  rc.blocking = 1;
  j->real_config = rc;
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

/* A comm the real NCCL made from parent's (split, shrink): ours wraps its handle. A
 * non-blocking one is ready as a handle at once; ncclCommGetAsyncError asks the real one. */
static ncclResult_t wrap_real(ncclComm_t parent, ncclResult_t r, ncclComm_t rc, ncclComm_t *newcomm,
                              const char *fn) {
  if (r != ncclSuccess && r != ncclInProgress)
    return shim_real_error(parent->fb, parent->real, r, fn);
  if (!rc) return r; /* NCCL_SPLIT_NOCOLOR */
  struct ncclComm *c = comm_new(parent->device, 1);
  if (!c) {
    parent->fb->ncclCommAbort(rc);
    return shim_error(ncclSystemError, "%s: out of memory", fn);
  }
  c->real = rc;
  c->fb = parent->fb;
  c->rank = c->nranks = -1; /* the real comm answers the queries */
  atomic_store(&c->state, ncclSuccess);
  *newcomm = c;
  return r;
}

NCCL_EXPORT(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
            ncclConfig_t *config) {
  const char *fn = "ncclCommSplit";
  if (SHIM_IS_REAL(comm)) {
    if (!newcomm) return shim_error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
    *newcomm = NULL;
    ncclComm_t rc = NULL;
    ncclResult_t r = comm->fb->ncclCommSplit
                         ? comm->fb->ncclCommSplit(comm->real, color, key, &rc, config)
                         : shim_error(ncclInvalidUsage, "%s: the fallback NCCL has none", fn);
    return wrap_real(comm, r, rc, newcomm, fn);
  }
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
  j->c = c;
  j->parent = comm;
  j->color = color == NCCL_SPLIT_NOCOLOR ? WEFT_SPLIT_NOCOLOR : color;
  j->key = key;
  if (color == NCCL_SPLIT_NOCOLOR) c->blocking = 1; /* nothing is kept: no handle to poll */
  r = start(j, newcomm);
  if (r == ncclSuccess && *newcomm && !(*newcomm)->w) { /* not a member */
    comm_free(*newcomm);
    *newcomm = NULL;
  }
  return r;
}

/* The exclude list, checked here so that a bad one fails the call itself, also when the
 * shrink then runs on a thread of its own. */
static ncclResult_t check_exclude(const ncclComm_t comm, const int *list, int count,
                                  const char *fn) {
  if (count < 0 || (count > 0 && !list))
    return shim_error(ncclInvalidArgument, "%s: %d ranks to exclude at %p", fn, count,
                      (const void *)list);
  unsigned char *seen = calloc((size_t)comm->nranks, 1);
  if (!seen) return shim_error(ncclSystemError, "%s: out of memory", fn);
  ncclResult_t r = ncclSuccess;
  for (int i = 0; i < count && r == ncclSuccess; i++) {
    int x = list[i];
    if (x < 0 || x >= comm->nranks)
      r = shim_error(ncclInvalidArgument, "%s: excluded rank %d (entry %d) is not a rank of %d", fn,
                     x, i, comm->nranks);
    else if (seen[x])
      r = shim_error(ncclInvalidArgument, "%s: rank %d is listed twice (entry %d)", fn, x, i);
    else if (x == comm->rank)
      r = shim_error(ncclInvalidArgument,
                     "%s: rank %d excludes itself (excluded ranks do not call ncclCommShrink)", fn,
                     x);
    else
      seen[x] = 1;
  }
  free(seen);
  return r;
}

/* Only the remaining ranks call it (weft_comm_shrink): the lowest of them makes the new
 * comm's id and hands it to the others directly, so excluded ranks, dead or alive, take no
 * part. NCCL_SHRINK_ABORT aborts the parent first: its operations in flight end. The parent
 * still has to be destroyed, as in NCCL. */
NCCL_EXPORT(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
            int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  const char *fn = "ncclCommShrink";
  if (!newcomm) return shim_error(ncclInvalidArgument, "%s: newcomm is NULL", fn);
  *newcomm = NULL;
  if (SHIM_IS_REAL(comm)) {
    ncclComm_t rc = NULL;
    ncclResult_t r = comm->fb->ncclCommShrink
                         ? comm->fb->ncclCommShrink(comm->real, excludeRanksList, excludeRanksCount,
                                                    &rc, config, shrinkFlags)
                         : shim_error(ncclInvalidUsage, "%s: the fallback NCCL has none", fn);
    return wrap_real(comm, r, rc, newcomm, fn);
  }
  ncclResult_t r = shim_ready(comm, fn);
  if (r != ncclSuccess) return r;
  if (shrinkFlags != NCCL_SHRINK_DEFAULT && shrinkFlags != NCCL_SHRINK_ABORT)
    return shim_error(ncclInvalidArgument,
                      "%s: flags %#x (NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT)", fn, shrinkFlags);
  if ((r = check_exclude(comm, excludeRanksList, excludeRanksCount, fn)) != ncclSuccess) return r;
  int blocking = comm->blocking; /* inherited unless config says, as in a split */
  if (config && (r = shim_config(config, &blocking)) != ncclSuccess) return r;
  if (config && config->blocking == NCCL_CONFIG_UNDEF_INT) blocking = comm->blocking;
  struct ncclComm *c = comm_new(comm->device, blocking);
  job_t *j = calloc(1, sizeof *j);
  int *ex = malloc(sizeof *ex * (size_t)(excludeRanksCount ? excludeRanksCount : 1));
  if (!c || !j || !ex) {
    free(j);
    free(ex);
    if (c) comm_free(c);
    return shim_error(ncclSystemError, "%s: out of memory", fn);
  }
  if (excludeRanksCount) memcpy(ex, excludeRanksList, sizeof *ex * (size_t)excludeRanksCount);
  c->wconfig.timeout_ms = comm->wconfig.timeout_ms;
  j->c = c;
  j->parent = comm;
  j->shrink = 1;
  j->exclude = ex;
  j->nexclude = excludeRanksCount;
  j->shrink_flags = shrinkFlags == NCCL_SHRINK_ABORT ? WEFT_SHRINK_ABORT : 0;
  return start(j, newcomm);
}

/* Every operation issued so far ends on the GPU: weft runs them on the callers' streams. */
NCCL_EXPORT(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  SHIM_FORWARD(comm, ncclCommFinalize, comm->real);
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
  if (comm->real) {
    ncclResult_t rr =
        abort ? comm->fb->ncclCommAbort(comm->real) : comm->fb->ncclCommDestroy(comm->real);
    if (rr != ncclSuccess) rr = shim_real_error(comm->fb, NULL, rr, fn);
    comm_free(comm);
    return rr;
  }
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
  SHIM_FORWARD(comm, ncclCommRevoke, comm->real, revokeFlags);
  ncclResult_t r = shim_ready(comm, "ncclCommRevoke");
  if (r != ncclSuccess) return r;
  if (revokeFlags != 0)
    return shim_error(ncclInvalidArgument, "ncclCommRevoke: flags %#x (must be 0)", revokeFlags);
  return shim_result(weft_comm_abort(comm->w));
}

NCCL_EXPORT(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError) {
  if (!asyncError)
    return shim_error(ncclInvalidArgument, "ncclCommGetAsyncError: asyncError is NULL");
  SHIM_FORWARD(comm, ncclCommGetAsyncError, comm->real, asyncError);
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
  SHIM_FORWARD(comm, ncclCommCount, comm->real, count);
  ncclResult_t r = shim_ready(comm, "ncclCommCount");
  if (r == ncclSuccess && !count) r = shim_error(ncclInvalidArgument, "ncclCommCount: NULL");
  if (r == ncclSuccess) *count = comm->nranks;
  return r;
}

NCCL_EXPORT(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device) {
  SHIM_FORWARD(comm, ncclCommCuDevice, comm->real, device);
  ncclResult_t r = shim_ready(comm, "ncclCommCuDevice");
  if (r == ncclSuccess && !device) r = shim_error(ncclInvalidArgument, "ncclCommCuDevice: NULL");
  if (r == ncclSuccess) *device = comm->device;
  return r;
}

NCCL_EXPORT(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank) {
  SHIM_FORWARD(comm, ncclCommUserRank, comm->real, rank);
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
  if (SHIM_IS_REAL(comm)) return comm->fb->ncclGetLastError(comm->real);
  if (comm && comm->magic == SHIM_MAGIC && comm->w) {
    weft_result_t e = WEFT_SUCCESS;
    if (weft_comm_get_async_error(comm->w, &e) == WEFT_SUCCESS && e != WEFT_SUCCESS)
      return weft_get_last_error(comm->w);
  }
  return shim_last_error();
}
