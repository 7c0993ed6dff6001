/* The CUDA back end of the example GPT (examples/common/ops_cuda.cu) against the CPU's
 * (ops_cpu.c): every operation on random inputs, at sizes that are not multiples of a warp
 * or a tile, with the backward ones adding into non-zero gradients; each result must match
 * the CPU's to 1e-4 of the largest value (f32; only the order of sums differs). Then the
 * products again with bf16 inputs: to 1e-2 (bf16 keeps 8 significant bits, so each input
 * moves by up to 2^-9 of itself). Exits 77 (skipped) where no CUDA device can be opened.
 * The mixture of experts' operations (moe_ops.h) likewise, their top-k choices exactly.
 * usage: test_ops */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"

typedef struct {
  gpt_ops_t g;
  unsigned long long seed;
  void *dev[64];
  int ndev;
  int bad;
  int bf16;    /* products on bf16 copies: the back end keeps att in its own form (ops.h) */
  double tol;  /* of the largest value */
  double seen; /* the worst difference met */
} ctx_t;

static float rnd(ctx_t *x) {
  x->seed = x->seed * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((x->seed >> 40) & 0xffffff) / (float)0xffffff * 2.0f - 1.0f;
}

/* n random floats on the host (scaled), and their copy on the device */
static float *host(ctx_t *x, size_t n, float scale) {
  float *h = malloc(n * sizeof *h);
  for (size_t i = 0; h && i < n; i++)
    h[i] = rnd(x) * scale;
  if (!h) x->bad = 1;
  return h;
}

static void *dev(ctx_t *x, const void *h, size_t bytes) {
  void *d = x->g.vt->alloc(x->g.ctx, bytes);
  if (!d || x->ndev == 64) return x->bad = 1, d;
  x->g.vt->put(x->g.ctx, d, h, bytes);
  x->dev[x->ndev++] = d;
  return d;
}

/* Like dev, with the copy `shift` floats into its allocation (shift 1: a pointer 4 bytes past
 * an alignment, as slices of the model's packed arrays can be). */
static float *dev_at(ctx_t *x, const float *h, size_t n, int shift) {
  char *d = x->g.vt->alloc(x->g.ctx, (n + (size_t)shift) * sizeof *h);
  if (!d || x->ndev == 64) return x->bad = 1, (float *)d;
  x->dev[x->ndev++] = d;
  float *p = (float *)d + shift;
  x->g.vt->put(x->g.ctx, p, h, n * sizeof *h);
  return p;
}

/* The device's n values (floats, or bf16 where half) against the CPU's floats: 0, or 1 with
 * a line naming them. */
static int same_as(ctx_t *x, const char *what, const void *d, const float *h, size_t n, int half) {
  float *got = malloc(n * sizeof *got);
  double most = 0, worst = 0;
  if (!got || x->g.vt->get(x->g.ctx, got, d, n * (half ? 2 : 4))) {
    free(got);
    return printf("test_ops: %s: reading the device back failed\n", what), 1;
  }
  for (size_t i = n; half && i-- > 0;) { /* in place, from the end: bf16 is a float's top half */
    uint32_t u = (uint32_t)((const uint16_t *)got)[i] << 16;
    memcpy(&got[i], &u, 4);
  }
  for (size_t i = 0; i < n; i++)
    most = fabs(h[i]) > most ? fabs(h[i]) : most;
  for (size_t i = 0; i < n; i++) {
    double e = fabs((double)got[i] - h[i]) / (most > 0 ? most : 1);
    worst = e > worst || e != e ? e : worst;
  }
  free(got);
  x->seen = worst > x->seen ? worst : x->seen;
  if (worst <= x->tol) return 0;
  return printf("test_ops: %s: worst difference %.3g of the largest value\n", what, worst), 1;
}

static int same(ctx_t *x, const char *what, const float *d, const float *h, size_t n) {
  return same_as(x, what, d, h, n, 0);
}

