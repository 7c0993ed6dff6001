/* MoE normal mode's direct path (src/moe/direct.c, direct.cu) on GPUs that map each other.
 * Its results equal the staged path's bit for bit (rows, weights, counts, combined tokens)
 * with the default window (one round), a small one (rounds of a few tokens) and none, on
 * shapes with uneven token counts, a rank without tokens, dropped choices and every payload
 * type, two layers sharing the window with their calls interleaved; the staged path itself is
 * checked against a model by test_moe. A rank whose kernels start late makes its peers' waits
 * say so at WARN after 1 s and end at the timeout, the report and the error naming the MoE
 * dispatch. */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "gpu_test.h"
#include "moe.h"
#include "rank_check.h"
#include "weft.h"
#include "weft_moe.h"

static int share;

typedef struct {
  int experts, k;
  size_t hidden;
  weft_dtype_t t;
  size_t tokens[8]; /* a rank's tokens: tokens[rank % 8] */
  unsigned salt;
} shape_t;

/* What one path gave, on the host. */
typedef struct {
  size_t rows;
  char *rx, *y;
  float *rw;
  int64_t counts[64];
} result_t;

static uint32_t mix(uint32_t a) {
  a ^= a >> 16, a *= 0x7feb352dU, a ^= a >> 15, a *= 0x846ca68bU;
  return a ^ (a >> 16);
}

/* Rank r's ids: k distinct experts a token, about one choice in eight dropped. */
static void fill_ids(const shape_t *sh, int rank, size_t T, int64_t *ids) {
  for (size_t t = 0; t < T; t++)
    for (int j = 0; j < sh->k; j++) {
      uint32_t h = mix(sh->salt * 7919u + (uint32_t)rank * 131071u + (uint32_t)(t * 64 + j));
      int64_t e = -1;
      if (h % 8) {
        e = (int64_t)(h >> 3) % sh->experts;
        for (int q = 0; q < j; q++) /* distinct: the next free expert */
          if (ids[t * sh->k + q] == e) e = (e + 1) % sh->experts, q = -1;
      }
      ids[t * sh->k + j] = e;
    }
}

/* One layer's run: its layer, buffers and handle, and what it gave. */
typedef struct {
  const shape_t *sh;
  weft_moe_t moe;
  weft_moe_handle_t h;
  void *d_ids, *d_x, *d_w, *d_rx, *d_rw, *d_y;
  result_t out;
} run_t;

/* The layer, its inputs on the GPU and its layout; want_direct: whether it must have the
 * window. */
static int run_begin(weft_comm_t c, int rank, const shape_t *sh, int want_direct, cudaStream_t st,
                     run_t *r) {
  memset(r, 0, sizeof *r);
  r->sh = sh;
  size_t T = sh->tokens[rank % 8], H = sh->hidden, es = weft_dtype_size(sh->t), k = (size_t)sh->k;
  size_t T1 = T ? T : 1;
  weft_moe_config_t cfg = WEFT_MOE_CONFIG_INIT;
  cfg.num_experts = sh->experts, cfg.topk = sh->k, cfg.hidden = H, cfg.dtype = sh->t;
  cfg.align = 4;
  if (weft_moe_create(c, &cfg, &r->moe)) FAIL("create: %s", weft_get_last_error(c));
  if ((r->moe->direct != NULL) != want_direct)
    FAIL("the layer %s a window", r->moe->direct ? "has" : "lacks");
  int64_t *ids = malloc(T1 * k * sizeof *ids);
  char *x = malloc(T1 * H * es);
  float *w = malloc(T1 * k * sizeof *w);
  if (!ids || !x || !w) FAIL("host memory");
  fill_ids(sh, rank, T, ids);
  for (size_t i = 0; i < T * H; i++)
    weft_dtype_store(sh->t, x, i, ((int)(mix((uint32_t)(i * 3 + rank)) % 17) - 8) * 0.125);
  for (size_t i = 0; i < T * k; i++)
    w[i] = (float)(mix((uint32_t)(i * 5 + rank + 1)) % 1000) / 997.0f;
  if (cudaMalloc(&r->d_ids, T1 * k * 8) || cudaMalloc(&r->d_x, T1 * H * es) ||
      cudaMalloc(&r->d_w, T1 * k * 4) || cudaMalloc(&r->d_y, T1 * H * es))
    FAIL("device memory");
  h2d(r->d_ids, ids, T * k * 8), h2d(r->d_x, x, T * H * es), h2d(r->d_w, w, T * k * 4);
  free(ids), free(x), free(w);
  if (weft_moe_layout(r->moe, r->d_ids, T, &r->h, (weft_stream_t)st) ||
      weft_moe_recv_rows(r->h, &r->out.rows) || weft_moe_expert_counts(r->h, r->out.counts, NULL))
    FAIL("layout: %s", weft_get_last_error(c));
  size_t R = r->out.rows ? r->out.rows : 1;
  if (cudaMalloc(&r->d_rx, R * H * es) || cudaMalloc(&r->d_rw, R * 4) ||
      cudaMemset(r->d_rx, 0x7f, R * H * es) || cudaMemset(r->d_rw, 0x7f, R * 4))
    FAIL("device rows");
  return 0;
}

