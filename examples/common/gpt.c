/* The GPT model: where each parameter and activation lives, and the forward and backward
 * passes as sequences of ops.h calls. See gpt.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "moe_layer.h"
#include "ops.h"

/* A layer's tensor sizes in floats, in enum order (q: this shard's channels of attention,
 * 4q its hidden units of the MLP; x: the MLPs here, g: the gate's size). */
static void layer_sizes(const gpt_t *m, size_t *s) {
  size_t c = (size_t)m->c.channels, q = c / (size_t)m->tp, g = (size_t)m->c.experts * c;
  size_t x = m->local_experts ? (size_t)m->local_experts : 1;
  size_t v[P_NLAYER] = {c, c, 3 * q * c,     3 * q,     c * q,         c,    c,
                        c, g, x * 4 * q * c, x * 4 * q, x * 4 * q * c, x * c};
  memcpy(s, v, sizeof v);
}

size_t gpt_param(const gpt_t *m, int l, int p) {
  size_t s[P_NLAYER], at = m->layer_first + (size_t)l * m->layer_size;
  layer_sizes(m, s);
  for (int i = 0; i < p; i++)
    at += s[i];
  return at;
}

int gpt_tp_summed(int p) {
  return p == P_LN1W || p == P_LN1B || p == P_ATTB || p == P_LN2W || p == P_LN2B || p == P_PROJB;
}

/* Activations of one forward: per layer, then the head. Offsets in floats from m->act. X1
 * and X2 are the gathered inputs of the column-parallel products (sequence parallel only);
 * FULL the gathered last residual, DFULL its gradient; PART the row-parallel products'
 * partial sums, and in the backward the gathered output gradients. G* and R* are the
 * mixture of experts' (moe_act_t), the head's M* its backward scratch (moe_scratch_t). */
enum {
  A_LN1,
  A_LN1M,
  A_LN1R,
  A_X1,
  A_QKV,
  A_ATTY,
  A_ATT,
  A_ATTP,
  A_RES2,
  A_LN2,
  A_LN2M,
  A_LN2R,
  A_X2,
  A_FCH,
  A_FCG,
  A_GPROB,
  A_GW,
  A_GF,
  A_RX,
  A_RW,
  A_RH,
  A_RG,
  A_RY,
  A_FCP,
  A_RES3,
  A_NLAYER
};
enum {
  H_ENC,
  H_FULL,
  H_LNF,
  H_LNFM,
  H_LNFR,
  H_LOGITS,
  H_PROBS,
  H_LOSSES,
  H_DRES,
  H_DFULL,
  H_DLN,
  H_PART,
  H_DQKV,
  H_DATTY,
  H_DFCH,
  H_DFCG,
  H_DLOGITS,
  H_SCRATCH,
  H_MDY,
  H_MDX,
  H_MGR,
  H_MSLOT,
  H_MSLOTS,
  H_MDW,
  H_MDP,
  H_MY,
  H_MYX,
  H_N
};

/* Rows of the norms and residuals: this rank's share of N with sequence parallelism. */
static int rows_here(const gpt_t *m, int N) { return m->sp ? N / m->tp : N; }

static size_t most(size_t a, size_t b) { return a > b ? a : b; }

static void act_sizes(const gpt_t *m, size_t *layer, size_t *head) {
  const gpt_config_t *c = &m->c;
  size_t N = (size_t)m->batch * c->seq, C = (size_t)c->channels, V = (size_t)c->vocab;
  size_t R = (size_t)rows_here(m, (int)N), q = C / (size_t)m->tp, X = m->sp ? N * C : 0;
  size_t att = (size_t)m->batch * (c->heads / m->tp) * c->seq * c->seq;
  /* the dense MLP's hidden rows, or the experts' (M rows, G gate entries, K choices) */
  size_t moe = m->local_experts > 0, M = m->max_rows, F = moe ? 0 : 4 * N * q;
  size_t G = moe ? N * (size_t)c->experts : 0, K = moe ? N * (size_t)c->topk : 0;
  size_t l[A_NLAYER] = {
      R * C, R, R,         X,         3 * N * q, N * q, att,  R * C, R * C,
      R * C, R, R,         X,         F,         F,     G,    K,     moe * m->batch * c->experts,
      M * C, M, 4 * M * C, 4 * M * C, M * C,     R * C, R * C};
  /* clang-format off */
  size_t h[H_N] = {N * C, X, N * C, N, N, N * V, N * V, N, N * C, N * C, N * C,
                   most(N * C, M * C), 3 * N * q, N * q, most(4 * N * q, 4 * M * C),
                   most(4 * N * q, 4 * M * C), N * V, (size_t)c->seq,
                   M * C, M * C, M * C, M, K, K, G, moe * N * C, moe * N * C};
  /* clang-format on */
  memcpy(layer, l, sizeof l);
  memcpy(head, h, sizeof h);
}

