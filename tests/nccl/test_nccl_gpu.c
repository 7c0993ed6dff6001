/* libnccl.so.2 (NCCL's ABI on weft) through nccl.h and the CUDA runtime only: the parent makes
 * the ids and forks a process per rank (--share: all on GPU 0, which NCCL refuses); each checks
 * collectives, groups, PreMulSum, graphs, errors, split, non-blocking init and abort against exact
 * host oracles, and shrink (default, and with the abort flag while an allreduce waits for the
 * rank left out). usage: test_nccl_gpu RANKS [--share]; TEST_NCCL_GPU_TIMEOUT_S (240) bounds it. */
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* encode() writes an integer's low bytes as the element */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "element encoding assumes little endian");

enum {
  NIDS = 3,        /* the main comm, the non-blocking one, the one that is aborted */
  TIMEOUT_S = 240, /* every rank's whole run; TEST_NCCL_GPU_TIMEOUT_S overrides */
  GRACE_S = 30,    /* once a rank has failed hard, its peers are likely stuck in a collective */
  SENTINEL = 0xa5, /* bytes an operation must overwrite, or must leave alone */
  AR_MAX = (1 << 20) + 3,
  C2_MAX = 300001, /* the largest odd count of the rooted and gathering collectives */
  A2A_BIG = 50001, /* block unit of the large uneven all_to_all */
};

static const size_t ar_counts[] = {1, 1000, AR_MAX};
static const size_t c2_counts[] = {1, 1001, C2_MAX};

/* ---- results ---- */

static struct {
  int rank, n, dev;
  cudaStream_t s;
  ncclComm_t comm;
  int pass, fail, skip;
  size_t cap;                           /* bytes of each buffer below */
  unsigned char *d_a, *d_b, *d_c, *d_d; /* device */
  unsigned char *h_a, *h_b, *h_c, *h_d; /* pinned host */
} g;

static void pass(const char *name) {
  printf("%d PASS %s\n", g.rank, name);
  g.pass++;
}

static void fail(const char *name, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(const char *name, const char *fmt, ...) {
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  printf("%d FAIL %s: %s\n", g.rank, name, msg);
  g.fail++;
}

static void skip(const char *name, const char *why) {
  printf("%d SKIP %s: %s\n", g.rank, name, why);
  g.skip++;
}

static int expect(int ok, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* PASS when ok, else FAIL with the message; returns ok. */
static int expect(int ok, const char *name, const char *fmt, ...) {
  if (ok) {
    pass(name);
    return 1;
  }
  char msg[768];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  fail(name, "%s", msg);
  return 0;
}

/* A call that must succeed: on failure the FAIL line carries the library's own text. */
static int nccl_ok(ncclResult_t r, const char *name, const char *call) {
  if (r == ncclSuccess) return 1;
  fail(name, "%s returned %s (%d): %s", call, ncclGetErrorString(r), (int)r,
       ncclGetLastError(NULL));
  return 0;
}

static int cuda_ok(cudaError_t e, const char *name, const char *call) {
  if (e == cudaSuccess) return 1;
  fail(name, "%s: %s", call, cudaGetErrorString(e));
  return 0;
}

#define NCCL(name, call) nccl_ok((call), (name), #call)
#define CUDA(name, call) cuda_ok((call), (name), #call)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  while (nanosleep(&ts, &ts) != 0) {}
}

static int h2d(void *dst, const void *src, size_t bytes, const char *name) {
  return !bytes || CUDA(name, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, g.s));
}

static int d2h(void *dst, const void *src, size_t bytes, const char *name) {
  return !bytes || CUDA(name, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, g.s));
}

static int fill_dev(void *dst, size_t bytes, const char *name) {
  return !bytes || CUDA(name, cudaMemsetAsync(dst, SENTINEL, bytes, g.s));
}

static int settle(const char *name) { return CUDA(name, cudaStreamSynchronize(g.s)); }

/* Reports where got and want first differ and how often; PASS when they agree. */
static int same(const char *name, const void *got, const void *want, size_t count, size_t size) {
  if (!memcmp(got, want, count * size)) {
    pass(name);
    return 1;
  }
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < count; i++)
    if (memcmp((const char *)got + i * size, (const char *)want + i * size, size) && !bad++)
      first = i;
  uint64_t a = 0, b = 0;
  memcpy(&a, (const char *)got + first * size, size);
  memcpy(&b, (const char *)want + first * size, size);
  fail(name, "%zu of %zu elements wrong; the first at %zu: 0x%0*llx, want 0x%0*llx", bad, count,
       first, (int)(2 * size), (unsigned long long)a, (int)(2 * size), (unsigned long long)b);
  return 0;
}

/* ---- element types and exact values ---- */

typedef enum { K_SINT, K_UINT, K_FLOAT } kind_t;

typedef struct {
  ncclDataType_t t;
  const char *name;
  int size;
  kind_t kind;
  int eb, mb, bias, maxexp; /* floats: exponent and mantissa bits, bias, largest power of 2 */
} dt_t;

static const dt_t dtypes[] = {
    {ncclInt8, "int8", 1, K_SINT, 0, 0, 0, 0},
    {ncclUint8, "uint8", 1, K_UINT, 0, 0, 0, 0},
    {ncclInt32, "int32", 4, K_SINT, 0, 0, 0, 0},
    {ncclUint32, "uint32", 4, K_UINT, 0, 0, 0, 0},
    {ncclInt64, "int64", 8, K_SINT, 0, 0, 0, 0},
    {ncclUint64, "uint64", 8, K_UINT, 0, 0, 0, 0},
    {ncclFloat16, "float16", 2, K_FLOAT, 5, 10, 15, 15},
    {ncclFloat32, "float32", 4, K_FLOAT, 8, 23, 127, 127},
    {ncclFloat64, "float64", 8, K_FLOAT, 11, 52, 1023, 1023},
    {ncclBfloat16, "bfloat16", 2, K_FLOAT, 8, 7, 127, 127},
    {ncclFloat8e4m3, "float8e4m3", 1, K_FLOAT, 4, 3, 7, 8}, /* no infinity: 448 is the max */
    {ncclFloat8e5m2, "float8e5m2", 1, K_FLOAT, 5, 2, 15, 15},
};
enum { NDT = sizeof dtypes / sizeof dtypes[0] };

static const dt_t *dt_of(ncclDataType_t t) {
  for (int k = 0; k < NDT; k++)
    if (dtypes[k].t == t) return &dtypes[k];
  return NULL;
}

static const char *op_name(ncclRedOp_t op) {
  static const char *const names[] = {"sum", "prod", "max", "min", "avg"};
  return (int)op >= 0 && (int)op < ncclNumOps ? names[op] : "premulsum";
}

/* f16, bf16 and fp8 bits of an integer the caller knows is exact in the format; written by
 * hand so the oracle shares no code (and no rounding) with the library. */
static uint32_t small_float(int64_t x, int eb, int mb, int bias) {
  if (!x) return 0;
  uint32_t sign = x < 0;
  uint64_t a = x < 0 ? (uint64_t)-x : (uint64_t)x;
  int e = 63 - __builtin_clzll(a);
  uint64_t frac = e >= mb ? a >> (e - mb) : a << (mb - e);
  return sign << (eb + mb) | (uint32_t)(e + bias) << mb | (uint32_t)(frac - (1ull << mb));
}

/* Logical values travel as uint64_t: two's complement for signed and float (an integer there),
 * the plain value for unsigned. */
static void encode(const dt_t *d, uint64_t v, void *dst) {
  if (d->kind != K_FLOAT) {
    memcpy(dst, &v, (size_t)d->size); /* the low bytes: integer wrap, as the library's */
  } else if (d->t == ncclFloat32) {
    float f = (float)(int64_t)v;
    memcpy(dst, &f, 4);
  } else if (d->t == ncclFloat64) {
    double f = (double)(int64_t)v;
    memcpy(dst, &f, 8);
  } else {
    uint32_t b = small_float((int64_t)v, d->eb, d->mb, d->bias);
    memcpy(dst, &b, (size_t)d->size);
  }
}

static uint64_t width_mask(const dt_t *d) {
  return d->size == 8 ? ~0ull : (1ull << (8 * d->size)) - 1;
}

static int64_t sign_extend(const dt_t *d, uint64_t v) {
  int sh = 64 - 8 * d->size;
  return (int64_t)(v << sh) >> sh;
}

