/* The GPT model: where each parameter and activation lives, and the forward and backward
 * passes as sequences of ops.h calls. See gpt.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "ops.h"

/* A layer's tensor sizes in floats, in enum order. */
static void layer_sizes(int C, size_t *s) {
  size_t c = (size_t)C;
  size_t v[P_NLAYER] = {c, c, 3 * c * c, 3 * c, c * c, c, c, c, 4 * c * c, 4 * c, 4 * c * c, c};
  memcpy(s, v, sizeof v);
}

size_t gpt_param(const gpt_t *m, int l, int p) {
  size_t s[P_NLAYER], at = m->layer_first + (size_t)l * m->layer_size;
  layer_sizes(m->c.channels, s);
  for (int i = 0; i < p; i++)
    at += s[i];
  return at;
}

/* Activations of one forward: per layer, then the head. Offsets in floats from m->act. */
enum {
  A_LN1,
  A_LN1M,
  A_LN1R,
  A_QKV,
  A_ATTY,
  A_ATT,
  A_ATTP,
  A_RES2,
  A_LN2,
  A_LN2M,
  A_LN2R,
  A_FCH,
  A_FCG,
  A_FCP,
  A_RES3,
  A_NLAYER
};
enum {
  H_ENC,
  H_LNF,
  H_LNFM,
  H_LNFR,
  H_LOGITS,
  H_PROBS,
  H_LOSSES,
  H_DRES,
  H_DLN,
  H_DQKV,
  H_DATTY,
  H_DFCH,
  H_DFCG,
  H_DLOGITS,
  H_SCRATCH,
  H_N
};

static void act_sizes(const gpt_config_t *c, int B, size_t *layer, size_t *head) {
  size_t N = (size_t)B * c->seq, C = (size_t)c->channels, V = (size_t)c->vocab;
  size_t att = (size_t)B * c->heads * c->seq * c->seq;
  size_t l[A_NLAYER] = {N * C, N, N, 3 * N * C, N * C,     att,   N * C, N * C,
                        N * C, N, N, 4 * N * C, 4 * N * C, N * C, N * C};
  size_t h[H_N] = {N * C,     N * C, N,         N,         N * V, N * V,         N, N * C, N * C,
                   3 * N * C, N * C, 4 * N * C, 4 * N * C, N * V, (size_t)c->seq};
  memcpy(layer, l, sizeof l);
  memcpy(head, h, sizeof h);
}

/* Offset of activation a of layer l (l = c.layers: the head's array a). */
static float *act(const gpt_t *m, int l, int a) {
  size_t ls[A_NLAYER], hs[H_N], per = 0, at = 0;
  act_sizes(&m->c, m->batch, ls, hs);
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
  memset(m, 0, sizeof *m);
  if (c->vocab < 2 || c->seq < 1 || c->channels < 1 || c->layers < 1 || c->heads < 1 ||
      c->channels % c->heads || batch < 1)
    return -1;
  size_t s[P_NLAYER], ls[A_NLAYER], hs[H_N];
  m->c = *c, m->batch = batch;
  layer_sizes(c->channels, s);
  for (int i = 0; i < P_NLAYER; i++)
    m->layer_size += s[i];
  m->layer_first = ((size_t)c->vocab + (size_t)c->seq) * (size_t)c->channels;
  m->lnf = m->layer_first + (size_t)c->layers * m->layer_size;
  m->nparams = m->lnf + 2 * (size_t)c->channels;
  act_sizes(c, batch, ls, hs);
  for (int i = 0; i < A_NLAYER; i++)
    m->nact += ls[i] * (size_t)c->layers;
  for (int i = 0; i < H_N; i++)
    m->nact += hs[i];
  m->act = calloc(m->nact, sizeof *m->act);
  return m->act ? 0 : -1;
}

