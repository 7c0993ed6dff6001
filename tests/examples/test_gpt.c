/* The example GPT's backward (examples/common/gpt.c, moe_layer.c, ops_cpu.c) against central
 * differences of its forward, for every parameter of a tiny dense model and a tiny mixture of
 * experts (gate, capacity drops and balance loss included), and AdamW's first step against
 * its closed form and its first eight against the update computed in double. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpt.h"

/* Whether the last two forwards routed every token alike (an MoE model's routing is a step
 * function of the weights: differences across a switch say nothing about the gradient). */
static int same_routing(const gpt_t *m, const int *before) {
  size_t n = (size_t)m->c.layers * m->batch * m->c.seq * (size_t)m->c.topk;
  return !m->local_experts || !memcmp(before, m->ids, n * sizeof *before);
}

/* The routing of the last forward keeps every sequence within the capacity, and drops some
 * choices (so that the gradient check covers drops). */
static int check_capacity(const gpt_t *m, int B) {
  int T = m->c.seq, k = m->c.topk, dropped = 0;
  int cap = (int)ceilf(m->c.capacity * (float)T * (float)k / (float)m->c.experts);
  for (int l = 0; l < m->c.layers; l++)
    for (int b = 0; b < B; b++) {
      const int *id = m->ids + ((size_t)l * B + b) * T * k;
      int kept[64] = {0};
      for (int i = 0; i < T * k; i++) {
        if (id[i] >= 0 && id[i] < 64 && ++kept[id[i]] > cap)
          return printf("test_gpt: layer %d sequence %d: expert %d over capacity\n", l, b, id[i]),
                 1;
        dropped += id[i] < 0;
      }
    }
  if (!dropped) return printf("test_gpt: the capacity dropped nothing (the test needs drops)\n"), 1;
  return 0;
}

static int check_grads(const char *what, const gpt_config_t *c) {
  gpt_t m;
  int B = 2, tok[10], tgt[10], bad = 0, *ids = NULL;
  size_t skipped = 0, nids = (size_t)c->layers * B * c->seq * (size_t)(c->topk ? c->topk : 1);
  if (gpt_init(&m, c, B)) return printf("test_gpt: init failed\n"), 1;
  float *p = malloc(m.nparams * sizeof *p), *g = calloc(m.nparams, sizeof *g);
  ids = malloc(nids * sizeof *ids);
  if (!p || !g || !ids) return printf("test_gpt: out of memory\n"), 1;
  gpt_init_params(&m, p, 3);
  for (size_t i = 0; i < m.nparams; i++) /* weights of size 1, so every path carries gradient */
    p[i] += (float)((int)(i * 7919 % 61) - 30) * 0.01f;
  for (int i = 0; i < 10; i++)
    tok[i] = (i * 3 + 1) % c->vocab, tgt[i] = (i * 5 + 2) % c->vocab;
  gpt_flat_t flat = {&m, p, g};
  gpt_io_t io = gpt_flat_io(&flat);
  gpt_forward(&m, &io, tok, tgt, B);
  gpt_backward(&m, &io, B, 1.0f);
  if (m.local_experts) memcpy(ids, m.ids, nids * sizeof *ids);
  if (m.local_experts) bad += check_capacity(&m, B);
  double worst = 0;
  for (size_t i = 0; i < m.nparams; i++) {
    float keep = p[i], h = 1e-2f;
    p[i] = keep + h;
    double up = gpt_forward(&m, &io, tok, tgt, B);
    int same = same_routing(&m, ids);
    p[i] = keep - h;
    double down = gpt_forward(&m, &io, tok, tgt, B);
    same &= same_routing(&m, ids);
    p[i] = keep;
    if (!same) { /* this weight moves a token to another expert within h */
      skipped++;
      continue;
    }
    double num = (up - down) / (2.0 * h), err = fabs(num - g[i]);
    double tol = 2e-3 + 2e-2 * fabs(num);
    worst = err / tol > worst ? err / tol : worst;
    if (err > tol && bad++ < 5)
      printf("test_gpt: %s: parameter %zu: backward %.6g, differences %.6g\n", what, i, g[i], num);
  }
  printf("test_gpt: %s: %zu parameters (%zu skipped: routing changes within h), worst error %.2f "
         "of its tolerance\n",
         what, m.nparams, skipped, worst);
  if (skipped * 10 > m.nparams) bad++, printf("test_gpt: %s: too many skipped\n", what);
  free(p), free(g), free(ids);
  gpt_free(&m);
  return bad != 0;
}

