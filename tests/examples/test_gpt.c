/* The example GPT's backward (examples/common/gpt.c, ops_cpu.c) against central differences
 * of its forward, for every parameter of a tiny model, and AdamW's first step against its
 * closed form. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "gpt.h"

static int check_grads(void) {
  gpt_config_t c = {.vocab = 7, .seq = 5, .channels = 8, .layers = 2, .heads = 2};
  gpt_t m;
  int B = 2, tok[10], tgt[10], bad = 0;
  if (gpt_init(&m, &c, B)) return printf("test_gpt: init failed\n"), 1;
  float *p = malloc(m.nparams * sizeof *p), *g = calloc(m.nparams, sizeof *g);
  if (!p || !g) return printf("test_gpt: out of memory\n"), 1;
  gpt_init_params(&m, p, 3);
  for (size_t i = 0; i < m.nparams; i++) /* weights of size 1, so every path carries gradient */
    p[i] += (float)((int)(i * 7919 % 61) - 30) * 0.01f;
  for (int i = 0; i < 10; i++)
    tok[i] = (i * 3 + 1) % c.vocab, tgt[i] = (i * 5 + 2) % c.vocab;
  gpt_flat_t flat = {&m, p, g};
  gpt_io_t io = gpt_flat_io(&flat);
  gpt_forward(&m, &io, tok, tgt, B);
  gpt_backward(&m, &io, tok, tgt, B, 1.0f);
  double worst = 0;
  for (size_t i = 0; i < m.nparams; i++) {
    float keep = p[i], h = 1e-2f;
    p[i] = keep + h;
    double up = gpt_forward(&m, &io, tok, tgt, B);
    p[i] = keep - h;
    double down = gpt_forward(&m, &io, tok, tgt, B);
    p[i] = keep;
    double num = (up - down) / (2.0 * h), err = fabs(num - g[i]);
    double tol = 2e-3 + 2e-2 * fabs(num);
    worst = err / tol > worst ? err / tol : worst;
    if (err > tol && bad++ < 5)
      printf("test_gpt: parameter %zu: backward %.6g, differences %.6g\n", i, g[i], num);
  }
  printf("test_gpt: %zu parameters, worst error %.2f of its tolerance\n", m.nparams, worst);
  free(p), free(g);
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
  return 0;
}

int main(void) { return check_grads() | check_adamw(); }
