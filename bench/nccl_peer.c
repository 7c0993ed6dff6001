/* The NCCL peer (see nccl_peer.h). Enum values are NCCL's ABI; where nccl.h is present at
 * build time they are checked against it. */
#include "nccl_peer.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
_Static_assert(ncclFloat32 == 7 && ncclFloat64 == 8 && ncclFloat16 == 6 && ncclBfloat16 == 9 &&
                   ncclInt8 == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclUint32 == 3 &&
                   ncclInt64 == 4 && ncclUint64 == 5,
               "NCCL data type values");
_Static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4,
               "NCCL reduction values");
#endif
#endif

typedef struct {
  char internal[128];
} nid_t;
typedef void *ncomm_t;

typedef struct {
  void *lib;
  ncomm_t comm;
  int (*get_id)(nid_t *);
  int (*init_rank)(ncomm_t *, int, nid_t, int);
  int (*destroy)(ncomm_t);
  int (*allreduce)(const void *, void *, size_t, int, int, ncomm_t, cudaStream_t);
  int (*reduce_scatter)(const void *, void *, size_t, int, int, ncomm_t, cudaStream_t);
  int (*allgather)(const void *, void *, size_t, int, ncomm_t, cudaStream_t);
  int (*broadcast)(const void *, void *, size_t, int, int, ncomm_t, cudaStream_t);
  int (*reduce)(const void *, void *, size_t, int, int, int, ncomm_t, cudaStream_t);
  int (*send)(const void *, size_t, int, int, ncomm_t, cudaStream_t);
  int (*recv)(void *, size_t, int, int, ncomm_t, cudaStream_t);
  int (*group_start)(void);
  int (*group_end)(void);
  const char *(*error_string)(int);
  int (*get_version)(int *);
  int (*reg)(ncomm_t, void *, size_t, void **); /* optional: NCCL 2.19 on */
  int (*dereg)(ncomm_t, void *);
} nccl_t;

static const int DTYPE[WEFT_DTYPE_COUNT] = {
    [WEFT_F32] = 7,       [WEFT_F64] = 8,       [WEFT_F16] = 6, [WEFT_BF16] = 9,
    [WEFT_I8] = 0,        [WEFT_U8] = 1,        [WEFT_I32] = 2, [WEFT_I64] = 4,
    [WEFT_FP8_E4M3] = 10, [WEFT_FP8_E5M2] = 11, [WEFT_U32] = 3, [WEFT_U64] = 5};
static const int OP[WEFT_OP_COUNT] = {
    [WEFT_SUM] = 0, [WEFT_PROD] = 1, [WEFT_MIN] = 3, [WEFT_MAX] = 2, [WEFT_AVG] = 4};

void *bench_nccl_open(weft_comm_t ctl, int rank, int nranks, char *version, size_t len) {
  nccl_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  /* NVLink multicast stays off unless the caller chose otherwise. */
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  p->lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (!p->lib) {
    fprintf(stderr, "collbench: --compare nccl: %s\n", dlerror());
    free(p);
    return NULL;
  }
  struct {
    void **fn;
    const char *name;
  } syms[] = {{(void **)&p->get_id, "ncclGetUniqueId"},
              {(void **)&p->init_rank, "ncclCommInitRank"},
              {(void **)&p->destroy, "ncclCommDestroy"},
              {(void **)&p->allreduce, "ncclAllReduce"},
              {(void **)&p->reduce_scatter, "ncclReduceScatter"},
              {(void **)&p->allgather, "ncclAllGather"},
              {(void **)&p->broadcast, "ncclBroadcast"},
              {(void **)&p->reduce, "ncclReduce"},
              {(void **)&p->send, "ncclSend"},
              {(void **)&p->recv, "ncclRecv"},
              {(void **)&p->group_start, "ncclGroupStart"},
              {(void **)&p->group_end, "ncclGroupEnd"},
              {(void **)&p->error_string, "ncclGetErrorString"},
              {(void **)&p->get_version, "ncclGetVersion"}};
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].fn = dlsym(p->lib, syms[i].name);
    if (!*syms[i].fn) {
      fprintf(stderr, "collbench: libnccl.so.2 lacks %s\n", syms[i].name);
      goto fail;
    }
  }
  p->reg = (int (*)(ncomm_t, void *, size_t, void **))dlsym(p->lib, "ncclCommRegister");
  p->dereg = (int (*)(ncomm_t, void *))dlsym(p->lib, "ncclCommDeregister");
  int v = 0;
  p->get_version(&v);
  snprintf(version, len, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
  nid_t id = {{0}};
  int e = rank == 0 ? p->get_id(&id) : 0, all = 0;
  weft_allreduce(&e, &all, 1, WEFT_I32, WEFT_MAX, ctl, NULL);
  if (all != 0) {
    fprintf(stderr, "collbench: ncclGetUniqueId failed\n");
    goto fail;
  }
  if (weft_broadcast(&id, &id, sizeof id, WEFT_U8, 0, ctl, NULL) != WEFT_SUCCESS) goto fail;
  e = p->init_rank(&p->comm, nranks, id, rank);
  if (e != 0) {
    fprintf(stderr, "collbench: ncclCommInitRank: %s\n", p->error_string(e));
    goto fail;
  }
  return p;
fail:
  dlclose(p->lib);
  free(p);
  return NULL;
}

