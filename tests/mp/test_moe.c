/* MoE dispatch and combine on forked ranks with host buffers: every rank can compute every
 * rank's ids and tokens, so each checks its own rows, counts and combined tokens exactly
 * against a model; the adjoint identities; and refusals that reach every rank and change
 * nothing; the split halves (host buffers); the config's limits at N and one past N (topk,
 * align, a low-latency block exactly full, and, host only, the byte limits). With --device
 * (CUDA builds) every rank works on GPU 0 with device buffers.
 * usage: test_moe RANKS [shm|tcp] [--device] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef WEFT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#include "dtype.h"

/* element i of a buffer of type t, as float (dtype.c converts) */
#define get(t, b, i)    ((float)weft_dtype_load((t), (b), (i)))
#define put(t, b, i, v) weft_dtype_store((t), (b), (i), (double)(v))
#include "launch.h"
#include "rank_check.h"
#include "weft.h"
#include "weft_moe.h"

enum { UNIFORM, SKEWED, SPARSE, DROPPED, FULL, NPATTERN };
static const char *const PATTERN_NAME[] = {"uniform", "skewed", "sparse", "dropped", "full"};

typedef struct {
  int pattern, experts, k, align, ll; /* ll: low-latency mode (bound LL_BOUND) */
  size_t hidden;
  weft_dtype_t t;
} shape_t;

enum { LL_BOUND = 17 }; /* the most tokens_of gives */

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* Tokens of rank s: the sparse pattern leaves rank 1 without any; the full one gives every
 * rank the low-latency bound. */
static size_t tokens_of(const shape_t *sh, int s) {
  if (sh->pattern == FULL) return LL_BOUND;
  return sh->pattern == SPARSE && s == 1 ? 0 : 5 + (size_t)(mix(s, 77) % 13);
}

/* Choice j of token t on rank s, distinct within the token. Skewed and full: every token's
 * first choice is expert 0 (full: with LL_BOUND tokens on every rank, expert 0's low-latency
 * block is exactly full, as in a decode step whose tokens all pick one expert); sparse: only
 * the experts of rank 0 and of the last rank; dropped: some -1, and every fourth token drops
 * all. */
static int64_t id_of(const shape_t *sh, int n, int s, size_t t, int j) {
  int e = sh->experts, local = e / n, pool = sh->pattern == SPARSE && n > 1 ? 2 * local : e;
  int64_t row[64];
  if (sh->pattern == DROPPED && (t % 4 == 3 || mix((uint64_t)s * 1000 + t, (uint64_t)j) % 3 == 0))
    return -1;
  for (int i = 0, tries = 0; i <= j; tries++) {
    int64_t v =
        (sh->pattern == SKEWED || sh->pattern == FULL) && i == 0
            ? 0
            : (int64_t)(mix((uint64_t)s * 1000 + t, 100 + (uint64_t)tries) % (uint64_t)pool);
    if (sh->pattern == SPARSE && n > 1 && v >= local) v = e - local + (v - local);
    int seen = (sh->pattern == SKEWED || sh->pattern == FULL) && i > 0 && v == 0;
    for (int q = 0; q < i; q++)
      seen |= row[q] == v;
    if (!seen) row[i++] = v;
  }
  return row[j];
}

/* Token t's element h on rank s: small integers times a power of two, exact in every dtype
 * and in sums of up to 32 of them scaled by 1/k. */
static float x_of(int s, size_t t, size_t h) {
  return (float)((int)(mix(s * 100000 + (int)t, h) % 15) - 7) * 0.25f;
}

/* Weight of choice j: 1/2, 1/4, 1/8 by slot on f32 (so that a weight landing in another
 * slot's row shows, and sums stay exact); 1/k on the 16-bit types, whose sums of those would
 * round. */
static float w_of(const shape_t *sh, int j) {
  return sh->t == WEFT_F32 ? 1.0f / (float)(2 << (j % 3)) : 1.0f / (float)sh->k;
}

static int has(const shape_t *sh, int n, int s, size_t t, int64_t e, int *slot) {
  for (int j = 0; j < sh->k; j++)
    if (id_of(sh, n, s, t, j) == e) return *slot = j, 1;
  return 0;
}

/* A buffer the calls get: host memory, or with --device a device twin of it, copied in
 * before a call (up) and back after (down) on the rank's stream. */
static int g_dev;
static weft_stream_t g_st, g_st2; /* the rank's stream, and a second one (device runs) */

typedef struct {
  char *h;
  void *d;
  size_t n;
} mb_t;

static int mb_new(mb_t *b, size_t n) {
  b->n = n + 16, b->d = NULL;
  b->h = calloc(b->n, 1);
#ifdef WEFT_HAVE_CUDA
  /* zeroed on the rank's stream: a cudaMemset on the legacy stream is not ordered with the
   * non-blocking stream's copies that follow */
  if (g_dev && (cudaMalloc(&b->d, b->n) != cudaSuccess ||
                cudaMemsetAsync(b->d, 0, b->n, (cudaStream_t)g_st) != cudaSuccess))
    return -1;
#endif
  return b->h ? 0 : -1;
}
static void *mb(const mb_t *b) { return g_dev ? b->d : (void *)b->h; }
static int mb_copy(mb_t *b, int up) {
#ifdef WEFT_HAVE_CUDA
  if (g_dev) {
    cudaStream_t s = (cudaStream_t)g_st;
    return cudaMemcpyAsync(up ? b->d : b->h, up ? b->h : b->d, b->n,
                           up ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                           s) != cudaSuccess ||
           cudaStreamSynchronize(s) != cudaSuccess;
  }
#endif
  (void)b, (void)up;
  return 0;
}
static int mb_up(mb_t *b) { return mb_copy(b, 1); }
static int sync2(void) {
#ifdef WEFT_HAVE_CUDA
  if (g_st2) return cudaStreamSynchronize((cudaStream_t)g_st2) != cudaSuccess;
#endif
  return 0;
}
static int mb_down(mb_t *b) { return mb_copy(b, 0); }
static void mb_free(mb_t *b) {
#ifdef WEFT_HAVE_CUDA
  if (b->d) cudaFree(b->d);
#endif
  free(b->h);
}

