/* A stand-in for NVIDIA's libnccl.so.2 that test_nccl_fallback loads through
 * WEFT_NCCL_FALLBACK: a few nccl* functions that record their calls (fake_nccl_log) and make
 * toy communicators. Its split asks its own ncclCommCount, which only deep binding sends
 * here rather than to weft's library of the same names. Needs no GPU. */
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct ncclComm {
  unsigned magic;
  int rank, nranks;
  unsigned long long id;
};

enum { FAKE_MAGIC = 0xfa4e };
static char log_text[8192];

static void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void note(const char *fmt, ...) {
  size_t n = strlen(log_text);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(log_text + n, sizeof log_text - n, fmt, ap);
  va_end(ap);
  n = strlen(log_text);
  if (n + 1 < sizeof log_text) log_text[n] = ' ', log_text[n + 1] = 0;
}

const char *fake_nccl_log(void) { return log_text; }
unsigned long long fake_nccl_id(ncclComm_t c) { return c && c->magic == FAKE_MAGIC ? c->id : 0; }

ncclResult_t ncclGetVersion(int *v) {
  *v = 22899;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  unsigned long long v = 0xfeed0000ull + (unsigned long long)getpid();
  memset(id, 0, sizeof *id);
  memcpy(id->internal, &v, sizeof v);
  note("getid");
  return ncclSuccess;
}

static ncclComm_t make(int rank, int nranks, unsigned long long id) {
  ncclComm_t c = calloc(1, sizeof *c);
  if (c) *c = (struct ncclComm){FAKE_MAGIC, rank, nranks, id};
  return c;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t *config) {
  unsigned long long v;
  memcpy(&v, id.internal, sizeof v);
  note("init %d/%d blocking=%d id=%llx", rank, nranks, config ? config->blocking : -1, v);
  *comm = make(rank, nranks, v);
  return *comm ? ncclSuccess : ncclSystemError;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int *count) {
  if (!comm || comm->magic != FAKE_MAGIC) return ncclInvalidArgument;
  *count = comm->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank) {
  if (!comm || comm->magic != FAKE_MAGIC) return ncclInvalidArgument;
  *rank = comm->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config) {
  (void)config;
  int n = -1;
  ncclResult_t r = ncclCommCount(comm, &n); /* its own, if deep binding works */
  note("split %d %d count=%d", color, key, r == ncclSuccess ? n : -1);
  if (r != ncclSuccess) return r;
  *newcomm = make(comm->rank, comm->nranks, comm->id + 1);
  return ncclSuccess;
}

ncclResult_t ncclCommShrink(ncclComm_t comm, int *exclude, int count, ncclComm_t *newcomm,
                            ncclConfig_t *config, int flags) {
  (void)config;
  note("shrink %d first=%d flags=%d", count, count ? exclude[0] : -1, flags);
  *newcomm = make(comm->rank, comm->nranks - count, comm->id + 2);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  note("destroy %d", comm ? comm->nranks : -1);
  free(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  note("abort");
  free(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e) {
  (void)comm;
  *e = ncclSuccess;
  return ncclSuccess;
}

const char *ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return "the fake's last error";
}

ncclResult_t ncclAllReduce(const void *s, void *r, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  (void)s, (void)r, (void)stream;
  note("allreduce %zu %d %d on %d", count, (int)t, (int)op, comm ? comm->rank : -1);
  return comm && comm->magic == FAKE_MAGIC ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclGroupStart(void) {
  note("groupstart");
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  note("groupend");
  return ncclSuccess;
}
