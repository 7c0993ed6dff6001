/* MoE low-latency mode on device communicators (src/moe/ll.c, ll.cu), 2+ ranks: layout,
 * dispatch and combine captured once in a CUDA graph and replayed with new ids and tokens
 * each time (uniform, skewed, a rank sending nothing, dropped choices), every row, count and
 * combined token checked against a model; eager calls with two handles in flight on two
 * streams, 0 tokens and rows that are not multiples of 16 bytes; refusals (over the bound,
 * a bad id found on the GPU, NULL buffers at dispatch and at combine, a fifth live handle)
 * that fail the refusing rank at once and every other rank at weft_moe_finish, with nothing
 * written; and a rank that never dispatches, which its peers report as a timeout naming the
 * MoE dispatch.
 * usage: test_moe_ll RANKS [--share] */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "gpu_test.h"
#include "rank_check.h"
#include "weft.h"
#include "weft_moe.h"

static int share;

enum { UNIFORM, SKEWED, SILENT, DROPPED, NPAT }; /* SILENT: rank 1 sends nothing */

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

typedef struct {
  int n, experts, k, pat, salt; /* salt: the replay, so that every round differs */
  size_t hidden, bound;
  weft_dtype_t t;
} model_t;

/* Choice j of token t on rank s, distinct within the token. */
static int64_t id_of(const model_t *m, int s, size_t t, int j) {
  if (m->pat == SILENT && s == 1 % m->n && m->n > 1) return -1;
  if (m->pat == DROPPED && (t % 3 == 2 || mix((uint64_t)s * 977 + t, (uint64_t)j + 31) % 4 == 0))
    return -1;
  int64_t row[32];
  for (int i = 0, tries = 0; i <= j; tries++) {
    int64_t v = m->pat == SKEWED && i == 0
                    ? 0
                    : (int64_t)(mix((uint64_t)(m->salt * 131 + s) * 1000 + t, 7 + (uint64_t)tries) %
                                (uint64_t)m->experts);
    int seen = 0;
    for (int q = 0; q < i; q++)
      seen |= row[q] == v;
    if (!seen) row[i++] = v;
  }
  return row[j];
}

/* Small multiples of 1/4: exact in every dtype, and in their sums scaled by the weights. */
static float x_of(const model_t *m, int s, size_t t, size_t c) {
  return (float)((int)(mix((uint64_t)(m->salt * 7 + s) * 100000 + t, c) % 15) - 7) * 0.25f;
}
static float w_of(int j) { return j % 2 ? 0.25f : 0.5f; }

/* A rank's device buffers for one shape, and host twins. */
typedef struct {
  size_t T, rows, es;
  int64_t *ids_h;
  char *x_h, *rx_h, *y_h;
  float *w_h, *rw_h;
  void *ids, *x, *rx, *y;
  float *w, *rw;
} bufs_t;

static int bufs_new(bufs_t *b, const model_t *m, size_t T) {
  size_t k = (size_t)m->k, H = m->hidden, L = (size_t)(m->experts / m->n);
  memset(b, 0, sizeof *b);
  b->T = T, b->es = weft_dtype_size(m->t), b->rows = L * (size_t)m->n * m->bound;
  size_t B = m->bound; /* inputs sized for the bound: a graph's tokens may be any up to it */
  b->ids_h = calloc(B * k, 8), b->x_h = calloc(B * H, b->es), b->w_h = calloc(B * k, 4);
  b->rx_h = calloc(b->rows * H, b->es), b->rw_h = calloc(b->rows, 4), b->y_h = calloc(B * H, b->es);
  return !b->ids_h || !b->x_h || !b->w_h || !b->rx_h || !b->rw_h || !b->y_h ||
         cudaMalloc(&b->ids, B * k * 8 + 8) || cudaMalloc(&b->x, B * H * b->es + 16) ||
         cudaMalloc((void **)&b->w, B * k * 4 + 4) ||
         cudaMalloc(&b->rx, b->rows * H * b->es + 16) ||
         cudaMalloc((void **)&b->rw, b->rows * 4 + 4) || cudaMalloc(&b->y, B * H * b->es + 16);
}

