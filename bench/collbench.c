/* collbench: bandwidth and latency sweeps of weft's collectives, nccl-tests style.
 * With no arguments it sweeps every collective on 4 local CPU ranks; --ranks N spawns N
 * ranks; under mpirun (or with WEFT_ROOT / torchrun variables) it is one rank of a job.
 * Rank 0 prints one row per size: time, algbw and busbw (nccl-tests' formulas) and #wrong,
 * out-of-place then in-place, with --compare the peer's figures and the ratio, and last the
 * algorithm weft ran (weft_comm_last_algo) each way. */
#ifdef WEFT_HAVE_MPI
#include <mpi.h>
#endif
#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "nccl_peer.h"
#endif
#include <getopt.h>
#include <sys/wait.h>
#include <stdarg.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "launch.h"
#include "plot.h"
#include "weft.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  switch (*end) {
  case 'G':
  case 'g': v *= 1 << 30; break;
  case 'M':
  case 'm': v *= 1 << 20; break;
  case 'K':
  case 'k': v *= 1 << 10; break;
  default: break;
  }
  return (size_t)v;
}

static int parse_dtype(const char *s, weft_dtype_t *t) {
  static const struct {
    const char *name;
    weft_dtype_t t;
  } names[] = {{"float", WEFT_F32},     {"f32", WEFT_F32},           {"double", WEFT_F64},
               {"f64", WEFT_F64},       {"half", WEFT_F16},          {"f16", WEFT_F16},
               {"bfloat16", WEFT_BF16}, {"bf16", WEFT_BF16},         {"int8", WEFT_I8},
               {"uint8", WEFT_U8},      {"int32", WEFT_I32},         {"int", WEFT_I32},
               {"int64", WEFT_I64},     {"fp8_e4m3", WEFT_FP8_E4M3}, {"fp8_e5m2", WEFT_FP8_E5M2},
               {"uint32", WEFT_U32},    {"uint64", WEFT_U64}};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcasecmp(s, names[i].name) == 0) {
      *t = names[i].t;
      return 0;
    }
  return -1;
}

static int parse_op(const char *s, weft_op_t *op) {
  for (int i = 0; i < WEFT_OP_COUNT; i++)
    if (strcasecmp(s, weft_op_name((weft_op_t)i)) == 0) {
      *op = (weft_op_t)i;
      return 0;
    }
  return -1;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: collbench [options]\n"
          "  -b, --minbytes SIZE   smallest size (default 8)\n"
          "  -e, --maxbytes SIZE   largest size (default 16M); sizes take K, M, G\n"
          "  -f, --stepfactor F    multiply the size by F each step (default 2)\n"
          "  -i, --stepbytes SIZE  add SIZE each step instead of multiplying\n"
          "  -n, --iters N         timed iterations per size (default 20)\n"
          "  -w, --warmup_iters N  untimed iterations first (default 5)\n"
          "  -c, --check 0|1       check results against the oracle (#wrong; default 1;\n"
          "                        with 0, #wrong reads n/a and JSON's wrong null)\n"
          "  -d, --datatype T      float double half bfloat16 int8 uint8 int32 uint32 int64 "
          "uint64\n"
          "                        fp8_e4m3 fp8_e5m2\n"
          "  -o, --op OP           sum prod min max avg (default sum)\n"
          "  -r, --root R          root of broadcast and reduce (default 0)\n"
          "  -C, --collective C    allreduce reduce_scatter allgather broadcast reduce alltoall "
          "alltoallv\n"
          "                        sendrecv all\n"
          "                        (comma list allowed; default all)\n"
          "      --ranks N         spawn N local ranks (default 4; ignored under mpirun)\n"
          "      --hosts K         the local ranks as K fake hosts (rank %% K; WEFT_HOSTID and\n"
          "                        NCCL_HOSTID): tcp between them, GPU buffers via the proxy\n"
          "      --json FILE       write every row as JSON\n"
          "      --compare mpi     also time Open MPI's collective in the same run (mpirun)\n"
          "      --compare nccl    also time NCCL (libnccl.so.2, loaded at run time) on GPUs\n"
          "      --gpu, --cpu      device or host buffers (default: GPUs when present, one\n"
          "                        rank per GPU)\n"
          "  -G, --cudagraph 0|1   GPU: capture the timed loop in a CUDA graph and replay it\n"
          "      --plot FILE.png   draw busbw against size for weft (and the peer)\n"
          "      --trace           GPU: per timed loop and rank, host clock stamps and event\n"
          "                        times on stderr (to see which rank started late)\n"
          "      --window          GPU: register both buffers as windows (weft_window_register),\n"
          "                        so allgather and alltoall write straight into the peers'\n"
          "                        buffers; NCCL's get ncclCommRegister\n"

          "      --params          print every WEFT_* variable and exit\n"
          "  -h, --help\n");
}