/* The test's own sums go over a host communicator split from the tested one (device runs:
 * host buffers), so that a check of MoE depends on nothing but the MoE calls. */
static weft_comm_t g_host;

static int sum4(const double *v, double *g) {
  return weft_allreduce(v, g, 4, WEFT_F64, WEFT_SUM, g_host, NULL) != WEFT_SUCCESS;
}

/* With identity experts, y[t] must be x[t] times the weights of t's kept choices, exactly. */
static int identity_wrong(const shape_t *sh, int rank, int n, const void *y, size_t T,
                          const char *what) {
  size_t H = sh->hidden, k = (size_t)sh->k;
  for (size_t t = 0; t < T; t++) {
    float kept = 0;
    for (size_t j = 0; j < k; j++)
      kept += id_of(sh, n, rank, t, (int)j) >= 0 ? w_of(sh, (int)j) : 0.0f;
    for (size_t c = 0; c < H; c++)
      if (get(sh->t, y, t * H + c) != x_of(rank, t, c) * kept)
        FAIL("%s %s: token %zu element %zu: %g, want %g", PATTERN_NAME[sh->pattern], what, t, c,
             get(sh->t, y, t * H + c), x_of(rank, t, c) * kept);
  }
  return 0;
}

/* The handle's counts and offsets against the model's, on the host and (device runs) on the
 * GPU. */
static int check_counts(int rank, weft_moe_handle_t h, int local, const int64_t *count,
                        const int64_t *off, const char *pn) {
  int64_t got_c[64], got_o[64], dev_c[64] = {0};
  if (weft_moe_expert_counts(h, got_c, got_o) != WEFT_SUCCESS) FAIL("%s: counts", pn);
  const int64_t *dc = NULL;
  if (weft_moe_device_counts(h, &dc) != (g_dev ? WEFT_SUCCESS : WEFT_ERR_INVALID_ARG))
    FAIL("%s: device counts", pn);
#ifdef WEFT_HAVE_CUDA
  /* written in the stream's order: the layout's (normal mode) or the dispatch's */
  if (g_dev && (cudaStreamSynchronize((cudaStream_t)g_st) != cudaSuccess ||
                cudaMemcpy(dev_c, dc, (size_t)local * 8, cudaMemcpyDeviceToHost) != cudaSuccess))
    FAIL("%s: reading the device counts", pn);
#endif
  for (int l = 0; l < local; l++)
    if (got_c[l] != count[l] || got_o[l] != off[l] || (g_dev && dev_c[l] != count[l]))
      FAIL("%s: expert %d: count %lld (device %lld) at %lld, want %lld at %lld", pn, l,
           (long long)got_c[l], g_dev ? (long long)dev_c[l] : -1LL, (long long)got_o[l],
           (long long)count[l], (long long)off[l]);
  return 0;
}

/* fp8 dispatch: every row the e4m3 bytes and scales of its source token, computed here
 * from the rule (a block's scale amax / 448, each element e4m3(x / scale)); padding rows
 * zeros with scale 0, a low-latency block's unused rows untouched; weights as dispatch's. */
static int check_fp8(int rank, int n, const shape_t *sh, weft_moe_handle_t h, mb_t *bx, mb_t *bw,
                     size_t rows, const int64_t *off) {
  size_t H = sh->hidden, nb = WEFT_MOE_FP8_BLOCKS(H);
  int local = sh->experts / n;
  char pn[64];
  snprintf(pn, sizeof pn, "%s %s %s%s", PATTERN_NAME[sh->pattern], weft_dtype_name(sh->t),
           sh->ll ? "low-latency" : "normal", g_dev ? " (device)" : "");
  mb_t b8, bs, bw8;
  if (mb_new(&b8, rows * H) || mb_new(&bs, rows * nb * 4) || mb_new(&bw8, rows * 4))
    FAIL("fp8 buffers");
  memset(b8.h, 0x5a, b8.n), memset(bs.h, 0x5a, bs.n);
  if (mb_up(&b8) || mb_up(&bs) ||
      weft_moe_dispatch_fp8(h, mb(bx), mb(bw), mb(&b8), mb(&bs), mb(&bw8), g_st) != WEFT_SUCCESS ||
      mb_down(&b8) || mb_down(&bs) || mb_down(&bw8))
    FAIL("fp8 dispatch %s", pn);
  const uint8_t *q = (const uint8_t *)b8.h;
  const float *sc = (const float *)bs.h, *w8 = (const float *)bw8.h;
  for (int l = 0; l < local; l++) {
    size_t r = (size_t)off[l];
    for (int s = 0; s < n; s++)
      for (size_t t = 0, T2 = tokens_of(sh, s); t < T2; t++) {
        int j;
        if (!has(sh, n, s, t, (int64_t)rank * local + l, &j)) continue;
        for (size_t b = 0; b < nb; b++) {
          float amax = 0;
          for (size_t c = b * 128; c < H && c < b * 128 + 128; c++)
            amax = fmaxf(amax, fabsf(x_of(s, t, c)));
          float want = amax / 448.0f > 0 ? amax / 448.0f : 1.0f;
          if (sc[r * nb + b] != want)
            FAIL("%s: fp8 row %zu block %zu: scale %g, want %g", pn, r, b, sc[r * nb + b], want);
          for (size_t c = b * 128; c < H && c < b * 128 + 128; c++)
            if (q[r * H + c] != weft_f32_to_e4m3(x_of(s, t, c) / want))
              FAIL("%s: fp8 row %zu element %zu: 0x%02x, want 0x%02x", pn, r, c, q[r * H + c],
                   weft_f32_to_e4m3(x_of(s, t, c) / want));
        }
        if (w8[r] != w_of(sh, j)) FAIL("%s: fp8 row %zu: weight %g", pn, r, w8[r]);
        r++;
      }
    size_t end = l + 1 < local ? (size_t)off[l + 1] : rows;
    for (; r < end; r++) { /* padding: zeros and scale 0; unused low-latency rows: untouched */
      unsigned char want = sh->ll ? 0x5a : 0;
      int bad = 0;
      for (size_t c = 0; c < H; c++)
        bad |= q[r * H + c] != want;
      for (size_t c = 0; c < nb * 4; c++)
        bad |= (unsigned char)bs.h[r * nb * 4 + c] != want;
      if (bad) FAIL("%s: fp8 %s row %zu written", pn, sh->ll ? "unused" : "padding", r);
    }
  }
  mb_free(&b8), mb_free(&bs), mb_free(&bw8);
  return 0;
}