static void bufs_free(bufs_t *b) {
  free(b->ids_h), free(b->x_h), free(b->w_h), free(b->rx_h), free(b->rw_h), free(b->y_h);
  cudaFree(b->ids), cudaFree(b->x), cudaFree(b->w), cudaFree(b->rx), cudaFree(b->rw),
      cudaFree(b->y);
}

/* This rank's inputs for m, up to the GPU; the outputs poisoned (0x5a bytes). */
static int bufs_fill(bufs_t *b, const model_t *m, int rank) {
  size_t k = (size_t)m->k, H = m->hidden;
  for (size_t t = 0; t < b->T; t++) {
    for (size_t j = 0; j < k; j++)
      b->ids_h[t * k + j] = id_of(m, rank, t, (int)j), b->w_h[t * k + j] = w_of((int)j);
    for (size_t c = 0; c < H; c++)
      weft_dtype_store(m->t, b->x_h, t * H + c, x_of(m, rank, t, c));
  }
  memset(b->rx_h, 0x5a, b->rows * H * b->es), memset(b->rw_h, 0x5a, b->rows * 4);
  memset(b->y_h, 0x5a, b->T * H * b->es);
  return cudaMemcpy(b->ids, b->ids_h, b->T * k * 8, cudaMemcpyHostToDevice) ||
         cudaMemcpy(b->x, b->x_h, b->T * H * b->es, cudaMemcpyHostToDevice) ||
         cudaMemcpy(b->w, b->w_h, b->T * k * 4, cudaMemcpyHostToDevice) ||
         cudaMemcpy(b->rx, b->rx_h, b->rows * H * b->es, cudaMemcpyHostToDevice) ||
         cudaMemcpy(b->rw, b->rw_h, b->rows * 4, cudaMemcpyHostToDevice) ||
         cudaMemcpy(b->y, b->y_h, b->T * H * b->es, cudaMemcpyHostToDevice) ||
         cudaDeviceSynchronize();
}

static int bufs_down(bufs_t *b, const model_t *m) {
  size_t H = m->hidden;
  return cudaDeviceSynchronize() ||
         cudaMemcpy(b->rx_h, b->rx, b->rows * H * b->es, cudaMemcpyDeviceToHost) ||
         cudaMemcpy(b->rw_h, b->rw, b->rows * 4, cudaMemcpyDeviceToHost) ||
         cudaMemcpy(b->y_h, b->y, b->T * H * b->es, cudaMemcpyDeviceToHost);
}

/* Every rank's tokens per rank: the same T everywhere but where `own` says. */
static size_t tokens_on(const size_t *Ts, int s) { return Ts[s]; }