/* Offset of activation a of layer l (l = c.layers: the head's array a). */
static float *act(const gpt_t *m, int l, int a) {
  size_t ls[A_NLAYER], hs[H_N], per = 0, at = 0;
  act_sizes(m, ls, hs);
  for (int i = 0; i < A_NLAYER; i++)
    per += ls[i];
  if (l < m->c.layers) {
    at = (size_t)l * per;
    for (int i = 0; i < a; i++)
      at += ls[i];
  } else {
    at = (size_t)m->c.layers * per;
    for (int i = 0; i < a; i++)
      at += hs[i];
  }
  return m->act + at;
}

int gpt_init(gpt_t *m, const gpt_config_t *c, int batch) {
  return gpt_init_tp(m, c, batch, 1, 0, 0);
}

/* The split's sizes, activations and (with experts) routing arrays. */
static int init(gpt_t *m, const gpt_config_t *c, int batch) {
  size_t s[P_NLAYER], ls[A_NLAYER], hs[H_N], L = (size_t)c->layers;
  size_t N = (size_t)batch * (size_t)c->seq, k = (size_t)c->topk, El = (size_t)m->local_experts;
  m->c = *c, m->batch = batch;
  if (El) m->max_rows = (size_t)m->ep * N * (k < El ? k : El);
  layer_sizes(m, s);
  for (int i = 0; i < P_NLAYER; i++)
    m->layer_size += s[i];
  for (int i = 0; i < P_FCW; i++)
    m->shared += s[i];
  m->layer_first = ((size_t)c->vocab + (size_t)c->seq) * (size_t)c->channels;
  m->lnf = m->layer_first + L * m->layer_size;
  m->nparams = m->lnf + 2 * (size_t)c->channels;
  act_sizes(m, ls, hs);
  for (int i = 0; i < A_NLAYER; i++)
    m->nact += ls[i] * L;
  for (int i = 0; i < H_N; i++)
    m->nact += hs[i];
  m->act = calloc(m->nact, sizeof *m->act);
  if (!m->act) return -1;
  if (!El) return 0;
  m->ids = malloc(sizeof *m->ids * L * N * k);
  m->rtok = malloc(sizeof *m->rtok * L * (m->max_rows ? m->max_rows : 1));
  m->counts = calloc(L * El * MOE_MICRO, sizeof *m->counts);
  m->offsets = calloc(L * El * MOE_MICRO, sizeof *m->offsets);
  m->rows = calloc(L * MOE_MICRO, sizeof *m->rows);
  if (!m->ids || !m->rtok || !m->counts || !m->offsets || !m->rows) return gpt_free(m), -1;
  for (size_t i = 0; i < L * N * k; i++) /* a valid routing for gpt_io_replay */
    m->ids[i] = (int)((i / k + i % k) % (size_t)c->experts);
  return 0;
}

static int config_ok(const gpt_config_t *c, int batch) {
  int moe = c->experts > 0;
  return c->vocab >= 2 && c->seq >= 1 && c->channels >= 1 && c->layers >= 1 && c->heads >= 1 &&
         c->channels % c->heads == 0 && batch >= 1 && c->experts >= 0 && c->capacity >= 0 &&
         c->aux >= 0 && (!moe || (c->topk >= 1 && c->topk <= c->experts && c->topk <= c->channels));
}

