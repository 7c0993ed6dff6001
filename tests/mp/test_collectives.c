/* Multi-process oracle test: every collective x algorithm x dtype x op x in/out-of-place x
 * counts {0, 1, 7, 1023} on N forked ranks, compared bit for bit with the exact oracle; each
 * reduction also with the rounding oracle's inputs (1023 out of place, 7 in place) within a
 * bound per dtype, and every allreduce result compared across ranks byte for byte (the parent
 * does it once the ranks are done). Each call must report the algorithm asked for; rhd on
 * reduce_scatter/allgather off powers of two and WEFT_ALGO=rign must be refused, buffers
 * untouched. Also: sendbuf unchanged, guards after every buffer intact (in place too), a
 * non-root reduce leaves its recvbuf alone. Pruned: count 40000 (see skip_largest) runs once
 * per reduction x algo x dtype with op and placement rotating, and for data movement in
 * f32, f16, i8 and i64 only. usage: test_collectives RANKS [shm|tcp|auto] [--big]
 * [--hosts=K] (K fake hosts: shm within a host, tcp between them). Built with WEFT_TEST_GPU
 * (tests/gpu), the same matrix runs on device buffers: one GPU per rank, or all ranks on
 * GPU 0 with --share; --host-staged-on=R sets WEFT_P2P_DISABLE=1 in rank R alone, which
 * every rank must then follow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifdef WEFT_TEST_GPU
#include <cuda_runtime_api.h>
#endif

#include "launch.h"
#include "oracle.h"
#include "weft.h"

enum { GUARD = 64, SLOTS = 1 << 16, DESC = 80 };
static const unsigned char PATTERN = 0xA5;

typedef struct {
  int big;
  int share;     /* GPU build: every rank on GPU 0 */
  void *stream;  /* GPU build: the cudaStream_t every call uses */
  int hosts;     /* > 0: fake that many hosts (rank % hosts), so shm and tcp mix */
  int staged_on; /* GPU build: the rank (+ 1) that alone asks for host-staged regions */
  int runs, failures, refused;
  int rank, n;
  unsigned dtypes; /* bit t set: dtype t runs (WEFT_TEST_DTYPES, else all) */
  weft_comm_t comm;
  /* Shared with the parent, which compares them once every rank is done: the hash of each
   * allreduce's result per (rank, case seed), 0 when none, and rank 0's case names. */
  uint64_t *ident;
  char *ident_desc;
} ctx_t;

static const size_t COUNTS[] = {0, 1, 7, 1023, 40000};
#define NCOUNTS (sizeof COUNTS / sizeof COUNTS[0])

/* Runs one case; returns after checking. kind selects the collective. */
enum { AR, RS, AG, BC, RD, A2A, A2AV, SR, NKINDS };
static const char *KIND_NAME[NKINDS] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                        "reduce",    "alltoall",       "alltoallv", "sendrecv"};

typedef struct {
  int kind;
  const char *algo;
  weft_dtype_t t;
  weft_op_t op;
  size_t count;
  int in_place;
  int wide; /* reductions: the rounding oracle's inputs instead of the exact ones */
  uint32_t seed;
} case_t;

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

static void case_name(const case_t *k, char *buf, size_t len) {
  snprintf(buf, len, "%s algo=%s dtype=%s op=%s count=%zu %s%s", KIND_NAME[k->kind], k->algo,
           weft_dtype_name(k->t), weft_op_name(k->op), k->count,
           k->in_place ? "in-place" : "out-of-place", k->wide ? " wide" : "");
}

static void report(ctx_t *c, const case_t *k, const char *why) {
  char name[DESC];
  c->failures++;
  case_name(k, name, sizeof name);
  if (c->failures <= 10) fprintf(stderr, "rank %d/%d FAIL %s: %s\n", c->rank, c->n, name, why);
}