void bench_nccl_close(void *peer) {
  nccl_t *p = peer;
  if (!p) return;
  p->destroy(p->comm);
  dlclose(p->lib);
  free(p);
}

int bench_nccl_register(void *peer, void *buf, size_t bytes, void **handle, char *why, size_t len) {
  nccl_t *p = peer;
  *handle = NULL;
  if (!p->reg || !p->dereg) {
    snprintf(why, len, "this libnccl.so.2 has no ncclCommRegister");
    return -1;
  }
  int e = p->reg(p->comm, buf, bytes, handle);
  if (e != 0) {
    snprintf(why, len, "ncclCommRegister: %s", p->error_string(e));
    *handle = NULL;
    return -1;
  }
  return 0;
}

void bench_nccl_deregister(void *peer, void *handle) {
  nccl_t *p = peer;
  if (p && handle) p->dereg(p->comm, handle);
}

weft_result_t bench_nccl_call(void *peer, int coll, const void *s, void *r, size_t count,
                              const bench_opts_t *o, int rank, int nranks) {
  nccl_t *p = peer;
  cudaStream_t st = (cudaStream_t)o->stream;
  int t = DTYPE[o->dtype], op = OP[o->op], e = 0;
  size_t es = weft_dtype_size(o->dtype);
  switch (coll) {
  case B_ALLREDUCE: e = p->allreduce(s, r, count, t, op, p->comm, st); break;
  case B_REDUCE_SCATTER: e = p->reduce_scatter(s, r, count, t, op, p->comm, st); break;
  case B_ALLGATHER: e = p->allgather(s, r, count, t, p->comm, st); break;
  case B_BROADCAST: e = p->broadcast(s, r, count, t, o->root, p->comm, st); break;
  case B_REDUCE: e = p->reduce(s, r, count, t, op, o->root, p->comm, st); break;
  case B_ALLTOALL:
    p->group_start();
    for (int q = 0; q < nranks; q++) {
      p->send((const char *)s + (size_t)q * count * es, count, t, q, p->comm, st);
      p->recv((char *)r + (size_t)q * count * es, count, t, q, p->comm, st);
    }
    e = p->group_end();
    break;
  case B_ALLTOALLV: { /* NCCL has no alltoallv: the same blocks as grouped sends and receives */
    const size_t *v = bench_a2av(count, rank, nranks), n = (size_t)nranks;
    if (!v) return WEFT_ERR_NO_MEMORY;
    p->group_start();
    for (int q = 0; q < nranks; q++) {
      p->send((const char *)s + v[n + (size_t)q] * es, v[q], t, q, p->comm, st);
      p->recv((char *)r + v[3 * n + (size_t)q] * es, v[2 * n + (size_t)q], t, q, p->comm, st);
    }
    e = p->group_end();
    break;
  }
  default:
    p->group_start();
    p->send(s, count, t, (rank + 1) % nranks, p->comm, st);
    p->recv(r, count, t, (rank + nranks - 1) % nranks, p->comm, st);
    e = p->group_end();
    break;
  }
  if (e != 0) {
    fprintf(stderr, "collbench: NCCL %s: %s\n", bench_colls[coll].name, p->error_string(e));
    return WEFT_ERR_SYSTEM;
  }
  return WEFT_SUCCESS;
}