static void release(ctx_t *x) {
  for (int i = 0; i < x->ndev; i++)
    x->g.vt->release(x->g.ctx, x->dev[i]);
  x->ndev = 0;
}

#define CPU(f, ...) gpt_ops_cpu.vt->f(NULL, __VA_ARGS__)
#define GPU(f, ...) x->g.vt->f(x->g.ctx, __VA_ARGS__)

static int check_norm(ctx_t *x, int N, int C) {
  size_t nc = (size_t)N * C;
  float *in = host(x, nc, 2), *w = host(x, C, 1), *b = host(x, C, 1), *out = host(x, nc, 1);
  float *mean = host(x, N, 1), *rstd = host(x, N, 1), *dout = host(x, nc, 1);
  float *din = host(x, nc, 1), *dw = host(x, C, 1), *db = host(x, C, 1);
  int bad = x->bad;
  if (!bad) {
    float *d_in = dev(x, in, nc * 4), *d_w = dev(x, w, C * 4), *d_b = dev(x, b, C * 4);
    float *d_out = dev(x, out, nc * 4), *d_mean = dev(x, mean, N * 4),
          *d_rstd = dev(x, rstd, N * 4);
    float *d_dout = dev(x, dout, nc * 4), *d_din = dev(x, din, nc * 4), *d_dw = dev(x, dw, C * 4);
    float *d_db = dev(x, db, C * 4);
    CPU(layernorm_fwd, out, mean, rstd, in, w, b, N, C);
    GPU(layernorm_fwd, d_out, d_mean, d_rstd, d_in, d_w, d_b, N, C);
    CPU(layernorm_bwd, din, dw, db, dout, in, w, mean, rstd, N, C);
    GPU(layernorm_bwd, d_din, d_dw, d_db, d_dout, d_in, d_w, d_mean, d_rstd, N, C);
    bad = x->bad || same(x, "layernorm_fwd out", d_out, out, nc) ||
          same(x, "layernorm_fwd rstd", d_rstd, rstd, N) ||
          same(x, "layernorm_bwd din", d_din, din, nc) ||
          same(x, "layernorm_bwd dw", d_dw, dw, C) || same(x, "layernorm_bwd db", d_db, db, C);
  }
  release(x);
  free(in), free(w), free(b), free(out), free(mean), free(rstd), free(dout), free(din), free(dw),
      free(db);
  return bad;
}

static int check_matmul(ctx_t *x, int N, int C, int OC, int bias, int shift) {
  size_t nc = (size_t)N * C, no = (size_t)N * OC, oc = (size_t)OC * C;
  float *in = host(x, nc, 1), *w = host(x, oc, 1), *b = host(x, OC, 1), *out = host(x, no, 1);
  float *dout = host(x, no, 1), *din = host(x, nc, 1), *dw = host(x, oc, 1), *db = host(x, OC, 1);
  int bad = x->bad;
  if (!bad) {
    float *d_in = dev_at(x, in, nc, shift), *d_w = dev_at(x, w, oc, shift),
          *d_b = dev_at(x, b, OC, shift);
    float *d_out = dev_at(x, out, no, shift), *d_dout = dev(x, dout, no * 4),
          *d_din = dev(x, din, nc * 4);
    float *d_dw = dev(x, dw, oc * 4), *d_db = dev(x, db, OC * 4);
    CPU(matmul_fwd, out, in, w, bias ? b : NULL, N, C, OC);
    GPU(matmul_fwd, d_out, d_in, d_w, bias ? d_b : NULL, N, C, OC);
    CPU(matmul_bwd, din, dw, bias ? db : NULL, dout, in, w, N, C, OC);
    GPU(matmul_bwd, d_din, d_dw, bias ? d_db : NULL, d_dout, d_in, d_w, N, C, OC);
    bad = x->bad || same(x, "matmul_fwd", d_out, out, no) ||
          same(x, "matmul_bwd din", d_din, din, nc) || same(x, "matmul_bwd dw", d_dw, dw, oc) ||
          same(x, "matmul_bwd dbias", d_db, db, OC);
    CPU(bias_fwd, out, b, N, OC), GPU(bias_fwd, d_out, d_b, N, OC);
    CPU(bias_bwd, db, dout, N, OC), GPU(bias_bwd, d_db, d_dout, N, OC);
    bad = bad || same(x, "bias_fwd", d_out, out, no) || same(x, "bias_bwd", d_db, db, OC);
  }
  release(x);
  free(in), free(w), free(b), free(out), free(dout), free(din), free(dw), free(db);
  return bad;
}