static int run_dispatch(int rank, run_t *r, cudaStream_t st) {
  if (weft_moe_dispatch(r->h, r->d_x, r->d_w, r->d_rx, r->d_rw, (weft_stream_t)st))
    FAIL("dispatch: %s", weft_get_last_error(NULL));
  return 0;
}

/* Combines the rows weighted by their weights (identity experts). */
static int run_combine(int rank, run_t *r, cudaStream_t st) {
  if (weft_moe_combine(r->h, r->d_rx, r->d_rw, r->d_y, (weft_stream_t)st))
    FAIL("combine: %s", weft_get_last_error(NULL));
  return 0;
}

/* What it gave, copied out; the rest freed. */
static int run_end(int rank, run_t *r, cudaStream_t st) {
  const shape_t *sh = r->sh;
  size_t T = sh->tokens[rank % 8], H = sh->hidden, es = weft_dtype_size(sh->t);
  size_t R = r->out.rows ? r->out.rows : 1;
  result_t *o = &r->out;
  o->rx = malloc(R * H * es), o->y = malloc((T ? T : 1) * H * es), o->rw = malloc(R * 4);
  if (cudaStreamSynchronize(st) || !o->rx || !o->y || !o->rw ||
      cudaMemcpy(o->rx, r->d_rx, o->rows * H * es, cudaMemcpyDeviceToHost) ||
      cudaMemcpy(o->rw, r->d_rw, o->rows * 4, cudaMemcpyDeviceToHost) ||
      cudaMemcpy(o->y, r->d_y, T * H * es, cudaMemcpyDeviceToHost))
    FAIL("copying out");
  weft_moe_handle_destroy(r->h);
  if (weft_moe_destroy(r->moe)) FAIL("destroy");
  cudaFree(r->d_ids), cudaFree(r->d_x), cudaFree(r->d_w), cudaFree(r->d_rx), cudaFree(r->d_rw);
  cudaFree(r->d_y);
  return 0;
}

static void result_free(result_t *r) { free(r->rx), free(r->y), free(r->rw); }

static int same(const shape_t *sh, int rank, const result_t *a, const result_t *b,
                const char *what) {
  size_t T = sh->tokens[rank % 8], H = sh->hidden, es = weft_dtype_size(sh->t);
  if (a->rows != b->rows) FAIL("%s: %zu rows, staged %zu", what, a->rows, b->rows);
  if (memcmp(a->counts, b->counts, sizeof a->counts)) FAIL("%s: counts differ", what);
  for (size_t r = 0; r < a->rows; r++) {
    if (memcmp(a->rx + r * H * es, b->rx + r * H * es, H * es))
      FAIL("%s: row %zu differs from the staged path's", what, r);
    if (memcmp(&a->rw[r], &b->rw[r], 4))
      FAIL("%s: row %zu's weight %g, staged %g", what, r, a->rw[r], b->rw[r]);
  }
  for (size_t t = 0; t < T; t++)
    if (memcmp(a->y + t * H * es, b->y + t * H * es, H * es))
      FAIL("%s: combined token %zu differs from the staged path's", what, t);
  return 0;
}

/* A communicator whose device parameters read WEFT_MOE_WINDOW_BYTES = window ("": unset):
 * they are read once, at its init. */