int gpt_init_tp(gpt_t *m, const gpt_config_t *c, int batch, int tp, int tp_rank, int sp) {
  memset(m, 0, sizeof *m);
  if (!config_ok(c, batch) || tp < 1 || c->heads % tp || tp_rank < 0 || tp_rank >= tp ||
      (sp && tp == 1) || (tp > 1 && c->experts))
    return -1;
  m->tp = tp, m->tp_rank = tp_rank, m->sp = sp, m->ep = 1, m->local_experts = c->experts;
  return init(m, c, batch);
}

int gpt_init_ep(gpt_t *m, const gpt_config_t *c, int batch, int ep, int ep_rank) {
  memset(m, 0, sizeof *m);
  if (!config_ok(c, batch) || c->experts < 1 || ep < 1 || c->experts % ep || ep_rank < 0 ||
      ep_rank >= ep)
    return -1;
  m->tp = 1, m->ep = ep, m->ep_rank = ep_rank, m->local_experts = c->experts / ep;
  return init(m, c, batch);
}

void gpt_free(gpt_t *m) {
  free(m->act), free(m->ids), free(m->rtok), free(m->counts), free(m->offsets), free(m->rows);
  m->act = NULL, m->ids = m->rtok = NULL, m->counts = m->offsets = NULL, m->rows = NULL;
}

/* rows x cols of src (row stride sstride, from column c0) into dst, packed. */
static void copy_cols(float *dst, const float *src, size_t rows, size_t cols, size_t sstride,
                      size_t c0) {
  for (size_t r = 0; r < rows; r++)
    memcpy(dst + r * cols, src + r * sstride + c0, cols * sizeof *dst);
}

void gpt_shard(const gpt_t *full, const gpt_t *part, const float *fp, float *pp) {
  size_t C = (size_t)full->c.channels, q = C / (size_t)part->tp, r = (size_t)part->tp_rank;
  size_t x = (size_t)part->ep_rank; /* expert shards: the x-th run of each expert tensor */
  memcpy(pp, fp, full->layer_first * sizeof *pp);
  memcpy(pp + part->lnf, fp + full->lnf, 2 * C * sizeof *pp);
  for (int l = 0; l < full->c.layers; l++)
    for (int p = 0; p < P_NLAYER; p++) {
      const float *f = fp + gpt_param(full, l, p);
      float *o = pp + gpt_param(part, l, p);
      size_t n = gpt_param(part, l, p + 1) - gpt_param(part, l, p);
      if (p == P_QKVW || p == P_QKVB) /* this shard's heads of q, of k and of v */
        for (size_t j = 0, w = p == P_QKVW ? C : 1; j < 3; j++)
          memcpy(o + j * q * w, f + (j * C + r * q) * w, q * w * sizeof *o);
      else if (p >= P_FCW && part->ep > 1)
        memcpy(o, f + x * n, n * sizeof *o);
      else if (p == P_FCW || p == P_FCB) /* its hidden units */
        memcpy(o, f + r * n, n * sizeof *o);
      else if (p == P_ATTW || p == P_PROJW) /* its input columns */
        copy_cols(o, f, C, n / C, n / C * (size_t)part->tp, r * (n / C));
      else
        memcpy(o, f, n * sizeof *o);
    }
}

static double uniform(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

static float normal(uint64_t *s, float std) {
  double u = uniform(s), v = uniform(s);
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v)) * std;
}

void gpt_init_params(const gpt_t *m, float *params, unsigned long long seed) {
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
  float proj = 0.02f / sqrtf(2.0f * (float)m->c.layers);
  for (size_t i = 0; i < m->layer_first; i++)
    params[i] = normal(&s, 0.02f);
  for (int l = 0; l < m->c.layers; l++)
    for (int p = 0; p < P_NLAYER; p++) {
      float *t = params + gpt_param(m, l, p);
      size_t n = gpt_param(m, l, p + 1) - gpt_param(m, l, p);
      for (size_t i = 0; i < n; i++)
        t[i] = p == P_LN1W || p == P_LN2W                  ? 1.0f
               : p == P_QKVW || p == P_FCW || p == P_GATEW ? normal(&s, 0.02f)
               : p == P_ATTW || p == P_PROJW               ? normal(&s, proj)
                                                           : 0.0f;
    }
  for (int i = 0; i < m->c.channels; i++)
    params[m->lnf + (size_t)i] = 1.0f, params[m->lnf + (size_t)m->c.channels + (size_t)i] = 0.0f;
}

