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
#include "moe_mem.h"
#include "moe_torch.h"
#include "weft.h"
#include "weft_moe.h"

typedef struct {
  size_t tokens, hidden, align;
  int topk, experts, iters, warmup, check, ranks, gpu, torch, ll, graph, fp8;
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
/* With q (fp8 dispatch's e4m3 rows, sc their scales), also its elements whose value q * s is
 * further from the routed token's than e4m3's precision allows (half a unit of 3 mantissa
 * bits, or of the smallest normal) count in wrong[0]. */
static void check_rank(const mopts_t *o, int rank, int n, const void *rx, const void *y,
                       const uint8_t *q, const float *sc, const int64_t *off, uint64_t wrong[2],
                       size_t *recv_tokens) {
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
        for (size_t c = 0; c < H && o->check && q; c++) {
          float x = x_of(s, t, c), sb = sc[r * WEFT_MOE_FP8_BLOCKS(H) + c / WEFT_MOE_FP8_BLOCK];
          wrong[0] += fabsf(weft_e4m3_to_f32(q[r * H + c]) * sb - x) >
                      fmaxf(fabsf(x) * 0x1p-4f, sb * 0x1p-10f);
        }
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
static int report(const mopts_t *o, int n, const double *tmax, const double *bmax,
                  const uint64_t *wrong) {
  int rc = 0, any = 0;
  FILE *js = o->json ? fopen(o->json, "w") : NULL;
  if (o->json && !js) fprintf(stderr, "moebench: cannot write %s\n", o->json), rc = 1;
  printf("# moebench: %d ranks (%s), %zu tokens/rank, hidden %zu, top-%d of %d "
         "experts, %s, %s mode, align %zu; mean of %d iterations after %d warm-up\n",
         n, o->gpu ? "device buffers, GPUs shared round-robin" : "host buffers", o->tokens,
         o->hidden, o->topk, o->experts, weft_dtype_name(o->t), o->ll ? "low-latency" : "normal",
         o->align, o->iters, o->warmup);
  printf("# time: the call%s until its stream is done (host clock), after a barrier\n",
         o->graph ? " (dispatch or combine captured once in a CUDA graph, replayed)" : "");
  printf("# GB/s: the most bytes of tokens a rank receives (each once per rank) over the "
         "slowest rank's mean time, as DeepEP counts them\n");
  if (o->fp8)
    printf("# dispatch in fp8: e4m3 rows and a scale per %d elements (its GB/s counts those "
           "bytes); combine's rows come from a plain dispatch\n",
           WEFT_MOE_FP8_BLOCK);
  printf("%-10s %12s %10s %8s\n", "phase", "time_us", "GB/s", "#wrong");
  if (js)
    fprintf(js,
            "{\n  \"bench\": \"moebench\", \"nranks\": %d, \"tokens\": %zu, \"hidden\": %zu, "
            "\"topk\": %d, \"experts\": %d, \"dtype\": \"%s\", \"mode\": \"%s\", "
            "\"buffers\": \"%s\", \"align\": %zu, \"check\": %d, \"graph\": %d, \"fp8\": %d,\n  "
            "\"rows\": [",
            n, o->tokens, o->hidden, o->topk, o->experts, weft_dtype_name(o->t),
            o->ll ? "ll" : "normal", o->gpu ? "device" : "host", o->align, o->check, o->graph,
            o->fp8);
  for (int ph = 0; ph < NPHASE; ph++) {
    char gbs[32] = "-", jgbs[32] = "null", wtxt[32] = "n/a", jw[32] = "null";
    if (ph != LAYOUT) {
      snprintf(gbs, sizeof gbs, "%.2f", bmax[ph] / tmax[ph] / 1e9);
      snprintf(jgbs, sizeof jgbs, "%.4f", bmax[ph] / tmax[ph] / 1e9);
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
  moe_torch_t pt;
  if (o->torch && moe_torch_run(n, o->tokens, o->hidden, o->topk, o->experts, weft_dtype_name(o->t),
                                o->iters, o->warmup, &pt) != 0)
    rc = 1, any = 1;
  else if (o->torch) {
    printf("# PyTorch %s in the same run (scripts/gpu/moe_torch.py: argsort + bincount, "
           "index_select, all_to_all_single, index_add_ in f32; its max error %.3g)\n",
           pt.version, pt.max_error);
    printf("%-10s %12s %12s %12s\n", "phase", "weft_us", "torch_us", "torch/weft");
    if (js) fprintf(js, "\n  ],\n  \"torch\": \"%s\", \"torch_rows\": [", pt.version);
    for (int ph = 0; ph < NPHASE; ph++) {
      printf("%-10s %12.2f %12.2f %12.2f\n", PHASE[ph], tmax[ph] * 1e6, pt.us[ph],
             pt.us[ph] / (tmax[ph] * 1e6));
      if (js)
        fprintf(js, "%s\n    {\"phase\": \"%s\", \"time_us\": %.3f, \"torch_over_weft\": %.4f}",
                ph ? "," : "", PHASE[ph], pt.us[ph], pt.us[ph] / (tmax[ph] * 1e6));
    }
  }
  if (js) fprintf(js, "\n  ]\n}\n"), fclose(js);
  printf("# moebench: %s\n", !o->check ? "results not checked (-c 0)"
                             : any     ? "WRONG RESULTS"
                                       : "no errors");
  return rc | any;
}

/* A buffer of the run: its host copy, and where the calls see it (the same memory on host
 * runs, a device twin with --gpu). */
typedef struct {
  void *h, *d;
  size_t bytes;
} mbuf_t;

static int mb_make(const mopts_t *o, mbuf_t *b, size_t bytes) {
  b->bytes = bytes, b->h = calloc(1, bytes + 1), b->d = b->h;
  if (b->h && o->gpu) b->d = moe_mem_alloc(bytes);
  return b->h && b->d ? 0 : -1;
}

static void mb_drop(const mopts_t *o, mbuf_t *b) {
  if (o->gpu && b->d) moe_mem_free(b->d);
  free(b->h);
}

/* the host copy to the calls' memory (up) or back */
static int mb_move(const mopts_t *o, mbuf_t *b, int up, void *st) {
  if (!o->gpu || !b->bytes) return 0;
  return up ? moe_mem_copy(b->d, b->h, b->bytes, 1, st) : moe_mem_copy(b->h, b->d, b->bytes, 0, st);
}

enum { IDS, W, X, Y, RX, RW, RX8, RS, NBUF }; /* RX8, RS: fp8 dispatch's rows and scales */

/* Phase ph's call (dispatch, in fp8 when fp8 is set, or combine) on h. */
static weft_result_t issue(int ph, int fp8, weft_moe_handle_t h, mbuf_t *b, void *st) {
  if (ph == DISPATCH && fp8)
    return weft_moe_dispatch_fp8(h, b[X].d, b[W].d, b[RX8].d, b[RS].d, b[RW].d, st);
  return ph == DISPATCH ? weft_moe_dispatch(h, b[X].d, b[W].d, b[RX].d, b[RW].d, st)
                        : weft_moe_combine(h, b[RX].d, b[RW].d, b[Y].d, st);
}

/* The rank's layer over comm (host buffers) or a device communicator split from it. */

static int run_rank(int rank, int n, weft_unique_id_t id, void *arg) {
  const mopts_t *o = arg;
  weft_comm_t host = NULL, comm = NULL;
  weft_moe_t moe = NULL;
  weft_moe_handle_t h = NULL;
  void *st = NULL;
  if (weft_comm_init(&host, n, id, rank, NULL) != WEFT_SUCCESS) return fail(rank, "init", NULL);
  comm = host;
  if (o->gpu) {
    weft_config_t dcfg = WEFT_CONFIG_INIT;
    dcfg.device = moe_mem_open(rank, &st);
    if (dcfg.device < 0 || weft_comm_split(host, 0, rank, &comm, &dcfg) != WEFT_SUCCESS)
      return fail(rank, "the device communicator", host);
  }
  weft_moe_config_t cfg = WEFT_MOE_CONFIG_INIT;
  cfg.num_experts = o->experts, cfg.topk = o->topk, cfg.hidden = o->hidden, cfg.dtype = o->t;
  cfg.align = o->align;
  if (o->ll) cfg.mode = WEFT_MOE_LOW_LATENCY, cfg.max_tokens = o->tokens;
  if (weft_moe_create(comm, &cfg, &moe) != WEFT_SUCCESS) return fail(rank, "weft_moe_create", NULL);
  size_t T = o->tokens, H = o->hidden, es = weft_dtype_size(o->t), k = (size_t)o->topk;
  mbuf_t b[NBUF] = {{0}};
  int64_t *off = calloc((size_t)(o->experts / n), sizeof *off);
  double t[NPHASE] = {0};
  int bad = !off || mb_make(o, &b[IDS], T * k * 8) || mb_make(o, &b[W], T * k * 4) ||
            mb_make(o, &b[X], T * H * es) || mb_make(o, &b[Y], T * H * es);
  int64_t *ids = b[IDS].h;
  float *w = b[W].h;
  for (size_t i = 0; i < T && !bad; i++) {
    route(o, rank, i, ids + i * k);
    for (size_t j = 0; j < k; j++)
      w[i * k + j] = 1.0f / (float)k;
    for (size_t c = 0; c < H; c++)
      put(o->t, b[X].h, i * H + c, x_of(rank, i, c));
  }
  for (int i = IDS; i <= X && !bad; i++)
    bad |= mb_move(o, &b[i], 1, st);
  for (int i = 0; i < o->warmup + o->iters && !bad; i++) {
    int timed = i >= o->warmup;
    weft_moe_handle_destroy(h);
    h = NULL;
    bad |= weft_barrier(host, NULL) != WEFT_SUCCESS;
    double t0 = now_s();
    if (bad || weft_moe_layout(moe, b[IDS].d, T, &h, st) != WEFT_SUCCESS)
      return fail(rank, "weft_moe_layout", NULL);
    /* low-latency mode on windows returns before the GPU is done */
    if (o->gpu && moe_mem_sync(st)) return fail(rank, "weft_moe_layout", comm);
    if (timed) t[LAYOUT] += now_s() - t0;
    if (!b[RX].h) { /* the routing is the same every time: one allocation */
      size_t rows = 0;
      weft_moe_recv_rows(h, &rows);
      weft_moe_expert_counts(h, NULL, off);
      if (mb_make(o, &b[RX], rows * H * es) || mb_make(o, &b[RW], rows * 4) ||
          (o->fp8 && (mb_make(o, &b[RX8], rows * H) ||
                      mb_make(o, &b[RS], rows * WEFT_MOE_FP8_BLOCKS(H) * 4))))
        return fail(rank, "allocating the rows", NULL);
    }
  }
  for (int ph = DISPATCH; ph <= COMBINE && !bad; ph++) {
    void *graph = NULL; /* --graph: the call captured once, then replayed */
    if (o->graph && (moe_mem_capture(st) || issue(ph, o->fp8, h, b, st) != WEFT_SUCCESS ||
                     !(graph = moe_mem_captured(st))))
      return fail(rank, PHASE[ph], NULL);
    for (int i = 0; i < o->warmup + o->iters; i++) {
      if (weft_barrier(host, NULL) != WEFT_SUCCESS) return fail(rank, "barrier", host);
      double t0 = now_s();
      weft_result_t rc = graph ? (moe_mem_replay(graph, st) ? WEFT_ERR_SYSTEM : WEFT_SUCCESS)
                               : issue(ph, o->fp8, h, b, st);
      if (rc != WEFT_SUCCESS) return fail(rank, PHASE[ph], NULL);
      if (o->gpu && moe_mem_sync(st)) return fail(rank, PHASE[ph], comm);
      if (i >= o->warmup) t[ph] += now_s() - t0;
    }
    moe_mem_graph_free(graph);
    /* fp8: combine's rows come from a plain dispatch (untimed) */
    if (ph == DISPATCH && o->fp8 &&
        (mb_move(o, &b[RX8], 0, st) || mb_move(o, &b[RS], 0, st) ||
         issue(ph, 0, h, b, st) != WEFT_SUCCESS || (o->gpu && moe_mem_sync(st))))
      return fail(rank, "the plain dispatch after fp8's", NULL);
  }
  if (bad || mb_move(o, &b[RX], 0, st) || mb_move(o, &b[Y], 0, st))
    return fail(rank, "setting up or reading back", NULL);
  size_t recv_tokens = 0;
  uint64_t wrong[NPHASE] = {0}, wsum[NPHASE];
  check_rank(o, rank, n, b[RX].h, b[Y].h, o->fp8 ? b[RX8].h : NULL, b[RS].h, off, wrong + DISPATCH,
             &recv_tokens);
  double mean[NPHASE], tmax[NPHASE], bytes[NPHASE], bmax[NPHASE];
  for (int ph = 0; ph < NPHASE; ph++) /* each token once per rank, as its phase moves it */
    bytes[ph] = (double)recv_tokens *
                (double)(ph == DISPATCH && o->fp8 ? H + WEFT_MOE_FP8_BLOCKS(H) * 4 : H * es);
  for (int ph = 0; ph < NPHASE; ph++)
    mean[ph] = t[ph] / o->iters;
  if (weft_allreduce(mean, tmax, NPHASE, WEFT_F64, WEFT_MAX, host, NULL) != WEFT_SUCCESS ||
      weft_allreduce(bytes, bmax, NPHASE, WEFT_F64, WEFT_MAX, host, NULL) != WEFT_SUCCESS ||
      weft_allreduce(wrong, wsum, NPHASE, WEFT_U64, WEFT_SUM, host, NULL) != WEFT_SUCCESS)
    return fail(rank, "gathering the results", NULL);
  int rc = rank == 0 ? report(o, n, tmax, bmax, wsum) : 0;
  weft_moe_handle_destroy(h);
  weft_moe_destroy(moe);
  if (comm != host) weft_comm_destroy(comm);
  weft_comm_destroy(host);
  for (int i = 0; i < NBUF; i++)
    mb_drop(o, &b[i]);
  moe_mem_close(st);
  free(off);
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
             "      --mode normal|ll  ll: low latency, fixed blocks of tokens * ranks rows a\n"
             "                        local expert\n"
             "      --cpu | --gpu     host or device buffers (default: GPUs when present; ranks\n"
             "                        share them round-robin, and default to one per GPU)\n"
             "      --fp8             dispatch in fp8 (e4m3 rows, a scale per 128 elements)\n"
             "      --graph           ll on GPUs: time each call captured once in a CUDA\n"
             "                        graph and replayed\n"
             "      --compare torch   PyTorch's permute + all_to_all_single in the same run\n"
             "                        (scripts/gpu/moe_torch.py; one rank per GPU)\n"
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
                                        {"graph", no_argument, 0, 12},
                                        {"fp8", no_argument, 0, 13},
                                        {"datatype", required_argument, 0, 'd'},
                                        {"iters", required_argument, 0, 'n'},
                                        {"warmup_iters", required_argument, 0, 'w'},
                                        {"check", required_argument, 0, 'c'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  const char *missing = NULL;
  int gpu_mode = -1, ranks_given = 0;
  for (int ch; (ch = getopt_long(argc, argv, "d:n:w:c:h", longs, NULL)) != -1;) {
    switch (ch) {
    case 1: o.ranks = atoi(optarg), ranks_given = 1; break;
    case 2: o.tokens = strtoull(optarg, NULL, 0); break;
    case 3: o.hidden = strtoull(optarg, NULL, 0); break;
    case 4: o.topk = atoi(optarg); break;
    case 5: o.experts = atoi(optarg); break;
    case 6: o.align = strtoull(optarg, NULL, 0); break;
    case 7:
      if (strcmp(optarg, "ll") == 0)
        o.ll = 1;
      else if (strcmp(optarg, "normal") != 0)
        missing = "that --mode";
      break;
    case 8: gpu_mode = 0; break;
    case 9: gpu_mode = 1; break;
    case 10:
      if (strcmp(optarg, "torch") != 0) {
        fprintf(stderr, "moebench: --compare takes torch\n");
        return 2;
      }
      o.torch = 1;
      break;
    case 11: o.json = optarg; break;
    case 12: o.graph = 1; break;
    case 13: o.fp8 = 1; break;
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
  int ngpu = gpu_mode != 0 ? moe_mem_gpus() : 0;
  if (gpu_mode == 1 && ngpu == 0) {
    fprintf(stderr, "moebench: --gpu, but no GPU is visible (or this build has no CUDA)\n");
    return 2;
  }
  o.gpu = ngpu > 0;
  if (o.gpu && !ranks_given) o.ranks = ngpu;
  if (o.torch && (!o.gpu || o.ranks > ngpu)) {
    fprintf(stderr,
            "moebench: --compare torch needs device buffers and a GPU per rank "
            "(PyTorch's NCCL does not share one): %d ranks, %d GPUs\n",
            o.ranks, ngpu);
    return 2;
  }
  if (o.graph && (!o.gpu || !o.ll)) {
    fprintf(stderr, "moebench: --graph needs --mode ll and GPUs\n");
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