/* One shape: layout, queries, dispatch against the model, identity combine, an expert-scaled
 * combine, and the two adjoint identities. */
static int run_split(weft_moe_t moe, weft_moe_handle_t h, const shape_t *sh, int rank,
                     const void *ids, const char *x, const float *w, size_t rows);

static int run_shape(weft_comm_t comm, int rank, int n, const shape_t *sh) {
  weft_moe_config_t cfg = WEFT_MOE_CONFIG_INIT;
  cfg.num_experts = sh->experts, cfg.topk = sh->k, cfg.hidden = sh->hidden, cfg.dtype = sh->t;
  cfg.index_type = sh->pattern % 2 ? WEFT_I32 : WEFT_I64, cfg.align = (size_t)sh->align;
  if (sh->ll) cfg.mode = WEFT_MOE_LOW_LATENCY, cfg.max_tokens = LL_BOUND, cfg.align = 1;
  weft_moe_t moe = NULL;
  weft_moe_handle_t h = NULL;
  size_t T = tokens_of(sh, rank), H = sh->hidden, es = weft_dtype_size(sh->t), k = sh->k;
  int local = sh->experts / n, bad = 0;
  char pn[64];
  snprintf(pn, sizeof pn, "%s %s %s%s", PATTERN_NAME[sh->pattern], weft_dtype_name(sh->t),
           sh->ll ? "low-latency" : "normal", g_dev ? " (device)" : "");
  if (weft_moe_create(comm, &cfg, &moe) != WEFT_SUCCESS) FAIL("create %s", pn);
  mb_t bids, bx, by, bw;
  if (mb_new(&bids, T * k * 8) || mb_new(&bx, T * H * es) || mb_new(&by, T * H * es) ||
      mb_new(&bw, T * k * 4))
    FAIL("buffers");
  char *x = bx.h, *y = by.h;
  float *w = (float *)bw.h;
  for (size_t t = 0; t < T; t++) {
    for (size_t j = 0; j < k; j++) {
      int64_t e = id_of(sh, n, rank, t, (int)j);
      if (cfg.index_type == WEFT_I32)
        ((int32_t *)bids.h)[t * k + j] = (int32_t)e;
      else
        ((int64_t *)bids.h)[t * k + j] = e;
      w[t * k + j] = w_of(sh, (int)j);
    }
    for (size_t c = 0; c < H; c++)
      put(sh->t, x, t * H + c, x_of(rank, t, c));
  }
  if (mb_up(&bids) || mb_up(&bx) || mb_up(&bw)) FAIL("copying in");
  if (weft_moe_layout(moe, T ? mb(&bids) : NULL, T, &h, g_st) != WEFT_SUCCESS)
    FAIL("layout %s", pn);
  /* the model: rows of local expert l from source s, token t in order */
  int64_t *count = calloc((size_t)local, 8), *off = calloc((size_t)local, 8);
  size_t rows = 0, want_rows = 0;
  for (int l = 0; l < local; l++) {
    off[l] = (int64_t)want_rows;
    for (int s = 0; s < n; s++)
      for (size_t t = 0, T2 = tokens_of(sh, s); t < T2; t++) {
        int j;
        count[l] += has(sh, n, s, t, (int64_t)rank * local + l, &j);
      }
    want_rows += ((size_t)count[l] + sh->align - 1) / sh->align * sh->align;
    if (sh->ll)
      off[l] = (int64_t)((size_t)l * n * LL_BOUND), want_rows = (size_t)(l + 1) * n * LL_BOUND;
  }
  /* full: rank 0's expert 0 gets every rank's every token, its count the block's rows */
  if (sh->pattern == FULL && rank == 0 && count[0] != (int64_t)n * LL_BOUND)
    FAIL("%s: expert 0 gets %lld rows, not a full block's %d", pn, (long long)count[0],
         n * LL_BOUND);
  weft_moe_recv_rows(h, &rows);
  if (rows != want_rows) FAIL("%s: %zu rows, want %zu", pn, rows, want_rows);
  /* low-latency mode on a device communicator: the counts come with the dispatch */
  int counts_later = g_dev && sh->ll;
  if (!counts_later && check_counts(rank, h, local, count, off, pn)) return 1;
  mb_t brx, bro, brw, brws;
  if (mb_new(&brx, rows * H * es) || mb_new(&bro, rows * H * es) || mb_new(&brw, rows * 4) ||
      mb_new(&brws, rows * 4))
    FAIL("row buffers");
  char *rx = brx.h, *ro = bro.h;
  float *rw = (float *)brw.h, *rws = (float *)brws.h;
  memset(rx, 0x5a, rows * H * es);
  memset(rw, 0x5a, rows * 4);
  if (mb_up(&brx) || mb_up(&brw)) FAIL("copying in");
  if (weft_moe_dispatch(h, mb(&bx), mb(&bw), mb(&brx), mb(&brw), g_st) != WEFT_SUCCESS)
    FAIL("dispatch %s", pn);
  if (mb_down(&brx) || mb_down(&brw)) FAIL("copying out");
  if (counts_later && check_counts(rank, h, local, count, off, pn)) return 1;
  for (int l = 0; l < local && !bad; l++) {
    size_t r = (size_t)off[l];
    for (int s = 0; s < n; s++)
      for (size_t t = 0, T2 = tokens_of(sh, s); t < T2; t++) {
        int j;
        if (!has(sh, n, s, t, (int64_t)rank * local + l, &j)) continue;
        for (size_t c = 0; c < H && !bad; c++)
          bad = get(sh->t, rx, r * H + c) != x_of(s, t, c);
        if (bad || rw[r] != w_of(sh, j))
          FAIL("%s: expert %d row %zu (rank %d token %zu): wrong %s", pn, l, r, s, t,
               bad ? "payload" : "weight");
        r++;
      }
    size_t end = l + 1 < local ? (size_t)off[l + 1] : rows;
    for (; r < end; r++) { /* padding: zeros; a low-latency block's unused rows: untouched */
      unsigned char want = sh->ll ? 0x5a : 0;
      for (size_t c = 0; c < H * es; c++)
        bad |= (unsigned char)rx[r * H * es + c] != want;
      for (size_t c = 0; c < 4; c++)
        bad |= ((unsigned char *)&rw[r])[c] != want;
      if (bad) FAIL("%s: %s row %zu written", pn, sh->ll ? "unused" : "padding", r);
    }
  }
  if (check_fp8(rank, n, sh, h, &bx, &bw, rows, off)) return 1;
  /* identity experts: y[t] = x[t] times the kept weights' sum, exactly; y poisoned first,
   * so that a token with no expert must really get zeros */
  memset(y, 0x5a, T * H * es);
  if (mb_up(&by) || weft_moe_combine(h, mb(&brx), mb(&brw), mb(&by), g_st) != WEFT_SUCCESS ||
      mb_down(&by))
    FAIL("combine %s", pn);
  if (identity_wrong(sh, rank, n, y, T, "identity combine")) return 1;
  /* a dispatch and then, on another stream (device runs), a combine of its rows: the handle
   * orders its calls, so the combine sees the rows whatever the streams */
  memset(y, 0x5a, T * H * es);
  memset(rx, 0x5a, rows * H * es);
  if (mb_up(&by) || mb_up(&brx) ||
      weft_moe_dispatch(h, mb(&bx), mb(&bw), mb(&brx), mb(&brw), g_st) != WEFT_SUCCESS ||
      weft_moe_combine(h, mb(&brx), mb(&brw), mb(&by), g_st2) != WEFT_SUCCESS || sync2() ||
      mb_down(&by) || mb_down(&brx))
    FAIL("dispatch then combine on two streams %s", pn);
  if (identity_wrong(sh, rank, n, y, T, "two streams")) return 1;
  /* experts that scale by (expert + 1), weights from the rows: y = sum w (e + 1) x */
  for (int l = 0; l < local; l++)
    for (int64_t r = off[l]; r < off[l] + count[l]; r++)
      for (size_t c = 0; c < H; c++)
        put(sh->t, ro, (size_t)r * H + c,
            get(sh->t, rx, (size_t)r * H + c) * (float)(rank * local + l + 1));
  if (mb_up(&bro) || weft_moe_combine(h, mb(&bro), mb(&brw), mb(&by), g_st) != WEFT_SUCCESS ||
      mb_down(&by))
    FAIL("combine 2 %s", pn);
  for (size_t t = 0; t < T; t++) {
    float f = 0;
    for (size_t j = 0; j < k; j++) {
      int64_t e = id_of(sh, n, rank, t, (int)j);
      if (e >= 0) f += w_of(sh, (int)j) * (float)(e + 1);
    }
    for (size_t c = 0; c < H; c++) {
      double want = (double)x_of(rank, t, c) * f, have = get(sh->t, y, t * H + c);
      double tol = sh->t == WEFT_F32 ? 0 : fabs(want) * (sh->t == WEFT_BF16 ? 0x1p-7 : 0x1p-10);
      if (fabs(have - want) > tol)
        FAIL("%s: scaled combine token %zu element %zu: %g, want %g", pn, t, c, have, want);
    }
  }
  /* adjoints (f32): <D x, r> = <x, C_1 r> and <C_w r, z> = <r, W D z>, r = ro, z = x */
  if (sh->t == WEFT_F32) {
    double v[4] = {0}, g[4];
    if (weft_moe_combine(h, mb(&bro), NULL, mb(&by), g_st) != WEFT_SUCCESS || mb_down(&by))
      FAIL("combine 3");
    for (size_t t = 0; t < T; t++) { /* no weights: y = sum (e + 1) x, exactly */
      float f = 0;
      for (size_t j = 0; j < k; j++) {
        int64_t e = id_of(sh, n, rank, t, (int)j);
        if (e >= 0) f += (float)(e + 1);
      }
      for (size_t c = 0; c < H; c++)
        if (get(sh->t, y, t * H + c) != x_of(rank, t, c) * f)
          FAIL("%s: unweighted combine token %zu element %zu: %g, want %g", pn, t, c,
               get(sh->t, y, t * H + c), x_of(rank, t, c) * f);
    }
    for (size_t i = 0; i < rows * H; i++)
      v[0] += (double)((float *)rx)[i] * ((float *)ro)[i];
    for (size_t i = 0; i < T * H; i++)
      v[1] += (double)((float *)x)[i] * ((float *)y)[i];
    for (size_t r = 0; r < rows; r++)
      rws[r] = (float)(r % 3 + 1) * 0.5f;
    if (mb_up(&brws) || weft_moe_combine(h, mb(&bro), mb(&brws), mb(&by), g_st) != WEFT_SUCCESS ||
        mb_down(&by))
      FAIL("combine 4");
    for (size_t i = 0; i < T * H; i++)
      v[2] += (double)((float *)y)[i] * ((float *)x)[i];
    for (size_t i = 0; i < rows * H; i++)
      v[3] += (double)((float *)ro)[i] * rws[i / H] * ((float *)rx)[i];
    if (sum4(v, g)) FAIL("sum");
    if (getenv("TEST_MOE_VERBOSE"))
      fprintf(stderr, "rank %d %s: v %.17g %.17g %.17g %.17g, sums %.17g %.17g %.17g %.17g\n", rank,
              pn, v[0], v[1], v[2], v[3], g[0], g[1], g[2], g[3]);
    if (fabs(g[0] - g[1]) > 1e-9 * fabs(g[0]) || fabs(g[2] - g[3]) > 1e-9 * fabs(g[2]) || g[0] == 0)
      FAIL("%s: adjoint identities: %.17g vs %.17g, %.17g vs %.17g", pn, g[0], g[1], g[2], g[3]);
  }
  if (!g_dev && run_split(moe, h, sh, rank, bids.h, x, w, rows)) return 1;
  weft_moe_handle_destroy(h);
  if (weft_moe_destroy(moe) != WEFT_SUCCESS) FAIL("destroy");
  mb_free(&bids), mb_free(&bx), mb_free(&by), mb_free(&bw), mb_free(&brx), mb_free(&bro);
  mb_free(&brw), mb_free(&brws);
  free(count), free(off);
  return 0;
}

