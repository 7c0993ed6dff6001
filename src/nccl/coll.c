/* Collectives, point-to-point and groups of the NCCL ABI, each a call of weft's API on the
 * caller's stream. PreMulSum scales the input on the stream first (premul.cu), then sums; its
 * temporary buffers come from CUDA's stream-ordered allocator, so graphs can capture them,
 * and are given back after the operation (after the group, inside one). */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "shim.h"

/* per thread, like NCCL's and weft's groups */
static _Thread_local struct {
  int depth;
  struct pending {
    void *ptr;
    cudaStream_t stream;
  } * frees;
  int nfrees, cap;
} grp;

static void give_back(void *p, cudaStream_t s) { cudaFreeAsync(p, s); }

/* After the operation that reads p has been issued (now, or at the group's end). */
static ncclResult_t free_after(void *p, cudaStream_t s) {
  if (!grp.depth) {
    give_back(p, s);
    return ncclSuccess;
  }
  if (grp.nfrees == grp.cap) {
    int ncap = grp.cap ? 2 * grp.cap : 8;
    struct pending *n = realloc(grp.frees, (size_t)ncap * sizeof *n);
    if (!n) {
      give_back(p, s); /* before the group runs: its op must not run on freed memory */
      return shim_error(ncclSystemError, "group: out of memory");
    }
    grp.frees = n;
    grp.cap = ncap;
  }
  grp.frees[grp.nfrees++] = (struct pending){p, s};
  return ncclSuccess;
}

static void flush_frees(void) {
  for (int i = 0; i < grp.nfrees; i++)
    give_back(grp.frees[i].ptr, grp.frees[i].stream);
  free(grp.frees);
  grp.frees = NULL;
  grp.nfrees = grp.cap = 0;
}

/* The scaled copy of count elements of send that a PreMulSum sums, in a new stream-ordered
 * buffer (*tmp): the caller's buffers stay as they were if weft then refuses the call. It is
 * made on the comm's GPU, whichever is the caller's current one. */
static ncclResult_t premul_input(int device, const shim_premul_t *p, const void **send,
                                 size_t count, weft_dtype_t dt, cudaStream_t s, void **tmp) {
  size_t es = weft_dtype_size(dt), bytes = count * es;
  ncclResult_t r = ncclSuccess;
  *tmp = NULL;
  if (!count) return ncclSuccess;
  if (bytes / es != count)
    return shim_error(ncclInvalidArgument, "PreMulSum: count %zu overflows", count);
  int saved = device;
  cudaGetDevice(&saved);
  if (saved != device) cudaSetDevice(device);
  cudaError_t e = cudaMallocAsync(tmp, bytes, s);
  if (e != cudaSuccess) {
    cudaGetLastError();
    *tmp = NULL;
    r = shim_error(ncclUnhandledCudaError, "PreMulSum: a %zu-byte buffer: %s", bytes,
                   cudaGetErrorString(e));
    goto out;
  }
  int k = shim_premul_launch(*tmp, *send, count, (int)dt, p, s);
  if (k != 0) {
    give_back(*tmp, s);
    *tmp = NULL;
    r = shim_error(ncclUnhandledCudaError, "PreMulSum: scaling kernel: %s",
                   cudaGetErrorString((cudaError_t)k));
    goto out;
  }
  *send = *tmp;
out:
  if (saved != device) cudaSetDevice(saved);
  return r;
}

typedef struct {
  struct ncclComm *comm;
  weft_dtype_t dt;
  weft_op_t op;
  shim_premul_t premul;
  void *tmp; /* PreMulSum's scaled input, given back by finish */
} call_t;

static ncclResult_t prepare(call_t *c, ncclComm_t comm, ncclDataType_t dtype, int reduces,
                            ncclRedOp_t op, const char *fn) {
  ncclResult_t r = shim_ready(comm, fn);
  if (r == ncclSuccess) r = shim_dtype(dtype, fn, &c->dt);
  c->comm = comm;
  c->op = WEFT_SUM;
  c->premul.used = 0;
  c->tmp = NULL;
  if (r == ncclSuccess && reduces) r = shim_op(comm, op, dtype, fn, &c->op, &c->premul);
  return r;
}

/* With a PreMulSum op, *send becomes the scaled copy of its count elements (c->tmp). */
static ncclResult_t scale_input(call_t *c, const void **send, size_t count, cudaStream_t s) {
  if (!c->premul.used) return ncclSuccess;
  return premul_input(c->comm->device, &c->premul, send, count, c->dt, s, &c->tmp);
}

/* The call's result; the scaled copy goes back after the operation that reads it. */
static ncclResult_t finish(call_t *c, weft_result_t w, cudaStream_t s) {
  ncclResult_t r = shim_result(w);
  if (c->tmp) free_after(c->tmp, s);
  return r;
}

#define WS(stream) ((weft_stream_t)(void *)(stream))

NCCL_EXPORT(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count,
            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclAllReduce, sendbuff, recvbuff, count, datatype, op, comm->real, stream);
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 1, op, "ncclAllReduce");
  if (r != ncclSuccess || (r = scale_input(&c, &sendbuff, count, stream))) return r;
  return finish(&c, weft_allreduce(sendbuff, recvbuff, count, c.dt, c.op, comm->w, WS(stream)),
                stream);
}