static const float *flat_params(void *arg, int block) {
  gpt_flat_t *f = arg;
  return f->params + (block == GPT_EMBED   ? 0
                      : block == GPT_FINAL ? f->m->lnf
                                           : gpt_param(f->m, block, 0));
}

static float *flat_grads(void *arg, int block) {
  gpt_flat_t *f = arg;
  return f->grads + (block == GPT_EMBED   ? 0
                     : block == GPT_FINAL ? f->m->lnf
                                          : gpt_param(f->m, block, 0));
}

gpt_io_t gpt_flat_io(gpt_flat_t *flat) {
  return (gpt_io_t){.params = flat_params, .grads = flat_grads, .arg = flat};
}

/* Tensor p of the layer block at w. */
static size_t in_layer(const gpt_t *m, int p) { return gpt_param(m, 0, p) - gpt_param(m, 0, 0); }

/* ---- Megatron's four points, as hooks (tp > 1) ---- */

static void gather_all(const gpt_t *m, const gpt_io_t *io, const float *shard, float *full,
                       size_t n) {
  io->gather(io->arg, shard, full, n);
  for (int i = 0; i < m->tp; i++)
    io->gather_next(io->arg);
}

/* out[N][OC] = x . w^T + b, x this rank's rows of the input: with sp, the others' are
 * gathered into full (which the backward reads) while the product of those here runs. */
static void column_fwd(const gpt_t *m, const gpt_io_t *io, float *out, const float *x, float *full,
                       const float *w, const float *b, int N, int OC) {
  int C = m->c.channels, R = rows_here(m, N);
  if (!m->sp) return op_matmul_fwd(out, x, w, b, N, C, OC);
  size_t n = (size_t)R * C;
  io->gather(io->arg, x, full, n);
  for (int i = 0; i < m->tp; i++) {
    int s = io->gather_next(io->arg);
    if (s < 0 || s >= m->tp) continue; /* a failed gather: the trainer reports it */
    op_matmul_fwd(out + (size_t)s * R * OC, s == m->tp_rank ? x : full + s * n, w, b, R, C, OC);
  }
}

/* dx = the group's sum of d(x . w^T)/dx (this rank's rows with sp); dw, db this shard's. */
static void column_bwd(const gpt_t *m, const gpt_io_t *io, float *dx, float *part, float *dw,
                       float *db, const float *dout, const float *x, const float *w, int N,
                       int OC) {
  int C = m->c.channels;
  if (m->tp == 1) return op_matmul_bwd(dx, dw, db, dout, x, w, N, C, OC);
  memset(part, 0, sizeof(float) * (size_t)N * C);
  op_matmul_bwd(part, dw, db, dout, x, w, N, C, OC);
  io->reduce(io->arg, part, dx, (size_t)rows_here(m, N) * C);
}

/* out[R][C] = the group's sum of x . w^T (x: [N][IC], this shard's columns) + b. */
static void row_fwd(const gpt_t *m, const gpt_io_t *io, float *out, float *part, const float *x,
                    const float *w, const float *b, int N, int IC) {
  int C = m->c.channels, R = rows_here(m, N);
  if (m->tp == 1) return op_matmul_fwd(out, x, w, b, N, IC, C);
  op_matmul_fwd(part, x, w, NULL, N, IC, C);
  io->reduce(io->arg, part, out, (size_t)R * C);
  op_bias_fwd(out, b, R, C);
}

/* The backward of row_fwd from dout [R][C] (gathered into full first with sp). */
static void row_bwd(const gpt_t *m, const gpt_io_t *io, float *dx, float *full, float *dw,
                    float *db, const float *dout, const float *x, const float *w, int N, int IC) {
  int C = m->c.channels, R = rows_here(m, N);
  if (m->tp == 1) return op_matmul_bwd(dx, dw, db, dout, x, w, N, IC, C);
  op_bias_bwd(db, dout, R, C);
  if (m->sp) gather_all(m, io, dout, full, (size_t)R * C), dout = full;
  op_matmul_bwd(dx, dw, NULL, dout, x, w, N, IC, C);
}