/* A call that must fail with `want` on every rank, with `needle` in the message. */
static int expect_fail(int rank, weft_result_t rc, weft_result_t want, const char *needle,
                       const char *what) {
  const char *msg = weft_get_last_error(NULL);
  if (rc != want || !strstr(msg, needle))
    FAIL("%s: got %s \"%s\", want %s with \"%s\"", what, weft_result_string(rc), msg,
         weft_result_string(want), needle);
  return 0;
}

/* Split halves (host buffers): dispatch started on two handles of the same ids with the
 * inputs overwritten meanwhile, finished in the other order: each equals the plain
 * dispatch; a start on a busy handle fails on every rank and writes nothing; a started
 * combine equals the plain one; finishing nothing succeeds; destroying a handle finishes its
 * call. */
static int run_split(weft_moe_t moe, weft_moe_handle_t h, const shape_t *sh, int rank,
                     const void *ids, const char *x, const float *w, size_t rows) {
  char pn[64];
  snprintf(pn, sizeof pn, "%s %s %s%s", PATTERN_NAME[sh->pattern], weft_dtype_name(sh->t),
           sh->ll ? "low-latency" : "normal", g_dev ? " (device)" : "");
  size_t T = tokens_of(sh, rank), k = sh->k, rb = rows * sh->hidden * weft_dtype_size(sh->t);
  size_t tb = T * sh->hidden * weft_dtype_size(sh->t);
  weft_moe_handle_t h2 = NULL;
  char *want = malloc(rb + 1), *r1 = malloc(rb + 1), *r2 = malloc(rb + 1), *xc = malloc(tb + 1);
  char *y = malloc(tb + 1), *yw = malloc(tb + 1);
  float *ww = malloc(rows * 4 + 4), *w1 = malloc(rows * 4 + 4), *wc = malloc(T * k * 4 + 4);
  if (!want || !r1 || !r2 || !xc || !y || !yw || !ww || !w1 || !wc) FAIL("split buffers");
  memcpy(xc, x, tb), memcpy(wc, w, T * k * 4);
  memset(want, 0x5a, rb), memset(r1, 0x5a, rb), memset(r2, 0x5a, rb);
  memset(ww, 0x5a, rows * 4), memset(w1, 0x5a, rows * 4); /* low latency: unused rows kept */
  if (weft_moe_layout(moe, T ? ids : NULL, T, &h2, NULL) != WEFT_SUCCESS ||
      weft_moe_dispatch(h, xc, wc, want, ww, NULL) != WEFT_SUCCESS ||
      weft_moe_combine(h, want, ww, yw, NULL) != WEFT_SUCCESS)
    FAIL("split %s: the plain calls", pn);
  if (weft_moe_dispatch_start(h, xc, wc, r1, w1, NULL) != WEFT_SUCCESS) FAIL("split: start 1");
  memset(xc, 0x77, tb), memset(wc, 0x77, T * k * 4); /* inputs may be reused at once */
  if (expect_fail(rank, weft_moe_combine_start(h, r1, w1, y, NULL), WEFT_ERR_INVALID_ARG,
                  "not finished", "a start on a busy handle") ||
      expect_fail(rank, weft_moe_dispatch(h, xc, wc, r1, w1, NULL), WEFT_ERR_INVALID_ARG,
                  "not finished", "a plain call on a busy handle"))
    return 1;
  memcpy(xc, x, tb), memcpy(wc, w, T * k * 4);
  if (weft_moe_dispatch_start(h2, xc, wc, r2, NULL, NULL) != WEFT_SUCCESS) FAIL("split: start 2");
  memset(xc, 0x77, tb);
  if (weft_moe_finish(h2) != WEFT_SUCCESS || weft_moe_finish(h) != WEFT_SUCCESS)
    FAIL("split %s: finishing", pn);
  if (memcmp(r1, want, rb) || memcmp(r2, want, rb) || memcmp(w1, ww, rows * 4))
    FAIL("split %s: a started dispatch differs from the plain one", pn);
  memset(y, 0x5a, tb);
  if (weft_moe_combine_start(h, r1, w1, y, NULL) != WEFT_SUCCESS) FAIL("split: combine start");
  memset(r1, 0x77, rb); /* so may the rows */
  if (weft_moe_finish(h) != WEFT_SUCCESS || weft_moe_finish(h) != WEFT_SUCCESS)
    FAIL("split %s: finishing the combine, then nothing", pn);
  if (memcmp(y, yw, tb)) FAIL("split %s: a started combine differs from the plain one", pn);
  if (weft_moe_combine_start(h2, r2, NULL, y, NULL) != WEFT_SUCCESS ||
      weft_moe_handle_destroy(h2) != WEFT_SUCCESS)
    FAIL("split %s: destroying a handle with a call started", pn);
  free(want), free(r1), free(r2), free(xc), free(y), free(yw), free(ww), free(w1), free(wc);
  return 0;
}