/* Mixes the index so that a block landing at a wrong offset shows. */
static uint32_t mixh(size_t i) { return (uint32_t)((uint64_t)(i + 1) * 2654435761u) >> 24; }

/* Rank r's element i of an allreduce with op. The values keep every partial result exact (see
 * exact()); unsigned types carry their top bit where a signed comparison or division would give
 * another answer. */
static uint64_t ar_value(const dt_t *d, ncclRedOp_t op, int r, int n, size_t i) {
  uint32_t h = mixh(i), ur = (uint32_t)r;
  int fp8 = d->kind == K_FLOAT && d->size == 1;
  uint64_t top = 1ull << (8 * d->size - 1);
  if (op == ncclProd) {
    static const int64_t sv[] = {1, 2, 3, -1}, fv[] = {1, 2, -1};
    if (d->kind == K_UINT) return 1 + (ur + h) % 3;
    if (d->kind == K_SINT) return (uint64_t)sv[(ur + h) % 4];
    return (uint64_t)fv[(ur + h) % 3]; /* powers of two: exact in every float type */
  }
  if (op == ncclMax || op == ncclMin) {
    if (d->kind == K_UINT) return ((ur + i) % 3 == 0 ? top : 0) + (3 * ur + h) % 9;
    return (uint64_t)((int64_t)((3 * ur + h) % 9) - 4);
  }
  if (op == ncclAvg && d->kind == K_FLOAT) {
    /* +1 and -1 cancel across ranks: the sum is n times the shared part, its average exact */
    int sgn = (n % 2 && r == n - 1) ? 0 : (r % 2 ? -1 : 1);
    return (uint64_t)((int64_t)(fp8 ? h % 2 : h % 4) + sgn);
  }
  if (fp8) return (ur + h) % 3;
  return 1 + (ur + h) % 4 + (d->kind == K_UINT && r == 0 ? top : 0);
}

/* Whether every partial result of the values above is exact in d; integers always are (they
 * wrap, as the oracle does). */
static int exact(const dt_t *d, ncclRedOp_t op, int n) {
  if (d->kind != K_FLOAT) return 1;
  int64_t all_exact = 1ll << (d->mb + 1); /* every integer up to it is representable */
  int64_t per_rank = d->size == 1 ? 2 : 4;
  if (op == ncclSum || op == ncclAvg) return per_rank * n <= all_exact;
  if (op == ncclProd) return n <= d->maxexp;
  return 1;
}

static int greater(const dt_t *d, uint64_t a, uint64_t b) {
  return d->kind == K_UINT ? a > b : (int64_t)a > (int64_t)b;
}

static uint64_t ar_expect(const dt_t *d, ncclRedOp_t op, int n, size_t i) {
  uint64_t acc = ar_value(d, op, 0, n, i);
  for (int r = 1; r < n; r++) {
    uint64_t v = ar_value(d, op, r, n, i);
    if (op == ncclProd)
      acc *= v;
    else if (op == ncclMax)
      acc = greater(d, v, acc) ? v : acc;
    else if (op == ncclMin)
      acc = greater(d, acc, v) ? v : acc;
    else
      acc += v;
  }
  if (op != ncclAvg) return acc;
  /* the sum as the type holds it, then divided: unsigned stays unsigned */
  if (d->kind == K_FLOAT) return (uint64_t)((int64_t)acc / n);
  if (d->kind == K_UINT) return (acc & width_mask(d)) / (uint64_t)n;
  return (uint64_t)(sign_extend(d, acc) / n);
}

/* Section 2's element from rank a for b (a root, a destination, a replay), index i: distinct
 * per (a, b) for up to 10 ranks, and sums of them exact in f32. */
static uint64_t pv(int a, int b, size_t i) { return (uint64_t)(a * 1000 + b * 100 + mixh(i) % 97); }

static void fill_pv(const dt_t *d, unsigned char *h, size_t count, int a, int b) {
  for (size_t i = 0; i < count; i++)
    encode(d, pv(a, b, i), h + i * (size_t)d->size);
}

/* ---- 1: allreduce, every type and op ---- */

static void allreduce_one(const dt_t *d, ncclRedOp_t op, size_t count, int inplace) {
  char name[160];
  snprintf(name, sizeof name, "allreduce %s %s count=%zu %s", d->name, op_name(op), count,
           inplace ? "in-place" : "out-of-place");
  if (!exact(d, op, g.n)) {
    skip(name, "the result would not be exact in this type with this many ranks");
    return;
  }
  size_t es = (size_t)d->size, bytes = count * es;
  for (size_t i = 0; i < count; i++)
    encode(d, ar_value(d, op, g.rank, g.n, i), g.h_a + i * es);
  unsigned char *recv = inplace ? g.d_a : g.d_b;
  if (!h2d(g.d_a, g.h_a, bytes, name) || (!inplace && !fill_dev(g.d_b, bytes, name))) return;
  if (!NCCL(name, ncclAllReduce(g.d_a, recv, count, d->t, op, g.comm, g.s))) return;
  if (!d2h(g.h_b, recv, bytes, name) || !settle(name)) return;
  for (size_t i = 0; i < count; i++)
    encode(d, ar_expect(d, op, g.n, i), g.h_c + i * es);
  same(name, g.h_b, g.h_c, count, es);
}

static void test_allreduce(void) {
  static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  for (int k = 0; k < NDT; k++)
    for (int o = 0; o < 5; o++)
      for (size_t c = 0; c < sizeof ar_counts / sizeof ar_counts[0]; c++)
        for (int inplace = 0; inplace < 2; inplace++)
          allreduce_one(&dtypes[k], ops[o], ar_counts[c], inplace);
}

/* ---- 2: rooted and gathering collectives ---- */

static void test_broadcast(const dt_t *d, size_t count, int root) {
  char name[160];
  size_t es = (size_t)d->size, bytes = count * es;
  snprintf(name, sizeof name, "broadcast %s count=%zu root=%d", d->name, count, root);
  /* only the root's sendbuff may be read */
  if (g.rank == root)
    fill_pv(d, g.h_a, count, root, 0);
  else
    memset(g.h_a, SENTINEL, bytes);
  if (h2d(g.d_a, g.h_a, bytes, name) && fill_dev(g.d_b, bytes, name) &&
      NCCL(name, ncclBroadcast(g.d_a, g.d_b, count, d->t, root, g.comm, g.s)) &&
      d2h(g.h_b, g.d_b, bytes, name) && settle(name)) {
    fill_pv(d, g.h_c, count, root, 0);
    same(name, g.h_b, g.h_c, count, es);
  }

  snprintf(name, sizeof name, "bcast %s count=%zu root=%d", d->name, count, root);
  if (g.rank == root)
    fill_pv(d, g.h_a, count, root, 1);
  else
    memset(g.h_a, SENTINEL, bytes);
  if (h2d(g.d_a, g.h_a, bytes, name) &&
      NCCL(name, ncclBcast(g.d_a, count, d->t, root, g.comm, g.s)) &&
      d2h(g.h_b, g.d_a, bytes, name) && settle(name)) {
    fill_pv(d, g.h_c, count, root, 1);
    same(name, g.h_b, g.h_c, count, es);
  }
}

static void test_reduce(const dt_t *d, size_t count, int root, ncclRedOp_t op, int inplace) {
  char name[160];
  size_t es = (size_t)d->size, bytes = count * es;
  snprintf(name, sizeof name, "reduce %s %s count=%zu root=%d %s", d->name, op_name(op), count,
           root, inplace ? "in-place" : "out-of-place");
  fill_pv(d, g.h_a, count, g.rank, root);
  unsigned char *recv = inplace ? g.d_a : g.d_b;
  if (!h2d(g.d_a, g.h_a, bytes, name) || (!inplace && !fill_dev(g.d_b, bytes, name))) return;
  if (!NCCL(name, ncclReduce(g.d_a, recv, count, d->t, op, root, g.comm, g.s))) return;
  if (!d2h(g.h_b, recv, bytes, name) || !settle(name)) return;
  if (g.rank != root) {
    /* recvbuff is the root's only: elsewhere it keeps what it held */
    if (inplace)
      memcpy(g.h_c, g.h_a, bytes);
    else
      memset(g.h_c, SENTINEL, bytes);
  } else {
    for (size_t i = 0; i < count; i++) {
      uint64_t acc = 0;
      for (int r = 0; r < g.n; r++)
        acc = op == ncclMax ? (r == 0 || pv(r, root, i) > acc ? pv(r, root, i) : acc)
                            : acc + pv(r, root, i);
      encode(d, acc, g.h_c + i * es);
    }
  }
  same(name, g.h_b, g.h_c, count, es);
}