static int parse_colls(const char *arg, bench_opts_t *o) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", arg);
  o->ncolls = 0;
  for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int c = 0; c < B_NCOLLS; c++)
      if (strcasecmp(tok, "all") == 0 || strcasecmp(tok, bench_colls[c].name) == 0) {
        o->colls[o->ncolls++] = c;
        found = 1;
        if (o->ncolls == B_NCOLLS) break;
      }
    if (!found) return -1;
  }
  return o->ncolls ? 0 : -1;
}

static void print_params(FILE *f, int only_set) {
  for (int i = 0; i < weft_param_count(); i++) {
    const char *name, *value, *dflt, *help;
    weft_param_info(i, &name, &value, &dflt, &help);
    if (only_set && !getenv(name)) continue;
    if (only_set)
      fprintf(f, "#   %s=%s\n", name, value);
    else
      fprintf(f, "%-22s %-10s %s\n", name, dflt[0] ? dflt : "(unset)", help);
  }
}

/* ---- JSON rows (rank 0) ---- */
typedef struct {
  char *buf;
  size_t len, cap;
} sbuf_t;

static void sb_printf(sbuf_t *s, const char *fmt, ...) {
  va_list ap;
  for (;;) {
    va_start(ap, fmt);
    int n = vsnprintf(s->buf ? s->buf + s->len : NULL, s->buf ? s->cap - s->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (s->buf && s->len + (size_t)n < s->cap) {
      s->len += (size_t)n;
      return;
    }
    size_t ncap = (s->cap + (size_t)n + 1) * 2;
    char *nb = realloc(s->buf, ncap);
    if (!nb) return;
    s->buf = nb;
    s->cap = ncap;
  }
}

/* s as a JSON string: the library's messages may hold quotes */
static void sb_json_str(sbuf_t *sb, const char *s) {
  sb_printf(sb, "\"");
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      sb_printf(sb, "\\%c", *s);
    else
      sb_printf(sb, "%c", (unsigned char)*s < 0x20 ? ' ' : *s);
  }
  sb_printf(sb, "\"");
}

typedef struct {
  bench_opts_t *o;
  int argc;
  char **argv;
} run_arg_t;

/* A peer library measured in the same run (--compare). */
typedef struct {
  const char *name; /* "mpi" or "nccl"; NULL: none */
  char version[32];
  void *nccl;
} peer_t;

/* Agreement between the ranks on the host communicator; a failure there stops the run like
 * a failed measured call (it is the same library). */
static int ctl_failed(weft_result_t rc, weft_comm_t ctl, int rank) {
  if (rc == WEFT_SUCCESS) return 0;
  fprintf(stderr, "collbench: rank %d: exchanging results failed: %s: %s\n", rank,
          weft_result_string(rc), weft_get_last_error(ctl));
  return 1;
}

static double reduce_max(double v, weft_comm_t comm, int rank, int *failed) {
  double out = v;
  if (ctl_failed(weft_allreduce(&v, &out, 1, WEFT_F64, WEFT_MAX, comm, NULL), comm, rank))
    *failed = 1;
  return out;
}

static int alloc_bufs(const bench_opts_t *o, size_t bytes, char **s, char **r) {
#ifdef WEFT_HAVE_CUDA
  if (o->gpu) return bench_gpu_alloc(bytes, (void **)s, (void **)r);
#endif
  (void)o;
  *s = malloc(bytes);
  *r = malloc(bytes);
  if (!*s || !*r) return -1;
  memset(*s, 0, bytes);
  memset(*r, 0, bytes);
  return 0;
}

static void free_bufs(const bench_opts_t *o, char *s, char *r) {
#ifdef WEFT_HAVE_CUDA
  if (o->gpu) {
    bench_gpu_free(s, r);
    return;
  }
#endif
  (void)o;
  free(s);
  free(r);
}

/* Seconds per call on this rank (or < 0 on failure, with *rc set); on GPUs *submit gets
 * the host's seconds per call of queueing them (else -1). *algo: what the timed calls ran,
 * taken before anything else is issued on comm (the barriers and result exchanges are
 * calls too). */