/* Layer l's mixture-of-experts activations, and the backward's scratch. */
static moe_act_t moe_acts(const gpt_t *m, int l) {
  size_t N = (size_t)m->batch * m->c.seq, El = (size_t)m->local_experts;
  return (moe_act_t){.x = act(m, l, A_LN2),
                     .probs = act(m, l, A_GPROB),
                     .w = act(m, l, A_GW),
                     .f = act(m, l, A_GF),
                     .rx = act(m, l, A_RX),
                     .rw = act(m, l, A_RW),
                     .rh = act(m, l, A_RH),
                     .rg = act(m, l, A_RG),
                     .ry = act(m, l, A_RY),
                     .ids = m->ids + (size_t)l * N * (size_t)m->c.topk,
                     .rtok = m->rtok + (size_t)l * m->max_rows,
                     .counts = m->counts + (size_t)l * El * MOE_MICRO,
                     .offsets = m->offsets + (size_t)l * El * MOE_MICRO,
                     .rows = m->rows + (size_t)l * MOE_MICRO};
}

static moe_scratch_t moe_scratch(const gpt_t *m) {
  int L = m->c.layers;
  return (moe_scratch_t){.dy = act(m, L, H_MDY),
                         .dx = act(m, L, H_MDX),
                         .gr = act(m, L, H_MGR),
                         .dh = act(m, L, H_DFCH),
                         .dg = act(m, L, H_DFCG),
                         .rslot = act(m, L, H_MSLOT),
                         .slots = act(m, L, H_MSLOTS),
                         .dw = act(m, L, H_MDW),
                         .dp = act(m, L, H_MDP),
                         .y = act(m, L, H_MY),
                         .yx = act(m, L, H_MYX)};
}

/* ---- the passes ---- */

float gpt_forward(gpt_t *m, const gpt_io_t *io, const int *tokens, const int *targets, int B) {
  const gpt_config_t *c = &m->c;
  int T = c->seq, C = c->channels, N = B * T, L = c->layers, R = rows_here(m, N);
  int q = C / m->tp, NH = c->heads / m->tp;
  const float *emb = io->params(io->arg, GPT_EMBED), *wte = emb, *wpe = emb + (size_t)c->vocab * C;
  float *res = act(m, L, H_ENC), *part = act(m, L, H_PART), aux = 0;
  op_encoder_fwd(res, tokens, wte, wpe, B, T, C);
  res += (size_t)(m->sp ? m->tp_rank : 0) * R * C; /* sequence parallel: this rank's rows */
  for (int l = 0; l < L; l++) {
    const float *lw = io->params(io->arg, l);
#define W(p) (lw + in_layer(m, (p)))
#define A(a) act(m, l, (a))
    op_layernorm_fwd(A(A_LN1), A(A_LN1M), A(A_LN1R), res, W(P_LN1W), W(P_LN1B), R, C);
    column_fwd(m, io, A(A_QKV), A(A_LN1), A(A_X1), W(P_QKVW), W(P_QKVB), N, 3 * q);
    op_attention_fwd(A(A_ATTY), A(A_ATT), A(A_QKV), B, T, q, NH);
    row_fwd(m, io, A(A_ATTP), part, A(A_ATTY), W(P_ATTW), W(P_ATTB), N, q);
    op_add(A(A_RES2), res, A(A_ATTP), R * C);
    op_layernorm_fwd(A(A_LN2), A(A_LN2M), A(A_LN2R), A(A_RES2), W(P_LN2W), W(P_LN2B), R, C);
    if (m->local_experts) {
      moe_act_t ma = moe_acts(m, l);
      aux += moe_forward(m, io, l, &ma, lw, A(A_FCP), B);
    } else {
      column_fwd(m, io, A(A_FCH), A(A_LN2), A(A_X2), W(P_FCW), W(P_FCB), N, 4 * q);
      op_gelu_fwd(A(A_FCG), A(A_FCH), N * 4 * q);
      row_fwd(m, io, A(A_FCP), part, A(A_FCG), W(P_PROJW), W(P_PROJB), N, 4 * q);
    }
    op_add(A(A_RES3), A(A_RES2), A(A_FCP), R * C);
    res = A(A_RES3);
  }
  /* the head runs on every row on every shard (sequence parallel: gathered first) */
  if (m->sp) gather_all(m, io, res, act(m, L, H_FULL), (size_t)R * C), res = act(m, L, H_FULL);
  const float *fin = io->params(io->arg, GPT_FINAL);
  op_layernorm_fwd(act(m, L, H_LNF), act(m, L, H_LNFM), act(m, L, H_LNFR), res, fin, fin + C, N, C);
  op_matmul_fwd(act(m, L, H_LOGITS), act(m, L, H_LNF), wte, NULL, N, C, c->vocab);
  return aux + op_xent_fwd(act(m, L, H_LOSSES), act(m, L, H_PROBS), act(m, L, H_LOGITS), targets, N,
                           c->vocab);
}