static void test_allgather(const dt_t *d, size_t count, int inplace) {
  char name[160];
  size_t es = (size_t)d->size, bytes = count * es, all = bytes * (size_t)g.n;
  snprintf(name, sizeof name, "allgather %s count=%zu %s", d->name, count,
           inplace ? "in-place" : "out-of-place");
  fill_pv(d, g.h_a, count, g.rank, 2);
  unsigned char *mine = g.d_b + (size_t)g.rank * bytes;
  if (!fill_dev(g.d_b, all, name) || !h2d(inplace ? mine : g.d_a, g.h_a, bytes, name)) return;
  if (!NCCL(name, ncclAllGather(inplace ? mine : g.d_a, g.d_b, count, d->t, g.comm, g.s))) return;
  if (!d2h(g.h_b, g.d_b, all, name) || !settle(name)) return;
  for (int q = 0; q < g.n; q++)
    fill_pv(d, g.h_c + (size_t)q * bytes, count, q, 2);
  same(name, g.h_b, g.h_c, count * (size_t)g.n, es);
}

static void test_reduce_scatter(const dt_t *d, size_t count, ncclRedOp_t op, int inplace) {
  char name[160];
  size_t es = (size_t)d->size, bytes = count * es, all = bytes * (size_t)g.n;
  snprintf(name, sizeof name, "reducescatter %s %s count=%zu %s", d->name, op_name(op), count,
           inplace ? "in-place" : "out-of-place");
  for (int p = 0; p < g.n; p++)
    fill_pv(d, g.h_a + (size_t)p * bytes, count, g.rank, p);
  unsigned char *recv = inplace ? g.d_a + (size_t)g.rank * bytes : g.d_b;
  if (!h2d(g.d_a, g.h_a, all, name) || (!inplace && !fill_dev(g.d_b, bytes, name))) return;
  if (!NCCL(name, ncclReduceScatter(g.d_a, recv, count, d->t, op, g.comm, g.s))) return;
  if (!d2h(g.h_b, recv, bytes, name) || !settle(name)) return;
  for (size_t i = 0; i < count; i++) {
    uint64_t acc = 0;
    for (int r = 0; r < g.n; r++)
      acc += pv(r, g.rank, i);
    /* 1000 * n(n-1)/2 + n * (...) divides by n: the average is an exact integer */
    encode(d, op == ncclAvg ? acc / (uint64_t)g.n : acc, g.h_c + i * es);
  }
  same(name, g.h_b, g.h_c, count, es);
}

static void test_alltoall(const dt_t *d, size_t count) {
  char name[160];
  size_t es = (size_t)d->size, bytes = count * es, all = bytes * (size_t)g.n;
  snprintf(name, sizeof name, "alltoall %s count=%zu", d->name, count);
  for (int p = 0; p < g.n; p++)
    fill_pv(d, g.h_a + (size_t)p * bytes, count, g.rank, p);
  if (!h2d(g.d_a, g.h_a, all, name) || !fill_dev(g.d_b, all, name)) return;
  if (!NCCL(name, ncclAlltoAll(g.d_a, g.d_b, count, d->t, g.comm, g.s))) return;
  if (!d2h(g.h_b, g.d_b, all, name) || !settle(name)) return;
  for (int q = 0; q < g.n; q++)
    fill_pv(d, g.h_c + (size_t)q * bytes, count, q, g.rank);
  same(name, g.h_b, g.h_c, count * (size_t)g.n, es);
}

static void test_gather(const dt_t *d, size_t count, int root, int inplace) {
  char name[160];
  size_t es = (size_t)d->size, bytes = count * es, all = bytes * (size_t)g.n;
  snprintf(name, sizeof name, "gather %s count=%zu root=%d %s", d->name, count, root,
           inplace ? "in-place" : "out-of-place");
  fill_pv(d, g.h_a, count, g.rank, root + 3);
  /* in place: the root's own block already sits at recvbuff + root * count */
  int at_root = inplace && g.rank == root;
  unsigned char *send = at_root ? g.d_b + (size_t)root * bytes : g.d_a;
  if (!fill_dev(g.d_b, all, name) || !h2d(send, g.h_a, bytes, name)) return;
  if (!NCCL(name, ncclGather(send, g.d_b, count, d->t, root, g.comm, g.s))) return;
  if (!d2h(g.h_b, g.d_b, all, name) || !settle(name)) return;
  memset(g.h_c, SENTINEL, all); /* recvbuff is not used off the root */
  if (g.rank == root)
    for (int q = 0; q < g.n; q++)
      fill_pv(d, g.h_c + (size_t)q * bytes, count, q, root + 3);
  same(name, g.h_b, g.h_c, count * (size_t)g.n, es);
}

static void test_scatter(const dt_t *d, size_t count, int root, int inplace) {
  char name[160];
  size_t es = (size_t)d->size, bytes = count * es, all = bytes * (size_t)g.n;
  snprintf(name, sizeof name, "scatter %s count=%zu root=%d %s", d->name, count, root,
           inplace ? "in-place" : "out-of-place");
  if (g.rank == root)
    for (int p = 0; p < g.n; p++)
      fill_pv(d, g.h_a + (size_t)p * bytes, count, root, p);
  else
    memset(g.h_a, SENTINEL, all); /* sendbuff is not used off the root */
  int at_root = inplace && g.rank == root;
  unsigned char *recv = at_root ? g.d_a + (size_t)root * bytes : g.d_b;
  if (!h2d(g.d_a, g.h_a, all, name) || (!at_root && !fill_dev(g.d_b, bytes, name))) return;
  if (!NCCL(name, ncclScatter(g.d_a, recv, count, d->t, root, g.comm, g.s))) return;
  if (!d2h(g.h_b, recv, bytes, name) || !settle(name)) return;
  fill_pv(d, g.h_c, count, root, g.rank);
  same(name, g.h_b, g.h_c, count, es);
}

static void test_rooted(void) {
  const dt_t *types[] = {dt_of(ncclFloat32), dt_of(ncclInt32)};
  for (int k = 0; k < 2; k++) {
    for (size_t c = 0; c < sizeof c2_counts / sizeof c2_counts[0]; c++) {
      const dt_t *d = types[k];
      size_t count = c2_counts[c];
      for (int root = 0; root < g.n; root++) {
        test_broadcast(d, count, root);
        test_reduce(d, count, root, ncclSum, 0);
        test_reduce(d, count, root, ncclMax, 0);
        test_reduce(d, count, root, ncclSum, 1);
        test_gather(d, count, root, 0);
        test_gather(d, count, root, 1);
        test_scatter(d, count, root, 0);
        test_scatter(d, count, root, 1);
      }
      test_allgather(d, count, 0);
      test_allgather(d, count, 1);
      test_reduce_scatter(d, count, ncclSum, 0);
      test_reduce_scatter(d, count, ncclAvg, 0);
      test_reduce_scatter(d, count, ncclSum, 1);
      test_alltoall(d, count);
    }
  }
}

/* ---- 3: PreMulSum ---- */

/* in_r[i] = 1 + (r + h) % 4, scalar_r = r + 1: sum_r scalar_r * in_r <= 2 n (n + 1), exact in
 * bf16 up to 10 ranks (256) and in f16 up to 31 (2048). */
static uint64_t pm_value(int r, size_t i) { return 1 + ((uint32_t)r + mixh(i)) % 4; }

static uint64_t pm_expect(int n, size_t i) {
  uint64_t acc = 0;
  for (int r = 0; r < n; r++)
    acc += (uint64_t)(r + 1) * pm_value(r, i);
  return acc;
}

/* Runs the op (made by the caller) as an allreduce out of place and in place, and as a
 * reduce-scatter, each checked against sum_r (r + 1) * in_r. */