/* Host buffers: the byte limits a layer's config checks, at the largest value that fits and
 * one past it, through the argument checks alone (nothing of that size is allocated): a
 * low-latency bound whose blocks total INT64_MAX rows or less (exactly that on one rank: an
 * expert a rank, top-1) is taken, and a layout then answers with those rows while a dispatch
 * into them is refused; hidden times the element size one past SIZE_MAX is refused. */
static int run_overflow_edges(weft_comm_t comm, int rank, int n, const weft_moe_config_t *cfg) {
  weft_moe_config_t c = *cfg;
  weft_moe_t moe = NULL;
  weft_moe_handle_t h = NULL;
  size_t per = (size_t)n, rows = 0; /* rows a token of the bound adds: nranks * local */
  c.num_experts = n, c.topk = 1;
  c.mode = WEFT_MOE_LOW_LATENCY, c.align = 1, c.max_tokens = (size_t)INT64_MAX / per;
  int64_t ids[1] = {0};
  uint16_t x[8] = {0};
  if (weft_moe_create(comm, &c, &moe) != WEFT_SUCCESS) FAIL("the largest low-latency bound");
  if (weft_moe_layout(moe, ids, 1, &h, NULL) != WEFT_SUCCESS || weft_moe_recv_rows(h, &rows) ||
      rows != c.max_tokens * per)
    FAIL("the largest low-latency bound: layout, %zu rows", rows);
  if (expect_fail(rank, weft_moe_dispatch(h, x, NULL, x, NULL, NULL), WEFT_ERR_INVALID_ARG,
                  "do not fit", "a dispatch into INT64_MAX rows"))
    return 1;
  weft_moe_handle_destroy(h);
  weft_moe_destroy(moe);
  c.max_tokens++;
  if (expect_fail(rank, weft_moe_create(comm, &c, &moe), WEFT_ERR_INVALID_ARG,
                  "max_tokens * num_experts overflows", "a low-latency bound past INT64_MAX rows"))
    return 1;
  c = *cfg, c.dtype = WEFT_BF16, c.hidden = SIZE_MAX / 2;
  if (weft_moe_create(comm, &c, &moe) != WEFT_SUCCESS) FAIL("hidden of SIZE_MAX - 1 bytes");
  weft_moe_destroy(moe), moe = NULL;
  c.hidden++;
  if (expect_fail(rank, weft_moe_create(comm, &c, &moe), WEFT_ERR_INVALID_ARG,
                  "hidden times the element size overflows", "hidden past SIZE_MAX bytes"))
    return 1;
  return 0;
}