NCCL_EXPORT(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, comm->real,
               stream);
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 1, op, "ncclReduceScatter");
  if (r != ncclSuccess) return r;
  size_t all = recvcount * (size_t)comm->nranks;
  if (comm->nranks && all / (size_t)comm->nranks != recvcount)
    return shim_error(ncclInvalidArgument, "ncclReduceScatter: recvcount %zu overflows", recvcount);
  if ((r = scale_input(&c, &sendbuff, all, stream))) return r;
  return finish(&c,
                weft_reduce_scatter(sendbuff, recvbuff, recvcount, c.dt, c.op, comm->w, WS(stream)),
                stream);
}

NCCL_EXPORT(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count,
            ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
            cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclReduce, sendbuff, recvbuff, count, datatype, op, root, comm->real, stream);
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 1, op, "ncclReduce");
  if (r != ncclSuccess || (r = scale_input(&c, &sendbuff, count, stream))) return r;
  return finish(&c, weft_reduce(sendbuff, recvbuff, count, c.dt, c.op, root, comm->w, WS(stream)),
                stream);
}

NCCL_EXPORT(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count,
            ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclBroadcast, sendbuff, recvbuff, count, datatype, root, comm->real, stream);
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 0, ncclSum, "ncclBroadcast");
  if (r != ncclSuccess) return r;
  return shim_result(weft_broadcast(sendbuff, recvbuff, count, c.dt, root, comm->w, WS(stream)));
}

NCCL_EXPORT(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root,
            ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclBcast, buff, count, datatype, root, comm->real, stream);
  return pncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

NCCL_EXPORT(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclAllGather, sendbuff, recvbuff, sendcount, datatype, comm->real, stream);
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 0, ncclSum, "ncclAllGather");
  if (r != ncclSuccess) return r;
  return shim_result(weft_allgather(sendbuff, recvbuff, sendcount, c.dt, comm->w, WS(stream)));
}

NCCL_EXPORT(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count,
            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclAlltoAll, sendbuff, recvbuff, count, datatype, comm->real, stream);
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 0, ncclSum, "ncclAlltoAll");
  if (r != ncclSuccess) return r;
  return shim_result(weft_alltoall(sendbuff, recvbuff, count, c.dt, comm->w, WS(stream)));
}

NCCL_EXPORT(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype,
            int peer, ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclSend, sendbuff, count, datatype, peer, comm->real, stream);
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 0, ncclSum, "ncclSend");
  if (r != ncclSuccess) return r;
  return shim_result(weft_send(sendbuff, count, c.dt, peer, comm->w, WS(stream)));
}

NCCL_EXPORT(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
            ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclRecv, recvbuff, count, datatype, peer, comm->real, stream);
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 0, ncclSum, "ncclRecv");
  if (r != ncclSuccess) return r;
  return shim_result(weft_recv(recvbuff, count, c.dt, peer, comm->w, WS(stream)));
}

/* Gather and scatter as a group of sends and receives (the root's own block included: weft
 * copies a rank's message to itself on the stream). */
static ncclResult_t rooted_p2p(const char *fn, int gather, const void *sendbuff, void *recvbuff,
                               size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream) {
  call_t c;
  ncclResult_t r = prepare(&c, comm, datatype, 0, ncclSum, fn);
  if (r != ncclSuccess) return r;
  if (root < 0 || root >= comm->nranks)
    return shim_error(ncclInvalidArgument, "%s: root %d is not a rank of %d", fn, root,
                      comm->nranks);
  size_t block = count * weft_dtype_size(c.dt);
  if (count && block / count != weft_dtype_size(c.dt))
    return shim_error(ncclInvalidArgument, "%s: count %zu overflows", fn, count);
  if (comm->rank == root && (size_t)comm->nranks > SIZE_MAX / (block ? block : 1))
    return shim_error(ncclInvalidArgument, "%s: count %zu overflows", fn, count);
  weft_result_t w = weft_group_start();
  if (gather) {
    if (w == WEFT_SUCCESS) w = weft_send(sendbuff, count, c.dt, root, comm->w, WS(stream));
    for (int p = 0; p < comm->nranks && comm->rank == root && w == WEFT_SUCCESS; p++)
      w = weft_recv((char *)recvbuff + (size_t)p * block, count, c.dt, p, comm->w, WS(stream));
  } else {
    for (int p = 0; p < comm->nranks && comm->rank == root && w == WEFT_SUCCESS; p++)
      w = weft_send((const char *)sendbuff + (size_t)p * block, count, c.dt, p, comm->w,
                    WS(stream));
    if (w == WEFT_SUCCESS) w = weft_recv(recvbuff, count, c.dt, root, comm->w, WS(stream));
  }
  weft_result_t e = weft_group_end(); /* reports a failed member too; nothing ran then */
  return shim_result(w != WEFT_SUCCESS ? w : e);
}