/* The rows, counts (from the device pointer) and identity-combined tokens of one round. */
static int check_round(int rank, const model_t *m, bufs_t *b, const size_t *Ts,
                       const int64_t *dev_counts, const char *what) {
  int n = m->n, L = m->experts / n, k = m->k;
  size_t H = m->hidden, B = m->bound, es = b->es;
  if (bufs_down(b, m)) FAIL("%s: copying out", what);
  int64_t got[64];
  if (cudaMemcpy(got, dev_counts, (size_t)L * 8, cudaMemcpyDeviceToHost))
    FAIL("%s: reading the device counts", what);
  for (int l = 0; l < L; l++) {
    size_t r = (size_t)l * n * B, e = (size_t)rank * L + l;
    for (int s = 0; s < n; s++)
      for (size_t t = 0; t < tokens_on(Ts, s); t++)
        for (int j = 0; j < k; j++) {
          if (id_of(m, s, t, j) != (int64_t)e) continue;
          for (size_t c = 0; c < H; c++)
            if ((float)weft_dtype_load(m->t, b->rx_h, r * H + c) != x_of(m, s, t, c))
              FAIL("%s: expert %d row %zu (rank %d token %zu) element %zu: %g, want %g", what, l, r,
                   s, t, c, weft_dtype_load(m->t, b->rx_h, r * H + c), x_of(m, s, t, c));
          if (b->rw_h[r] != w_of(j))
            FAIL("%s: expert %d row %zu: weight %g", what, l, r, b->rw_h[r]);
          r++;
        }
    if ((size_t)got[l] != r - (size_t)l * n * B)
      FAIL("%s: expert %d: device count %lld, want %zu", what, l, (long long)got[l],
           r - (size_t)l * n * B);
    for (; r < (size_t)(l + 1) * n * B; r++) /* a block's unused rows: as they were */
      for (size_t c = 0; c < H * es; c++)
        if ((unsigned char)b->rx_h[r * H * es + c] != 0x5a)
          FAIL("%s: expert %d: unused row %zu written", what, l, r);
  }
  for (size_t t = 0; t < b->T; t++) {
    float kept = 0;
    for (int j = 0; j < k; j++)
      kept += id_of(m, rank, t, j) >= 0 ? w_of(j) : 0.0f;
    for (size_t c = 0; c < H; c++)
      if ((float)weft_dtype_load(m->t, b->y_h, t * H + c) != x_of(m, rank, t, c) * kept)
        FAIL("%s: token %zu element %zu: %g, want %g", what, t, c,
             weft_dtype_load(m->t, b->y_h, t * H + c), x_of(m, rank, t, c) * kept);
  }
  return 0;
}

static weft_moe_t make(weft_comm_t c, const model_t *m) {
  weft_moe_config_t cfg = WEFT_MOE_CONFIG_INIT;
  cfg.num_experts = m->experts, cfg.topk = m->k, cfg.hidden = m->hidden, cfg.dtype = m->t;
  cfg.index_type = WEFT_I64, cfg.mode = WEFT_MOE_LOW_LATENCY, cfg.max_tokens = m->bound;
  weft_moe_t moe = NULL;
  return weft_moe_create(c, &cfg, &moe) == WEFT_SUCCESS ? moe : NULL;
}

/* One graph of layout, dispatch and identity combine, replayed over every pattern. */
static int run_graph(int rank, weft_comm_t c, cudaStream_t st) {
  int n = 0;
  weft_comm_count(c, &n);
  model_t m = {.n = n,
               .experts = 4 * n,
               .k = 3 < 4 * n ? 3 : 4 * n,
               .hidden = 200,
               .bound = 24,
               .t = WEFT_BF16};
  size_t T = 20, Ts[8];
  for (int s = 0; s < n; s++)
    Ts[s] = T;
  weft_moe_t moe = make(c, &m);
  bufs_t b;
  if (!moe || bufs_new(&b, &m, T)) FAIL("graph: create");
  weft_moe_handle_t h = NULL;
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  if (cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal)) FAIL("graph: begin capture");
  weft_result_t r1 = weft_moe_layout(moe, b.ids, T, &h, (weft_stream_t)st);
  weft_result_t r2 = r1 ? r1 : weft_moe_dispatch(h, b.x, b.w, b.rx, b.rw, (weft_stream_t)st);
  weft_result_t r3 = r2 ? r2 : weft_moe_combine(h, b.rx, b.rw, b.y, (weft_stream_t)st);
  cudaError_t ec = cudaStreamEndCapture(st, &g);
  if (r3 || ec) FAIL("graph: capture: %s, %s", weft_result_string(r3), cudaGetErrorString(ec));
  if (cudaGraphInstantiate(&ge, g, 0)) FAIL("graph: instantiate");
  const int64_t *dc = NULL;
  if (weft_moe_device_counts(h, &dc) || !dc) FAIL("graph: device counts");
  for (int rep = 0; rep < 2 * NPAT; rep++) {
    m.pat = rep % NPAT, m.salt = rep;
    char what[64];
    snprintf(what, sizeof what, "graph replay %d", rep);
    if (bufs_fill(&b, &m, rank) || cudaGraphLaunch(ge, st) || cudaStreamSynchronize(st))
      FAIL("%s: launch", what);
    if (check_round(rank, &m, &b, Ts, dc, what)) return 1;
    if (weft_moe_finish(h) != WEFT_SUCCESS) FAIL("%s: finish", what);
  }
  cudaGraphExecDestroy(ge), cudaGraphDestroy(g);
  weft_moe_handle_destroy(h);
  if (weft_moe_destroy(moe)) FAIL("graph: destroy");
  bufs_free(&b);
  return 0;
}