static int run_errors(weft_comm_t comm, int rank, int n) {
  weft_moe_config_t cfg = WEFT_MOE_CONFIG_INIT;
  cfg.num_experts = 2 * n, cfg.topk = 2, cfg.hidden = 8, cfg.dtype = WEFT_BF16;
  weft_moe_t moe = NULL;
  weft_moe_handle_t h = NULL;
  char who[64];
  snprintf(who, sizeof who, "rank %d", n - 1);
  /* configs: k differs on the last rank; experts not a multiple; low latency */
  weft_moe_config_t c2 = cfg;
  if (rank == n - 1) c2.topk = 3;
  if (n > 1 && expect_fail(rank, weft_moe_create(comm, &c2, &moe), WEFT_ERR_INVALID_ARG,
                           "disagree on topk", "k mismatched"))
    return 1;
  c2 = cfg, c2.num_experts = n > 1 ? 2 * n + 1 : 0;
  if (expect_fail(rank, weft_moe_create(comm, &c2, &moe), WEFT_ERR_INVALID_ARG,
                  "multiple of the rank count", "experts not a multiple"))
    return 1;
  /* a NULL config, a config of the wrong size, an align too large: on one rank, every rank
   * fails (none is left waiting for the others) */
  snprintf(who, sizeof who, "rank %d's config or arguments are invalid", n - 1);
  const char *own = rank == n - 1 ? "config or moe is NULL" : who;
  if (expect_fail(rank, weft_moe_create(comm, rank == n - 1 ? NULL : &cfg, &moe),
                  WEFT_ERR_INVALID_ARG, own, "NULL config"))
    return 1;
  c2 = cfg, c2.size = rank == n - 1 ? 8 : c2.size;
  if (expect_fail(rank, weft_moe_create(comm, &c2, &moe), WEFT_ERR_INVALID_ARG,
                  rank == n - 1 ? "config->size" : who, "config size"))
    return 1;
  c2 = cfg, c2.align = WEFT_MOE_MAX_ALIGN + 1;
  if (expect_fail(rank, weft_moe_create(comm, &c2, &moe), WEFT_ERR_INVALID_ARG,
                  "WEFT_MOE_MAX_ALIGN", "align too large"))
    return 1;
  snprintf(who, sizeof who, "rank %d", n - 1);
  c2 = cfg, c2.mode = WEFT_MOE_LOW_LATENCY;
  if (expect_fail(rank, weft_moe_create(comm, &c2, &moe), WEFT_ERR_INVALID_ARG, "max_tokens",
                  "low latency without a bound"))
    return 1;
  c2.max_tokens = 12, c2.align = 4;
  if (expect_fail(rank, weft_moe_create(comm, &c2, &moe), WEFT_ERR_INVALID_ARG, "normal mode",
                  "low latency with align"))
    return 1;
  c2.align = 1;
  { /* topk one past WEFT_MOE_MAX_TOPK (with experts enough): refused; at it, run_shape runs */
    weft_moe_config_t c3 = cfg;
    c3.topk = WEFT_MOE_MAX_TOPK + 1, c3.num_experts = n * (WEFT_MOE_MAX_TOPK + 1);
    if (expect_fail(rank, weft_moe_create(comm, &c3, &moe), WEFT_ERR_INVALID_ARG,
                    "topk must be in 1..WEFT_MOE_MAX_TOPK", "topk past the limit"))
      return 1;
  }
  if (!g_dev && run_overflow_edges(comm, rank, n, &cfg)) return 1;
  if (moe) FAIL("a refused create left a plan");
  if (weft_moe_create(comm, &cfg, &moe) != WEFT_SUCCESS) FAIL("create");
  /* ids of 12 tokens: out of range on the last rank only (token 9), then repeated there
   * (token 1); every rank's token 2 goes to the last expert, so the last rank gets rows */
  mb_t bids, bx, brx;
  if (mb_new(&bids, 24 * 8) || mb_new(&bx, 12 * 8 * 2)) FAIL("buffers");
  int64_t *ids = (int64_t *)bids.h;
  for (int t = 0; t < 12; t++)
    ids[2 * t] = t % 2, ids[2 * t + 1] = -1;
  ids[2] = 1, ids[3] = 0, ids[4] = 2 * n - 1;
  if (rank == n - 1) ids[19] = 2 * n;
  if (mb_up(&bids)) FAIL("copying in");
  if (expect_fail(rank, weft_moe_layout(moe, mb(&bids), 12, &h, g_st), WEFT_ERR_INVALID_ARG, who,
                  "id out of range") ||
      expect_fail(rank, weft_moe_layout(moe, mb(&bids), 12, &h, g_st), WEFT_ERR_INVALID_ARG,
                  "token 9's choice 1 is expert", "id out of range message"))
    return 1;
  ids[19] = -1;
  if (rank == n - 1) ids[3] = 1;
  if (mb_up(&bids) || expect_fail(rank, weft_moe_layout(moe, mb(&bids), 12, &h, g_st),
                                  WEFT_ERR_INVALID_ARG, "already chose", "repeated id"))
    return 1;
  if (h) FAIL("a refused layout left a handle");
  ids[3] = 0;
  if (mb_up(&bids)) FAIL("copying in");
  { /* low-latency: 12 tokens on the last rank against a bound of 11 */
    weft_moe_t ll = NULL;
    c2.max_tokens = 11;
    if (weft_moe_create(comm, &c2, &ll) != WEFT_SUCCESS) FAIL("low-latency create");
    snprintf(who, sizeof who, "rank %d: 12 tokens exceed the low-latency bound of 11", n - 1);
    weft_result_t rc = weft_moe_layout(ll, mb(&bids), rank == n - 1 ? 12 : 11, &h, g_st);
    if (g_dev && rank != n - 1) { /* device buffers: the refusal comes with the dispatch */
      size_t lrows = 0;
      mb_t blx;
      if (rc != WEFT_SUCCESS || weft_moe_recv_rows(h, &lrows) || mb_new(&blx, lrows * 8 * 2) ||
          weft_moe_dispatch(h, mb(&bx), NULL, mb(&blx), NULL, g_st) != WEFT_SUCCESS)
        FAIL("over the bound: a peer's dispatch");
      rc = weft_moe_finish(h);
      weft_moe_handle_destroy(h), h = NULL;
      mb_free(&blx);
    }
    if (expect_fail(rank, rc, WEFT_ERR_INVALID_ARG, who, "over the bound")) return 1;
    if (h) FAIL("a refused layout left a handle");
    weft_moe_destroy(ll);
    snprintf(who, sizeof who, "rank %d", n - 1);
  }
  if (weft_moe_layout(moe, mb(&bids), 12, &h, g_st) != WEFT_SUCCESS) FAIL("layout");
  size_t rows = 0;
  weft_moe_recv_rows(h, &rows);
  if (rank == n - 1 && rows == 0) FAIL("the last rank receives no rows");
  /* buffers: NULL on the last rank, misaligned on the first, and (device comms) a host
   * buffer on the first; the others' left unchanged */
  if (mb_new(&brx, rows * 8 * 2)) FAIL("buffers");
  uint16_t *x = (uint16_t *)bx.h;
  char *rx0 = malloc(brx.n);
  for (int i = 0; i < 12 * 8; i++)
    x[i] = weft_f32_to_bf16((float)i);
  memset(brx.h, 0x5a, brx.n);
  memcpy(rx0, brx.h, brx.n);
  if (mb_up(&bx) || mb_up(&brx)) FAIL("copying in");
  snprintf(who, sizeof who, "rank %d: recv_x is NULL", n - 1);
  if (expect_fail(rank,
                  weft_moe_dispatch(h, mb(&bx), NULL, rank == n - 1 ? NULL : mb(&brx), NULL, g_st),
                  WEFT_ERR_INVALID_ARG, who, "NULL recv_x") ||
      expect_fail(rank,
                  weft_moe_dispatch(h, (char *)mb(&bx) + (rank == 0), NULL, mb(&brx), NULL, g_st),
                  WEFT_ERR_INVALID_ARG, "rank 0: x is not aligned", "misaligned x"))
    return 1;
  if (g_dev &&
      expect_fail(rank,
                  weft_moe_dispatch(h, rank == 0 ? bx.h : mb(&bx), NULL, mb(&brx), NULL, g_st),
                  WEFT_ERR_INVALID_ARG, "rank 0: x is not device memory", "host x"))
    return 1;
  if (n > 1) { /* rank 0 alone calls the fp8 dispatch (its rows fit in recv_x) */
    mb_t bs;
    if (mb_new(&bs, rows * 4)) FAIL("buffers");
    weft_result_t rc = rank == 0
                           ? weft_moe_dispatch_fp8(h, mb(&bx), NULL, mb(&brx), mb(&bs), NULL, g_st)
                           : weft_moe_dispatch(h, mb(&bx), NULL, mb(&brx), NULL, g_st);
    mb_free(&bs);
    if (expect_fail(rank, rc, WEFT_ERR_INVALID_ARG,
                    "ranks disagree on fp8: rank 0 called weft_moe_dispatch_fp8 and rank 1 "
                    "weft_moe_dispatch",
                    "fp8 on rank 0 only"))
      return 1;
  }
  if (mb_down(&brx) || memcmp(brx.h, rx0, brx.n)) FAIL("a refused dispatch wrote recv_x");
  if (expect_fail(rank, weft_moe_destroy(moe), WEFT_ERR_INVALID_ARG, "still live",
                  "destroy with a live handle"))
    return 1;
  /* and the communicator still works */
  if (weft_moe_dispatch(h, mb(&bx), NULL, mb(&brx), NULL, g_st) != WEFT_SUCCESS || mb_down(&brx))
    FAIL("dispatch after");
  weft_moe_handle_destroy(h);
  weft_moe_destroy(moe);
  mb_free(&bids), mb_free(&bx), mb_free(&brx);
  free(rx0);
  return 0;
}