static void premul_runs(const dt_t *d, ncclRedOp_t op, const char *what) {
  char name[192];
  size_t es = (size_t)d->size;
  const size_t count = 100003, rcount = 30011;
  for (int inplace = 0; inplace < 2; inplace++) {
    snprintf(name, sizeof name, "premulsum %s %s allreduce %s", d->name, what,
             inplace ? "in-place" : "out-of-place");
    for (size_t i = 0; i < count; i++)
      encode(d, pm_value(g.rank, i), g.h_a + i * es);
    unsigned char *recv = inplace ? g.d_a : g.d_b;
    if (!h2d(g.d_a, g.h_a, count * es, name) || (!inplace && !fill_dev(g.d_b, count * es, name)))
      continue;
    if (!NCCL(name, ncclAllReduce(g.d_a, recv, count, d->t, op, g.comm, g.s))) continue;
    if (!d2h(g.h_b, recv, count * es, name) || !settle(name)) continue;
    for (size_t i = 0; i < count; i++)
      encode(d, pm_expect(g.n, i), g.h_c + i * es);
    same(name, g.h_b, g.h_c, count, es);
  }
  snprintf(name, sizeof name, "premulsum %s %s reducescatter", d->name, what);
  size_t all = rcount * (size_t)g.n;
  /* block p of rank r: element j of the whole buffer is pm_value(r, j) */
  for (size_t j = 0; j < all; j++)
    encode(d, pm_value(g.rank, j), g.h_a + j * es);
  if (!h2d(g.d_a, g.h_a, all * es, name) || !fill_dev(g.d_b, rcount * es, name)) return;
  if (!NCCL(name, ncclReduceScatter(g.d_a, g.d_b, rcount, d->t, op, g.comm, g.s))) return;
  if (!d2h(g.h_b, g.d_b, rcount * es, name) || !settle(name)) return;
  for (size_t i = 0; i < rcount; i++)
    encode(d, pm_expect(g.n, (size_t)g.rank * rcount + i), g.h_c + i * es);
  same(name, g.h_b, g.h_c, rcount, es);
}

static void premul_type(const dt_t *d, ncclScalarResidence_t res) {
  char name[192];
  const char *what = res == ncclScalarDevice ? "device-scalar" : "host-scalar";
  snprintf(name, sizeof name, "premulsum %s %s create", d->name, what);
  if (d->kind == K_FLOAT && 2ll * g.n * (g.n + 1) > 1ll << (d->mb + 1)) {
    skip(name, "the weighted sum would not be exact in this type with this many ranks");
    return;
  }
  unsigned char scalar[8] = {0};
  void *dev_scalar = NULL;
  ncclRedOp_t op;
  if (res == ncclScalarDevice) {
    /* zero at creation, the rank's scalar before the run: it is read when the op runs */
    if (!CUDA(name, cudaMalloc(&dev_scalar, 8))) return;
    if (!CUDA(name, cudaMemset(dev_scalar, 0, 8))) {
      cudaFree(dev_scalar);
      return;
    }
  } else {
    encode(d, (uint64_t)(g.rank + 1), scalar);
  }
  if (!NCCL(name, ncclRedOpCreatePreMulSum(&op, res == ncclScalarDevice ? dev_scalar : scalar, d->t,
                                           res, g.comm))) {
    cudaFree(dev_scalar);
    return;
  }
  pass(name);
  if (res == ncclScalarDevice) {
    encode(d, (uint64_t)(g.rank + 1), scalar);
    /* pageable source: the copy is done when the call returns */
    if (!CUDA(name, cudaMemcpy(dev_scalar, scalar, (size_t)d->size, cudaMemcpyHostToDevice))) {
      ncclRedOpDestroy(op, g.comm);
      cudaFree(dev_scalar);
      return;
    }
  }
  premul_runs(d, op, what);

  snprintf(name, sizeof name, "premulsum %s %s wrong datatype", d->name, what);
  ncclDataType_t other = d->t == ncclFloat32 ? ncclFloat64 : ncclFloat32;
  ncclResult_t r = ncclAllReduce(g.d_a, g.d_b, 16, other, op, g.comm, g.s);
  expect(r == ncclInvalidArgument, name, "an op made for %s used with another type: %s (%d)",
         d->name, ncclGetErrorString(r), (int)r);

  snprintf(name, sizeof name, "premulsum %s %s destroy", d->name, what);
  if (NCCL(name, ncclRedOpDestroy(op, g.comm))) pass(name);
  snprintf(name, sizeof name, "premulsum %s %s use after destroy", d->name, what);
  r = ncclAllReduce(g.d_a, g.d_b, 16, d->t, op, g.comm, g.s);
  expect(r == ncclInvalidArgument, name, "ncclAllReduce with a destroyed op: %s (%d)",
         ncclGetErrorString(r), (int)r);
  snprintf(name, sizeof name, "premulsum %s %s destroy twice", d->name, what);
  r = ncclRedOpDestroy(op, g.comm);
  expect(r == ncclInvalidArgument, name, "second ncclRedOpDestroy: %s (%d)", ncclGetErrorString(r),
         (int)r);
  settle(name);
  cudaFree(dev_scalar);
}

static void test_premul(void) {
  premul_type(dt_of(ncclFloat32), ncclScalarHostImmediate);
  premul_type(dt_of(ncclFloat32), ncclScalarDevice);
  premul_type(dt_of(ncclInt32), ncclScalarHostImmediate);
  premul_type(dt_of(ncclInt32), ncclScalarDevice);
  premul_type(dt_of(ncclBfloat16), ncclScalarHostImmediate);
  premul_type(dt_of(ncclFloat16), ncclScalarDevice);
  premul_type(dt_of(ncclFloat64), ncclScalarDevice);
}

/* ---- 4: groups ---- */

/* Elements rank s sends to rank d in the uneven all_to_all: zero for some pairs (the diagonal
 * included), odd for others. */
static size_t a2a_size(int s, int d, size_t unit) {
  size_t m = (size_t)((2 * s + d + s * d) % 4);
  return m ? m * unit + (size_t)(s + d) : 0;
}

static int32_t a2a_value(int s, int d, size_t i) {
  return (int32_t)(((s * 16 + d) << 20) + (int)i);
}

static void test_uneven_alltoall(size_t unit) {
  char name[160];
  snprintf(name, sizeof name, "group all_to_all uneven unit=%zu", unit);
  int n = g.n;
  size_t soff = 0, roff = 0, stot = 0, rtot = 0;
  for (int p = 0; p < n; p++) {
    stot += a2a_size(g.rank, p, unit);
    rtot += a2a_size(p, g.rank, unit);
  }
  const size_t tail = 64; /* past the last block: must stay untouched */
  if ((stot + tail) * 4 > g.cap || (rtot + tail) * 4 > g.cap) {
    fail(name, "buffers too small (%zu, %zu elements)", stot, rtot);
    return;
  }
  int32_t *hs = (int32_t *)g.h_a, *hw = (int32_t *)g.h_c;
  size_t off = 0;
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < a2a_size(g.rank, p, unit); i++)
      hs[off++] = a2a_value(g.rank, p, i);
  if (!h2d(g.d_a, hs, stot * 4, name) || !fill_dev(g.d_b, (rtot + tail) * 4, name)) return;
  ncclResult_t r = ncclGroupStart(), first = r;
  for (int p = 0; p < n && r == ncclSuccess; p++) {
    r = ncclSend(g.d_a + soff * 4, a2a_size(g.rank, p, unit), ncclInt32, p, g.comm, g.s);
    if (r == ncclSuccess)
      r = ncclRecv(g.d_b + roff * 4, a2a_size(p, g.rank, unit), ncclInt32, p, g.comm, g.s);
    soff += a2a_size(g.rank, p, unit);
    roff += a2a_size(p, g.rank, unit);
  }
  ncclResult_t e = ncclGroupEnd();
  if (first != ncclSuccess || r != ncclSuccess) {
    fail(name, "ncclGroupStart/ncclSend/ncclRecv: %s: %s", ncclGetErrorString(r),
         ncclGetLastError(NULL));
    return;
  }
  if (!NCCL(name, e)) return;
  if (!d2h(g.h_b, g.d_b, (rtot + tail) * 4, name) || !settle(name)) return;
  off = 0;
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < a2a_size(p, g.rank, unit); i++)
      hw[off++] = a2a_value(p, g.rank, i);
  memset(hw + rtot, SENTINEL, tail * 4);
  same(name, g.h_b, hw, rtot + tail, 4);
}