/* Eager calls: f32 rows of 37 elements (not 16-byte multiples), tokens differing by rank and
 * none on the last, two handles in flight, the second combine on another stream. */
static int run_eager(int rank, weft_comm_t c, cudaStream_t st, cudaStream_t st2) {
  int n = 0;
  weft_comm_count(c, &n);
  model_t m0 = {.n = n,
                .experts = 2 * n,
                .k = 2 * n < 5 ? 2 * n : 5,
                .hidden = 37,
                .bound = 9,
                .t = WEFT_F32,
                .pat = DROPPED,
                .salt = 100};
  model_t m1 = m0;
  m1.pat = UNIFORM, m1.salt = 101;
  size_t Ts[8];
  for (int s = 0; s < n; s++)
    Ts[s] = s == n - 1 && n > 1 ? 0 : (size_t)(3 + s) % 10;
  weft_moe_t moe = make(c, &m0);
  bufs_t b0, b1;
  if (!moe || bufs_new(&b0, &m0, Ts[rank]) || bufs_new(&b1, &m1, Ts[rank]) ||
      bufs_fill(&b0, &m0, rank) || bufs_fill(&b1, &m1, rank))
    FAIL("eager: setup");
  weft_moe_handle_t h0 = NULL, h1 = NULL;
  weft_stream_t s = (weft_stream_t)st, s2 = (weft_stream_t)st2;
  int64_t cnt[64];
  if (weft_moe_layout(moe, b0.ids, b0.T, &h0, s) || weft_moe_layout(moe, b1.ids, b1.T, &h1, s))
    FAIL("eager: layouts");
  if (weft_moe_expert_counts(h0, cnt, NULL) != WEFT_ERR_INVALID_ARG)
    FAIL("eager: counts before any dispatch were answered");
  if (weft_moe_dispatch(h0, b0.x, b0.w, b0.rx, b0.rw, s) ||
      weft_moe_dispatch(h1, b1.x, b1.w, b1.rx, b1.rw, s) ||
      weft_moe_combine(h0, b0.rx, b0.rw, b0.y, s2) || weft_moe_combine(h1, b1.rx, b1.rw, b1.y, s))
    FAIL("eager: calls");
  const int64_t *d0 = NULL, *d1 = NULL;
  if (weft_moe_device_counts(h0, &d0) || weft_moe_device_counts(h1, &d1)) FAIL("eager: counts");
  if (check_round(rank, &m0, &b0, Ts, d0, "eager h0") ||
      check_round(rank, &m1, &b1, Ts, d1, "eager h1"))
    return 1;
  int64_t off[64];
  if (weft_moe_expert_counts(h1, cnt, off)) FAIL("eager: host counts");
  for (int l = 0; l < m1.experts / n; l++)
    if (off[l] != (int64_t)((size_t)l * n * m1.bound)) FAIL("eager: offset %d", l);
  weft_moe_handle_destroy(h0), weft_moe_handle_destroy(h1);
  weft_moe_destroy(moe);
  bufs_free(&b0), bufs_free(&b1);
  return 0;
}

static int expect(int rank, weft_result_t rc, weft_result_t want, const char *needle,
                  const char *what) {
  const char *msg = weft_get_last_error(NULL);
  if (rc != want || (needle && !strstr(msg, needle)))
    FAIL("%s: got %s \"%s\", want %s with \"%s\"", what, weft_result_string(rc), msg,
         weft_result_string(want), needle ? needle : "");
  return 0;
}

