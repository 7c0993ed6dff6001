/* moebench: MoE layout, dispatch and combine (weft_moe.h) timed and checked, in collbench's
 * flag style. Local ranks (--ranks N) route random top-k tokens; rank 0 prints one row per
 * phase: the slowest rank's mean time, the bandwidth counted as DeepEP counts it (bytes of
 * the tokens a rank receives, each once per rank, over the time) and the wrong elements. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtype.h"

/* element i of a buffer of type t, as float (dtype.c converts) */
#define get(t, b, i)    ((float)weft_dtype_load((t), (b), (i)))
#define put(t, b, i, v) weft_dtype_store((t), (b), (i), (double)(v))
#include "launch.h"
#include "weft.h"
#include "weft_moe.h"

typedef struct {
  size_t tokens, hidden, align;
  int topk, experts, iters, warmup, check, ranks;
  weft_dtype_t t;
  const char *json;
} mopts_t;

enum { LAYOUT, DISPATCH, COMBINE, NPHASE };
static const char *const PHASE[NPHASE] = {"layout", "dispatch", "combine"};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Token t of rank s: k distinct experts drawn uniformly (every rank can draw any rank's). */
static void route(const mopts_t *o, int s, size_t t, int64_t *ids) {
  for (int j = 0, tries = 0; j < o->topk; tries++) {
    int64_t e = (int64_t)(mix((uint64_t)s << 40 | t, (uint64_t)tries) % (uint64_t)o->experts);
    int seen = 0;
    for (int i = 0; i < j; i++)
      seen |= ids[i] == e;
    if (!seen) ids[j++] = e;
  }
}

/* Element c of token t on rank s: small multiples of 1/4, exact in every payload type and in
 * sums of up to 8 of them scaled by a power of two. */
static float x_of(int s, size_t t, size_t c) {
  return (float)((int)(mix((uint64_t)s << 40 | t, c + 1000) % 15) - 7) * 0.25f;
}

/* Wrong elements of this rank's rows (expert-major, by source rank then token: wrong[0])
 * and of its combined tokens (identity experts: x times the sum of its weights, exact when
 * k is a power of two: wrong[1]); and the tokens it received, each once per rank. */
static void check_rank(const mopts_t *o, int rank, int n, const void *rx, const void *y,
                       const int64_t *off, uint64_t wrong[2], size_t *recv_tokens) {
  int local = o->experts / n, k = o->topk;
  size_t H = o->hidden, *next = calloc((size_t)local, sizeof *next);
  int64_t ids[WEFT_MOE_MAX_TOPK];
  float tol = (k & (k - 1)) == 0 ? 0 : o->t == WEFT_F32 ? 1e-6f : o->t == WEFT_F16 ? 1e-3f : 1e-2f;
  wrong[0] = wrong[1] = 0, *recv_tokens = 0;
  for (int s = 0; s < n && next; s++)
    for (size_t t = 0; t < o->tokens; t++) {
      route(o, s, t, ids);
      int here = 0;
      for (int j = 0; j < k; j++) {
        if (ids[j] / local != rank) continue;
        here = 1;
        size_t r = (size_t)off[ids[j] % local] + next[ids[j] % local]++;
        for (size_t c = 0; c < H && o->check; c++)
          wrong[0] += get(o->t, rx, r * H + c) != x_of(s, t, c);
      }
      *recv_tokens += (size_t)here;
    }
  for (size_t t = 0; t < o->tokens && o->check; t++)
    for (size_t c = 0; c < H; c++) /* no choice dropped: the weights sum to 1 */
      wrong[1] += fabsf(get(o->t, y, t * H + c) - x_of(rank, t, c)) > fabsf(x_of(rank, t, c)) * tol;
  if (!next) wrong[0] = wrong[1] = 1;
  free(next);
}

static int fail(int rank, const char *what, weft_comm_t comm) {
  fprintf(stderr, "moebench: rank %d: %s failed: %s\n", rank, what, weft_get_last_error(comm));
  return 1;
}

/* Rank 0's rows and JSON; 1 when a result was wrong or the JSON could not be written. */
static int report(const mopts_t *o, int n, const double *tmax, double bmax, const uint64_t *wrong) {
  int rc = 0, any = 0;
  FILE *js = o->json ? fopen(o->json, "w") : NULL;
  if (o->json && !js) fprintf(stderr, "moebench: cannot write %s\n", o->json), rc = 1;
  printf("# moebench: %d ranks (host buffers), %zu tokens/rank, hidden %zu, top-%d of %d "
         "experts, %s, normal mode, align %zu; mean of %d iterations after %d warm-up\n",
         n, o->tokens, o->hidden, o->topk, o->experts, weft_dtype_name(o->t), o->align, o->iters,
         o->warmup);
  printf("# GB/s: the most bytes of tokens a rank receives (each once per rank) over the "
         "slowest rank's mean time, as DeepEP counts them\n");
  printf("%-10s %12s %10s %8s\n", "phase", "time_us", "GB/s", "#wrong");
  if (js)
    fprintf(js,
            "{\n  \"bench\": \"moebench\", \"nranks\": %d, \"tokens\": %zu, \"hidden\": %zu, "
            "\"topk\": %d, \"experts\": %d, \"dtype\": \"%s\", \"mode\": \"normal\", "
            "\"buffers\": \"host\", \"align\": %zu, \"check\": %d,\n  \"rows\": [",
            n, o->tokens, o->hidden, o->topk, o->experts, weft_dtype_name(o->t), o->align,
            o->check);
  for (int ph = 0; ph < NPHASE; ph++) {
    char gbs[32] = "-", jgbs[32] = "null", wtxt[32] = "n/a", jw[32] = "null";
    if (ph != LAYOUT) {
      snprintf(gbs, sizeof gbs, "%.2f", bmax / tmax[ph] / 1e9);
      snprintf(jgbs, sizeof jgbs, "%.4f", bmax / tmax[ph] / 1e9);
    }
    if (o->check && ph != LAYOUT) {
      snprintf(wtxt, sizeof wtxt, "%llu", (unsigned long long)wrong[ph]);
      snprintf(jw, sizeof jw, "%llu", (unsigned long long)wrong[ph]);
      any |= wrong[ph] != 0;
    }
    printf("%-10s %12.2f %10s %8s\n", PHASE[ph], tmax[ph] * 1e6, gbs, wtxt);
    if (js)
      fprintf(js, "%s\n    {\"phase\": \"%s\", \"time_us\": %.3f, \"gbps\": %s, \"wrong\": %s}",
              ph ? "," : "", PHASE[ph], tmax[ph] * 1e6, jgbs, jw);
  }
  if (js) fprintf(js, "\n  ]\n}\n"), fclose(js);
  printf("# moebench: %s\n", !o->check ? "results not checked (-c 0)"
                             : any     ? "WRONG RESULTS"
                                       : "no errors");
  return rc | any;
}

static int run_rank(int rank, int n, weft_unique_id_t id, void *arg) {
  const mopts_t *o = arg;
  weft_comm_t comm = NULL;
  weft_moe_t moe = NULL;
  weft_moe_handle_t h = NULL;
  if (weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS) return fail(rank, "init", NULL);
  weft_moe_config_t cfg = WEFT_MOE_CONFIG_INIT;
  cfg.num_experts = o->experts, cfg.topk = o->topk, cfg.hidden = o->hidden, cfg.dtype = o->t;
  cfg.align = o->align;
  if (weft_moe_create(comm, &cfg, &moe) != WEFT_SUCCESS) return fail(rank, "weft_moe_create", NULL);
  size_t T = o->tokens, H = o->hidden, es = weft_dtype_size(o->t), k = (size_t)o->topk;
  int64_t *ids = malloc((T * k + 1) * sizeof *ids);
  float *w = malloc((T * k + 1) * sizeof *w);
  char *x = malloc(T * H * es + 1), *y = malloc(T * H * es + 1), *rx = NULL;
  float *rw = NULL;
  int64_t *off = calloc((size_t)(o->experts / n), sizeof *off);
  double t[NPHASE] = {0};
  int bad = !ids || !w || !x || !y || !off;
  for (size_t i = 0; i < T && !bad; i++) {
    route(o, rank, i, ids + i * k);
    for (size_t j = 0; j < k; j++)
      w[i * k + j] = 1.0f / (float)k;
    for (size_t c = 0; c < H; c++)
      put(o->t, x, i * H + c, x_of(rank, i, c));
  }
  size_t rows = 0;
  for (int i = 0; i < o->warmup + o->iters && !bad; i++) {
    int timed = i >= o->warmup;
    weft_moe_handle_destroy(h);
    h = NULL;
    bad |= weft_barrier(comm, NULL) != WEFT_SUCCESS;
    double t0 = now_s();
    if (bad || weft_moe_layout(moe, ids, T, &h, NULL) != WEFT_SUCCESS)
      return fail(rank, "weft_moe_layout", NULL);
    if (timed) t[LAYOUT] += now_s() - t0;
    if (!rx) { /* the routing is the same every time: one allocation */
      weft_moe_recv_rows(h, &rows);
      weft_moe_expert_counts(h, NULL, off);
      rx = malloc(rows * H * es + 1), rw = malloc(rows * sizeof *rw + 1);
      if (!rx || !rw) return fail(rank, "allocating the rows", NULL);
    }
  }
  for (int ph = DISPATCH; ph <= COMBINE && !bad; ph++)
    for (int i = 0; i < o->warmup + o->iters; i++) {
      if (weft_barrier(comm, NULL) != WEFT_SUCCESS) return fail(rank, "barrier", comm);
      double t0 = now_s();
      weft_result_t rc = ph == DISPATCH ? weft_moe_dispatch(h, x, w, rx, rw, NULL)
                                        : weft_moe_combine(h, rx, rw, y, NULL);
      if (rc != WEFT_SUCCESS) return fail(rank, PHASE[ph], NULL);
      if (i >= o->warmup) t[ph] += now_s() - t0;
    }
  if (bad) return fail(rank, "setting up", NULL);
  size_t recv_tokens = 0;
  uint64_t wrong[NPHASE] = {0}, wsum[NPHASE];
  check_rank(o, rank, n, rx, y, off, wrong + DISPATCH, &recv_tokens);
  double mean[NPHASE], tmax[NPHASE], bytes = (double)recv_tokens * (double)(H * es), bmax = 0;
  for (int ph = 0; ph < NPHASE; ph++)
    mean[ph] = t[ph] / o->iters;
  if (weft_allreduce(mean, tmax, NPHASE, WEFT_F64, WEFT_MAX, comm, NULL) != WEFT_SUCCESS ||
      weft_allreduce(&bytes, &bmax, 1, WEFT_F64, WEFT_MAX, comm, NULL) != WEFT_SUCCESS ||
      weft_allreduce(wrong, wsum, NPHASE, WEFT_U64, WEFT_SUM, comm, NULL) != WEFT_SUCCESS)
    return fail(rank, "gathering the results", NULL);
  int rc = rank == 0 ? report(o, n, tmax, bmax, wsum) : 0;
  weft_moe_handle_destroy(h);
  weft_moe_destroy(moe);
  weft_comm_destroy(comm);
  free(ids), free(w), free(x), free(y), free(rx), free(rw), free(off);
  return rc;
}

static void usage(FILE *f) {
  fprintf(f, "usage: moebench [flags]   (MoE dispatch and combine, weft_moe.h)\n"
             "      --ranks N         local ranks to spawn (default 4)\n"
             "      --tokens T        tokens per rank (default 512; DeepSeek-V3: 4096)\n"
             "      --hidden H        elements per token (default 2048; DeepSeek-V3: 7168)\n"
             "      --topk K          experts per token (default 8)\n"
             "      --experts E       experts over all ranks (default 64; DeepSeek-V3: 256)\n"
             "      --align A         pad each expert's rows to a multiple of A (default 1)\n"
             "  -d, --datatype T      bf16 (default), f16 or f32\n"
             "      --mode normal|ll  ll (low latency) is not built yet\n"
             "      --cpu | --gpu     host buffers (the only kind built yet) or device buffers\n"
             "      --compare torch   PyTorch's all_to_all_single + permute (with --gpu; not yet)\n"
             "  -n, --iters N         timed iterations (default 20)\n"
             "  -w, --warmup_iters N  untimed first iterations (default 5)\n"
             "  -c, --check 0|1       check every row and combined token (default 1)\n"
             "      --json FILE       one row per phase: phase, time_us, gbps, wrong\n");
}

static int parse_type(const char *s, weft_dtype_t *t) {
  if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) return *t = WEFT_BF16, 0;
  if (!strcmp(s, "f16") || !strcmp(s, "half")) return *t = WEFT_F16, 0;
  if (!strcmp(s, "f32") || !strcmp(s, "float")) return *t = WEFT_F32, 0;
  return -1;
}