void gpt_free(gpt_t *m) {
  free(m->act);
  m->act = NULL;
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
        t[i] = p == P_LN1W || p == P_LN2W    ? 1.0f
               : p == P_QKVW || p == P_FCW   ? normal(&s, 0.02f)
               : p == P_ATTW || p == P_PROJW ? normal(&s, proj)
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

float gpt_forward(gpt_t *m, const gpt_io_t *io, const int *tokens, const int *targets, int B) {
  const gpt_config_t *c = &m->c;
  int T = c->seq, C = c->channels, N = B * T, L = c->layers;
  const float *emb = io->params(io->arg, GPT_EMBED), *wte = emb, *wpe = emb + (size_t)c->vocab * C;
  float *res = act(m, L, H_ENC);
  op_encoder_fwd(res, tokens, wte, wpe, B, T, C);
  for (int l = 0; l < L; l++) {
    const float *lw = io->params(io->arg, l);
#define W(p) (lw + in_layer(m, (p)))
#define A(a) act(m, l, (a))
    op_layernorm_fwd(A(A_LN1), A(A_LN1M), A(A_LN1R), res, W(P_LN1W), W(P_LN1B), N, C);
    op_matmul_fwd(A(A_QKV), A(A_LN1), W(P_QKVW), W(P_QKVB), N, C, 3 * C);
    op_attention_fwd(A(A_ATTY), A(A_ATT), A(A_QKV), B, T, C, c->heads);
    op_matmul_fwd(A(A_ATTP), A(A_ATTY), W(P_ATTW), W(P_ATTB), N, C, C);
    op_add(A(A_RES2), res, A(A_ATTP), N * C);
    op_layernorm_fwd(A(A_LN2), A(A_LN2M), A(A_LN2R), A(A_RES2), W(P_LN2W), W(P_LN2B), N, C);
    op_matmul_fwd(A(A_FCH), A(A_LN2), W(P_FCW), W(P_FCB), N, C, 4 * C);
    op_gelu_fwd(A(A_FCG), A(A_FCH), N * 4 * C);
    op_matmul_fwd(A(A_FCP), A(A_FCG), W(P_PROJW), W(P_PROJB), N, 4 * C, C);
    op_add(A(A_RES3), A(A_RES2), A(A_FCP), N * C);
    res = A(A_RES3);
  }
  const float *fin = io->params(io->arg, GPT_FINAL);
  op_layernorm_fwd(act(m, L, H_LNF), act(m, L, H_LNFM), act(m, L, H_LNFR), res, fin, fin + C, N, C);
  op_matmul_fwd(act(m, L, H_LOGITS), act(m, L, H_LNF), wte, NULL, N, C, c->vocab);
  return op_xent_fwd(act(m, L, H_LOSSES), act(m, L, H_PROBS), act(m, L, H_LOGITS), targets, N,
                     c->vocab);
}

static void done(const gpt_io_t *io, int block) {
  if (io->done) io->done(io->arg, block);
}

void gpt_backward(gpt_t *m, const gpt_io_t *io, const int *tokens, const int *targets, int B,
                  float scale) {
  const gpt_config_t *c = &m->c;
  int T = c->seq, C = c->channels, N = B * T, L = c->layers, V = c->vocab;
  const float *wte = io->params(io->arg, GPT_EMBED), *fin = io->params(io->arg, GPT_FINAL);
  float *gemb = io->grads(io->arg, GPT_EMBED), *gfin = io->grads(io->arg, GPT_FINAL);
  float *dres = act(m, L, H_DRES), *dln = act(m, L, H_DLN), *dlogits = act(m, L, H_DLOGITS);
  float *dqkv = act(m, L, H_DQKV), *datty = act(m, L, H_DATTY), *dfch = act(m, L, H_DFCH);
  float *dfcg = act(m, L, H_DFCG), *scratch = act(m, L, H_SCRATCH);
  memset(dlogits, 0, sizeof(float) * (size_t)N * V);
  memset(dln, 0, sizeof(float) * (size_t)N * C);
  memset(dres, 0, sizeof(float) * (size_t)N * C);
  op_xent_bwd(dlogits, act(m, L, H_PROBS), targets, N, V, scale / (float)N);
  op_matmul_bwd(dln, gemb, NULL, dlogits, act(m, L, H_LNF), wte, N, C, V); /* tied head */
  const float *last = L ? act(m, L - 1, A_RES3) : act(m, L, H_ENC);
  op_layernorm_bwd(dres, gfin, gfin + C, dln, last, fin, act(m, L, H_LNFM), act(m, L, H_LNFR), N,
                   C);
  done(io, GPT_FINAL);
  for (int l = L - 1; l >= 0; l--) {
    const float *lw = io->params(io->arg, l);
    float *lg = io->grads(io->arg, l);
#define G(p) (lg + in_layer(m, (p)))
    const float *res = l ? act(m, l - 1, A_RES3) : act(m, L, H_ENC);
    size_t nc = (size_t)N * C;
    memset(dfcg, 0, sizeof(float) * 4 * nc);
    memset(dfch, 0, sizeof(float) * 4 * nc);
    memset(dln, 0, sizeof(float) * nc);
    memset(datty, 0, sizeof(float) * nc);
    memset(dqkv, 0, sizeof(float) * 3 * nc);
    /* MLP branch: res3 = res2 + proj(gelu(fc(ln2(res2)))) */
    op_matmul_bwd(dfcg, G(P_PROJW), G(P_PROJB), dres, A(A_FCG), W(P_PROJW), N, 4 * C, C);
    op_gelu_bwd(dfch, A(A_FCH), dfcg, N * 4 * C);
    op_matmul_bwd(dln, G(P_FCW), G(P_FCB), dfch, A(A_LN2), W(P_FCW), N, C, 4 * C);
    op_layernorm_bwd(dres, G(P_LN2W), G(P_LN2B), dln, A(A_RES2), W(P_LN2W), A(A_LN2M), A(A_LN2R), N,
                     C);
    /* attention branch: res2 = res + attproj(attention(qkv(ln1(res)))) */
    memset(dln, 0, sizeof(float) * nc);
    op_matmul_bwd(datty, G(P_ATTW), G(P_ATTB), dres, A(A_ATTY), W(P_ATTW), N, C, C);
    op_attention_bwd(dqkv, datty, A(A_QKV), A(A_ATT), B, T, C, c->heads, scratch);
    op_matmul_bwd(dln, G(P_QKVW), G(P_QKVB), dqkv, A(A_LN1), W(P_QKVW), N, C, 3 * C);
    op_layernorm_bwd(dres, G(P_LN1W), G(P_LN1B), dln, res, W(P_LN1W), A(A_LN1M), A(A_LN1R), N, C);
    done(io, l);
  }
  op_encoder_bwd(gemb, gemb + (size_t)V * C, dres, tokens, B, T, C);
  done(io, GPT_EMBED);
}

void gpt_io_replay(const gpt_t *m, const gpt_io_t *io, int backward) {
  int L = m->c.layers;
  if (!backward) {
    io->params(io->arg, GPT_EMBED);
    for (int l = 0; l < L; l++)
      io->params(io->arg, l);
    io->params(io->arg, GPT_FINAL);
    return;
  }
  io->params(io->arg, GPT_EMBED), io->params(io->arg, GPT_FINAL);
  io->grads(io->arg, GPT_EMBED), io->grads(io->arg, GPT_FINAL);
  done(io, GPT_FINAL);
  for (int l = L - 1; l >= 0; l--) {
    io->params(io->arg, l), io->grads(io->arg, l);
    done(io, l);
  }
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
