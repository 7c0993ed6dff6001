/* Multi-process oracle test: every collective x dtype x op x in/out-of-place x count x
 * algorithm, on N forked ranks, compared bit for bit with the oracle. Also checks that
 * out-of-place calls leave sendbuf alone and nobody writes past the output.
 * usage: test_collectives RANKS [shm|tcp|auto] [--big] [--hosts=K] (K fake hosts: shm within
 * a host, tcp between them). Built with WEFT_TEST_GPU (tests/gpu), the same matrix runs on
 * device buffers: one GPU per rank, or all ranks on GPU 0 with --share; --host-staged-on=R
 * sets WEFT_P2P_DISABLE=1 in rank R alone, which every rank must then follow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef WEFT_TEST_GPU
#include <cuda_runtime_api.h>
#endif

#include "launch.h"
#include "oracle.h"
#include "weft.h"

enum { GUARD = 64 };
static const unsigned char PATTERN = 0xA5;

typedef struct {
  int big;
  int share;     /* GPU build: every rank on GPU 0 */
  void *stream;  /* GPU build: the cudaStream_t every call uses */
  int hosts;     /* > 0: fake that many hosts (rank % hosts), so shm and tcp mix */
  int staged_on; /* GPU build: the rank (+ 1) that alone asks for host-staged regions */
  int failures, runs;
  int rank, n;
  weft_comm_t comm;
} ctx_t;

static const size_t COUNTS[] = {0, 1, 7, 1023, 40000};
#define NCOUNTS (sizeof COUNTS / sizeof COUNTS[0])

static void set_algo(const char *a) { setenv("WEFT_ALGO", a, 1); }

static void *alloc_guarded(size_t bytes) {
  unsigned char *p = malloc(bytes + GUARD);
  memset(p, PATTERN, bytes + GUARD);
  return p;
}

static int guard_ok(const void *buf, size_t bytes) {
  const unsigned char *p = (const unsigned char *)buf + bytes;
  for (int i = 0; i < GUARD; i++)
    if (p[i] != PATTERN) return 0;
  return 1;
}

static void report(ctx_t *c, const char *what, const char *algo, weft_dtype_t t, weft_op_t op,
                   size_t count, int in_place, const char *why) {
  c->failures++;
  if (c->failures <= 10)
    fprintf(stderr, "rank %d/%d FAIL %s algo=%s dtype=%s op=%s count=%zu %s: %s\n", c->rank, c->n,
            what, algo, weft_dtype_name(t), weft_op_name(op), count,
            in_place ? "in-place" : "out-of-place", why);
}

/* Runs one case; returns after checking. kind selects the collective. */
enum { AR, RS, AG, BC, RD, A2A, A2AV, SR, NKINDS };
static const char *KIND_NAME[NKINDS] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                        "reduce",    "alltoall",       "alltoallv", "sendrecv"};

#ifdef WEFT_TEST_GPU
/* Device twins of the host buffers: the host side is filled and checked as in the host
 * test, and copied to and from the GPU around the call (guards included). */
static char *dev_twin(const char *host, size_t bytes) {
  void *d = NULL;
  if (!host) return NULL;
  /* synchronised: a pageable cudaMemcpy may return before its copy lands */
  if (cudaMalloc(&d, bytes) != cudaSuccess || cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) ||
      cudaDeviceSynchronize())
    return NULL;
  return d;
}
#define ON_DEV(p, hbase, dbase) ((p) ? (dbase) + ((const char *)(p) - (hbase)) : NULL)
#endif