NCCL_EXPORT(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count,
            ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclGather, sendbuff, recvbuff, count, datatype, root, comm->real, stream);
  return rooted_p2p("ncclGather", 1, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

NCCL_EXPORT(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count,
            ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  SHIM_FORWARD(comm, ncclScatter, sendbuff, recvbuff, count, datatype, root, comm->real, stream);
  return rooted_p2p("ncclScatter", 0, sendbuff, recvbuff, count, datatype, root, comm, stream);
}

/* A group may hold comms of weft's and of the fallback NCCL (WEFT_NCCL_FALLBACK): both
 * libraries' groups open and close together. */
NCCL_EXPORT(ncclResult_t, ncclGroupStart, void) {
  const shim_real_t *real = shim_real_loaded();
  ncclResult_t r = shim_result(weft_group_start());
  if (r != ncclSuccess) return r;
  grp.depth++;
  if (real && (r = real->ncclGroupStart()) != ncclSuccess)
    return shim_real_error(real, NULL, r, "ncclGroupStart");
  return ncclSuccess;
}

NCCL_EXPORT(ncclResult_t, ncclGroupEnd, void) {
  if (!grp.depth) return shim_error(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  const shim_real_t *real = shim_real_loaded();
  grp.depth--;
  ncclResult_t r = shim_result(weft_group_end());
  if (!grp.depth) flush_frees();
  ncclResult_t rr = real ? real->ncclGroupEnd() : ncclSuccess;
  if (rr != ncclSuccess && rr != ncclInProgress && r == ncclSuccess)
    r = shim_real_error(real, NULL, rr, "ncclGroupEnd");
  return r == ncclSuccess ? rr : r;
}

/* weft has no cost model to report: the group's operations are dropped unrun and the
 * estimate stays NCCL_UNDEF_FLOAT. */
NCCL_EXPORT(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t *simInfo) {
  if (!grp.depth) return shim_error(ncclInvalidUsage, "ncclGroupSimulateEnd without a group");
  if (simInfo && simInfo->magic != 0x74685283)
    return shim_error(ncclInvalidArgument,
                      "ncclSimInfo_t was not set from NCCL_SIM_INFO_INITIALIZER");
  grp.depth--;
  weft_result_t w = weft_group_discard();
  if (!grp.depth) flush_frees();
  if (simInfo) simInfo->estimatedTime = NCCL_UNDEF_FLOAT;
  /* the fallback's ops are dropped too (an NCCL before 2.22 has no simulation: they run) */
  const shim_real_t *real = shim_real_loaded();
  ncclResult_t rr = !real                        ? ncclSuccess
                    : real->ncclGroupSimulateEnd ? real->ncclGroupSimulateEnd(simInfo)
                                                 : real->ncclGroupEnd();
  if (w == WEFT_SUCCESS && rr != ncclSuccess)
    return shim_real_error(real, NULL, rr, "ncclGroupSimulateEnd");
  return shim_result(w);
}

NCCL_EXPORT(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar,
            ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  SHIM_FORWARD(comm, ncclRedOpCreatePreMulSum, op, scalar, datatype, residence, comm->real);
  const char *fn = "ncclRedOpCreatePreMulSum";
  weft_dtype_t dt;
  ncclResult_t r = shim_ready(comm, fn);
  if (r == ncclSuccess) r = shim_dtype(datatype, fn, &dt);
  if (r != ncclSuccess) return r;
  if (!op || !scalar) return shim_error(ncclInvalidArgument, "%s: op or scalar is NULL", fn);
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate)
    return shim_error(ncclInvalidArgument, "%s: residence %d", fn, (int)residence);
  shim_premul_t p = {.used = 1, .dtype = datatype, .residence = residence};
  if (residence == ncclScalarHostImmediate)
    memcpy(&p.value, scalar, weft_dtype_size(dt));
  else
    p.device = scalar;
  pthread_mutex_lock(&comm->mu);
  int k = 0;
  while (k < comm->nops && comm->ops[k].used)
    k++;
  if (k == comm->nops) {
    shim_premul_t *n = realloc(comm->ops, (size_t)(k + 1) * sizeof *n);
    if (n) {
      comm->ops = n;
      comm->nops++;
    } else {
      k = -1;
    }
  }
  if (k >= 0) comm->ops[k] = p;
  pthread_mutex_unlock(&comm->mu);
  if (k < 0) return shim_error(ncclSystemError, "%s: out of memory", fn);
  *op = (ncclRedOp_t)(ncclNumOps + k);
  return ncclSuccess;
}

NCCL_EXPORT(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  SHIM_FORWARD(comm, ncclRedOpDestroy, op, comm->real);
  ncclResult_t r = shim_ready(comm, "ncclRedOpDestroy");
  if (r != ncclSuccess) return r;
  int k = (int)op - ncclNumOps;
  pthread_mutex_lock(&comm->mu);
  int ok = k >= 0 && k < comm->nops && comm->ops[k].used;
  if (ok) comm->ops[k].used = 0;
  pthread_mutex_unlock(&comm->mu);
  return ok ? ncclSuccess
            : shim_error(ncclInvalidArgument,
                         "ncclRedOpDestroy: op %d is not a live PreMulSum op of this comm",
                         (int)op);
}