int main(int argc, char **argv) {
  mopts_t o = {.tokens = 512,
               .hidden = 2048,
               .align = 1,
               .topk = 8,
               .experts = 64,
               .iters = 20,
               .warmup = 5,
               .check = 1,
               .ranks = 4,
               .t = WEFT_BF16};
  static const struct option longs[] = {{"ranks", required_argument, 0, 1},
                                        {"tokens", required_argument, 0, 2},
                                        {"hidden", required_argument, 0, 3},
                                        {"topk", required_argument, 0, 4},
                                        {"experts", required_argument, 0, 5},
                                        {"align", required_argument, 0, 6},
                                        {"mode", required_argument, 0, 7},
                                        {"cpu", no_argument, 0, 8},
                                        {"gpu", no_argument, 0, 9},
                                        {"compare", required_argument, 0, 10},
                                        {"json", required_argument, 0, 11},
                                        {"datatype", required_argument, 0, 'd'},
                                        {"iters", required_argument, 0, 'n'},
                                        {"warmup_iters", required_argument, 0, 'w'},
                                        {"check", required_argument, 0, 'c'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  const char *missing = NULL;
  for (int ch; (ch = getopt_long(argc, argv, "d:n:w:c:h", longs, NULL)) != -1;) {
    switch (ch) {
    case 1: o.ranks = atoi(optarg); break;
    case 2: o.tokens = strtoull(optarg, NULL, 0); break;
    case 3: o.hidden = strtoull(optarg, NULL, 0); break;
    case 4: o.topk = atoi(optarg); break;
    case 5: o.experts = atoi(optarg); break;
    case 6: o.align = strtoull(optarg, NULL, 0); break;
    case 7:
      if (strcmp(optarg, "normal") != 0)
        missing = strcmp(optarg, "ll") == 0 ? "--mode ll (low-latency mode)" : "that --mode";
      break;
    case 8: break;
    case 9: missing = "--gpu (device buffers)"; break;
    case 10: missing = "--compare (PyTorch's baseline runs on device buffers)"; break;
    case 11: o.json = optarg; break;
    case 'd':
      if (parse_type(optarg, &o.t)) {
        fprintf(stderr, "moebench: -d takes bf16, f16 or f32\n");
        return 2;
      }
      break;
    case 'n': o.iters = atoi(optarg); break;
    case 'w': o.warmup = atoi(optarg); break;
    case 'c': o.check = atoi(optarg); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 2;
    }
  }
  if (missing) {
    fprintf(stderr, "moebench: %s is not built yet (docs/moe.md says what is)\n", missing);
    return 2;
  }
  if (o.ranks < 1 || o.iters < 1 || o.warmup < 0 || o.topk < 1 || o.topk > WEFT_MOE_MAX_TOPK ||
      o.topk > o.experts || o.experts % o.ranks || o.hidden < 1) {
    fprintf(stderr,
            "moebench: need ranks >= 1, iters >= 1, 1 <= topk <= min(experts, %d), "
            "experts a multiple of ranks, hidden >= 1\n",
            WEFT_MOE_MAX_TOPK);
    return 2;
  }
  return launch_local(o.ranks, run_rank, &o, 3600) ? 1 : 0;
}