/* Whether the rank's received rows (and y when ytoo) are still all 0x5a. */
static int untouched(bufs_t *b, const model_t *m, int ytoo) {
  if (bufs_down(b, m)) return 0;
  for (size_t i = 0; i < b->rows * m->hidden * b->es; i++)
    if ((unsigned char)b->rx_h[i] != 0x5a) return 0;
  for (size_t i = 0; ytoo && i < b->T * m->hidden * b->es; i++)
    if ((unsigned char)b->y_h[i] != 0x5a) return 0;
  return 1;
}

/* Refusals: the refusing rank's call fails at once (when its host can see why), every other
 * rank's weft_moe_finish with the same reason; nothing is written; the next round works. */
static int run_refusals(int rank, weft_comm_t c, cudaStream_t st) {
  int n = 0;
  weft_comm_count(c, &n);
  int last = n - 1;
  model_t m = {
      .n = n, .experts = 2 * n, .k = 2, .hidden = 64, .bound = 11, .t = WEFT_BF16, .salt = 7};
  weft_moe_t moe = make(c, &m);
  bufs_t b;
  weft_stream_t s = (weft_stream_t)st;
  char why[160];
  if (!moe || bufs_new(&b, &m, 11) || bufs_fill(&b, &m, rank)) FAIL("refusals: setup");
  weft_moe_handle_t h = NULL;
  /* more tokens than the bound on the last rank */
  snprintf(why, sizeof why, "rank %d: 12 tokens exceed the low-latency bound of 11", last);
  weft_result_t rc = weft_moe_layout(moe, b.ids, rank == last ? 12 : 11, &h, s);
  if (rank == last) {
    if (expect(rank, rc, WEFT_ERR_INVALID_ARG, why, "over the bound, at layout")) return 1;
    if (h) FAIL("a refused layout made a handle");
  } else if (rc || weft_moe_dispatch(h, b.x, b.w, b.rx, b.rw, s) ||
             weft_moe_combine(h, b.rx, b.rw, b.y, s) ||
             expect(rank, weft_moe_finish(h), WEFT_ERR_INVALID_ARG, why, "over the bound") ||
             !untouched(&b, &m, 1)) {
    FAIL("over the bound: a peer's round");
  }
  weft_moe_handle_destroy(h), h = NULL;
  /* an id out of range on the last rank: found on the GPU, so every rank learns at finish */
  int64_t kept = b.ids_h[2 * 2 + 1];
  if (rank == last) b.ids_h[2 * 2 + 1] = m.experts;
  snprintf(why, sizeof why, "rank %d: token 2's choice 1 is expert %d, which is not in", last,
           m.experts);
  if (cudaMemcpy(b.ids, b.ids_h, 11 * 2 * 8, cudaMemcpyHostToDevice) ||
      weft_moe_layout(moe, b.ids, 11, &h, s) || weft_moe_dispatch(h, b.x, b.w, b.rx, b.rw, s) ||
      expect(rank, weft_moe_finish(h), WEFT_ERR_INVALID_ARG, why, "bad id") ||
      !untouched(&b, &m, 0))
    FAIL("bad id");
  weft_moe_handle_destroy(h), h = NULL;
  b.ids_h[2 * 2 + 1] = kept;
  if (cudaMemcpy(b.ids, b.ids_h, 11 * 2 * 8, cudaMemcpyHostToDevice) ||
      weft_moe_layout(moe, b.ids, 11, &h, s))
    FAIL("layout after");
  /* a NULL recv_x on rank 0 */
  rc = weft_moe_dispatch(h, b.x, b.w, rank == 0 ? NULL : b.rx, b.rw, s);
  if ((rank == 0 ? expect(rank, rc, WEFT_ERR_INVALID_ARG, "rank 0: recv_x is NULL", "NULL recv_x")
                 : rc != WEFT_SUCCESS) ||
      expect(rank, weft_moe_finish(h), WEFT_ERR_INVALID_ARG, "rank 0: recv_x is NULL",
             "NULL recv_x, finish") ||
      !untouched(&b, &m, 0))
    FAIL("NULL recv_x");
  /* the next dispatch works; then a NULL y on the last rank refuses the combine */
  snprintf(why, sizeof why, "rank %d: y is NULL", last);
  if (weft_moe_dispatch(h, b.x, b.w, b.rx, b.rw, s) || weft_moe_finish(h)) FAIL("dispatch after");
  rc = weft_moe_combine(h, b.rx, b.rw, rank == last ? NULL : b.y, s);
  if ((rank == last ? expect(rank, rc, WEFT_ERR_INVALID_ARG, why, "NULL y") : rc != WEFT_SUCCESS) ||
      expect(rank, weft_moe_finish(h), WEFT_ERR_INVALID_ARG, why, "NULL y, finish"))
    FAIL("NULL y");
  if (bufs_down(&b, &m)) FAIL("copying out");
  for (size_t i = 0; i < b.T * m.hidden * b.es; i++)
    if ((unsigned char)b.y_h[i] != 0x5a) FAIL("a refused combine wrote y");
  /* and the layer still works */
  size_t Ts[8];
  for (int q = 0; q < n; q++)
    Ts[q] = 11;
  const int64_t *dc = NULL;
  if (weft_moe_combine(h, b.rx, b.rw, b.y, s) || weft_moe_finish(h) ||
      weft_moe_device_counts(h, &dc) || check_round(rank, &m, &b, Ts, dc, "after the refusals"))
    FAIL("a round after the refusals");
  /* rank 0 dispatches in fp8, the others not: refused on every rank, at finish */
  uint8_t *r8 = NULL;
  float *rs = NULL;
  if (cudaMalloc((void **)&r8, b.rows * m.hidden) ||
      cudaMalloc((void **)&rs, b.rows * WEFT_MOE_FP8_BLOCKS(m.hidden) * 4))
    FAIL("fp8 buffers");
  rc = rank == 0 ? weft_moe_dispatch_fp8(h, b.x, b.w, r8, rs, b.rw, s)
                 : weft_moe_dispatch(h, b.x, b.w, b.rx, b.rw, s);
  if (rc != WEFT_SUCCESS || expect(rank, weft_moe_finish(h), WEFT_ERR_INVALID_ARG,
                                   n > 1 ? "ranks disagree on fp8" : NULL, "fp8 on rank 0 only"))
    FAIL("fp8 on rank 0 only");
  cudaFree(r8), cudaFree(rs);
  /* four live handles, then a fifth refused on every rank */
  weft_moe_handle_t more[4] = {h, NULL, NULL, NULL};
  for (int i = 1; i < 4; i++)
    if (weft_moe_layout(moe, b.ids, 11, &more[i], s)) FAIL("handle %d", i);
  weft_moe_handle_t fifth = NULL;
  if (expect(rank, weft_moe_layout(moe, b.ids, 11, &fifth, s), WEFT_ERR_INVALID_ARG,
             "low-latency handles are live already", "a fifth handle"))
    return 1;
  /* every rank refused that layout, each in a round of its own making: they pair up, and the
   * next dispatch is whole */
  if (weft_moe_dispatch(more[1], b.x, b.w, b.rx, b.rw, s) != WEFT_SUCCESS ||
      weft_moe_finish(more[1]) != WEFT_SUCCESS)
    FAIL("a dispatch after a fifth handle");
  for (int i = 0; i < 4; i++)
    weft_moe_handle_destroy(more[i]);
  if (weft_moe_destroy(moe)) FAIL("refusals: destroy");
  bufs_free(&b);
  return 0;
}