/* The algorithms each collective has, the set "auto" must pick from. */
#ifdef WEFT_TEST_GPU
static const char *HAS[NKINDS] = {[AR] = "oneshot twoshot ring",
                                  [RS] = "ring direct",
                                  [AG] = "ring direct",
                                  [BC] = "direct",
                                  [RD] = "direct",
                                  [A2A] = "direct",
                                  [A2AV] = "direct",
                                  [SR] = "direct"};
#else
static const char *HAS[NKINDS] = {
    [AR] = "ring rhd tree direct", [RS] = "ring rhd direct", [AG] = "ring rhd direct",
    [BC] = "chain tree",           [RD] = "chain tree",      [A2A] = "pairwise direct",
    [A2AV] = "pairwise direct",    [SR] = "direct"};
#endif

static int word_in(const char *w, const char *list) {
  size_t n = strlen(w);
  for (const char *p = strstr(list, w); p; p = strstr(p + 1, w))
    if ((p == list || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
  return 0;
}

/* rhd splits the buffer in halves: reduce_scatter and allgather need 2^k ranks for it */
static int rhd_refused(const ctx_t *c, const case_t *k) {
#ifdef WEFT_TEST_GPU
  (void)c, (void)k;
  return 0;
#else
  return (k->kind == RS || k->kind == AG) && (c->n & (c->n - 1));
#endif
}

/* Past 8 ranks a device rank's kernels reach its ring neighbours alone (src/gpu/slots.h):
 * every collective runs as a ring (broadcast and reduce as chains) whatever WEFT_ALGO asks,
 * send/recv goes to the neighbours (as SR's does), and alltoall(v) is refused. */
static int ring_only(const ctx_t *c) {
#ifdef WEFT_TEST_GPU
  return c->n > 8;
#else
  (void)c;
  return 0;
#endif
}

/* What the call must return: success, or the refusal this configuration gets. */
static weft_result_t expected_rc(const ctx_t *c, const case_t *k) {
  if (strcmp(k->algo, "rign") == 0) return WEFT_ERR_INVALID_ARG;
  if (ring_only(c) && (k->kind == A2A || k->kind == A2AV)) return WEFT_ERR_UNSUPPORTED;
  if (strcmp(k->algo, "rhd") == 0 && rhd_refused(c, k)) return WEFT_ERR_UNSUPPORTED;
  return WEFT_SUCCESS;
}

/* Why the algorithm that ran is not the one asked for, or NULL. */
static const char *wrong_algo(const ctx_t *c, const case_t *k, char *why, size_t len) {
  const char *ran = weft_comm_last_algo(c->comm);
  const char *want = ring_only(c) && k->kind != SR ? "ring" : k->algo;
  int ok = strcmp(want, "auto") == 0
               ? word_in(ran, HAS[k->kind]) && !(strcmp(ran, "rhd") == 0 && rhd_refused(c, k))
               : strcmp(ran, want) == 0;
  if (ok) return NULL;
  snprintf(why, len, "weft_comm_last_algo says %s ran, not %s", ran,
           strcmp(want, "auto") ? want : HAS[k->kind]);
  return why;
}

static uint64_t hash_bytes(const char *p, size_t n) {
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i++)
    h = (h ^ (unsigned char)p[i]) * 1099511628211ULL;
  return h | 1; /* 0 marks "no result" */
}

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

/* The expected output of a case checked exactly (everything but the wide reductions);
 * returns 0 where this rank has nothing to compare. */
static int expected_exact(const ctx_t *c, const case_t *k, char *expect, const char *out,
                          size_t out_elems, const size_t *rd, const size_t *rcv) {
  int n = c->n, r = c->rank, root = (int)(k->seed % (uint32_t)n);
  size_t count = k->count, es = weft_dtype_size(k->t);
  weft_dtype_t t = k->t;
  switch (k->kind) {
  case AR: oracle_reduced(t, k->op, n, expect, 0, count, k->seed); break;
  case RS: oracle_reduced(t, k->op, n, expect, (size_t)r * count, count, k->seed); break;
  case AG:
    for (int p = 0; p < n; p++)
      oracle_fill(t, WEFT_SUM, p, expect + (size_t)p * count * es, 0, count, k->seed);
    break;
  case BC: oracle_fill(t, WEFT_SUM, root, expect, 0, count, k->seed); break;
  case RD:
    if (r != root) return 0;
    oracle_reduced(t, k->op, n, expect, 0, count, k->seed);
    break;
  case A2A:
    for (int p = 0; p < n; p++)
      oracle_fill(t, WEFT_SUM, p, expect + (size_t)p * count * es, (size_t)r * count, count,
                  k->seed);
    break;
  case A2AV:
    memcpy(expect, out, out_elems * es); /* gaps stay as they were */
    for (int p = 0; p < n; p++) {
      /* rank p's send displacement toward r, recomputed as p computed it */
      size_t off = 0;
      for (int q = 0; q < r; q++)
        off += (count + (size_t)(p * 3 + q)) % (count + 1) + 1;
      oracle_fill(t, WEFT_SUM, p, expect + rd[p] * es, off, rcv[p], k->seed);
    }
    break;
  case SR: oracle_fill(t, WEFT_SUM, (r + n - 1) % n, expect, 0, count, k->seed); break;
  }
  return 1;
}

static void run_case(ctx_t *c, const case_t *k) {
  int n = c->n, r = c->rank, root = (int)(k->seed % (uint32_t)n), kind = k->kind;
  weft_dtype_t t = k->t;
  size_t count = k->count, es = weft_dtype_size(t);
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
  /* reduce: a non-root rank may pass no recvbuf; count 1 tries that */
  int no_recv = kind == RD && !k->in_place && r != root && count == 1;
  size_t total = in_elems > out_elems ? in_elems : out_elems;
  size_t sbytes = total * es + GUARD, rbytes = out_elems * es + GUARD;
  char *sendbuf = alloc_guarded(total * es),
       *recvbuf = k->in_place || no_recv ? NULL : alloc_guarded(out_elems * es);
  /* whole allocations as they were before the call, guards included */
  char *send0 = malloc(sbytes), *recv0 = malloc(rbytes), *expect = malloc(out_elems * es + 1);
  weft_op_t fill_op = (kind == AR || kind == RS || kind == RD) ? k->op : WEFT_SUM;
  /* Lay out inputs: in place, the input sits where NCCL puts it inside the output. */
  char *in = sendbuf, *out = k->in_place ? sendbuf : recvbuf;
  if (k->in_place && kind == AG) in = sendbuf + (size_t)r * count * es;
  if (k->in_place && kind == RS) out = sendbuf + (size_t)r * count * es;
  size_t in_fill = kind == AG ? count : in_elems;
  if (k->wide)
    oracle_fill_wide(t, fill_op, r, in, 0, in_fill, k->seed);
  else
    oracle_fill(t, fill_op, r, in, 0, in_fill, k->seed);
  if (kind == A2AV)
    for (int p = 0; p < n; p++)
      memset(in + (sd[p] + sc[p]) * es, 0x5a, es); /* gap */
  memcpy(send0, sendbuf, sbytes);
  if (recvbuf) memcpy(recv0, recvbuf, rbytes);
  set_algo(k->algo);
  weft_result_t rc = WEFT_SUCCESS;
  weft_stream_t st = (weft_stream_t)c->stream;
  char *hin = in, *hout = out;
#ifdef WEFT_TEST_GPU
  char *dsend = dev_twin(sendbuf, sbytes), *drecv = dev_twin(recvbuf, rbytes);
  in = ON_DEV(in, sendbuf, dsend);
  out = k->in_place ? ON_DEV(out, sendbuf, dsend) : ON_DEV(out, recvbuf, drecv);
#endif
  switch (kind) {
  case AR: rc = weft_allreduce(in, out, count, t, k->op, c->comm, st); break;
  case RS: rc = weft_reduce_scatter(in, out, count, t, k->op, c->comm, st); break;
  case AG: rc = weft_allgather(in, out, count, t, c->comm, st); break;
  case BC: rc = weft_broadcast(in, out, count, t, root, c->comm, st); break;
  case RD: rc = weft_reduce(in, out, count, t, k->op, root, c->comm, st); break;
  case A2A: rc = weft_alltoall(in, out, count, t, c->comm, st); break;
  case A2AV: rc = weft_alltoallv(in, sc, sd, out, rcv, rd, t, c->comm, st); break;
  case SR:
    weft_group_start();
    weft_send(in, count, t, (r + 1) % n, c->comm, st);
    weft_recv(out, count, t, (r + n - 1) % n, c->comm, st);
    rc = weft_group_end();
    break;
  }
  char why[256] = "";
  const char *err = weft_get_last_error(c->comm);
  snprintf(why, sizeof why, "%s", err); /* before anything else can replace it */
#ifdef WEFT_TEST_GPU
  /* copied back whatever rc says: a refused call must not have touched them either */
  if ((rc == WEFT_SUCCESS && cudaStreamSynchronize((cudaStream_t)c->stream) != cudaSuccess) ||
      cudaMemcpy(sendbuf, dsend, sbytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
      (recvbuf && cudaMemcpy(recvbuf, drecv, rbytes, cudaMemcpyDeviceToHost) != cudaSuccess))
    fprintf(stderr, "rank %d: CUDA error after the call: %s\n", r,
            cudaGetErrorString(cudaGetLastError()));
  if (rc == WEFT_SUCCESS) {
    weft_result_t ae = WEFT_SUCCESS;
    weft_comm_get_async_error(c->comm, &ae);
    if (ae != WEFT_SUCCESS) {
      rc = ae;
      snprintf(why, sizeof why, "%s", weft_get_last_error(c->comm));
    }
  }
  cudaFree(dsend);
  cudaFree(drecv);
  in = hin;
  out = hout;
#else
  (void)hin, (void)hout;
#endif
  c->runs++;
  weft_result_t want_rc = expected_rc(c, k);
  int untouched =
      memcmp(sendbuf, send0, sbytes) == 0 && (!recvbuf || memcmp(recvbuf, recv0, rbytes) == 0);
  if (want_rc != WEFT_SUCCESS) {
    char msg[300];
    snprintf(msg, sizeof msg, "%s", why);
    if (rc != want_rc)
      snprintf(why, sizeof why, "returned %s, not %s (%.150s)", weft_result_string(rc),
               weft_result_string(want_rc), rc ? msg : "it ran");
    else if (!untouched)
      snprintf(why, sizeof why, "refused with %s but changed a buffer", weft_result_string(rc));
    else if (want_rc == WEFT_ERR_INVALID_ARG && (!strstr(msg, k->algo) || !strstr(msg, "ring")))
      snprintf(why, sizeof why, "the error names neither the value nor the valid ones: %.150s",
               msg);
    else
      why[0] = 0;
    if (why[0])
      report(c, k, why);
    else
      c->refused++;
    goto done;
  }
  if (rc != WEFT_SUCCESS) {
    char msg[200];
    snprintf(msg, sizeof msg, "%s", why);
    snprintf(why, sizeof why, "returned %s: %s", weft_result_string(rc), msg);
    report(c, k, why);
    goto done;
  }
  why[0] = 0;
  wrong_algo(c, k, why, sizeof why);
  if (kind == AR && c->ident && k->seed < SLOTS) {
    c->ident[(size_t)r * SLOTS + k->seed] = hash_bytes(out, count * es);
    if (r == 0) case_name(k, c->ident_desc + (size_t)k->seed * DESC, DESC);
  }
  size_t cmp_elems = kind == RS ? count : out_elems;
  if (!why[0] && k->wide && (kind != RD || r == root)) {
    double want = 0, have = 0, tol = 0;
    size_t first = kind == RS ? (size_t)r * count : 0;
    size_t bad = oracle_check_wide(t, k->op, n, out, first, count, k->seed, &want, &have, &tol);
    if (bad < count)
      snprintf(why, sizeof why, "element %zu is %.17g, expected %.17g within %.3g", bad, have, want,
               tol);
  } else if (!why[0] && !k->wide && expected_exact(c, k, expect, out, out_elems, rd, rcv) &&
             memcmp(out, expect, cmp_elems * es) != 0) {
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
  if (!why[0] && kind == A2AV && !k->in_place)
    for (int p = 0; p < n; p++)
      for (size_t b = 0; b < 2 * es; b++)
        if ((unsigned char)out[(rd[p] + rcv[p]) * es + b] != PATTERN)
          snprintf(why, sizeof why, "wrote into the gap after block %d", p);
  if (why[0]) {
  } else if (kind == RD && r != root && !untouched) {
    snprintf(why, sizeof why, "a non-root rank's %s was written",
             k->in_place ? "buffer (sendbuf = recvbuf)" : "recvbuf");
  } else if (!k->in_place && memcmp(sendbuf, send0, sbytes) != 0) {
    snprintf(why, sizeof why, "sendbuf was modified (or written past its end)");
  } else if (k->in_place ? !guard_ok(sendbuf, total * es)
                         : recvbuf && !guard_ok(recvbuf, out_elems * es)) {
    snprintf(why, sizeof why, "wrote past the end of %s", k->in_place ? "the buffer" : "recvbuf");
  }
  if (why[0]) report(c, k, why);
done:
  free(sendbuf);
  free(recvbuf);
  free(send0);
  free(recv0);
  free(expect);
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

/* The largest count costs most of the run: a reduction runs it once per (collective, algo,
 * dtype), op and placement rotating so that each op runs there in and out of place per
 * algo; data movement looks at the size of a type only, and runs it in and out of place in
 * one type per size (f32, f16, i8, i64). */
static int skip_largest(int kind, int a, int t, int op, int ip) {
  if (kind == AR || kind == RS || kind == RD) return op != (t + a) % WEFT_OP_COUNT || ip != t % 2;
  return t != WEFT_F32 && t != WEFT_F16 && t != WEFT_I8 && t != WEFT_I64;
}

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
      for (int t = 0; t < WEFT_DTYPE_COUNT; t++)
        for (int op = 0; op < (!(c.dtypes >> t & 1) ? 0 : reduces ? WEFT_OP_COUNT : 1); op++) {
          case_t k = {
              .kind = kind, .algo = ALGOS[kind][a], .t = (weft_dtype_t)t, .op = (weft_op_t)op};
          for (size_t ci = 0; ci < NCOUNTS; ci++)
            for (int ip = 0; ip <= 1; ip++) {
              if (ip && (kind == A2AV || kind == SR)) continue;
              if (ci == NCOUNTS - 1 && skip_largest(kind, a, t, op, ip)) continue;
              k.count = COUNTS[ci], k.in_place = ip, k.seed = seed++;
              run_case(&c, &k);
            }
          if (!reduces) continue;
          /* the rounding oracle: a thousand elements out of place, a few in place */
          for (int ip = 0; ip <= 1; ip++) {
            k.count = ip ? 7 : 1023, k.in_place = ip, k.wide = 1, k.seed = seed++;
            run_case(&c, &k);
          }
        }
  }
  /* an unknown WEFT_ALGO fails the call on every rank before anything moves */
  for (int kind = 0; kind < SR; kind++) {
    case_t k = {.kind = kind, .algo = "rign", .t = WEFT_F32, .count = 7, .seed = seed++};
    run_case(&c, &k);
  }
  if (c.big) { /* 64 MiB per rank, every collective once, tuner's choice (GPU: and rings) */
    size_t count = (64u << 20) / 4;
    for (int kind = 0; kind < NKINDS; kind++) {
      size_t per = (kind == RS || kind == AG || kind == A2A || kind == A2AV)
                       ? count / (size_t)nranks
                       : count;
      case_t k = {.kind = kind, .algo = "auto", .t = WEFT_F32, .count = per, .seed = seed++};
      run_case(&c, &k);
#ifdef WEFT_TEST_GPU
      if (kind == AR || kind == RS || kind == AG) {
        case_t g = {.kind = kind,
                    .algo = "ring",
                    .t = WEFT_F32,
                    .count = per + 1,
                    .in_place = kind != RS,
                    .seed = seed++};
        run_case(&c, &g);
      }
#endif
    }
  }
  weft_comm_destroy(c.comm);
  printf("rank %d/%d: %d cases: %d passed, %d failed, %d refused as expected\n", rank, nranks,
         c.runs, c.runs - c.failures - c.refused, c.failures, c.refused);
  return c.failures ? 1 : 0;
}

/* Every allreduce result that all ranks hold must be the same bytes on each (docs/architecture.md:
 * ranks agree bit for bit). Returns the number of results that differ. */
static int compare_across_ranks(const ctx_t *c, int n) {
  int compared = 0, differ = 0;
  for (size_t s = 0; s < SLOTS; s++) {
    int all = 1, same = 1;
    for (int r = 0; r < n; r++) {
      uint64_t h = c->ident[(size_t)r * SLOTS + s];
      all &= h != 0;
      same &= h == c->ident[s];
    }
    if (!all) continue; /* a rank failed the call: reported there */
    compared++;
    if (same) continue;
    if (++differ <= 10) {
      fprintf(stderr, "FAIL ranks hold different results of %s:", c->ident_desc + s * DESC);
      for (int r = 0; r < n; r++)
        fprintf(stderr, " %016llx", (unsigned long long)c->ident[(size_t)r * SLOTS + s]);
      fprintf(stderr, "\n");
    }
  }
  printf("bit identity across %d ranks: %d allreduce results compared, %d differ\n", n, compared,
         differ);
  return differ;
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
  /* WEFT_TEST_DTYPES=int32,half,...: those types only. The TSan build runs a few: races do
   * not depend on the element type, and the plain and ASan builds run them all. */
  const char *only = getenv("WEFT_TEST_DTYPES");
  if (only && !*only) only = NULL; /* set but empty: all */
  for (int t = 0; t < WEFT_DTYPE_COUNT; t++) {
    const char *name = weft_dtype_name((weft_dtype_t)t), *at = only ? strstr(only, name) : NULL;
    size_t len = strlen(name);
    while (at && !((at == only || at[-1] == ',') && (at[len] == ',' || at[len] == 0)))
      at = strstr(at + 1, name);
    if (!only || at) c.dtypes |= 1u << t;
  }
  for (int t = 0; t < WEFT_DTYPE_COUNT; t++)
    if ((c.dtypes >> t & 1) && n > oracle_exact_ranks((weft_dtype_t)t)) {
      c.dtypes &= ~(1u << t); /* said aloud: no exact oracle for it at this size */
      printf("%s: not run past %d ranks (the exact oracle's sums would round)\n",
             weft_dtype_name((weft_dtype_t)t), oracle_exact_ranks((weft_dtype_t)t));
    }
  if (!c.dtypes) {
    fprintf(stderr, "WEFT_TEST_DTYPES=%s names no type\n", only);
    return 2;
  }
  /* shared, so that it outlives the ranks; zeroed: no results yet */
  size_t ibytes = (size_t)n * SLOTS * sizeof *c.ident + (size_t)SLOTS * DESC;
  void *shared = n > 0
                     ? mmap(NULL, ibytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
                     : MAP_FAILED;
  if (shared == MAP_FAILED) {
    perror("mmap");
    return 2;
  }
  c.ident = shared;
  c.ident_desc = (char *)shared + (size_t)n * SLOTS * sizeof *c.ident;
  int rc = launch_local(n, rank_main, &c, 1500);
  if (compare_across_ranks(&c, n)) rc = 1;
  printf("%s: %d ranks, transport %s, %d fake hosts: %s\n", argv[0], n,
         getenv("WEFT_TRANSPORT") ? getenv("WEFT_TRANSPORT") : "auto", c.hosts,
         rc ? "FAILED" : "ok");
  return rc;
}