static void test_ring(void) {
  const char *name = "group ring send/recv float32 count=100003";
  const dt_t *d = dt_of(ncclFloat32);
  size_t count = 100003, bytes = count * 4;
  int next = (g.rank + 1) % g.n, prev = (g.rank + g.n - 1) % g.n;
  fill_pv(d, g.h_a, count, g.rank, 3);
  if (!h2d(g.d_a, g.h_a, bytes, name) || !fill_dev(g.d_b, bytes, name)) return;
  ncclResult_t r1 = ncclGroupStart();
  ncclResult_t r2 = ncclSend(g.d_a, count, ncclFloat32, next, g.comm, g.s);
  ncclResult_t r3 = ncclRecv(g.d_b, count, ncclFloat32, prev, g.comm, g.s);
  ncclResult_t r4 = ncclGroupEnd();
  if (!NCCL(name, r1) || !NCCL(name, r2) || !NCCL(name, r3) || !NCCL(name, r4)) return;
  if (!d2h(g.h_b, g.d_b, bytes, name) || !settle(name)) return;
  fill_pv(d, g.h_c, count, prev, 3);
  same(name, g.h_b, g.h_c, count, 4);
}

static void test_two_allreduces(void) {
  const char *name = "group of two allreduces (int32 sum 4099, float32 max 777)";
  const dt_t *di = dt_of(ncclInt32), *df = dt_of(ncclFloat32);
  size_t ci = 4099, cf = 777;
  for (size_t i = 0; i < ci; i++)
    encode(di, ar_value(di, ncclSum, g.rank, g.n, i), g.h_a + i * 4);
  for (size_t i = 0; i < cf; i++)
    encode(df, ar_value(df, ncclMax, g.rank, g.n, i), g.h_b + i * 4);
  if (!h2d(g.d_a, g.h_a, ci * 4, name) || !h2d(g.d_c, g.h_b, cf * 4, name) ||
      !fill_dev(g.d_b, ci * 4, name) || !fill_dev(g.d_d, cf * 4, name))
    return;
  ncclResult_t r1 = ncclGroupStart();
  ncclResult_t r2 = ncclAllReduce(g.d_a, g.d_b, ci, ncclInt32, ncclSum, g.comm, g.s);
  ncclResult_t r3 = ncclAllReduce(g.d_c, g.d_d, cf, ncclFloat32, ncclMax, g.comm, g.s);
  ncclResult_t r4 = ncclGroupEnd();
  if (!NCCL(name, r1) || !NCCL(name, r2) || !NCCL(name, r3) || !NCCL(name, r4)) return;
  if (!d2h(g.h_a, g.d_b, ci * 4, name) || !d2h(g.h_b, g.d_d, cf * 4, name) || !settle(name)) return;
  for (size_t i = 0; i < ci; i++)
    encode(di, ar_expect(di, ncclSum, g.n, i), g.h_c + i * 4);
  for (size_t i = 0; i < cf; i++)
    encode(df, ar_expect(df, ncclMax, g.n, i), g.h_c + (ci + i) * 4);
  memcpy(g.h_a + ci * 4, g.h_b, cf * 4);
  same(name, g.h_a, g.h_c, ci + cf, 4);
}

static void test_groups(void) {
  test_uneven_alltoall(37);
  test_uneven_alltoall(A2A_BIG);
  test_ring();
  test_two_allreduces();
}

/* ---- 5: CUDA graphs ---- */