/* The comm's verdict once it has one (its watch runs every 100 ms), or success after `wait`
 * seconds. */
static weft_result_t verdict(weft_comm_t c, double wait) {
  weft_result_t e = WEFT_SUCCESS;
  for (double t0 = now_s(); weft_comm_get_async_error(c, &e) == WEFT_SUCCESS && e == WEFT_SUCCESS &&
                            now_s() - t0 < wait;)
    usleep(50000);
  return e;
}

/* A rank that never dispatches, on a communicator of its own (it fails): its peers' waits
 * say so after 1 s (WEFT_WAIT_REPORT_S, set by main), end at the timeout (rank 0's the
 * shortest, so that its own report is the one it keeps), weft_moe_finish says so, and the
 * communicator's error names the MoE dispatch. */
static int run_silent(int rank, int n, int dev, weft_comm_t world, cudaStream_t st) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev, cfg.timeout_ms = rank == 0 ? 2000 : 5000;
  weft_comm_t c = NULL;
  if (weft_comm_split(world, 0, rank, &c, &cfg)) FAIL("silent: split");
  model_t m = {
      .n = n, .experts = 2 * n, .k = 2, .hidden = 64, .bound = 8, .t = WEFT_BF16, .salt = 9};
  weft_moe_t moe = make(c, &m);
  bufs_t b;
  weft_moe_handle_t h = NULL;
  if (!moe || bufs_new(&b, &m, 8) || bufs_fill(&b, &m, rank) ||
      weft_moe_layout(moe, b.ids, 8, &h, (weft_stream_t)st))
    FAIL("silent: setup");
  if (rank != n - 1) {
    static log_catch_t log;
    if (rank == 0 && log_catch(&log)) FAIL("silent: stderr to %s", log.path);
    double t0 = now_s();
    int bad =
        weft_moe_dispatch(h, b.x, b.w, b.rx, b.rw, (weft_stream_t)st) ||
        expect(rank, weft_moe_finish(h), WEFT_ERR_TIMEOUT, "waited in vain", "silent: finish");
    weft_result_t e = bad ? WEFT_SUCCESS : verdict(c, 10);
    char *text = rank == 0 ? (char *)log_release(&log) : NULL;
    if (bad) FAIL("silent: a peer's dispatch");
    const char *msg = weft_get_last_error(c);
    printf("rank %d: a silent rank, after %.2f s: %s\n", rank, now_s() - t0, msg);
    if (e == WEFT_SUCCESS || (rank == 0 && (e != WEFT_ERR_TIMEOUT || !strstr(msg, "MoE dispatch"))))
      FAIL("silent: the comm's error: %s: %s", weft_result_string(e), msg);
    if (rank == 0) {
      char who[32];
      snprintf(who, sizeof who, "for rank %d", n - 1);
      const char *line = log_line(text, "has waited");
      if (!line || !strstr(line, "MoE dispatch") || !strstr(line, who))
        FAIL("silent: no wait report naming the MoE dispatch and rank %d in: %s", n - 1, text);
      printf("rank 0: ...%s\n", line);
    }
  } else if (verdict(c, 20) == WEFT_SUCCESS) { /* the peers' notices */
    FAIL("silent: the silent rank's comm never learnt of the failure");
  }
  weft_moe_handle_destroy(h);
  weft_moe_destroy(moe);
  weft_comm_destroy(c);
  bufs_free(&b);
  return 0;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  int dev = 0;
  cudaStream_t st, st2;
  if (gpu_rank_setup(rank, share, &dev, &st) ||
      cudaStreamCreateWithFlags(&st2, cudaStreamNonBlocking))
    FAIL("no GPU");
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev;
  weft_comm_t c = NULL;
  if (weft_comm_init(&c, n, id, rank, &cfg) != WEFT_SUCCESS) FAIL("init");
  if (run_graph(rank, c, st) || run_eager(rank, c, st, st2) || run_refusals(rank, c, st) ||
      run_silent(rank, n, dev, c, st))
    return 1;
  weft_comm_destroy(c);
  if (rank == 0)
    printf("test_moe_ll: %d ranks: graph replays, eager calls, refusals and a silent rank "
           "passed\n",
           n);
  return 0;
}

int main(int argc, char **argv) {
  gpu_test_wait_reports();
  return gpu_test_main(argc, argv, "test_moe_ll", rank_main, &share);
}
