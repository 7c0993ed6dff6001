/* The GPT model: where each parameter and activation lives, the shards of a split model,
 * initial weights, AdamW. The passes are gpt_pass.c's. See gpt.h. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"
#include "gpt_act.h"
#include "moe_layer.h"

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

int gpt_rows_here(const gpt_t *m, int N) { return m->sp ? N / m->tp : N; }

static size_t most(size_t a, size_t b) { return a > b ? a : b; }

static void act_sizes(const gpt_t *m, size_t *layer, size_t *head) {
  const gpt_config_t *c = &m->c;
  size_t N = (size_t)m->batch * c->seq, C = (size_t)c->channels, V = (size_t)c->vocab;
  size_t R = (size_t)gpt_rows_here(m, (int)N), q = C / (size_t)m->tp, X = m->sp ? N * C : 0;
  size_t att = OP(attention_keep, m->batch, c->seq, (int)q, c->heads / m->tp);
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
                   M * C, M * C, M * C, M, K, G, moe * N * C, moe * N * C};
  /* clang-format on */
  memcpy(layer, l, sizeof l);
  memcpy(head, h, sizeof h);
}

/* Offset of activation a of layer l (l = c.layers: the head's array a). */
float *gpt_act(const gpt_t *m, int l, int a) {
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
  if (!m->ops) m->ops = &gpt_ops_cpu;
  act_sizes(m, ls, hs);
  for (int i = 0; i < A_NLAYER; i++)
    m->nact += ls[i] * L;
  for (int i = 0; i < H_N; i++)
    m->nact += hs[i];
  m->act = OP(alloc, m->nact * sizeof *m->act);
  m->tok = OP(alloc, N * sizeof *m->tok), m->tgt = OP(alloc, N * sizeof *m->tgt);
  if (!m->act || !m->tok || !m->tgt) return gpt_free(m), -1;
  if (!El) return 0;
  m->ids = OP(alloc, sizeof *m->ids * L * N * k);
  m->rtok = OP(alloc, sizeof *m->rtok * L * (m->max_rows ? m->max_rows : 1));
  m->route_host = malloc(sizeof *m->route_host * (L * N * k + m->max_rows));
  float *slots = malloc(sizeof *slots * N * k);
  m->counts = calloc(L * El * MOE_MICRO, sizeof *m->counts);
  m->offsets = calloc(L * El * MOE_MICRO, sizeof *m->offsets);
  m->rows = calloc(L * MOE_MICRO, sizeof *m->rows);
  if (!m->ids || !m->rtok || !m->route_host || !slots || !m->counts || !m->offsets || !m->rows)
    return free(slots), gpt_free(m), -1;
  for (size_t i = 0; i < L * N * k; i++) /* a valid routing for gpt_io_replay */
    m->route_host[i] = (int)((i / k + i % k) % (size_t)c->experts);
  for (size_t i = 0; i < N * k; i++) /* each choice's slot, sent with its row in the backward */
    slots[i] = (float)(i % k);
  OP(put, m->ids, m->route_host, sizeof *m->ids * L * N * k);
  OP(put, gpt_act(m, (int)L, H_MSLOTS), slots, sizeof *slots * N * k);
  free(slots);
  return 0;
}

static int config_ok(const gpt_config_t *c, int batch) {
  int moe = c->experts > 0;
  return c->vocab >= 2 && c->seq >= 1 && c->channels >= 1 && c->layers >= 1 && c->heads >= 1 &&
         c->channels % c->heads == 0 && batch >= 1 && c->experts >= 0 && c->capacity >= 0 &&
         c->aux >= 0 && (!moe || (c->topk >= 1 && c->topk <= c->experts && c->topk <= c->channels));
}

int gpt_init_tp(gpt_t *m, const gpt_config_t *c, int batch, int tp, int tp_rank, int sp) {
  return gpt_init_on(m, &gpt_ops_cpu, c, batch, tp, tp_rank, sp);
}

int gpt_init_on(gpt_t *m, const gpt_ops_t *ops, const gpt_config_t *c, int batch, int tp,
                int tp_rank, int sp) {
  memset(m, 0, sizeof *m);
  m->ops = ops;
  if (!ops || !config_ok(c, batch) || tp < 1 || c->heads % tp || tp_rank < 0 || tp_rank >= tp ||
      (sp && tp == 1) || (tp > 1 && c->experts))
    return -1;
  m->tp = tp, m->tp_rank = tp_rank, m->sp = sp, m->ep = 1, m->local_experts = c->experts;
  return init(m, c, batch);
}

int gpt_init_ep(gpt_t *m, const gpt_config_t *c, int batch, int ep, int ep_rank) {
  return gpt_init_ep_on(m, &gpt_ops_cpu, c, batch, ep, ep_rank);
}

int gpt_init_ep_on(gpt_t *m, const gpt_ops_t *ops, const gpt_config_t *c, int batch, int ep,
                   int ep_rank) {
  memset(m, 0, sizeof *m);
  m->ops = ops;
  if (!ops || !config_ok(c, batch) || c->experts < 1 || ep < 1 || c->experts % ep || ep_rank < 0 ||
      ep_rank >= ep)
    return -1;
  m->tp = 1, m->ep = ep, m->ep_rank = ep_rank, m->local_experts = c->experts / ep;
  return init(m, c, batch);
}