static void run_case(ctx_t *c, int kind, const char *algo, weft_dtype_t t, weft_op_t op,
                     size_t count, int in_place, uint32_t seed) {
  int n = c->n, r = c->rank, root = (int)(seed % (uint32_t)n);
  size_t es = weft_dtype_size(t);
  size_t in_elems = count, out_elems = count;
  size_t *sc = NULL, *sd = NULL, *rcv = NULL, *rd = NULL;
  if (kind == RS || kind == A2A) in_elems = count * (size_t)n;
  if (kind == AG || kind == A2A) out_elems = count * (size_t)n;
  if (kind == A2AV) {
    sc = calloc((size_t)n, sizeof *sc);
    sd = calloc((size_t)n, sizeof *sd);
    rcv = calloc((size_t)n, sizeof *rcv);
    rd = calloc((size_t)n, sizeof *rd);
    in_elems = out_elems = 0;
    for (int p = 0; p < n; p++) { /* count(s -> d) varies per pair; gaps between blocks */
      sc[p] = (count + (size_t)(r * 3 + p)) % (count + 1);
      rcv[p] = (count + (size_t)(p * 3 + r)) % (count + 1);
      sd[p] = in_elems;
      in_elems += sc[p] + 1;
      rd[p] = out_elems;
      out_elems += rcv[p] + 2;
    }
  }
  size_t total = in_elems > out_elems ? in_elems : out_elems;
  char *sendbuf = alloc_guarded(total * es),
       *recvbuf = in_place ? NULL : alloc_guarded(out_elems * es);
  char *expect = malloc(out_elems * es + 1), *orig = malloc(in_elems * es + 1);
  weft_op_t fill_op = (kind == AR || kind == RS || kind == RD) ? op : WEFT_SUM;
  /* Lay out inputs: in place, the input sits where NCCL puts it inside the output. */
  char *in = sendbuf, *out = in_place ? sendbuf : recvbuf;
  if (in_place && kind == AG) in = sendbuf + (size_t)r * count * es;
  if (in_place && kind == RS) out = sendbuf + (size_t)r * count * es;
  oracle_fill(t, fill_op, r, in, 0, kind == AG ? count : in_elems, seed);
  if (kind == A2AV)
    for (int p = 0; p < n; p++)
      memset(in + (sd[p] + sc[p]) * es, 0x5a, es); /* gap */
  memcpy(orig, in, (kind == AG ? count : in_elems) * es);
  if (!in_place) memset(out, PATTERN, out_elems * es);
  set_algo(algo);
  weft_result_t rc = WEFT_SUCCESS;
  weft_stream_t st = (weft_stream_t)c->stream;
  char *hin = in, *hout = out;
#ifdef WEFT_TEST_GPU
  size_t sbytes = total * es + GUARD, rbytes = out_elems * es + GUARD;
  char *dsend = dev_twin(sendbuf, sbytes), *drecv = dev_twin(recvbuf, rbytes);
  in = ON_DEV(in, sendbuf, dsend);
  out = in_place ? ON_DEV(out, sendbuf, dsend) : ON_DEV(out, recvbuf, drecv);
#endif
  switch (kind) {
  case AR: rc = weft_allreduce(in, out, count, t, op, c->comm, st); break;
  case RS: rc = weft_reduce_scatter(in, out, count, t, op, c->comm, st); break;
  case AG: rc = weft_allgather(in, out, count, t, c->comm, st); break;
  case BC: rc = weft_broadcast(in, out, count, t, root, c->comm, st); break;
  case RD: rc = weft_reduce(in, out, count, t, op, root, c->comm, st); break;
  case A2A: rc = weft_alltoall(in, out, count, t, c->comm, st); break;
  case A2AV: rc = weft_alltoallv(in, sc, sd, out, rcv, rd, t, c->comm, st); break;
  case SR:
    weft_group_start();
    weft_send(in, count, t, (r + 1) % n, c->comm, st);
    weft_recv(out, count, t, (r + n - 1) % n, c->comm, st);
    rc = weft_group_end();
    break;
  }
#ifdef WEFT_TEST_GPU
  if (rc == WEFT_SUCCESS) {
    weft_result_t ae = WEFT_SUCCESS;
    if (cudaStreamSynchronize((cudaStream_t)c->stream) != cudaSuccess ||
        cudaMemcpy(sendbuf, dsend, sbytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
        (recvbuf && cudaMemcpy(recvbuf, drecv, rbytes, cudaMemcpyDeviceToHost) != cudaSuccess))
      fprintf(stderr, "rank %d: CUDA error after the call: %s\n", r,
              cudaGetErrorString(cudaGetLastError()));
    weft_comm_get_async_error(c->comm, &ae);
    if (ae != WEFT_SUCCESS) rc = ae;
  }
  cudaFree(dsend);
  cudaFree(drecv);
  in = hin;
  out = hout;
#else
  (void)hin, (void)hout;
#endif
  c->runs++;
  char why[256] = "";
  if (rc != WEFT_SUCCESS) {
    snprintf(why, sizeof why, "returned %s: %s", weft_result_string(rc),
             weft_get_last_error(c->comm));
  } else {
    int check = 1;
    size_t cmp_elems = out_elems;
    switch (kind) {
    case AR: oracle_reduced(t, op, n, expect, 0, count, seed); break;
    case RS:
      oracle_reduced(t, op, n, expect, (size_t)r * count, count, seed);
      cmp_elems = count;
      break;
    case AG:
      for (int p = 0; p < n; p++)
        oracle_fill(t, WEFT_SUM, p, expect + (size_t)p * count * es, 0, count, seed);
      break;
    case BC: oracle_fill(t, WEFT_SUM, root, expect, 0, count, seed); break;
    case RD:
      check = r == root;
      if (check) oracle_reduced(t, op, n, expect, 0, count, seed);
      break;
    case A2A:
      for (int p = 0; p < n; p++)
        oracle_fill(t, WEFT_SUM, p, expect + (size_t)p * count * es, (size_t)r * count, count,
                    seed);
      break;
    case A2AV: {
      memcpy(expect, out, out_elems * es); /* gaps stay as they were */
      for (int p = 0; p < n; p++) {
        /* rank p's send displacement toward r, recomputed as p computed it */
        size_t off = 0;
        for (int q = 0; q < r; q++)
          off += (count + (size_t)(p * 3 + q)) % (count + 1) + 1;
        oracle_fill(t, WEFT_SUM, p, expect + rd[p] * es, off, rcv[p], seed);
      }
      if (!in_place)
        for (int p = 0; p < n; p++)
          for (size_t k = 0; k < 2 * es; k++)
            if ((unsigned char)out[(rd[p] + rcv[p]) * es + k] != PATTERN)
              snprintf(why, sizeof why, "wrote into the gap after block %d", p);
      break;
    }
    case SR: oracle_fill(t, WEFT_SUM, (r + n - 1) % n, expect, 0, count, seed); break;
    }
    if (check && memcmp(out, expect, cmp_elems * es) != 0) {
      size_t bad = 0;
      while (bad < cmp_elems * es && out[bad] == expect[bad])
        bad++;
      size_t e0 = bad / es * es;
      unsigned long long got = 0, want = 0;
      memcpy(&got, out + e0, es < 8 ? es : 8);
      memcpy(&want, expect + e0, es < 8 ? es : 8);
      snprintf(why, sizeof why, "wrong result at element %zu (bytes %llx, expected %llx)", bad / es,
               got, want);
    }
    if (!why[0] && !in_place && memcmp(in, orig, (kind == AG ? count : in_elems) * es) != 0)
      snprintf(why, sizeof why, "sendbuf was modified");
    if (!why[0] && !in_place && !guard_ok(out, out_elems * es))
      snprintf(why, sizeof why, "wrote past the end of recvbuf");
  }
  if (why[0]) report(c, KIND_NAME[kind], algo, t, op, count, in_place, why);
  free(sendbuf);
  free(recvbuf);
  free(expect);
  free(orig);
  free(sc);
  free(sd);
  free(rcv);
  free(rd);
}

#ifdef WEFT_TEST_GPU
static const char *ALGOS[NKINDS][6] = {
    [AR] = {"auto", "oneshot", "twoshot", "ring"},
    [RS] = {"auto", "ring"},
    [AG] = {"auto", "ring"},
    [BC] = {"auto"},
    [RD] = {"auto"},
    [A2A] = {"auto"},
    [A2AV] = {"auto"},
    [SR] = {"auto"},
};
#else
static const char *ALGOS[NKINDS][6] = {
    [AR] = {"auto", "ring", "rhd", "tree", "direct"},
    [RS] = {"auto", "ring", "rhd", "direct"},
    [AG] = {"auto", "ring", "rhd", "direct"},
    [BC] = {"auto", "chain", "tree"},
    [RD] = {"auto", "chain", "tree"},
    [A2A] = {"auto", "pairwise", "direct"},
    [A2AV] = {"auto", "pairwise", "direct"},
    [SR] = {"auto"},
};
#endif

static int rank_main(int rank, int nranks, weft_unique_id_t id, void *arg) {
  ctx_t c = *(ctx_t *)arg;
  c.rank = rank;
  c.n = nranks;
  if (c.hosts > 0) {
    char host[32];
    snprintf(host, sizeof host, "fake-host-%d", rank % c.hosts);
    setenv("WEFT_HOSTID", host, 1);
  }
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 60000;
#ifdef WEFT_TEST_GPU
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) {
    fprintf(stderr, "rank %d: no GPU\n", rank);
    return 1;
  }
  cfg.device = c.share ? 0 : rank % ngpu;
  if (c.staged_on == rank + 1) setenv("WEFT_P2P_DISABLE", "1", 1);
  cudaSetDevice(cfg.device);
  cudaStream_t s = NULL;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  c.stream = s;
#endif
  if (weft_comm_init(&c.comm, nranks, id, rank, &cfg) != WEFT_SUCCESS) {
    fprintf(stderr, "rank %d: init failed: %s\n", rank, weft_get_last_error(NULL));
    return 1;
  }
  uint32_t seed = 1;
  for (int kind = 0; kind < NKINDS; kind++) {
    int reduces = kind == AR || kind == RS || kind == RD;
    for (int a = 0; ALGOS[kind][a]; a++)
      for (int t = 0; t < WEFT_DTYPE_COUNT; t++) {
        /* Data movement does not look at the type: its size is what matters. */
        if (!reduces && t != WEFT_F32 && t != WEFT_F16 && t != WEFT_I8 && t != WEFT_I64) continue;
        for (int op = 0; op < (reduces ? WEFT_OP_COUNT : 1); op++)
          for (size_t ci = 0; ci < NCOUNTS; ci++)
            for (int ip = 0; ip <= 1; ip++) {
              if (ip && (kind == A2AV || kind == SR)) continue;
              /* the largest count once per (collective, algo, dtype) keeps the run short */
              if (ci == NCOUNTS - 1 && (op != 0 || ip)) continue;
              run_case(&c, kind, ALGOS[kind][a], (weft_dtype_t)t, (weft_op_t)op, COUNTS[ci], ip,
                       seed++);
            }
      }
  }
  if (c.big) { /* 64 MiB per rank, every collective once, tuner's choice (GPU: and rings) */
    size_t count = (64u << 20) / 4;
    for (int kind = 0; kind < NKINDS; kind++) {
      size_t per = (kind == RS || kind == AG || kind == A2A || kind == A2AV)
                       ? count / (size_t)nranks
                       : count;
      run_case(&c, kind, "auto", WEFT_F32, WEFT_SUM, per, 0, seed++);
#ifdef WEFT_TEST_GPU
      if (kind == AR || kind == RS || kind == AG)
        run_case(&c, kind, "ring", WEFT_F32, WEFT_SUM, per + 1, kind != RS, seed++);
#endif
    }
  }
  weft_comm_destroy(c.comm);
  printf("rank %d/%d: %d cases, %d failed\n", rank, nranks, c.runs, c.failures);
  return c.failures ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s RANKS [shm|tcp|auto] [--big] [--hosts=K]\n", argv[0]);
    return 2;
  }
  int n = atoi(argv[1]);
  ctx_t c = {0};
  for (int i = 2; i < argc; i++) {
    if (strcmp(argv[i], "--big") == 0)
      c.big = 1;
    else if (strcmp(argv[i], "--share") == 0)
      c.share = 1;
    else if (strncmp(argv[i], "--hosts=", 8) == 0)
      c.hosts = atoi(argv[i] + 8);
    else if (strncmp(argv[i], "--host-staged-on=", 17) == 0)
      c.staged_on = atoi(argv[i] + 17) + 1;
    else
      setenv("WEFT_TRANSPORT", argv[i], 1);
  }
  int rc = launch_local(n, rank_main, &c, 1500);
  printf("%s: %d ranks, transport %s, %d fake hosts: %s\n", argv[0], n,
         getenv("WEFT_TRANSPORT") ? getenv("WEFT_TRANSPORT") : "auto", c.hosts,
         rc ? "FAILED" : "ok");
  return rc;
}