/* After a failed shape: the communicator's own failure, if it had one (a device kernel that
 * timed out returns early and its caller's data is then wrong; the comm learns of it within
 * its watch's period, so this waits a second for it). */
static void async_said(weft_comm_t comm, int rank) {
  weft_result_t e = WEFT_SUCCESS;
  for (int i = 0; i < 20 && weft_comm_get_async_error(comm, &e) == WEFT_SUCCESS && !e; i++)
    usleep(50000);
  if (e)
    fprintf(stderr, "rank %d: the communicator failed too: %s: %s\n", rank, weft_result_string(e),
            weft_get_last_error(comm));
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  weft_comm_t comm = NULL;
  weft_config_t cfg = WEFT_CONFIG_INIT;
#ifdef WEFT_HAVE_CUDA
  cudaStream_t st = NULL, st2 = NULL;
  if (g_dev && (cudaSetDevice(0) != cudaSuccess ||
                cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
                cudaStreamCreateWithFlags(&st2, cudaStreamNonBlocking) != cudaSuccess))
    FAIL("no GPU stream: %s", cudaGetErrorString(cudaGetLastError()));
  g_st = (weft_stream_t)st, g_st2 = (weft_stream_t)st2, cfg.device = g_dev ? 0 : -1;
#endif
  if (weft_comm_init(&comm, n, id, rank, &cfg) != WEFT_SUCCESS) FAIL("init");
  weft_config_t hcfg = WEFT_CONFIG_INIT; /* device -1: host buffers */
  if (weft_comm_split(comm, 0, rank, &g_host, &hcfg) != WEFT_SUCCESS) FAIL("host comm");
  const weft_dtype_t types[] = {WEFT_F32, WEFT_BF16, WEFT_F16};
  int cases = 0;
  for (int p = 0; p < NPATTERN; p++)
    for (int ti = 0; ti < 3; ti++) {
      shape_t sh = {.pattern = p,
                    .experts = 4 * n,
                    .k = p == SKEWED            ? 4
                         : p == FULL && ti == 0 ? 1
                                                : 2,
                    .align = ti == 1 ? 4 : 1,
                    .hidden = p == DROPPED && ti == 0 ? 260 : 24 + (size_t)ti,
                    .t = types[ti]};
      if (p == UNIFORM && ti == 0) sh.k = 8 < 4 * n ? 8 : 4 * n;
      if (run_shape(comm, rank, n, &sh)) return async_said(comm, rank), 1;
      cases++;
      sh.ll = 1; /* low-latency mode: align stays 1 */
      if (ti != 1 && (run_shape(comm, rank, n, &sh) || !++cases)) return async_said(comm, rank), 1;
    }
  /* the config's limits reached: top-WEFT_MOE_MAX_TOPK of just as many experts or a few more
   * (normal and low-latency), and blocks padded to WEFT_MOE_MAX_ALIGN rows (one past each is
   * refused in run_errors) */
  shape_t top = {.pattern = UNIFORM,
                 .experts = n * ((WEFT_MOE_MAX_TOPK + n - 1) / n),
                 .k = WEFT_MOE_MAX_TOPK,
                 .align = 1,
                 .hidden = 24,
                 .t = WEFT_F32};
  shape_t wide = {.pattern = SKEWED,
                  .experts = 4 * n,
                  .k = 2,
                  .align = WEFT_MOE_MAX_ALIGN,
                  .hidden = 4,
                  .t = WEFT_BF16};
  if (run_shape(comm, rank, n, &top) || !++cases || (top.ll = 1, run_shape(comm, rank, n, &top)) ||
      !++cases || run_shape(comm, rank, n, &wide) || !++cases)
    return async_said(comm, rank), 1;
  if (run_errors(comm, rank, n)) return async_said(comm, rank), 1;
  weft_comm_destroy(g_host);
  weft_comm_destroy(comm);
  if (rank == 0)
    printf("test_moe: %d ranks (%s buffers): %d shapes and the refusals passed\n", n,
           g_dev ? "device" : "host", cases);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  for (int i = 2; i < argc; i++)
    if (strcmp(argv[i], "--device") == 0)
      g_dev = 1;
    else
      setenv("WEFT_TRANSPORT", argv[i], 1);
  if (n < 1) return 2;
#ifndef WEFT_HAVE_CUDA
  if (g_dev) return printf("test_moe: --device needs a CUDA build: skipped\n"), 77;
#endif
  return launch_local(n, rank_main, NULL, 120) ? 1 : 0;
}