void gpt_free(gpt_t *m) {
  if (m->ops) {
    OP(release, m->act), OP(release, m->tok), OP(release, m->tgt);
    OP(release, m->ids), OP(release, m->rtok);
  }
  free(m->route_host), free(m->counts), free(m->offsets), free(m->rows);
  m->act = NULL, m->tok = m->tgt = m->ids = m->rtok = m->route_host = NULL;
  m->counts = m->offsets = NULL, m->rows = NULL;
}

/* rows x cols between packed part and full (row stride fstride, from column c0). */
static void copy_cols(float *part, float *full, size_t rows, size_t cols, size_t fstride, size_t c0,
                      int to_full) {
  for (size_t r = 0; r < rows; r++)
    memcpy(to_full ? full + r * fstride + c0 : part + r * cols,
           to_full ? part + r * cols : full + r * fstride + c0, cols * sizeof *part);
}

static void copy(float *part, float *full, size_t n, int to_full) {
  memcpy(to_full ? full : part, to_full ? part : full, n * sizeof *part);
}

/* part's pieces of full, either way; whole: the tensors every shard holds too. */
static void map_shard(const gpt_t *full, const gpt_t *part, float *fp, float *pp, int to_full,
                      int whole) {
  size_t C = (size_t)full->c.channels, q = C / (size_t)part->tp, r = (size_t)part->tp_rank;
  size_t x = (size_t)part->ep_rank; /* expert shards: the x-th run of each expert tensor */
  if (whole) copy(pp, fp, full->layer_first, to_full);
  if (whole) copy(pp + part->lnf, fp + full->lnf, 2 * C, to_full);
  for (int l = 0; l < full->c.layers; l++)
    for (int p = 0; p < P_NLAYER; p++) {
      float *f = fp + gpt_param(full, l, p), *o = pp + gpt_param(part, l, p);
      size_t n = gpt_param(part, l, p + 1) - gpt_param(part, l, p);
      int split = (part->ep > 1 && p >= P_FCW) ||
                  (part->tp > 1 && (p == P_QKVW || p == P_QKVB || p == P_ATTW || p == P_FCW ||
                                    p == P_FCB || p == P_PROJW));
      if (!split) {
        if (whole) copy(o, f, n, to_full);
      } else if (part->ep > 1) {
        copy(o, f + x * n, n, to_full);
      } else if (p == P_QKVW || p == P_QKVB) { /* this shard's heads of q, of k and of v */
        for (size_t j = 0, w = p == P_QKVW ? C : 1; j < 3; j++)
          copy(o + j * q * w, f + (j * C + r * q) * w, q * w, to_full);
      } else if (p == P_FCW || p == P_FCB) { /* its hidden units */
        copy(o, f + r * n, n, to_full);
      } else { /* the output projections: its input columns */
        copy_cols(o, f, C, n / C, n / C * (size_t)part->tp, r * (n / C), to_full);
      }
    }
}

void gpt_shard(const gpt_t *full, const gpt_t *part, const float *fp, float *pp) {
  map_shard(full, part, (float *)fp, pp, 0, 1); /* reads fp only */
}

void gpt_unshard(const gpt_t *full, const gpt_t *part, const float *pp, float *fp, int whole) {
  map_shard(full, part, fp, (float *)pp, 1, whole); /* reads pp only */
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

int gpt_init_shard_params(const gpt_t *part, unsigned long long seed, float *pp) {
  gpt_t full;
  if (gpt_init(&full, &part->c, 1)) return -1;
  float *w = malloc(full.nparams * sizeof *w);
  if (w) gpt_init_params(&full, w, seed), gpt_shard(&full, part, w, pp);
  free(w);
  gpt_free(&full);
  return w ? 0 : -1;
}

int gpt_block_at(const gpt_t *m, int i) {
  return i < m->c.layers ? i : i == m->c.layers ? GPT_FINAL : GPT_EMBED;
}

size_t gpt_block_first(const gpt_t *m, int block) {
  return block == GPT_EMBED ? 0 : block == GPT_FINAL ? m->lnf : gpt_param(m, block, 0);
}

size_t gpt_block_size(const gpt_t *m, int block) {
  return block == GPT_EMBED   ? m->layer_first
         : block == GPT_FINAL ? m->nparams - m->lnf
                              : m->layer_size;
}

static const float *flat_params(void *arg, int block) {
  gpt_flat_t *f = arg;
  return f->params + gpt_block_first(f->m, block);
}

static float *flat_grads(void *arg, int block) {
  gpt_flat_t *f = arg;
  return f->grads + gpt_block_first(f->m, block);
}

gpt_io_t gpt_flat_io(gpt_flat_t *flat) {
  return (gpt_io_t){.params = flat_params, .grads = flat_grads, .arg = flat};
}