static int check_adamw(void) {
  adamw_t o = {.lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.5f};
  float p[2] = {1.0f, -2.0f}, g[2] = {0.5f, -3.0f}, mm[2] = {0}, vv[2] = {0};
  adamw_step(&o, 1, p, g, mm, vv, 2);
  /* step 1: m/(1-b1) = g, v/(1-b2) = g^2, so the step is lr * (sign(g) + wd * p) */
  float want[2] = {1.0f - 0.1f * (1.0f + 0.5f * 1.0f), -2.0f - 0.1f * (-1.0f + 0.5f * -2.0f)};
  for (int i = 0; i < 2; i++)
    if (fabsf(p[i] - want[i]) > 1e-5f)
      return printf("test_gpt: adamw parameter %d: %g, want %g\n", i, p[i], want[i]), 1;
  /* Steps 1-8 against the same update in double. Step 1 alone hides the bias correction
   * (beta^step == beta there): a correction by beta instead of beta^step moves step 2 by
   * about a third of lr, against float rounding's ~1e-7. The gradients change size and sign
   * from step to step, so the moments and their corrections matter at every step. */
  enum { N = 3, STEPS = 8 };
  float q[N] = {1.0f, -2.0f, 0.25f}, m[N] = {0}, v[N] = {0};
  double qd[N], md[N] = {0}, vd[N] = {0}, b1 = o.beta1, b2 = o.beta2, worst = 0;
  for (int i = 0; i < N; i++)
    qd[i] = q[i];
  for (int s = 1; s <= STEPS; s++) {
    float gr[N];
    for (int i = 0; i < N; i++)
      gr[i] = (float)((i + 1) * (s % 3 ? 1 : -2) * s) * 0.125f;
    adamw_step(&o, s, q, gr, m, v, N);
    double c1 = 1.0 - pow(b1, s), c2 = 1.0 - pow(b2, s);
    for (int i = 0; i < N; i++) {
      md[i] = b1 * md[i] + (1.0 - b1) * gr[i];
      vd[i] = b2 * vd[i] + (1.0 - b2) * (double)gr[i] * gr[i];
      qd[i] -= (double)o.lr *
               (md[i] / c1 / (sqrt(vd[i] / c2) + (double)o.eps) + (double)o.weight_decay * qd[i]);
      double err = fabs(q[i] - qd[i]) / (1.0 + fabs(qd[i]));
      worst = err > worst ? err : worst;
      if (err > 1e-5)
        return printf("test_gpt: adamw step %d parameter %d: %.8g, want %.8g (double)\n", s, i,
                      q[i], qd[i]),
               1;
    }
  }
  printf("test_gpt: adamw: %d steps within %.2g of the update in double\n", STEPS, worst);
  return 0;
}

int main(void) {
  gpt_config_t dense = {.vocab = 7, .seq = 5, .channels = 8, .layers = 2, .heads = 2};
  /* 4 experts, top 2, at most 3 of a sequence's 10 choices per expert: some are dropped */
  gpt_config_t moe = dense;
  moe.experts = 4, moe.topk = 2, moe.capacity = 1.0f, moe.aux = 0.5f;
  return check_grads("dense", &dense) | check_grads("experts", &moe) | check_adamw();
}