static void done(const gpt_io_t *io, int block) {
  if (io->done) io->done(io->arg, block);
}

void gpt_backward(gpt_t *m, const gpt_io_t *io, const int *tokens, const int *targets, int B,
                  float scale) {
  const gpt_config_t *c = &m->c;
  int T = c->seq, C = c->channels, N = B * T, L = c->layers, V = c->vocab, R = rows_here(m, N);
  int q = C / m->tp, NH = c->heads / m->tp;
  size_t nc = (size_t)N * C, rc = (size_t)R * C, nq = (size_t)N * q;
  const float *wte = io->params(io->arg, GPT_EMBED), *fin = io->params(io->arg, GPT_FINAL);
  float *gemb = io->grads(io->arg, GPT_EMBED), *gfin = io->grads(io->arg, GPT_FINAL);
  float *dres = act(m, L, H_DRES), *dln = act(m, L, H_DLN), *dlogits = act(m, L, H_DLOGITS);
  float *dqkv = act(m, L, H_DQKV), *datty = act(m, L, H_DATTY), *dfch = act(m, L, H_DFCH);
  float *dfcg = act(m, L, H_DFCG), *scratch = act(m, L, H_SCRATCH), *part = act(m, L, H_PART);
  float *dfull = act(m, L, H_DFULL);
  const float *last = L ? act(m, L - 1, A_RES3) : act(m, L, H_ENC);
  if (m->sp) last = act(m, L, H_FULL);
  memset(dlogits, 0, sizeof(float) * (size_t)N * V);
  memset(dln, 0, sizeof(float) * nc);
  memset(dfull, 0, sizeof(float) * nc);
  op_xent_bwd(dlogits, act(m, L, H_PROBS), targets, N, V, scale / (float)N);
  op_matmul_bwd(dln, gemb, NULL, dlogits, act(m, L, H_LNF), wte, N, C, V); /* tied head */
  op_layernorm_bwd(dfull, gfin, gfin + C, dln, last, fin, act(m, L, H_LNFM), act(m, L, H_LNFR), N,
                   C);
  memcpy(dres, dfull + (size_t)(m->sp ? m->tp_rank : 0) * rc, sizeof(float) * rc);
  done(io, GPT_FINAL);
  for (int l = L - 1; l >= 0; l--) {
    const float *lw = io->params(io->arg, l);
    float *lg = io->grads(io->arg, l);
#define G(p) (lg + in_layer(m, (p)))
    const float *res = l ? act(m, l - 1, A_RES3) : act(m, L, H_ENC) + (m->sp ? m->tp_rank : 0) * rc;
    const float *x1 = m->sp ? A(A_X1) : A(A_LN1), *x2 = m->sp ? A(A_X2) : A(A_LN2);
    memset(dfcg, 0, sizeof(float) * 4 * nq);
    memset(dfch, 0, sizeof(float) * 4 * nq);
    memset(dln, 0, sizeof(float) * rc);
    memset(datty, 0, sizeof(float) * nq);
    memset(dqkv, 0, sizeof(float) * 3 * nq);
    /* MLP branch: res3 = res2 + proj(gelu(fc(ln2(res2)))), or the experts' */
    if (m->local_experts) {
      moe_act_t ma = moe_acts(m, l);
      moe_scratch_t ms = moe_scratch(m);
      moe_backward(m, io, l, &ma, &ms, lw, lg, dres, dln, B, scale);
    } else {
      row_bwd(m, io, dfcg, part, G(P_PROJW), G(P_PROJB), dres, A(A_FCG), W(P_PROJW), N, 4 * q);
      op_gelu_bwd(dfch, A(A_FCH), dfcg, N * 4 * q);
      column_bwd(m, io, dln, part, G(P_FCW), G(P_FCB), dfch, x2, W(P_FCW), N, 4 * q);
    }
    op_layernorm_bwd(dres, G(P_LN2W), G(P_LN2B), dln, A(A_RES2), W(P_LN2W), A(A_LN2M), A(A_LN2R), R,
                     C);
    /* attention branch: res2 = res + attproj(attention(qkv(ln1(res)))) */
    memset(dln, 0, sizeof(float) * rc);
    row_bwd(m, io, datty, part, G(P_ATTW), G(P_ATTB), dres, A(A_ATTY), W(P_ATTW), N, q);
    op_attention_bwd(dqkv, datty, A(A_QKV), A(A_ATT), B, T, q, NH, scratch);
    column_bwd(m, io, dln, part, G(P_QKVW), G(P_QKVB), dqkv, x1, W(P_QKVW), N, 3 * q);
    op_layernorm_bwd(dres, G(P_LN1W), G(P_LN1B), dln, res, W(P_LN1W), A(A_LN1M), A(A_LN1R), R, C);
    done(io, l);
  }
  if (m->sp) gather_all(m, io, dres, dfull, rc), dres = dfull;
  op_encoder_bwd(gemb, gemb + (size_t)V * C, dres, tokens, B, T, C);
  done(io, GPT_EMBED);
}

