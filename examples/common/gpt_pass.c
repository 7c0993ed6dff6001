/* The example GPT's forward and backward passes as sequences of ops.h calls, with the
 * tensor-parallel points and the experts' layers reached through gpt_io_t's hooks, and their
 * replay without math. See gpt.h. */
#include <string.h>

#include "gpt.h"
#include "gpt_act.h"
#include "moe_layer.h"
#include "ops.h"

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
  int C = m->c.channels, R = gpt_rows_here(m, N);
  if (!m->sp) return OP(matmul_fwd, out, x, w, b, N, C, OC);
  size_t n = (size_t)R * C;
  io->gather(io->arg, x, full, n);
  for (int i = 0; i < m->tp; i++) {
    int s = io->gather_next(io->arg);
    if (s < 0 || s >= m->tp) continue; /* a failed gather: the trainer reports it */
    OP(matmul_fwd, out + (size_t)s * R * OC, s == m->tp_rank ? x : full + s * n, w, b, R, C, OC);
  }
}

/* dx = the group's sum of d(x . w^T)/dx (this rank's rows with sp); dw, db this shard's. */
static void column_bwd(const gpt_t *m, const gpt_io_t *io, float *dx, float *part, float *dw,
                       float *db, const float *dout, const float *x, const float *w, int N,
                       int OC) {
  int C = m->c.channels;
  if (m->tp == 1) return OP(matmul_bwd, dx, dw, db, dout, x, w, N, C, OC);
  OP(zero, part, sizeof(float) * (size_t)N * C);
  OP(matmul_bwd, part, dw, db, dout, x, w, N, C, OC);
  io->reduce(io->arg, part, dx, (size_t)gpt_rows_here(m, N) * C);
}

/* out[R][C] = the group's sum of x . w^T (x: [N][IC], this shard's columns) + b. */
static void row_fwd(const gpt_t *m, const gpt_io_t *io, float *out, float *part, const float *x,
                    const float *w, const float *b, int N, int IC) {
  int C = m->c.channels, R = gpt_rows_here(m, N);
  if (m->tp == 1) return OP(matmul_fwd, out, x, w, b, N, IC, C);
  OP(matmul_fwd, part, x, w, NULL, N, IC, C);
  io->reduce(io->arg, part, out, (size_t)R * C);
  OP(bias_fwd, out, b, R, C);
}

/* The backward of row_fwd from dout [R][C] (gathered into full first with sp). */
static void row_bwd(const gpt_t *m, const gpt_io_t *io, float *dx, float *full, float *dw,
                    float *db, const float *dout, const float *x, const float *w, int N, int IC) {
  int C = m->c.channels, R = gpt_rows_here(m, N);
  if (m->tp == 1) return OP(matmul_bwd, dx, dw, db, dout, x, w, N, IC, C);
  OP(bias_bwd, db, dout, R, C);
  if (m->sp) gather_all(m, io, dout, full, (size_t)R * C), dout = full;
  OP(matmul_bwd, dx, dw, NULL, dout, x, w, N, IC, C);
}

/* Layer l's mixture-of-experts activations, and the backward's scratch. */
static moe_act_t moe_acts(const gpt_t *m, int l) {
  size_t N = (size_t)m->batch * m->c.seq, El = (size_t)m->local_experts;
  return (moe_act_t){.x = gpt_act(m, l, A_LN2),
                     .probs = gpt_act(m, l, A_GPROB),
                     .w = gpt_act(m, l, A_GW),
                     .f = gpt_act(m, l, A_GF),
                     .rx = gpt_act(m, l, A_RX),
                     .rw = gpt_act(m, l, A_RW),
                     .rh = gpt_act(m, l, A_RH),
                     .rg = gpt_act(m, l, A_RG),
                     .ry = gpt_act(m, l, A_RY),
                     .ids = m->ids + (size_t)l * N * (size_t)m->c.topk,
                     .rtok = m->rtok + (size_t)l * m->max_rows,
                     .counts = m->counts + (size_t)l * El * MOE_MICRO,
                     .offsets = m->offsets + (size_t)l * El * MOE_MICRO,
                     .rows = m->rows + (size_t)l * MOE_MICRO};
}

static moe_scratch_t moe_scratch(const gpt_t *m) {
  int L = m->c.layers;
  return (moe_scratch_t){.dy = gpt_act(m, L, H_MDY),
                         .dx = gpt_act(m, L, H_MDX),
                         .gr = gpt_act(m, L, H_MGR),
                         .dh = gpt_act(m, L, H_DFCH),
                         .dg = gpt_act(m, L, H_DFCG),
                         .rslot = gpt_act(m, L, H_MSLOT),
                         .slots = gpt_act(m, L, H_MSLOTS),
                         .dp = gpt_act(m, L, H_MDP),
                         .y = gpt_act(m, L, H_MY),
                         .yx = gpt_act(m, L, H_MYX)};
}