static void test_graph(void) {
  const char *name = "graph capture (allreduce float32 sum + allgather int32)";
  const dt_t *df = dt_of(ncclFloat32), *di = dt_of(ncclInt32);
  size_t ca = 100003, cg = 7777;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  if (!settle(name) || !CUDA(name, cudaStreamBeginCapture(g.s, cudaStreamCaptureModeThreadLocal)))
    return;
  ncclResult_t r1 = ncclAllReduce(g.d_a, g.d_b, ca, ncclFloat32, ncclSum, g.comm, g.s);
  ncclResult_t r2 = ncclAllGather(g.d_c, g.d_d, cg, ncclInt32, g.comm, g.s);
  cudaError_t e = cudaStreamEndCapture(g.s, &graph); /* always: the stream must leave capture */
  if (!NCCL(name, r1) || !NCCL(name, r2) || !cuda_ok(e, name, "cudaStreamEndCapture")) {
    if (graph) cudaGraphDestroy(graph);
    return;
  }
  if (!CUDA(name, cudaGraphInstantiate(&exec, graph, 0))) {
    cudaGraphDestroy(graph);
    return;
  }
  pass(name);
  for (int k = 0; k < 5; k++) {
    char rn[160];
    snprintf(rn, sizeof rn, "graph replay %d", k);
    fill_pv(df, g.h_a, ca, g.rank, k);
    fill_pv(di, g.h_b, cg, g.rank, k + 5);
    /* new inputs on the graph's stream, and the outputs poisoned, before every replay */
    if (!h2d(g.d_a, g.h_a, ca * 4, rn) || !h2d(g.d_c, g.h_b, cg * 4, rn) ||
        !fill_dev(g.d_b, ca * 4, rn) || !fill_dev(g.d_d, cg * 4 * (size_t)g.n, rn) ||
        !CUDA(rn, cudaGraphLaunch(exec, g.s)) || !d2h(g.h_a, g.d_b, ca * 4, rn) ||
        !d2h(g.h_b, g.d_d, cg * 4 * (size_t)g.n, rn) || !settle(rn))
      break;
    for (size_t i = 0; i < ca; i++) {
      uint64_t acc = 0;
      for (int r = 0; r < g.n; r++)
        acc += pv(r, k, i);
      encode(df, acc, g.h_c + i * 4);
    }
    for (int q = 0; q < g.n; q++)
      fill_pv(di, g.h_c + (ca + (size_t)q * cg) * 4, cg, q, k + 5);
    memcpy(g.h_a + ca * 4, g.h_b, cg * 4 * (size_t)g.n);
    same(rn, g.h_a, g.h_c, ca + cg * (size_t)g.n, 4);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

/* ---- 6: errors and queries ---- */

static void expect_invalid(ncclResult_t r, const char *name) {
  const char *last = ncclGetLastError(g.comm);
  expect(r == ncclInvalidArgument && last && *last, name,
         "got %s (%d), last error \"%s\"; want ncclInvalidArgument and a message",
         ncclGetErrorString(r), (int)r, last ? last : "(null)");
}

static void test_errors(void) {
  int v = 0, count = -1, rank = -1, dev = -1;
  ncclResult_t r = ncclGetVersion(&v);
  expect(r == ncclSuccess && v == NCCL_VERSION_CODE, "ncclGetVersion", "%s, version %d, want %d",
         ncclGetErrorString(r), v, NCCL_VERSION_CODE);

  r = ncclAllReduce(g.d_a, g.d_b, 16, (ncclDataType_t)ncclNumTypes, ncclSum, g.comm, g.s);
  expect_invalid(r, "error: datatype ncclNumTypes");
  r = ncclAllReduce(g.d_a, g.d_b, 16, ncclFloat32, (ncclRedOp_t)(ncclNumOps + 1000), g.comm, g.s);
  expect_invalid(r, "error: reduction op that was never created");
  r = ncclBroadcast(g.d_a, g.d_b, 16, ncclFloat32, g.n, g.comm, g.s);
  expect_invalid(r, "error: broadcast root == nranks");
  r = ncclAllReduce(g.d_a, g.d_b, 16, ncclFloat32, ncclSum, NULL, g.s);
  expect(r == ncclInvalidArgument, "error: NULL comm", "got %s (%d)", ncclGetErrorString(r),
         (int)r);

  float *hs = malloc(64 * sizeof *hs), *hr = malloc(64 * sizeof *hr);
  if (hs && hr) {
    memset(hs, 0, 64 * sizeof *hs);
    r = ncclAllReduce(hs, hr, 64, ncclFloat32, ncclSum, g.comm, g.s);
    expect_invalid(r, "error: malloc'd send and recv buffers");
    r = ncclAllReduce(g.d_a, hr, 64, ncclFloat32, ncclSum, g.comm, g.s);
    expect_invalid(r, "error: malloc'd recv buffer");
    r = ncclAllGather(hs, g.d_b, 64, ncclFloat32, g.comm, g.s);
    expect_invalid(r, "error: malloc'd allgather send buffer");
  } else {
    fail("error: malloc'd buffers", "out of host memory");
  }
  free(hs);
  free(hr);
  settle("error: stream after rejected calls");

  r = ncclCommCount(g.comm, &count);
  expect(r == ncclSuccess && count == g.n, "ncclCommCount", "%s, %d, want %d",
         ncclGetErrorString(r), count, g.n);
  r = ncclCommUserRank(g.comm, &rank);
  expect(r == ncclSuccess && rank == g.rank, "ncclCommUserRank", "%s, %d, want %d",
         ncclGetErrorString(r), rank, g.rank);
  r = ncclCommCuDevice(g.comm, &dev);
  expect(r == ncclSuccess && dev == g.dev, "ncclCommCuDevice", "%s, %d, want %d",
         ncclGetErrorString(r), dev, g.dev);
  ncclResult_t async = ncclInternalError;
  r = ncclCommGetAsyncError(g.comm, &async);
  expect(r == ncclSuccess && async == ncclSuccess, "ncclCommGetAsyncError healthy",
         "returned %s, asyncError %s", ncclGetErrorString(r), ncclGetErrorString(async));

  /* the rejected calls must not have touched the communicator's state */
  allreduce_one(dt_of(ncclFloat32), ncclSum, 4099, 0);
}

/* ---- 10: memory and registration ---- */

static void test_mem(void) {
  const char *name = "ncclMemAlloc";
  const dt_t *d = dt_of(ncclFloat32);
  size_t count = 65537, bytes = count * 4;
  void *p = NULL, *handle = NULL;
  if (!NCCL(name, ncclMemAlloc(&p, bytes))) return;
  struct cudaPointerAttributes at;
  memset(&at, 0, sizeof at);
  cudaError_t e = cudaPointerGetAttributes(&at, p);
  if (!expect(p && e == cudaSuccess && at.type == cudaMemoryTypeDevice && at.device == g.dev, name,
              "%p: %s, type %d on device %d (want device memory on %d)", p, cudaGetErrorString(e),
              (int)at.type, at.device, g.dev)) {
    ncclMemFree(p);
    return;
  }
  for (int reg = 0; reg < 2; reg++) {
    const char *rn = reg ? "allreduce in a registered ncclMemAlloc buffer"
                         : "allreduce in an ncclMemAlloc buffer";
    if (reg && !NCCL("ncclCommRegister", ncclCommRegister(g.comm, p, bytes, &handle))) break;
    if (reg) expect(handle != NULL, "ncclCommRegister", "handle is NULL");
    for (size_t i = 0; i < count; i++)
      encode(d, ar_value(d, ncclSum, g.rank, g.n, i), g.h_a + i * 4);
    if (!h2d(p, g.h_a, bytes, rn) ||
        !NCCL(rn, ncclAllReduce(p, p, count, ncclFloat32, ncclSum, g.comm, g.s)) ||
        !d2h(g.h_b, p, bytes, rn) || !settle(rn))
      continue;
    for (size_t i = 0; i < count; i++)
      encode(d, ar_expect(d, ncclSum, g.n, i), g.h_c + i * 4);
    same(rn, g.h_b, g.h_c, count, 4);
  }
  if (handle && NCCL("ncclCommDeregister", ncclCommDeregister(g.comm, handle)))
    pass("ncclCommDeregister");
  if (NCCL("ncclMemFree", ncclMemFree(p))) pass("ncclMemFree");
}

/* ---- 7: split ---- */

/* An allreduce of rank-dependent floats on sub, whose members' old ranks are members[]. */
static void sub_allreduce(ncclComm_t sub, const int *members, int nm, const char *name) {
  const dt_t *d = dt_of(ncclFloat32);
  size_t count = 10007, bytes = count * 4;
  fill_pv(d, g.h_a, count, g.rank, 4);
  if (!h2d(g.d_a, g.h_a, bytes, name) || !fill_dev(g.d_b, bytes, name)) return;
  if (!NCCL(name, ncclAllReduce(g.d_a, g.d_b, count, ncclFloat32, ncclSum, sub, g.s))) return;
  if (!d2h(g.h_b, g.d_b, bytes, name) || !settle(name)) return;
  for (size_t i = 0; i < count; i++) {
    uint64_t acc = 0;
    for (int k = 0; k < nm; k++)
      acc += pv(members[k], 4, i);
    encode(d, acc, g.h_c + i * 4);
  }
  same(name, g.h_b, g.h_c, count, 4);
}

static void check_sub(ncclComm_t sub, int want_n, int want_rank, const char *what) {
  char name[160];
  int cnt = -1, rk = -1, dev = -1;
  snprintf(name, sizeof name, "%s: count, rank and device of the new comm", what);
  ncclResult_t r1 = ncclCommCount(sub, &cnt), r2 = ncclCommUserRank(sub, &rk),
               r3 = ncclCommCuDevice(sub, &dev);
  expect(!r1 && !r2 && !r3 && cnt == want_n && rk == want_rank && dev == g.dev, name,
         "count %d rank %d device %d (%s/%s/%s), want %d %d %d", cnt, rk, dev,
         ncclGetErrorString(r1), ncclGetErrorString(r2), ncclGetErrorString(r3), want_n, want_rank,
         g.dev);
}

static void test_split(void) {
  const char *name = "split color=rank%2 key=-rank";
  int color = g.rank % 2, members[256], nm = 0;
  ncclComm_t sub = NULL;
  if (NCCL(name, ncclCommSplit(g.comm, color, -g.rank, &sub, NULL)) &&
      expect(sub != NULL, name, "newcomm is NULL")) {
    for (int p = 0; p < g.n; p++)
      if (p % 2 == color) members[nm++] = p;
    /* key -rank: the highest old rank comes first */
    check_sub(sub, nm, (g.n - 1 - g.rank) / 2, name);
    sub_allreduce(sub, members, nm, "split color=rank%2: allreduce on the new comm");
    if (NCCL("split color=rank%2: destroy", ncclCommDestroy(sub)))
      pass("split color=rank%2: destroy");
  }

  name = "split NCCL_SPLIT_NOCOLOR on odd ranks";
  int odd = g.rank % 2;
  sub = (ncclComm_t)(uintptr_t)0x1; /* must be overwritten with NULL on the odd ranks */
  if (!NCCL(name, ncclCommSplit(g.comm, odd ? NCCL_SPLIT_NOCOLOR : 0, g.rank, &sub, NULL))) return;
  if (odd) {
    expect(sub == NULL, name, "newcomm is %p, want NULL", (void *)sub);
    return;
  }
  if (!expect(sub != NULL && sub != (ncclComm_t)(uintptr_t)0x1, name, "newcomm is %p", (void *)sub))
    return;
  nm = 0;
  for (int p = 0; p < g.n; p += 2)
    members[nm++] = p;
  check_sub(sub, nm, g.rank / 2, name);
  sub_allreduce(sub, members, nm, "split NOCOLOR: allreduce among the even ranks");
  if (NCCL("split NOCOLOR: destroy", ncclCommDestroy(sub))) pass("split NOCOLOR: destroy");
}

/* ---- 7b: shrink ---- */

static void shrink_refused(const int *list, int count, int flags, const char *word,
                           const char *name) {
  ncclComm_t k = (ncclComm_t)(uintptr_t)0x1;
  ncclResult_t r = ncclCommShrink(g.comm, (int *)list, count, &k, NULL, flags);
  expect(r == ncclInvalidArgument && k == NULL && strstr(ncclGetLastError(NULL), word), name,
         "%s, newcomm %p: %s", ncclGetErrorString(r), (void *)k, ncclGetLastError(NULL));
}

/* The last rank is left out and never calls it; the others get a comm of their own, in their
 * old order, while the parent stays whole (the last rank then joins an allreduce on it). */
static void test_shrink(void) {
  int out[] = {g.n}, twice[] = {(g.rank + 1) % g.n, (g.rank + 1) % g.n}, self[] = {g.rank};
  shrink_refused(out, 1, NCCL_SHRINK_DEFAULT, "is not a rank", "shrink: rank out of range");
  if (g.n > 1) shrink_refused(twice, 2, NCCL_SHRINK_DEFAULT, "twice", "shrink: rank twice");
  shrink_refused(self, 1, NCCL_SHRINK_DEFAULT, "excludes itself", "shrink: own rank");
  shrink_refused(NULL, 0, 0x7, "flags", "shrink: unknown flags");
  if (g.n < 2) return;
  const char *name = "shrink NCCL_SHRINK_DEFAULT without the last rank";
  int ex[] = {g.n - 1}, members[256], nm = 0;
  for (int p = 0; p < g.n - 1; p++)
    members[nm++] = p;
  if (g.rank != g.n - 1) {
    ncclComm_t sub = NULL;
    if (NCCL(name, ncclCommShrink(g.comm, ex, 1, &sub, NULL, NCCL_SHRINK_DEFAULT)) &&
        expect(sub != NULL, name, "newcomm is NULL")) {
      check_sub(sub, nm, g.rank, name);
      sub_allreduce(sub, members, nm, "shrink: allreduce on the new comm");
      if (NCCL("shrink: destroy", ncclCommDestroy(sub))) pass("shrink: destroy");
    }
  }
  int all[256];
  for (int p = 0; p < g.n; p++)
    all[p] = p;
  sub_allreduce(g.comm, all, g.n, "shrink: the parent still serves every rank");
}

/* NCCL_SHRINK_ABORT after a failure: on a comm split off the main one, the ranks but the last
 * start an allreduce the last never joins (its kernel waits), then shrink with the abort flag:
 * the wait ends, the shrink does not wait for the last rank, and the new comm works. */
static void test_shrink_abort(void) {
  if (g.n < 2) return;
  const char *name = "shrink NCCL_SHRINK_ABORT with an allreduce waiting for the left-out rank";
  ncclComm_t p = NULL, k = NULL;
  cudaStream_t as = NULL;
  if (!NCCL(name, ncclCommSplit(g.comm, 0, g.rank, &p, NULL)) ||
      !CUDA(name, cudaStreamCreateWithFlags(&as, cudaStreamNonBlocking)))
    return;
  if (g.rank == g.n - 1) {
    sleep_s(3.0); /* stays out, alive, until the others are done with p */
  } else {
    ncclResult_t r = ncclAllReduce(g.d_a, g.d_b, 1 << 16, ncclFloat32, ncclSum, p, as);
    expect(r == ncclSuccess, "shrink abort: the allreduce is issued", "%s", ncclGetErrorString(r));
    sleep_s(0.5);
    int ex[] = {g.n - 1}, members[256], nm = 0;
    for (int q = 0; q < g.n - 1; q++)
      members[nm++] = q;
    double t0 = now_s();
    if (NCCL(name, ncclCommShrink(p, ex, 1, &k, NULL, NCCL_SHRINK_ABORT)) &&
        expect(k != NULL, name, "newcomm is NULL")) {
      double took = now_s() - t0;
      cudaError_t e = cudaStreamSynchronize(as);
      expect(e == cudaSuccess && took < 10.0, "shrink abort: the waiting allreduce ends",
             "shrink took %.3f s; the stream: %s", took, cudaGetErrorString(e));
      check_sub(k, nm, g.rank, name);
      sub_allreduce(k, members, nm, "shrink abort: allreduce on the new comm");
      if (NCCL("shrink abort: destroy", ncclCommDestroy(k))) pass("shrink abort: destroy");
      printf("%d INFO shrink abort: the shrink took %.3f s\n", g.rank, took);
    }
  }
  ncclCommAbort(p);
  cudaStreamDestroy(as);
}

/* ---- 8: non-blocking communicator ---- */

/* Polls until comm's state is no longer ncclInProgress (at most limit seconds). */
static ncclResult_t wait_ready(ncclComm_t comm, double limit, ncclResult_t *call) {
  double t0 = now_s();
  ncclResult_t st = ncclInProgress;
  *call = ncclSuccess;
  while (now_s() - t0 < limit) {
    *call = ncclCommGetAsyncError(comm, &st);
    if (*call != ncclSuccess || st != ncclInProgress) return st;
    sleep_s(0.001);
  }
  return ncclInProgress;
}

static void test_nonblocking(const ncclUniqueId *id) {
  const char *name = "non-blocking ncclCommInitRankConfig";
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t nb = NULL;
  ncclResult_t r = ncclCommInitRankConfig(&nb, g.n, *id, g.rank, &cfg), call;
  if (r != ncclSuccess && r != ncclInProgress) {
    fail(name, "returned %s: %s", ncclGetErrorString(r), ncclGetLastError(NULL));
    return;
  }
  if (!expect(nb != NULL, name, "returned %s but comm is NULL", ncclGetErrorString(r))) return;
  ncclResult_t st = wait_ready(nb, 120, &call);
  if (!expect(call == ncclSuccess && st == ncclSuccess, name,
              "ncclCommGetAsyncError returned %s, state %s after polling: %s",
              ncclGetErrorString(call), ncclGetErrorString(st), ncclGetLastError(nb)))
    return; /* a destroy would wait for an init that is still running */
  printf("%d INFO non-blocking init returned %s first\n", g.rank, ncclGetErrorString(r));

  const char *an = "non-blocking comm: allreduce";
  const dt_t *d = dt_of(ncclInt64);
  size_t count = 50021, bytes = count * 8;
  for (size_t i = 0; i < count; i++)
    encode(d, ar_value(d, ncclSum, g.rank, g.n, i), g.h_a + i * 8);
  if (h2d(g.d_a, g.h_a, bytes, an) && fill_dev(g.d_b, bytes, an)) {
    r = ncclAllReduce(g.d_a, g.d_b, count, ncclInt64, ncclSum, nb, g.s);
    if (r == ncclInProgress) r = wait_ready(nb, 60, &call); /* allowed on a non-blocking comm */
    if (NCCL(an, r) && d2h(g.h_b, g.d_b, bytes, an) && settle(an)) {
      for (size_t i = 0; i < count; i++)
        encode(d, ar_expect(d, ncclSum, g.n, i), g.h_c + i * 8);
      same(an, g.h_b, g.h_c, count, 8);
    }
  }
  r = ncclCommDestroy(nb);
  if (r == ncclInProgress) r = ncclSuccess; /* NCCL may finish a non-blocking destroy later */
  if (NCCL("non-blocking comm: destroy", r)) pass("non-blocking comm: destroy");
}

/* ---- 9: abort while a kernel waits ---- */

typedef struct {
  ncclComm_t comm;
  double delay, t_abort;
  ncclResult_t r;
} aborter_t;

static void *aborter(void *p) {
  aborter_t *a = p;
  sleep_s(a->delay);
  a->t_abort = now_s();
  a->r = ncclCommAbort(a->comm);
  return NULL;
}

static void test_abort(const ncclUniqueId *id) {
  const char *name = "abort: kernel waiting for ranks that never join ends";
  ncclComm_t ac = NULL;
  cudaStream_t as = NULL;
  if (!NCCL(name, ncclCommInitRank(&ac, g.n, *id, g.rank)) ||
      !CUDA(name, cudaStreamCreateWithFlags(&as, cudaStreamNonBlocking)))
    return;
  if (g.rank != 0) {
    sleep_s(3);
    ncclResult_t r = ncclCommAbort(ac);
    expect(r == ncclSuccess, "abort: own handle on the ranks that stayed out", "%s: %s",
           ncclGetErrorString(r), ncclGetLastError(NULL));
    cudaStreamDestroy(as);
    return;
  }
  if (g.n == 1) printf("0 INFO abort: one rank, so the allreduce has nobody to wait for\n");
  double t0 = now_s();
  ncclResult_t r = ncclAllReduce(g.d_a, g.d_b, 1 << 16, ncclFloat32, ncclSum, ac, as);
  double issued = now_s() - t0;
  /* The aborter starts only once the call is back: the library frees the comm in
   * ncclCommAbort, so an abort racing a call still inside it would be a use after free. */
  aborter_t a = {.comm = ac, .delay = 1.0, .r = ncclInternalError};
  pthread_t th;
  if (pthread_create(&th, NULL, aborter, &a) != 0) {
    fail(name, "cannot start the aborting thread");
    return;
  }
  cudaError_t e = cudaErrorNotReady;
  while ((e = cudaStreamQuery(as)) == cudaErrorNotReady && now_s() - t0 < 20)
    sleep_s(0.01);
  if (e == cudaErrorNotReady) {
    /* the kernel still spins: nothing later can run on this GPU context */
    fail(name, "the stream is still busy 20 s after the allreduce (abort at +1 s)");
    printf("0 test_nccl_gpu: %d passed, %d failed\n", g.pass, g.fail);
    fflush(stdout);
    _exit(1);
  }
  e = cudaStreamSynchronize(as);
  double done = now_s();
  pthread_join(th, NULL);
  /* with one rank, or when the call itself waited, the stream may be done before the abort */
  double after_abort = a.t_abort > 0 && done > a.t_abort ? done - a.t_abort : 0;
  expect(e == cudaSuccess && a.r == ncclSuccess && (g.n == 1 || after_abort <= 10.0), name,
         "allreduce returned %s after %.3f s; cudaStreamSynchronize %s %.3f s after the abort "
         "(%s)",
         ncclGetErrorString(r), issued, cudaGetErrorString(e), after_abort,
         ncclGetErrorString(a.r));
  printf("0 INFO abort: stream done %.3f s after the abort, %.3f s after the allreduce\n",
         after_abort, done - t0);
  cudaStreamDestroy(as);
}

/* ---- a rank ---- */

static void on_fault(int sig) {
  void *frames[32];
  int n = backtrace(frames, 32);
  char msg[64];
  int len = snprintf(msg, sizeof msg, "%d FAIL signal %d, backtrace:\n", g.rank, sig);
  if (write(2, msg, (size_t)len) < 0) {}
  backtrace_symbols_fd(frames, n, 2);
  _exit(3);
}

static int finish(void) {
  if (g.skip) printf("%d INFO %d checks skipped (not exact in their type)\n", g.rank, g.skip);
  printf("%d test_nccl_gpu: %d passed, %d failed\n", g.rank, g.pass, g.fail);
  fflush(stdout);
  return g.fail ? 1 : 0;
}

static int setup_buffers(void) {
  const char *name = "setup: buffers";
  size_t need = (size_t)AR_MAX * 8;
  size_t c2 = (size_t)C2_MAX * 4 * (size_t)g.n;
  size_t a2a = ((size_t)3 * A2A_BIG + (size_t)2 * (size_t)g.n) * (size_t)g.n * 4 + 64 * 4;
  size_t graph = (100003 + (size_t)7777 * (size_t)g.n) * 4;
  if (c2 > need) need = c2;
  if (a2a > need) need = a2a;
  if (graph > need) need = graph;
  g.cap = need + 4096;
  void **dev[] = {(void **)&g.d_a, (void **)&g.d_b, (void **)&g.d_c, (void **)&g.d_d};
  void **host[] = {(void **)&g.h_a, (void **)&g.h_b, (void **)&g.h_c, (void **)&g.h_d};
  for (int k = 0; k < 4; k++)
    if (!CUDA(name, cudaMalloc(dev[k], g.cap)) || !CUDA(name, cudaMallocHost(host[k], g.cap)))
      return 0;
  return 1;
}

static int run_rank(int rank, int n, int share, const ncclUniqueId *ids) {
  g.rank = rank;
  g.n = n;
  setvbuf(stdout, NULL, _IOLBF, 0);
  signal(SIGSEGV, on_fault);
  signal(SIGBUS, on_fault);
  signal(SIGABRT, on_fault);
  int ngpu = 0;
  cudaError_t e = cudaGetDeviceCount(&ngpu);
  if (e != cudaSuccess || ngpu < 1) {
    fail("setup", "no usable GPU: %s (%d devices)", cudaGetErrorString(e), ngpu);
    return finish();
  }
  g.dev = share ? 0 : rank % ngpu;
  if (!CUDA("setup", cudaSetDevice(g.dev)) ||
      !CUDA("setup", cudaStreamCreateWithFlags(&g.s, cudaStreamNonBlocking)) || !setup_buffers())
    return finish();
  if (!NCCL("ncclCommInitRank", ncclCommInitRank(&g.comm, n, ids[0], rank))) return finish();
  pass("ncclCommInitRank");

  test_allreduce();
  test_rooted();
  test_premul();
  test_groups();
  test_graph();
  test_errors();
  test_mem();
  test_split();
  test_shrink();
  test_nonblocking(&ids[1]);
  test_shrink_abort();
  test_abort(&ids[2]); /* last: an abort may leave state behind */

  /* the main comm must have outlived the other one's abort */
  allreduce_one(dt_of(ncclFloat32), ncclSum, 100003, 0);
  ncclResult_t async = ncclInternalError;
  ncclResult_t r = ncclCommGetAsyncError(g.comm, &async);
  expect(r == ncclSuccess && async == ncclSuccess, "ncclCommGetAsyncError after the abort",
         "returned %s, asyncError %s", ncclGetErrorString(r), ncclGetErrorString(async));
  if (NCCL("ncclCommFinalize", ncclCommFinalize(g.comm))) pass("ncclCommFinalize");
  if (NCCL("ncclCommDestroy", ncclCommDestroy(g.comm))) pass("ncclCommDestroy");
  g.comm = NULL;
  for (int k = 0; k < 4; k++) {
    unsigned char *dev[] = {g.d_a, g.d_b, g.d_c, g.d_d}, *host[] = {g.h_a, g.h_b, g.h_c, g.h_d};
    cudaFree(dev[k]);
    cudaFreeHost(host[k]);
  }
  cudaStreamDestroy(g.s);
  return finish();
}

/* ---- the parent: ids, ranks, and a watch over them ---- */

int main(int argc, char **argv) {
  int n = argc >= 2 ? atoi(argv[1]) : 0;
  int share = argc >= 3 && !strcmp(argv[2], "--share");
  if (n < 1 || n > 64 || argc > 3 || (argc == 3 && !share)) {
    fprintf(stderr, "usage: %s RANKS [--share]   (1 <= RANKS <= 64)\n", argv[0]);
    return 2;
  }
  const char *tv = getenv("TEST_NCCL_GPU_TIMEOUT_S");
  double limit = tv && atoi(tv) > 0 ? atoi(tv) : TIMEOUT_S;
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* The ids' rendezvous runs in this process, which must outlive the ranks; no CUDA here,
   * so that the children fork from a process without a CUDA context. */
  ncclUniqueId ids[NIDS];
  for (int k = 0; k < NIDS; k++) {
    ncclResult_t r = ncclGetUniqueId(&ids[k]);
    if (r != ncclSuccess) {
      printf("parent FAIL ncclGetUniqueId: %s: %s\n", ncclGetErrorString(r),
             ncclGetLastError(NULL));
      return 1;
    }
  }
  fflush(stdout);
  fflush(stderr);
  pid_t *pids = calloc((size_t)n, sizeof *pids);
  int *status = calloc((size_t)n, sizeof *status), *alive = calloc((size_t)n, sizeof *alive);
  if (!pids || !status || !alive) return 1;
  int started = 0;
  for (; started < n; started++) {
    pid_t p = fork();
    if (p == 0) {
      int rc = run_rank(started, n, share, ids);
      fflush(stdout);
      exit(rc);
    }
    if (p < 0) {
      perror("fork");
      break;
    }
    pids[started] = p;
    alive[started] = 1;
  }
  double t0 = now_s(), deadline = t0 + limit;
  int left = started, bad = started < n, timed_out = 0;
  while (left > 0) {
    int st = 0;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < started; r++)
        if (pids[r] == p && alive[r]) {
          alive[r] = 0;
          status[r] = st;
          left--;
          if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            bad = 1;
            /* the others may be waiting for this rank inside a collective */
            if (deadline > now_s() + GRACE_S) deadline = now_s() + GRACE_S;
          }
        }
      continue;
    }
    if (now_s() > deadline) {
      timed_out = 1;
      for (int r = 0; r < started; r++)
        if (alive[r]) kill(pids[r], SIGKILL);
      for (int r = 0; r < started; r++)
        if (alive[r]) {
          waitpid(pids[r], &status[r], 0);
          alive[r] = 0;
          left--;
        }
      bad = 1;
      break;
    }
    sleep_s(0.05);
  }
  for (int r = 0; r < started; r++) {
    int st = status[r];
    if (WIFEXITED(st))
      printf("parent: rank %d exited with %d\n", r, WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
      printf("parent: rank %d killed by signal %d%s\n", r, WTERMSIG(st),
             timed_out && WTERMSIG(st) == SIGKILL ? " (time limit)" : "");
  }
  printf("parent: %s after %.1f s\n", bad ? "FAIL" : "PASS", now_s() - t0);
  free(pids);
  free(status);
  free(alive);
  return bad ? 1 : 0;
}