static int check_attention(ctx_t *x, int B, int T, int C, int NH) {
  size_t q = (size_t)B * T * 3 * C, o = (size_t)B * T * C, a = (size_t)B * NH * T * T;
  float *qkv = host(x, q, 1), *out = host(x, o, 1), *att = host(x, a, 1), *dout = host(x, o, 1);
  float *dqkv = host(x, q, 1), *scratch = host(x, T, 1);
  /* with bf16 the fused kernels keep log-sum-exps in att where the head size suits them
   * (ops.h): their softmax shows in out and dqkv alone */
  int bad = x->bad, hs = C / NH, lse = x->bf16 && hs % 16 == 0 && hs <= 128;
  if (!bad) {
    float *d_qkv = dev(x, qkv, q * 4), *d_out = dev(x, out, o * 4), *d_att = dev(x, att, a * 4);
    float *d_dout = dev(x, dout, o * 4), *d_dqkv = dev(x, dqkv, q * 4);
    CPU(attention_fwd, out, att, qkv, B, T, C, NH);
    GPU(attention_fwd, d_out, d_att, d_qkv, B, T, C, NH);
    CPU(attention_bwd, dqkv, dout, qkv, out, att, B, T, C, NH, scratch);
    GPU(attention_bwd, d_dqkv, d_dout, d_qkv, d_out, d_att, B, T, C, NH, NULL);
    bad = x->bad || same(x, "attention_fwd out", d_out, out, o) ||
          (!lse && same_as(x, "attention_fwd att", d_att, att, a, x->bf16)) ||
          same(x, "attention_bwd dqkv", d_dqkv, dqkv, q);
  }
  release(x);
  free(qkv), free(out), free(att), free(dout), free(dqkv), free(scratch);
  return bad;
}