static double time_calls(int coll, char *in, char *out, size_t count, const bench_opts_t *o,
                         weft_comm_t comm, void *nccl, int rank, int nranks, weft_result_t *rc,
                         double *submit, const char **algo) {
  *submit = -1;
  *algo = "n/a";
#ifdef WEFT_HAVE_CUDA
  if (o->gpu)
    return bench_gpu_time(coll, in, out, count, o, comm, nccl, rank, nranks, rc, submit, algo);
#endif
  (void)nccl;
  *rc = WEFT_SUCCESS;
  for (int i = 0; i < o->warmup && *rc == WEFT_SUCCESS; i++)
    *rc = bench_call(coll, in, out, count, o, comm, rank, nranks);
  if (*rc == WEFT_SUCCESS) *rc = weft_barrier(comm, NULL);
  double t0 = now_s();
  for (int i = 0; i < o->iters && *rc == WEFT_SUCCESS; i++)
    *rc = bench_call(coll, in, out, count, o, comm, rank, nranks);
  *algo = weft_comm_last_algo(comm);
  return *rc == WEFT_SUCCESS ? (now_s() - t0) / (o->iters > 0 ? o->iters : 1) : -1;
}

static int run_rank(weft_comm_t comm, int rank, int nranks, const bench_opts_t *o, const peer_t *pr,
                    int argc, char **argv) {
  size_t es = weft_dtype_size(o->dtype), bytes = 0;
  for (int c = 0; c < B_NCOLLS; c++) { /* the largest buffer any collective needs */
    size_t nin, nout;
    bench_buf_elems(c, bench_count(c, o->max_bytes, es, nranks), nranks, &nin, &nout);
    if ((nin > nout ? nin : nout) * es > bytes) bytes = (nin > nout ? nin : nout) * es;
  }
  bytes += 64;
  char *sbuf = NULL, *rbuf = NULL;
  weft_comm_t ctl = o->ctl;
  int comparing = pr->name != NULL;
  if (alloc_bufs(o, bytes, &sbuf, &rbuf) != 0) {
    fprintf(stderr, "collbench: rank %d: cannot allocate 2 x %zu bytes\n", rank, bytes);
    return 1;
  }
  weft_window_t wins[2] = {NULL, NULL};
  if (o->window && o->gpu &&
      (weft_window_register(comm, sbuf, bytes, &wins[0]) != WEFT_SUCCESS ||
       weft_window_register(comm, rbuf, bytes, &wins[1]) != WEFT_SUCCESS)) {
    fprintf(stderr, "collbench: rank %d: %s\n", rank, weft_get_last_error(comm));
    if (wins[0]) weft_window_deregister(comm, wins[0]); /* every rank got this far alike */
    free_bufs(o, sbuf, rbuf);
    return 1;
  }
  /* NCCL gets the same chance: its buffers registered as well (what it does with them is
   * its business), or the header says why not */
  char nreg_why[160] = "registered (ncclCommRegister)";
#ifdef WEFT_HAVE_CUDA
  void *nregs[2] = {NULL, NULL};
  if (o->window && pr->nccl &&
      (bench_nccl_register(pr->nccl, sbuf, bytes, &nregs[0], nreg_why, sizeof nreg_why) != 0 ||
       bench_nccl_register(pr->nccl, rbuf, bytes, &nregs[1], nreg_why, sizeof nreg_why) != 0))
    fprintf(stderr, "collbench: rank %d: NCCL's buffers not registered: %s\n", rank, nreg_why);
#endif
  size_t devmem = 0;
  weft_comm_device_memory(comm, &devmem);
  sbuf_t js = {0};
  char fail_msg[512] = "";
  int failed = 0, tty = isatty(2);
  double start = now_s(), last_progress = start;
  if (rank == 0) {
    char host[64] = "";
    gethostname(host, sizeof host - 1);
    printf("# collbench: weft %d.%d.%d, %d ranks, host %s, dtype %s, op %s, iters %d, warmup %d, "
           "check %d\n#",
           WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH, nranks, host,
           weft_dtype_name(o->dtype), weft_op_name(o->op), o->iters, o->warmup, o->check);
    for (int i = 0; i < argc; i++)
      printf(" %s", argv[i]);
    printf("\n");
    if (o->gpu)
      printf("# on GPUs: one per rank, %s; weft holds %.1f MiB of device memory per rank%s\n",
             o->graph ? "CUDA-graph replays (-G)" : "stream launches", devmem / 1048576.0,
             o->window ? "; buffers registered as windows (weft_window_register)" : "");
    if (comparing) printf("# peer: %s %s, same buffers, same run\n", pr->name, pr->version);
    if (comparing && o->window && pr->nccl) printf("# peer's buffers: %s\n", nreg_why);
    print_params(stdout, 1);
    sb_printf(&js,
              "{\n  \"tool\": \"collbench\",\n  \"weft_version\": \"%d.%d.%d\",\n  \"host\": "
              "\"%s\",\n  \"nranks\": %d,\n  \"command\": \"",
              WEFT_VERSION_MAJOR, WEFT_VERSION_MINOR, WEFT_VERSION_PATCH, host, nranks);
    for (int i = 0; i < argc; i++)
      sb_printf(&js, "%s%s", i ? " " : "", argv[i]);
    sb_printf(&js,
              "\",\n  \"gpu\": %d,\n  \"graph\": %d,\n  \"check\": %d,\n  "
              "\"device_memory_bytes\": %zu,",
              o->gpu, o->graph, o->check, devmem);
    if (comparing) sb_printf(&js, "\n  \"peer\": \"%s %s\",", pr->name, pr->version);
    sb_printf(&js, "\n  \"rows\": [");
  }
  int first_row = 1, nsizes = 0, done_sizes = 0;
  plot_point_t *pts = NULL;
  size_t npts = 0, cap_pts = 0;
  for (size_t b = o->min_bytes; b <= o->max_bytes;
       b = o->step_bytes ? b + o->step_bytes : (size_t)(b * o->factor > b ? b * o->factor : b + 1))
    nsizes++;
  nsizes *= o->ncolls;
  for (int ci = 0; ci < o->ncolls && !failed; ci++) {
    int coll = o->colls[ci];
    if (rank == 0) {
      printf("#\n# %s\n#%11s %12s %9s %6s %5s %10s %8s %8s %6s %10s %8s %8s %6s",
             bench_colls[coll].name, "size", "count", "type", "redop", "root", "time", "algbw",
             "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
      if (comparing) printf(" %10s %8s %6s", "peer time", "peer bus", "ratio");
      printf(" %8s %8s", "algo", "algo");
      printf("\n#%11s %12s %9s %6s %5s %10s %8s %8s %6s %10s %8s %8s %6s", "(B)", "(elements)", "",
             "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
      if (comparing) printf(" %10s %8s %6s", "(us)", "(GB/s)", "peer/weft");
      printf(" %8s %8s", "(oop)", "(ip)");
      printf("\n");
    }
    for (size_t b = o->min_bytes; b <= o->max_bytes && !failed;
         b = o->step_bytes ? b + o->step_bytes
                           : (size_t)(b * o->factor > b ? b * o->factor : b + 1)) {
      done_sizes++;
      size_t count = bench_count(coll, b, es, nranks);
      if (count == 0) continue;
      size_t row_bytes = bench_row_bytes(coll, count, es, nranks);
      double t[2] = {0, 0}, sub[2] = {-1, -1}; /* sub: weft's and the peer's queueing */
      long wrong[2] = {-1, -1};                /* -1: not checked (-c 0) */
      /* what the timed calls ran, and the checked call where that differed */
      const char *algo[2] = {"n/a", "n/a"}, *check_algo[2] = {NULL, NULL};
      int has_in_place = bench_has_in_place(coll);
      for (int ip = 0; ip < 1 + has_in_place; ip++) {
        weft_result_t rc = WEFT_SUCCESS;
        long w = 0;
#ifdef WEFT_HAVE_CUDA
        if (o->check && o->gpu)
          w = bench_gpu_check(coll, sbuf, rbuf, count, o, comm, rank, nranks, ip, &rc);
#endif
        if (o->check && !o->gpu)
          w = bench_check(coll, sbuf, ip ? sbuf : rbuf, count, o, comm, rank, nranks, ip, &rc);
        if (o->check) check_algo[ip] = weft_comm_last_algo(comm);
        char *in, *out;
        bench_layout(coll, sbuf, rbuf, count, es, rank, ip, &in, &out);
        double dt = -1, st = -1;
        if (rc == WEFT_SUCCESS)
          dt = time_calls(coll, in, out, count, o, comm, NULL, rank, nranks, &rc, &st, &algo[ip]);
        if (rc != WEFT_SUCCESS) {
          fprintf(stderr, "collbench: rank %d: %s of %zu bytes%s failed: %s: %s\n", rank,
                  bench_colls[coll].name, row_bytes, ip ? " in place" : "", weft_result_string(rc),
                  weft_get_last_error(comm));
          snprintf(fail_msg, sizeof fail_msg, "%s of %zu bytes%s: %s: %s", bench_colls[coll].name,
                   row_bytes, ip ? " in place" : "", weft_result_string(rc),
                   weft_get_last_error(comm));
          failed = 1;
          break;
        }
        if (check_algo[ip] && strcmp(check_algo[ip], algo[ip]) == 0) check_algo[ip] = NULL;
        t[ip] = reduce_max(dt, ctl, rank, &failed);
        if (ip == 0 && o->gpu && !o->graph) sub[0] = reduce_max(st, ctl, rank, &failed);
        if (o->check) {
          long wsum = 0;
          if (ctl_failed(weft_allreduce(&w, &wsum, 1, WEFT_I64, WEFT_SUM, ctl, NULL), ctl, rank))
            failed = 1;
          wrong[ip] = wsum;
          if (wsum && !failed) failed = 2;
        }
        if (failed == 1) break;
      }
      if (failed == 1) break;
      double peer = -1;
#ifdef WEFT_HAVE_MPI
      if (o->compare_mpi) peer = bench_mpi_time(coll, sbuf, rbuf, count, o, rank, nranks);
#endif
      if (pr->nccl) {
        weft_result_t prc = WEFT_SUCCESS;
        double pst = -1;
        const char *unused;
        double pt = time_calls(coll, sbuf, rbuf, count, o, comm, pr->nccl, rank, nranks, &prc, &pst,
                               &unused);
        if (o->gpu && !o->graph) sub[1] = reduce_max(pst, ctl, rank, &failed);
        double worst = reduce_max(pt < 0 ? 1e30 : pt, ctl, rank, &failed);
        peer = worst >= 1e30 ? -1 : worst;
      }
      if (rank == 0) {
        const char *opn = bench_colls[coll].reduces ? weft_op_name(o->op) : "none";
        int root = (coll == B_BROADCAST || coll == B_REDUCE) ? o->root : -1;
        double alg[2] = {0, 0}, bus[2] = {0, 0};
        for (int ip = 0; ip < 1 + has_in_place; ip++) {
          alg[ip] = row_bytes / t[ip] / 1e9;
          bus[ip] = bench_busbw(coll, alg[ip], count, nranks);
        }
        char wtxt[2][24];
        for (int ip = 0; ip < 2; ip++)
          snprintf(wtxt[ip], sizeof wtxt[ip], wrong[ip] < 0 ? "n/a" : "%ld", wrong[ip]);
        printf("%12zu %12zu %9s %6s %5d %10.2f %8.2f %8.2f %6s", row_bytes, count,
               weft_dtype_name(o->dtype), opn, root, t[0] * 1e6, alg[0], bus[0], wtxt[0]);
        if (has_in_place)
          printf(" %10.2f %8.2f %8.2f %6s", t[1] * 1e6, alg[1], bus[1], wtxt[1]);
        else
          printf(" %10s %8s %8s %6s", "n/a", "n/a", "n/a", "n/a");
        double pbus = peer > 0 ? bench_busbw(coll, row_bytes / peer / 1e9, count, nranks) : 0;
        if (o->plot && npts == cap_pts) {
          size_t ncap = cap_pts ? cap_pts * 2 : 64;
          plot_point_t *np = realloc(pts, ncap * sizeof *np);
          if (np) pts = np, cap_pts = ncap;
        }
        if (o->plot && npts < cap_pts)
          pts[npts++] = (plot_point_t){bench_colls[coll].name, (double)row_bytes, bus[0], pbus};
        if (comparing) {
          if (peer > 0)
            printf(" %10.2f %8.2f %6.2f", peer * 1e6, pbus, peer / t[0]);
          else
            printf(" %10s %8s %6s", "n/a", "n/a", "n/a");
        }
        printf(" %8s %8s\n", algo[0], algo[1]);
        fflush(stdout);
        for (int ip = 0; ip < 1 + has_in_place; ip++) {
          sb_printf(&js,
                    "%s\n    {\"coll\": \"%s\", \"dtype\": \"%s\", \"op\": \"%s\", \"nranks\": "
                    "%d, \"bytes\": %zu, \"count\": %zu, \"in_place\": %d, \"time_us\": %.3f, "
                    "\"algbw\": %.4f, \"busbw\": %.4f, \"wrong\": %s, \"algo\": \"%s\"",
                    first_row ? "" : ",", bench_colls[coll].name, weft_dtype_name(o->dtype), opn,
                    nranks, row_bytes, count, ip, t[ip] * 1e6, alg[ip], bus[ip],
                    wrong[ip] < 0 ? "null" : wtxt[ip], algo[ip]);
          if (check_algo[ip]) sb_printf(&js, ", \"check_algo\": \"%s\"", check_algo[ip]);
          if (peer > 0 && ip == 0)
            sb_printf(&js,
                      ", \"peer\": \"%s\", \"peer_time_us\": %.3f, \"peer_busbw\": %.4f, "
                      "\"ratio\": %.4f",
                      pr->name, peer * 1e6, pbus, peer / t[0]);
          if (ip == 0 && sub[0] >= 0) sb_printf(&js, ", \"submit_us\": %.3f", sub[0] * 1e6);
          if (ip == 0 && peer > 0 && sub[1] >= 0)
            sb_printf(&js, ", \"peer_submit_us\": %.3f", sub[1] * 1e6);
          sb_printf(&js, "}");
          first_row = 0;
        }
        double now = now_s();
        if (now - last_progress > (tty ? 0.5 : 10.0) || done_sizes == nsizes) {
          fprintf(stderr,
                  tty ? "\rcollbench: %d/%d sizes done, %.0f s%s"
                      : "collbench: %d/%d sizes done, %.0f s%s\n",
                  done_sizes, nsizes, now - start, (tty && done_sizes == nsizes) ? "\n" : "");
          last_progress = now;
        }
      }
    }
  }
  if (rank == 0) {
    sb_printf(&js, "\n  ]");
    if (failed == 1) { /* the rows before the failure stand; say why there are no more */
      sb_printf(&js, ",\n  \"error\": ");
      sb_json_str(&js, fail_msg[0] ? fail_msg : "a rank failed; see its messages");
    }
    sb_printf(&js, "\n}\n");
    if (o->json) {
      FILE *f = fopen(o->json, "w");
      if (!f || fwrite(js.buf, 1, js.len, f) != js.len) {
        fprintf(stderr, "collbench: cannot write %s\n", o->json);
        failed = 1;
      }
      if (f) fclose(f);
    }
    if (o->plot && plot_png(o->plot, pts, npts, comparing ? pr->name : NULL) != 0) {
      fprintf(stderr, "collbench: cannot write the plot %s\n", o->plot);
      failed = 1;
    } else if (o->plot) {
      printf("# collbench: plot in %s\n", o->plot);
    }
    if (!failed && o->check)
      printf("# collbench: done in %.1f s, no errors\n", now_s() - start);
    else if (!failed)
      printf("# collbench: done in %.1f s, results not checked (-c 0)\n", now_s() - start);
    else if (failed == 2)
      printf("# collbench: WRONG RESULTS (see #wrong)\n");
    else
      printf("# collbench: FAILED: %s\n", fail_msg[0] ? fail_msg : "see the messages above");
  }
  free(js.buf);
  free(pts);
  for (int i = 0; i < 2; i++) {
    if (wins[i]) weft_window_deregister(comm, wins[i]);
#ifdef WEFT_HAVE_CUDA
    bench_nccl_deregister(pr->nccl, nregs[i]);
#endif
  }
  free_bufs(o, sbuf, rbuf);
  return failed ? 1 : 0;
}

/* Init failed on this rank: the reason on stderr, and on rank 0 the FAILED line and a JSON
 * file that says why (no rows), as a run that fails later leaves them. */
/* rank -1: not known (the variables that name it are unset or bad): reported as rank 0 is. */
static int init_failed(const bench_opts_t *o, int rank, const char *what) {
  const char *msg = weft_get_last_error(NULL);
  if (!strncmp(msg, what, strlen(what)) && msg[strlen(what)] == ':') what = NULL; /* said */
  if (rank >= 0)
    fprintf(stderr, "collbench: rank %d: %s%s%s\n", rank, what ? what : "", what ? ": " : "", msg);
  else
    fprintf(stderr, "collbench: %s%s%s\n", what ? what : "", what ? ": " : "", msg);
  if (rank > 0) return 1;
  if (!what) what = "init";
  printf("# collbench: FAILED: %s: %s\n", what, msg);
  if (o->json) {
    sbuf_t js = {0};
    sb_printf(&js, "{\n  \"tool\": \"collbench\",\n  \"rows\": [],\n  \"error\": ");
    sb_json_str(&js, msg);
    sb_printf(&js, "\n}\n");
    FILE *f = fopen(o->json, "w");
    if (!f || !js.buf || fwrite(js.buf, 1, js.len, f) != js.len)
      fprintf(stderr, "collbench: cannot write %s\n", o->json);
    if (f) fclose(f);
    free(js.buf);
  }
  return 1;
}

/* One rank's whole run over host communicator `host`: on GPUs, a device communicator split
 * from it (and NCCL's, with --compare nccl) runs the collectives. */
static int rank_entry(weft_comm_t host, int rank, int nranks, const bench_opts_t *opts, int argc,
                      char **argv) {
  bench_opts_t o = *opts;
  peer_t pr = {0};
  weft_comm_t comm = host;
  int rc = 1;
  o.ctl = host;
  if (o.compare_mpi) pr.name = "mpi";
  if (o.gpu) {
#ifdef WEFT_HAVE_CUDA
    int dev = bench_gpu_setup(rank, &o.stream);
    weft_config_t cfg = WEFT_CONFIG_INIT;
    cfg.device = dev;
    if (dev < 0) return 1;
    if (weft_comm_split(host, 0, rank, &comm, &cfg) != WEFT_SUCCESS) {
      init_failed(&o, rank, "the device communicator (weft_comm_split)");
      bench_gpu_teardown(o.stream);
      return 1;
    }
    if (o.compare_nccl) {
      pr.nccl = bench_nccl_open(host, rank, nranks, pr.version, sizeof pr.version);
      pr.name = "nccl";
    }
    if (!o.compare_nccl || pr.nccl) rc = run_rank(comm, rank, nranks, &o, &pr, argc, argv);
    bench_nccl_close(pr.nccl);
    weft_comm_destroy(comm);
    bench_gpu_teardown(o.stream);
#endif
    return rc;
  }
  return run_rank(comm, rank, nranks, &o, &pr, argc, argv);
}

static int local_rank_main(int rank, int nranks, weft_unique_id_t id, void *arg) {
  run_arg_t *a = arg;
  weft_comm_t comm;
  if (weft_comm_init(&comm, nranks, id, rank, NULL) != WEFT_SUCCESS)
    return init_failed(a->o, rank, "weft_comm_init");
  int rc = rank_entry(comm, rank, nranks, a->o, a->argc, a->argv);
  weft_comm_destroy(comm);
  return rc;
}

#ifdef WEFT_HAVE_CUDA
static int cuda_devices(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n > 100 ? 100 : n;
}
#endif

/* GPUs visible, counted in a child process: CUDA must not be initialised in a process
 * that forks ranks afterwards. */
static int count_gpus(void) {
#ifdef WEFT_HAVE_CUDA
  return launch_in_child(cuda_devices);
#else
  return 0;
#endif
}

int main(int argc, char **argv) {
  bench_opts_t o = {.min_bytes = 8,
                    .max_bytes = 16 << 20,
                    .factor = 2,
                    .iters = 20,
                    .warmup = 5,
                    .check = 1,
                    .dtype = WEFT_F32,
                    .op = WEFT_SUM,
                    .ranks = 4};
  parse_colls("all", &o);
  static const struct option longs[] = {{"minbytes", required_argument, 0, 'b'},
                                        {"maxbytes", required_argument, 0, 'e'},
                                        {"stepfactor", required_argument, 0, 'f'},
                                        {"stepbytes", required_argument, 0, 'i'},
                                        {"iters", required_argument, 0, 'n'},
                                        {"warmup_iters", required_argument, 0, 'w'},
                                        {"check", required_argument, 0, 'c'},
                                        {"datatype", required_argument, 0, 'd'},
                                        {"op", required_argument, 0, 'o'},
                                        {"root", required_argument, 0, 'r'},
                                        {"collective", required_argument, 0, 'C'},
                                        {"ranks", required_argument, 0, 1},
                                        {"json", required_argument, 0, 2},
                                        {"compare", required_argument, 0, 3},
                                        {"params", no_argument, 0, 4},
                                        {"gpu", no_argument, 0, 5},
                                        {"cpu", no_argument, 0, 6},
                                        {"cudagraph", required_argument, 0, 'G'},
                                        {"plot", required_argument, 0, 7},
                                        {"trace", no_argument, 0, 8},
                                        {"window", no_argument, 0, 9},
                                        {"hosts", required_argument, 0, 10},

                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  int ch, gpu_mode = -1, ranks_given = 0;
  for (int i = 1; i < argc; i++)
    ranks_given |= strncmp(argv[i], "--ranks", 7) == 0;
  while ((ch = getopt_long(argc, argv, "b:e:f:i:n:w:c:d:o:r:C:G:h", longs, NULL)) != -1) {
    switch (ch) {
    case 'b': o.min_bytes = parse_size(optarg); break;
    case 'e': o.max_bytes = parse_size(optarg); break;
    case 'f': o.factor = atof(optarg); break;
    case 'i': o.step_bytes = parse_size(optarg); break;
    case 'n': o.iters = atoi(optarg); break;
    case 'w': o.warmup = atoi(optarg); break;
    case 'c': o.check = atoi(optarg); break;
    case 'r': o.root = atoi(optarg); break;
    case 'd':
      if (parse_dtype(optarg, &o.dtype)) {
        fprintf(stderr, "collbench: unknown datatype %s\n", optarg);
        return 2;
      }
      break;
    case 'o':
      if (parse_op(optarg, &o.op)) {
        fprintf(stderr, "collbench: unknown op %s\n", optarg);
        return 2;
      }
      break;
    case 'C':
      if (parse_colls(optarg, &o)) {
        fprintf(stderr, "collbench: unknown collective %s\n", optarg);
        return 2;
      }
      break;
    case 1: o.ranks = atoi(optarg); break;
    case 2: o.json = optarg; break;
    case 3:
      if (strcmp(optarg, "mpi") == 0)
        o.compare_mpi = 1;
      else if (strcmp(optarg, "nccl") == 0)
        o.compare_nccl = 1;
      else {
        fprintf(stderr, "collbench: --compare takes mpi or nccl\n");
        return 2;
      }
      break;
    case 5: gpu_mode = 1; break;
    case 6: gpu_mode = 0; break;
    case 'G': o.graph = atoi(optarg); break;
    case 7: o.plot = optarg; break;
    case 8: o.trace = 1; break;
    case 9: o.window = 1; break;
    case 10: o.hosts = atoi(optarg); break;

    case 4: print_params(stdout, 0); return 0;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (o.factor <= 1 && !o.step_bytes) o.factor = 2;
  if (o.min_bytes < 1 || o.max_bytes < o.min_bytes || o.iters < 1 || o.warmup < 0 || o.ranks < 1) {
    fprintf(stderr, "collbench: need 1 <= minbytes <= maxbytes, iters >= 1, ranks >= 1\n");
    return 2;
  }
  /* GPUs when the build has CUDA and the machine has GPUs, unless --cpu */
  int ngpu = gpu_mode != 0 ? count_gpus() : 0;
  if (gpu_mode == 1 && ngpu == 0) {
    fprintf(stderr, "collbench: --gpu, but %s\n",
#ifdef WEFT_HAVE_CUDA
            "no GPU is visible"
#else
            "this collbench was built without CUDA"
#endif
    );
    return 2;
  }
  o.gpu = ngpu > 0;
  if (o.gpu && !ranks_given) o.ranks = ngpu;
  if (!o.gpu && (o.compare_nccl || o.graph || o.window)) {
    fprintf(stderr, "collbench: --compare nccl, -G and --window need GPUs\n");
    return 2;
  }
  run_arg_t a = {&o, argc, argv};
  int under_mpi = getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL;
  if (under_mpi) {
#ifdef WEFT_HAVE_MPI
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (o.root >= n) o.root = 0;
    weft_comm_t comm;
    int rc = 1;
    if (weft_comm_init_mpi(&comm, MPI_COMM_WORLD, NULL) == WEFT_SUCCESS) {
      rc = rank_entry(comm, rank, n, &o, argc, argv);
      weft_comm_destroy(comm);
    } else {
      init_failed(&o, rank, "weft_comm_init_mpi");
    }
    MPI_Finalize();
    return rc;
#else
    fprintf(stderr, "collbench: started by mpirun, but built without MPI (-Dmpi=enabled)\n");
    return 2;
#endif
  }
  if (o.compare_mpi) {
    fprintf(stderr,
            "collbench: --compare mpi needs mpirun (e.g. mpirun -np 4 collbench --compare mpi)\n");
    return 2;
  }
  if (getenv("WEFT_ROOT") || getenv("MASTER_ADDR")) {
    weft_comm_t comm;
    if (weft_comm_init_env(&comm, NULL) != WEFT_SUCCESS) { /* the rank as the variables say */
      const char *r = getenv(getenv("WEFT_ROOT") ? "WEFT_RANK" : "RANK");
      char *end = NULL;
      long rank = r ? strtol(r, &end, 10) : -1;
      return init_failed(&o, r && *r && !*end && rank >= 0 && rank < INT_MAX ? (int)rank : -1,
                         "weft_comm_init_env");
    }
    int rank, n;
    weft_comm_rank(comm, &rank);
    weft_comm_count(comm, &n);
    if (o.root >= n) o.root = 0;
    int rc = rank_entry(comm, rank, n, &o, argc, argv);
    weft_comm_destroy(comm);
    return rc;
  }
  if (o.root >= o.ranks) o.root = 0;
  if (o.hosts > 0) { /* the launcher gives each rank its fake host (bench/launch.c) */
    char k[16];
    snprintf(k, sizeof k, "%d", o.hosts);
    setenv("WEFT_TEST_HOSTS", k, 1);
  }
  return launch_local(o.ranks, local_rank_main, &a, 3600);
}