/* ---- the passes ---- */

float gpt_forward(gpt_t *m, const gpt_io_t *io, const int *tokens, const int *targets, int B) {
  const gpt_config_t *c = &m->c;
  int T = c->seq, C = c->channels, N = B * T, L = c->layers, R = gpt_rows_here(m, N);
  int q = C / m->tp, NH = c->heads / m->tp;
  const float *emb = io->params(io->arg, GPT_EMBED), *wte = emb, *wpe = emb + (size_t)c->vocab * C;
  float *res = gpt_act(m, L, H_ENC), *part = gpt_act(m, L, H_PART), aux = 0;
  OP(put, m->tok, tokens, sizeof(int) * (size_t)N);
  OP(put, m->tgt, targets, sizeof(int) * (size_t)N);
  OP(encoder_fwd, res, m->tok, wte, wpe, B, T, C);
  res += (size_t)(m->sp ? m->tp_rank : 0) * R * C; /* sequence parallel: this rank's rows */
  for (int l = 0; l < L; l++) {
    const float *lw = io->params(io->arg, l);
#define W(p) (lw + in_layer(m, (p)))
#define A(a) gpt_act(m, l, (a))
    OP(layernorm_fwd, A(A_LN1), A(A_LN1M), A(A_LN1R), res, W(P_LN1W), W(P_LN1B), R, C);
    column_fwd(m, io, A(A_QKV), A(A_LN1), A(A_X1), W(P_QKVW), W(P_QKVB), N, 3 * q);
    OP(attention_fwd, A(A_ATTY), A(A_ATT), A(A_QKV), B, T, q, NH);
    row_fwd(m, io, A(A_ATTP), part, A(A_ATTY), W(P_ATTW), W(P_ATTB), N, q);
    OP(add, A(A_RES2), res, A(A_ATTP), R * C);
    OP(layernorm_fwd, A(A_LN2), A(A_LN2M), A(A_LN2R), A(A_RES2), W(P_LN2W), W(P_LN2B), R, C);
    if (m->local_experts) {
      moe_act_t ma = moe_acts(m, l);
      aux += moe_forward(m, io, l, &ma, lw, A(A_FCP), B);
    } else {
      column_fwd(m, io, A(A_FCH), A(A_LN2), A(A_X2), W(P_FCW), W(P_FCB), N, 4 * q);
      OP(gelu_fwd, A(A_FCG), A(A_FCH), N * 4 * q);
      row_fwd(m, io, A(A_FCP), part, A(A_FCG), W(P_PROJW), W(P_PROJB), N, 4 * q);
    }
    OP(add, A(A_RES3), A(A_RES2), A(A_FCP), R * C);
    res = A(A_RES3);
  }
  /* the head runs on every row on every shard (sequence parallel: gathered first) */
  if (m->sp)
    gather_all(m, io, res, gpt_act(m, L, H_FULL), (size_t)R * C), res = gpt_act(m, L, H_FULL);
  const float *fin = io->params(io->arg, GPT_FINAL);
  OP(layernorm_fwd, gpt_act(m, L, H_LNF), gpt_act(m, L, H_LNFM), gpt_act(m, L, H_LNFR), res, fin,
     fin + C, N, C);
  OP(matmul_fwd, gpt_act(m, L, H_LOGITS), gpt_act(m, L, H_LNF), wte, NULL, N, C, c->vocab);
  return aux + OP(xent_fwd, gpt_act(m, L, H_LOSSES), gpt_act(m, L, H_PROBS),
                  gpt_act(m, L, H_LOGITS), m->tgt, N, c->vocab);
}

static void done(const gpt_io_t *io, int block) {
  if (io->done) io->done(io->arg, block);
}