/* embeddings, GELU, sums, cross-entropy and AdamW */
static int check_rest(ctx_t *x, int B, int T, int C, int V) {
  size_t N = (size_t)B * T, nc = N * C, nv = N * V, vc = (size_t)V * C, tc = (size_t)T * C;
  int *tok = malloc(N * sizeof *tok);
  float *wte = host(x, vc, 1), *wpe = host(x, tc, 1), *out = host(x, nc, 1), *dwte = host(x, vc, 1);
  float *dwpe = host(x, tc, 1), *a = host(x, nc, 3), *b = host(x, nc, 1), *logits = host(x, nv, 4);
  float *probs = host(x, nv, 1), *losses = host(x, N, 1), *dlog = host(x, nv, 1);
  float *p = host(x, nc, 1), *m = host(x, nc, 0.1f), *v = host(x, nc, 0.1f);
  int bad = x->bad || !tok;
  for (size_t i = 0; !bad && i < nc; i++)
    v[i] = fabsf(v[i]); /* a second moment is never negative */
  for (size_t i = 0; !bad && i < N; i++)
    tok[i] = (int)((rnd(x) + 1.0f) * 0.5f * (float)(V - 1));
  if (!bad) {
    int *d_tok = dev(x, tok, N * sizeof *tok);
    float *d_wte = dev(x, wte, vc * 4), *d_wpe = dev(x, wpe, tc * 4), *d_out = dev(x, out, nc * 4);
    float *d_dwte = dev(x, dwte, vc * 4), *d_dwpe = dev(x, dwpe, tc * 4), *d_a = dev(x, a, nc * 4);
    float *d_b = dev(x, b, nc * 4), *d_logits = dev(x, logits, nv * 4),
          *d_probs = dev(x, probs, nv * 4);
    float *d_losses = dev(x, losses, N * 4), *d_dlog = dev(x, dlog, nv * 4),
          *d_p = dev(x, p, nc * 4);
    float *d_m = dev(x, m, nc * 4), *d_v = dev(x, v, nc * 4);
    CPU(encoder_fwd, out, tok, wte, wpe, B, T, C),
        GPU(encoder_fwd, d_out, d_tok, d_wte, d_wpe, B, T, C);
    CPU(encoder_bwd, dwte, dwpe, a, tok, B, T, C),
        GPU(encoder_bwd, d_dwte, d_dwpe, d_a, d_tok, B, T, C);
    bad = x->bad || same(x, "encoder_fwd", d_out, out, nc) ||
          same(x, "encoder_bwd dwte", d_dwte, dwte, vc) ||
          same(x, "encoder_bwd dwpe", d_dwpe, dwpe, tc);
    CPU(gelu_bwd, b, a, out, (int)nc), GPU(gelu_bwd, d_b, d_a, d_out, (int)nc);
    CPU(gelu_fwd, out, a, (int)nc), GPU(gelu_fwd, d_out, d_a, (int)nc);
    bad = bad || same(x, "gelu_fwd", d_out, out, nc) || same(x, "gelu_bwd", d_b, b, nc);
    CPU(add, out, a, b, (int)nc), GPU(add, d_out, d_a, d_b, (int)nc);
    CPU(accumulate, a, b, (int)nc), GPU(accumulate, d_a, d_b, (int)nc);
    bad = bad || same(x, "add", d_out, out, nc) || same(x, "accumulate", d_a, a, nc);
    float lc = CPU(xent_fwd, losses, probs, logits, tok, (int)N, V);
    float lg = GPU(xent_fwd, d_losses, d_probs, d_logits, d_tok, (int)N, V);
    CPU(xent_bwd, dlog, probs, tok, (int)N, V, 0.5f),
        GPU(xent_bwd, d_dlog, d_probs, d_tok, (int)N, V, 0.5f);
    bad = bad || same(x, "xent_fwd losses", d_losses, losses, N) ||
          same(x, "xent_fwd probs", d_probs, probs, nv) || same(x, "xent_bwd", d_dlog, dlog, nv);
    if (fabsf(lc - lg) > x->tol * fabsf(lc))
      bad = 1, printf("test_ops: xent_fwd mean %g, want %g\n", lg, lc);
    adamw_t o = {.lr = 0.01f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    for (int s = 1; s <= 3; s++) /* the gradient: b */
      CPU(adamw, &o, s, p, b, m, v, nc), GPU(adamw, &o, s, d_p, d_b, d_m, d_v, nc);
    bad = bad || same(x, "adamw params", d_p, p, nc) || same(x, "adamw m", d_m, m, nc) ||
          same(x, "adamw v", d_v, v, nc);
  }
  release(x);
  free(tok), free(wte), free(wpe), free(out), free(dwte), free(dwpe), free(a), free(b),
      free(logits);
  free(probs), free(losses), free(dlog), free(p), free(m), free(v);
  return bad;
}

#define MCPU(f, ...) moe_ops_cpu.f(NULL, __VA_ARGS__)
#define MGPU(f, ...) x->g.moe->f(x->g.ctx, __VA_ARGS__)

static int same_ints(ctx_t *x, const char *what, const int *d, const int *h, size_t n) {
  int *got = malloc(n * sizeof *got), bad = !got || x->g.vt->get(x->g.ctx, got, d, n * sizeof *got);
  for (size_t i = 0; !bad && i < n; i++)
    bad = got[i] != h[i];
  free(got);
  return bad ? printf("test_ops: %s differ\n", what), 1 : 0;
}

/* The mixture of experts' operations (moe_ops.h): the gate on the CPU's probabilities (so
 * that both choose alike), its backward, the rows' backward, gather and scatter of R rows. */
static int check_moe(ctx_t *x, int B, int T, int E, int k, float cap, int C, int R) {
  size_t N = (size_t)B * T, ne = N * E, nk = N * k, nc = N * C, rc = (size_t)R * C;
  float *p = host(x, ne, 4), *w = host(x, nk, 1), *f = host(x, (size_t)B * E, 1);
  float *y = host(x, nc, 1), *dp = host(x, ne, 1), *gr = host(x, rc, 1), *dy = host(x, rc, 1);
  float *ry = host(x, rc, 1), *rw = host(x, R, 1), *slot = host(x, R, 1), *rows = host(x, rc, 1);
  int *ids = malloc(nk * sizeof *ids), *rtok = malloc((size_t)R * sizeof *rtok);
  int bad = x->bad || !ids || !rtok;
  for (int r = 0; !bad && r < R; r++) {
    slot[r] = (float)(int)((rnd(x) + 1.0f) * 0.5f * (float)(k - 1) + 0.5f);
    rtok[r] = (int)((rnd(x) + 1.0f) * 0.5f * (float)(nk - 1));
  }
  if (!bad) {
    float *d_p = dev(x, p, ne * 4);
    MCPU(softmax, p, (int)N, E), MGPU(softmax, d_p, (int)N, E);
    bad = same(x, "moe softmax", d_p, p, ne);
    x->g.vt->put(x->g.ctx, d_p, p, ne * 4);
    int *d_ids = dev(x, ids, nk * sizeof *ids), *d_rtok = dev(x, rtok, (size_t)R * sizeof *rtok);
    float *d_w = dev(x, w, nk * 4), *d_f = dev(x, f, (size_t)B * E * 4), *d_y = dev(x, y, nc * 4);
    float *d_dp = dev(x, dp, ne * 4), *d_gr = dev(x, gr, rc * 4), *d_dy = dev(x, dy, rc * 4);
    float *d_ry = dev(x, ry, rc * 4), *d_rw = dev(x, rw, (size_t)R * 4);
    float *d_slot = dev(x, slot, (size_t)R * 4), *d_rows = dev(x, rows, rc * 4);
    MCPU(gate, ids, w, f, p, B, T, E, k, cap), MGPU(gate, d_ids, d_w, d_f, d_p, B, T, E, k, cap);
    double bc = MCPU(balance, f, p, B, T, E), bg = MGPU(balance, d_f, d_p, B, T, E);
    bad = bad || x->bad || same_ints(x, "moe gate ids", d_ids, ids, nk) ||
          same(x, "moe gate w", d_w, w, nk) || same(x, "moe gate f", d_f, f, (size_t)B * E);
    if (fabs(bc - bg) > x->tol * fabs(bc))
      bad = 1, printf("test_ops: moe balance %g, want %g\n", bg, bc);
    MCPU(gate_bwd, dp, p, f, ids, y, (int)N, T, E, k, C, 0.3f);
    MGPU(gate_bwd, d_dp, d_p, d_f, d_ids, d_y, (int)N, T, E, k, C, 0.3f);
    MCPU(rows_bwd, gr, dy, ry, rw, slot, R, C),
        MGPU(rows_bwd, d_gr, d_dy, d_ry, d_rw, d_slot, R, C);
    bad = bad || same(x, "moe gate_bwd", d_dp, dp, ne) ||
          same(x, "moe rows_bwd gr", d_gr, gr, rc) || same(x, "moe rows_bwd dy", d_dy, dy, rc);
    MCPU(gather, rows, rw, y, w, rtok, R, C, k),
        MGPU(gather, d_rows, d_rw, d_y, d_w, d_rtok, R, C, k);
    MCPU(scatter, y, ry, rw, rtok, R, C, k, (int)N),
        MGPU(scatter, d_y, d_ry, d_rw, d_rtok, R, C, k, (int)N);
    bad = bad || same(x, "moe gather rows", d_rows, rows, rc) ||
          same(x, "moe gather rw", d_rw, rw, R) || same(x, "moe scatter", d_y, y, nc);
  }
  release(x);
  free(p), free(w), free(f), free(y), free(dp), free(gr), free(dy), free(ry), free(rw), free(slot),
      free(rows), free(ids), free(rtok);
  return bad;
}

/* The cases of one back end: all of them, or (products) the matrix products only. */
static int cases(ctx_t *x, int products, int *n) {
  int bad = 0;
  /* odd sizes: partial warps, tiles and blocks; and a model-sized case */
  /* N, C: the norm's backward keeps 4, 8, 24 or 32 columns a lane in registers, or (C over
   * 1024) none */
  int norms[][2] = {{1, 5}, {37, 67}, {64, 256}, {100, 768}, {300, 1000}, {3, 1500}};
  for (int i = 0; i < 6 && !products; i++, ++*n)
    bad += check_norm(x, norms[i][0], norms[i][1]);
  /* N, C, OC, bias, shift (pointers off 16-byte alignment: the bias product's fallback) */
  int mats[][5] = {{1, 3, 5, 1, 0},
                   {37, 67, 45, 1, 0},
                   {37, 67, 45, 0, 0},
                   {256, 192, 576, 1, 0},
                   {256, 192, 576, 1, 1}};
  for (int i = 0; i < 5; i++, ++*n)
    bad += check_matmul(x, mats[i][0], mats[i][1], mats[i][2], mats[i][3], mats[i][4]);
  /* B, T, C, NH: head sizes 4, 8, 16, 48, 64 (one tile of 64 queries, several, a part) */
  int atts[][4] = {{1, 1, 4, 1},    {2, 13, 24, 3},   {3, 64, 64, 4},
                   {2, 100, 96, 2}, {2, 200, 128, 2}, {1, 256, 256, 4}};
  for (int i = 0; i < 6; i++, ++*n)
    bad += check_attention(x, atts[i][0], atts[i][1], atts[i][2], atts[i][3]);
  int rest[][4] = {{1, 1, 3, 2}, {2, 13, 37, 13}, {4, 64, 128, 1000}};
  for (int i = 0; i < 3 && !products; i++, ++*n)
    bad += check_rest(x, rest[i][0], rest[i][1], rest[i][2], rest[i][3]);
  /* sequences, tokens, experts, k, capacity (0: dropless), channels, rows */
  int moes[][7] = {{1, 1, 2, 1, 0, 3, 1}, {2, 13, 5, 2, 3, 37, 40}, {4, 64, 64, 8, 0, 96, 300}};
  for (int i = 0; i < 3 && !products; i++, ++*n)
    bad += check_moe(x, moes[i][0], moes[i][1], moes[i][2], moes[i][3], (float)moes[i][4],
                     moes[i][5], moes[i][6]);
  return bad;
}

int main(void) {
  char why[256];
  int bad = 0, n = 0, nb = 0, badb = 0;
  for (int bf16 = 0; bf16 < 2; bf16++) {
    ctx_t x = {.seed = 7, .bf16 = bf16, .tol = bf16 ? 1e-2 : 1e-4};
    if (gpt_ops_cuda_open(&x.g, 0, bf16, why, sizeof why))
      return printf("test_ops: skipped: %s\n", why), 77;
    if (bf16) {
      badb = cases(&x, 1, &nb);
      if (x.seen < 1e-5) /* f32 products would match to about 1e-7 */
        badb++, printf("test_ops: the bf16 products match f32 too well (%.2g)\n", x.seen);
    } else
      bad = cases(&x, 0, &n);
    gpt_ops_close(&x.g);
  }
  printf("test_ops: %d of %d cases match the CPU within 1e-4; with bf16 products %d of %d "
         "within 1e-2\n",
         n - bad, n, nb - badb, nb);
  return bad || badb ? 1 : 0;
}