static weft_comm_t comm_with(weft_comm_t world, int rank, int dev, const char *window) {
  if (window[0])
    setenv("WEFT_MOE_WINDOW_BYTES", window, 1);
  else
    unsetenv("WEFT_MOE_WINDOW_BYTES");
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev;
  weft_comm_t c = NULL;
  if (weft_comm_split(world, 0, rank, &c, &cfg)) c = NULL;
  unsetenv("WEFT_MOE_WINDOW_BYTES");
  return c;
}

/* Shapes a and b on one communicator, their calls interleaved (two layers sharing the
 * window): layouts, dispatches, then the combines in the other order. */
static int run_pair(weft_comm_t c, int rank, const shape_t *a, const shape_t *b, int direct,
                    cudaStream_t st, result_t *ra, result_t *rb) {
  run_t x, y;
  if (run_begin(c, rank, a, direct, st, &x) || run_begin(c, rank, b, direct, st, &y) ||
      run_dispatch(rank, &x, st) || run_dispatch(rank, &y, st) || run_combine(rank, &y, st) ||
      run_combine(rank, &x, st) || run_end(rank, &y, st) || run_end(rank, &x, st))
    return 1;
  *ra = x.out, *rb = y.out;
  return 0;
}

/* Sleeps in the stream's order: the rank's kernels after it start late. */
static void CUDART_CB late(void *arg) { usleep((useconds_t)(uintptr_t)arg); }

/* The last rank's stream sleeps 4 s before its dispatch (its host agreed with the peers):
 * their kernels wait for its record until the timeout (rank 0's the shortest, so that its
 * own report is the one it keeps), saying so after 1 s (WEFT_WAIT_REPORT_S, set by main), and
 * the communicator's error names the MoE dispatch. */