void gpt_backward(gpt_t *m, const gpt_io_t *io, int B, float scale) {
  const gpt_config_t *c = &m->c;
  int T = c->seq, C = c->channels, N = B * T, L = c->layers, V = c->vocab, R = gpt_rows_here(m, N);
  int q = C / m->tp, NH = c->heads / m->tp;
  size_t nc = (size_t)N * C, rc = (size_t)R * C, nq = (size_t)N * q;
  const float *wte = io->params(io->arg, GPT_EMBED), *fin = io->params(io->arg, GPT_FINAL);
  float *gemb = io->grads(io->arg, GPT_EMBED), *gfin = io->grads(io->arg, GPT_FINAL);
  float *dres = gpt_act(m, L, H_DRES), *dln = gpt_act(m, L, H_DLN),
        *dlogits = gpt_act(m, L, H_DLOGITS);
  float *dqkv = gpt_act(m, L, H_DQKV), *datty = gpt_act(m, L, H_DATTY),
        *dfch = gpt_act(m, L, H_DFCH);
  float *dfcg = gpt_act(m, L, H_DFCG), *scratch = gpt_act(m, L, H_SCRATCH),
        *part = gpt_act(m, L, H_PART);
  float *dfull = gpt_act(m, L, H_DFULL);
  const float *last = L ? gpt_act(m, L - 1, A_RES3) : gpt_act(m, L, H_ENC);
  if (m->sp) last = gpt_act(m, L, H_FULL);
  OP(zero, dlogits, sizeof(float) * (size_t)N * V);
  OP(zero, dln, sizeof(float) * nc);
  OP(zero, dfull, sizeof(float) * nc);
  OP(xent_bwd, dlogits, gpt_act(m, L, H_PROBS), m->tgt, N, V, scale / (float)N);
  OP(matmul_bwd, dln, gemb, NULL, dlogits, gpt_act(m, L, H_LNF), wte, N, C, V); /* tied head */
  OP(layernorm_bwd, dfull, gfin, gfin + C, dln, last, fin, gpt_act(m, L, H_LNFM),
     gpt_act(m, L, H_LNFR), N, C);
  OP(copy, dres, dfull + (size_t)(m->sp ? m->tp_rank : 0) * rc, sizeof(float) * rc);
  done(io, GPT_FINAL);
  for (int l = L - 1; l >= 0; l--) {
    const float *lw = io->params(io->arg, l);
    float *lg = io->grads(io->arg, l);
#define G(p) (lg + in_layer(m, (p)))
    const float *res =
        l ? gpt_act(m, l - 1, A_RES3) : gpt_act(m, L, H_ENC) + (m->sp ? m->tp_rank : 0) * rc;
    const float *x1 = m->sp ? A(A_X1) : A(A_LN1), *x2 = m->sp ? A(A_X2) : A(A_LN2);
    OP(zero, dfcg, sizeof(float) * 4 * nq);
    OP(zero, dfch, sizeof(float) * 4 * nq);
    OP(zero, dln, sizeof(float) * rc);
    OP(zero, datty, sizeof(float) * nq);
    OP(zero, dqkv, sizeof(float) * 3 * nq);
    /* MLP branch: res3 = res2 + proj(gelu(fc(ln2(res2)))), or the experts' */
    if (m->local_experts) {
      moe_act_t ma = moe_acts(m, l);
      moe_scratch_t ms = moe_scratch(m);
      moe_backward(m, io, l, &ma, &ms, lw, lg, dres, dln, B, scale);
    } else {
      row_bwd(m, io, dfcg, part, G(P_PROJW), G(P_PROJB), dres, A(A_FCG), W(P_PROJW), N, 4 * q);
      OP(gelu_bwd, dfch, A(A_FCH), dfcg, N * 4 * q);
      column_bwd(m, io, dln, part, G(P_FCW), G(P_FCB), dfch, x2, W(P_FCW), N, 4 * q);
    }
    OP(layernorm_bwd, dres, G(P_LN2W), G(P_LN2B), dln, A(A_RES2), W(P_LN2W), A(A_LN2M), A(A_LN2R),
       R, C);
    /* attention branch: res2 = res + attproj(attention(qkv(ln1(res)))) */
    OP(zero, dln, sizeof(float) * rc);
    row_bwd(m, io, datty, part, G(P_ATTW), G(P_ATTB), dres, A(A_ATTY), W(P_ATTW), N, q);
    OP(attention_bwd, dqkv, datty, A(A_QKV), A(A_ATTY), A(A_ATT), B, T, q, NH, scratch);
    column_bwd(m, io, dln, part, G(P_QKVW), G(P_QKVB), dqkv, x1, W(P_QKVW), N, 3 * q);
    OP(layernorm_bwd, dres, G(P_LN1W), G(P_LN1B), dln, res, W(P_LN1W), A(A_LN1M), A(A_LN1R), R, C);
    done(io, l);
  }
  if (m->sp) gather_all(m, io, dres, dfull, rc), dres = dfull;
  OP(encoder_bwd, gemb, gemb + (size_t)V * C, dres, m->tok, B, T, C);
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
  size_t rc = (size_t)gpt_rows_here(m, N) * m->c.channels;
  float *part = gpt_act(m, L, H_PART), *out = gpt_act(m, L, H_DLN), *full = gpt_act(m, L, H_DFULL);
  for (int i = 0; i < 2 && m->tp > 1; i++) { /* attention, then the MLP (reversed: the same) */
    if (m->sp) gather_all(m, io, out, full, rc);
    io->reduce(io->arg, part, out, rc);
  }
}

void gpt_io_replay(const gpt_t *m, const gpt_io_t *io, int B, int backward) {
  int L = m->c.layers, N = B * m->c.seq;
  size_t rc = (size_t)gpt_rows_here(m, N) * m->c.channels;
  float *full = gpt_act(m, L, H_DFULL), *shard = gpt_act(m, L, H_DLN);
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