/* The hooks of one layer's pass on scratch of the right sizes: tensor parallel (forward and
 * backward call them in the same order: a gather with sp, a reduce, twice), or the
 * experts'. */
static void replay_layer(const gpt_t *m, const gpt_io_t *io, int N, int l, int backward) {
  int L = m->c.layers;
  if (m->local_experts) {
    moe_act_t ma = moe_acts(m, l);
    moe_scratch_t ms = moe_scratch(m);
    return moe_replay(m, io, l, &ma, &ms, N / m->c.seq, backward);
  }
  size_t rc = (size_t)rows_here(m, N) * m->c.channels;
  float *part = act(m, L, H_PART), *out = act(m, L, H_DLN), *full = act(m, L, H_DFULL);
  for (int i = 0; i < 2 && m->tp > 1; i++) { /* attention, then the MLP (reversed: the same) */
    if (m->sp) gather_all(m, io, out, full, rc);
    io->reduce(io->arg, part, out, rc);
  }
}

void gpt_io_replay(const gpt_t *m, const gpt_io_t *io, int B, int backward) {
  int L = m->c.layers, N = B * m->c.seq;
  size_t rc = (size_t)rows_here(m, N) * m->c.channels;
  float *full = act(m, L, H_DFULL), *shard = act(m, L, H_DLN);
  if (!backward) {
    io->params(io->arg, GPT_EMBED);
    for (int l = 0; l < L; l++)
      io->params(io->arg, l), replay_layer(m, io, N, l, 0);
    if (m->sp) gather_all(m, io, shard, full, rc);
    io->params(io->arg, GPT_FINAL);
    return;
  }
  io->params(io->arg, GPT_EMBED), io->params(io->arg, GPT_FINAL);
  io->grads(io->arg, GPT_EMBED), io->grads(io->arg, GPT_FINAL);
  done(io, GPT_FINAL);
  for (int l = L - 1; l >= 0; l--) {
    io->params(io->arg, l), io->grads(io->arg, l);
    replay_layer(m, io, N, l, 1);
    done(io, l);
  }
  if (m->sp) gather_all(m, io, shard, full, rc);
  done(io, GPT_EMBED);
}

void adamw_step(const adamw_t *o, int step, float *params, const float *grads, float *m, float *v,
                size_t n) {
  float c1 = 1.0f - powf(o->beta1, (float)step), c2 = 1.0f - powf(o->beta2, (float)step);
  for (size_t i = 0; i < n; i++) {
    m[i] = o->beta1 * m[i] + (1.0f - o->beta1) * grads[i];
    v[i] = o->beta2 * v[i] + (1.0f - o->beta2) * grads[i] * grads[i];
    float mh = m[i] / c1, vh = v[i] / c2;
    params[i] -= o->lr * (mh / (sqrtf(vh) + o->eps) + o->weight_decay * params[i]);
  }
}