static int run_late(int rank, int n, int dev, weft_comm_t world, cudaStream_t st) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev, cfg.timeout_ms = rank == 0 ? 2000 : 5000;
  weft_comm_t c = NULL;
  if (weft_comm_split(world, 0, rank, &c, &cfg)) FAIL("late: split");
  weft_moe_config_t mc = WEFT_MOE_CONFIG_INIT;
  mc.num_experts = 2 * n, mc.topk = 2, mc.hidden = 64, mc.dtype = WEFT_BF16;
  weft_moe_t moe = NULL;
  weft_moe_handle_t h = NULL;
  size_t T = 8, rows = 0;
  int64_t ids[16];
  for (int i = 0; i < 16; i++) /* every token to experts on two ranks */
    ids[i] = (i + rank + (i % 2) * (n - 1)) % (2 * n);
  void *d_ids, *d_x, *d_w, *d_rx, *d_rw;
  if (weft_moe_create(c, &mc, &moe) || !moe->direct || cudaMalloc(&d_ids, sizeof ids) ||
      cudaMalloc(&d_x, T * 128) || cudaMalloc(&d_w, T * 8) || cudaMemset(d_x, 0, T * 128) ||
      cudaMemset(d_w, 0, T * 8))
    FAIL("late: setup");
  h2d(d_ids, ids, sizeof ids);
  if (weft_moe_layout(moe, d_ids, T, &h, (weft_stream_t)st) || weft_moe_recv_rows(h, &rows) ||
      cudaMalloc(&d_rx, (rows ? rows : 1) * 128) || cudaMalloc(&d_rw, (rows ? rows : 1) * 4))
    FAIL("late: layout");
  if (rank == n - 1 && cudaLaunchHostFunc(st, late, (void *)(uintptr_t)4000000))
    FAIL("late: the host function");
  static log_catch_t log;
  if (rank == 0 && log_catch(&log)) FAIL("late: stderr to %s", log.path);
  double t0 = now_s();
  weft_result_t rc = weft_moe_dispatch(h, d_x, d_w, d_rx, d_rw, (weft_stream_t)st);
  if (rank == 0) {
    weft_result_t e = WEFT_SUCCESS;
    while (!rc && weft_comm_get_async_error(c, &e) == WEFT_SUCCESS && e == WEFT_SUCCESS &&
           now_s() - t0 < 10)
      usleep(50000);
    double dt = now_s() - t0;
    char *text = (char *)log_release(&log);
    const char *msg = weft_get_last_error(c), *line = log_line(text, "has waited");
    printf("rank 0: a late rank, after %.2f s: %s\n", dt, msg);
    if (rc || e != WEFT_ERR_TIMEOUT || !strstr(msg, "MoE dispatch") || dt < 1.5)
      FAIL("late: the comm's error: %s: %s", weft_result_string(e), msg);
    char who[32];
    snprintf(who, sizeof who, "for rank %d", n - 1);
    if (!line || !strstr(line, "MoE dispatch") || !strstr(line, who))
      FAIL("late: no wait report naming the MoE dispatch and rank %d in: %s", n - 1, text);
    printf("rank 0: ...%s\n", line);
  }
  if (rc) FAIL("late: dispatch: %s", weft_get_last_error(c));
  cudaStreamSynchronize(st);
  weft_moe_handle_destroy(h);
  weft_moe_destroy(moe);
  weft_comm_destroy(c);
  cudaFree(d_ids), cudaFree(d_x), cudaFree(d_w), cudaFree(d_rx), cudaFree(d_rw);
  return 0;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  int dev = 0;
  cudaStream_t st;
  if (gpu_rank_setup(rank, share, &dev, &st)) FAIL("no GPU");
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev;
  weft_comm_t c = NULL;
  if (weft_comm_init(&c, n, id, rank, &cfg) != WEFT_SUCCESS) FAIL("init");
  weft_comm_t cw[3] = {comm_with(c, rank, dev, ""), comm_with(c, rank, dev, "16384"),
                       comm_with(c, rank, dev, "0")};
  if (!cw[0] || !cw[1] || !cw[2]) FAIL("split: %s", weft_get_last_error(c));
  const shape_t shapes[] = {
      {.experts = 8 * n,
       .k = 8,
       .hidden = 512,
       .t = WEFT_BF16,
       .tokens = {300, 257, 0, 311, 64, 129, 5, 280},
       .salt = 1},
      {.experts = 4 * n,
       .k = 3,
       .hidden = 100,
       .t = WEFT_F32,
       .tokens = {77, 0, 150, 33, 1, 2, 90, 16},
       .salt = 2},
      {.experts = 2 * n,
       .k = 1,
       .hidden = 129,
       .t = WEFT_F16,
       .tokens = {40, 41, 42, 0, 44, 45, 46, 47},
       .salt = 3},
      {.experts = 32 * n,
       .k = 16,
       .hidden = 64,
       .t = WEFT_BF16,
       .tokens = {500, 499, 3, 498, 0, 1, 200, 100},
       .salt = 4},
  };
  const char *how[2] = {"one round", "in rounds"};
  int cases = 0;
  for (size_t i = 0; i + 1 < sizeof shapes / sizeof shapes[0]; i += 2) {
    const shape_t *a = &shapes[i], *b = &shapes[i + 1];
    result_t got[3][2];
    for (int p = 0; p < 3; p++)
      if (run_pair(cw[p], rank, a, b, p < 2, st, &got[p][0], &got[p][1])) return 1;
    for (int p = 0; p < 2; p++)
      for (int q = 0; q < 2; q++) {
        char what[128];
        const shape_t *sh = q ? b : a;
        snprintf(what, sizeof what, "%s hidden %zu top-%d of %d, %s", weft_dtype_name(sh->t),
                 sh->hidden, sh->k, sh->experts, how[p]);
        if (same(sh, rank, &got[p][q], &got[2][q], what)) return 1;
      }
    for (int p = 0; p < 3; p++)
      result_free(&got[p][0]), result_free(&got[p][1]);
    cases += 2;
  }
  for (int p = 0; p < 3; p++)
    weft_comm_destroy(cw[p]);
  if (run_late(rank, n, dev, c, st)) return 1;
  weft_comm_destroy(c);
  if (rank == 0)
    printf("test_moe_direct: %d ranks: %d shapes, two layers at a time, equal to the staged "
           "path in one round and in rounds, and a late rank passed\n",
           n, cases);
  return 0;
}

int main(int argc, char **argv) {
  gpu_test_wait_reports();
  return gpu_test_main(argc, argv, "test_moe_direct", rank_main, &share);
}
