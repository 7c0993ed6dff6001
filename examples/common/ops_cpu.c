/* The GPT's CPU back end, in f32: plain loops, written for reading (the examples prove
 * communication, not kernels); memory is the heap, streams are weft's host streams. See ops.h
 * for the shapes. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ops.h"
#include "weft.h"

/* ---- memory and order: the heap, every operation done when it returns ---- */

static void *cpu_alloc(void *ctx, size_t bytes) {
  (void)ctx;
  return calloc(bytes ? bytes : 1, 1);
}

static void cpu_release(void *ctx, void *p) {
  (void)ctx;
  free(p);
}

static void cpu_zero(void *ctx, void *p, size_t bytes) {
  (void)ctx;
  if (bytes) memset(p, 0, bytes);
}

static void cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
  (void)ctx;
  if (bytes && dst != src) memmove(dst, src, bytes);
}

static int cpu_get(void *ctx, void *host, const void *src, size_t bytes) {
  cpu_copy(ctx, host, src, bytes);
  return 0;
}

static void cpu_put(void *ctx, void *dst, const void *host, size_t bytes) {
  cpu_copy(ctx, dst, host, bytes);
}

static int cpu_finish(void *ctx) {
  (void)ctx;
  return 0;
}

static int cpu_stream_open(void *ctx, void **stream) {
  (void)ctx;
  weft_stream_t s = NULL;
  if (weft_stream_create(&s) != WEFT_SUCCESS) return -1;
  *stream = s;
  return 0;
}

static void cpu_stream_close(void *ctx, void *stream) {
  (void)ctx;
  if (stream) weft_stream_destroy(stream);
}

static int cpu_stream_wait(void *ctx, void *stream) {
  (void)ctx;
  return weft_stream_synchronize(stream) == WEFT_SUCCESS ? 0 : -1;
}

static void cpu_fence(void *ctx, void *stream) { /* the math is done when it returns */
  (void)ctx, (void)stream;
}

static int cpu_mark(void *ctx, void *stream, void **mark) {
  (void)ctx, (void)stream;
  *mark = NULL;
  return 0;
}

static int cpu_mark_wait(void *ctx, void *mark) {
  (void)ctx, (void)mark;
  return 0;
}

static void cpu_mark_close(void *ctx, void *mark) { (void)ctx, (void)mark; }

/* ---- the model's operations ---- */

static void cpu_encoder_fwd(void *ctx, float *out, const int *tokens, const float *wte,
                            const float *wpe, int B, int T, int C) {
  (void)ctx;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      const float *e = wte + (size_t)tokens[b * T + t] * C, *p = wpe + (size_t)t * C;
      for (int i = 0; i < C; i++)
        o[i] = e[i] + p[i];
    }
}

static void cpu_encoder_bwd(void *ctx, float *dwte, float *dwpe, const float *dout,
                            const int *tokens, int B, int T, int C) {
  (void)ctx;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      float *e = dwte + (size_t)tokens[b * T + t] * C, *p = dwpe + (size_t)t * C;
      for (int i = 0; i < C; i++)
        e[i] += d[i], p[i] += d[i];
    }
}

static void cpu_layernorm_fwd(void *ctx, float *out, float *mean, float *rstd, const float *in,
                              const float *w, const float *b, int N, int C) {
  (void)ctx;
  for (int n = 0; n < N; n++) {
    const float *x = in + (size_t)n * C;
    float m = 0, v = 0;
    for (int i = 0; i < C; i++)
      m += x[i];
    m /= (float)C;
    for (int i = 0; i < C; i++)
      v += (x[i] - m) * (x[i] - m);
    float s = 1.0f / sqrtf(v / (float)C + 1e-5f);
    for (int i = 0; i < C; i++)
      out[(size_t)n * C + i] = (x[i] - m) * s * w[i] + b[i];
    mean[n] = m, rstd[n] = s;
  }
}

static void cpu_layernorm_bwd(void *ctx, float *din, float *dw, float *db, const float *dout,
                              const float *in, const float *w, const float *mean, const float *rstd,
                              int N, int C) {
  (void)ctx;
  for (int n = 0; n < N; n++) {
    const float *x = in + (size_t)n * C, *d = dout + (size_t)n * C;
    float *dx = din + (size_t)n * C, m = mean[n], s = rstd[n];
    /* the two means the normalisation's gradient subtracts */
    float dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int i = 0; i < C; i++) {
      float norm = (x[i] - m) * s, dnorm = w[i] * d[i];
      dnorm_mean += dnorm, dnorm_norm_mean += dnorm * norm;
    }
    dnorm_mean /= (float)C, dnorm_norm_mean /= (float)C;
    for (int i = 0; i < C; i++) {
      float norm = (x[i] - m) * s, dnorm = w[i] * d[i];
      db[i] += d[i];
      dw[i] += norm * d[i];
      dx[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * s;
    }
  }
}

static void cpu_matmul_fwd(void *ctx, float *out, const float *in, const float *w,
                           const float *bias, int N, int C, int OC) {
  (void)ctx;
  for (int n = 0; n < N; n++) {
    const float *x = in + (size_t)n * C;
    for (int o = 0; o < OC; o++) {
      const float *wr = w + (size_t)o * C;
      float acc = bias ? bias[o] : 0.0f;
      for (int i = 0; i < C; i++)
        acc += x[i] * wr[i];
      out[(size_t)n * OC + o] = acc;
    }
  }
}

static void cpu_bias_fwd(void *ctx, float *out, const float *bias, int N, int OC) {
  (void)ctx;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++)
      out[(size_t)n * OC + o] += bias[o];
}

static void cpu_bias_bwd(void *ctx, float *dbias, const float *dout, int N, int OC) {
  (void)ctx;
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++)
      dbias[o] += dout[(size_t)n * OC + o];
}

static void cpu_matmul_bwd(void *ctx, float *din, float *dw, float *dbias, const float *dout,
                           const float *in, const float *w, int N, int C, int OC) {
  (void)ctx;
  for (int n = 0; n < N; n++) {
    const float *d = dout + (size_t)n * OC, *x = in + (size_t)n * C;
    float *dx = din + (size_t)n * C;
    for (int o = 0; o < OC; o++) {
      const float *wr = w + (size_t)o * C;
      float *dwr = dw + (size_t)o * C, g = d[o];
      for (int i = 0; i < C; i++) {
        dx[i] += g * wr[i];
        dwr[i] += g * x[i];
      }
      if (dbias) dbias[o] += g;
    }
  }
}

static void cpu_attention_fwd(void *ctx, float *out, float *att, const float *qkv, int B, int T,
                              int C, int NH) {
  (void)ctx;
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float *a = att + (((size_t)b * NH + h) * T + t) * T, most = -INFINITY, sum = 0;
        for (int u = 0; u <= t; u++) { /* causal: keys up to t */
          const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
          float dot = 0;
          for (int i = 0; i < hs; i++)
            dot += q[i] * k[i];
          a[u] = dot * scale;
          most = a[u] > most ? a[u] : most;
        }
        for (int u = 0; u <= t; u++)
          sum += a[u] = expf(a[u] - most);
        for (int u = 0; u < T; u++)
          a[u] = u <= t ? a[u] / sum : 0.0f;
        float *o = out + ((size_t)b * T + t) * C + h * hs;
        for (int i = 0; i < hs; i++)
          o[i] = 0;
        for (int u = 0; u <= t; u++) {
          const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
          for (int i = 0; i < hs; i++)
            o[i] += a[u] * v[i];
        }
      }
}

static size_t cpu_attention_keep(void *ctx, int B, int T, int C, int NH) {
  (void)ctx, (void)C;
  return (size_t)B * NH * T * T;
}

static void cpu_attention_bwd(void *ctx, float *dqkv, const float *dout, const float *qkv,
                              const float *out, const float *att, int B, int T, int C, int NH,
                              float *datt) {
  (void)ctx, (void)out;
  int hs = C / NH;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int h = 0; h < NH; h++) {
        const float *a = att + (((size_t)b * NH + h) * T + t) * T;
        const float *d = dout + ((size_t)b * T + t) * C + h * hs;
        const float *q = qkv + ((size_t)b * T + t) * 3 * C + h * hs;
        float *dq = dqkv + ((size_t)b * T + t) * 3 * C + h * hs, dot_sum = 0;
        for (int u = 0; u <= t; u++) { /* through the values */
          const float *v = qkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs;
          float *dv = dqkv + ((size_t)b * T + u) * 3 * C + 2 * C + h * hs, s = 0;
          for (int i = 0; i < hs; i++) {
            s += d[i] * v[i];
            dv[i] += a[u] * d[i];
          }
          datt[u] = s, dot_sum += a[u] * s;
        }
        for (int u = 0; u <= t; u++) { /* through the softmax, then the scores */
          float dpre = a[u] * (datt[u] - dot_sum) * scale;
          const float *k = qkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
          float *dk = dqkv + ((size_t)b * T + u) * 3 * C + C + h * hs;
          for (int i = 0; i < hs; i++) {
            dq[i] += dpre * k[i];
            dk[i] += dpre * q[i];
          }
        }
      }
}

#define GELU_S 0.7978845608f /* sqrt(2 / pi) */

static void cpu_gelu_fwd(void *ctx, float *out, const float *in, int n) {
  (void)ctx;
  for (int i = 0; i < n; i++) {
    float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x)));
  }
}

static void cpu_gelu_bwd(void *ctx, float *din, const float *in, const float *dout, int n) {
  (void)ctx;
  for (int i = 0; i < n; i++) {
    float x = in[i], th = tanhf(GELU_S * (x + 0.044715f * x * x * x));
    float dth = (1.0f - th * th) * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * dth);
  }
}

static void cpu_add(void *ctx, float *out, const float *a, const float *b, int n) {
  (void)ctx;
  for (int i = 0; i < n; i++)
    out[i] = a[i] + b[i];
}

static void cpu_accumulate(void *ctx, float *dst, const float *src, int n) {
  (void)ctx;
  for (int i = 0; i < n; i++)
    dst[i] += src[i];
}

static float cpu_xent_fwd(void *ctx, float *losses, float *probs, const float *logits,
                          const int *targets, int N, int V) {
  (void)ctx;
  double total = 0;
  for (int n = 0; n < N; n++) {
    const float *z = logits + (size_t)n * V;
    float *p = probs + (size_t)n * V, most = -INFINITY, sum = 0;
    for (int i = 0; i < V; i++)
      most = z[i] > most ? z[i] : most;
    for (int i = 0; i < V; i++)
      sum += p[i] = expf(z[i] - most);
    for (int i = 0; i < V; i++)
      p[i] /= sum;
    losses[n] = -logf(p[targets[n]]);
    total += losses[n];
  }
  return N ? (float)(total / N) : 0.0f;
}

static void cpu_xent_bwd(void *ctx, float *dlogits, const float *probs, const int *targets, int N,
                         int V, float scale) {
  (void)ctx;
  for (int n = 0; n < N; n++)
    for (int i = 0; i < V; i++)
      dlogits[(size_t)n * V + i] +=
          (probs[(size_t)n * V + i] - (i == targets[n] ? 1.0f : 0.0f)) * scale;
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

static void cpu_adamw(void *ctx, const adamw_t *o, int step, float *params, const float *grads,
                      float *m, float *v, size_t n) {
  (void)ctx;
  adamw_step(o, step, params, grads, m, v, n);
}

static const gpt_ops_vt_t cpu_vt = {.name = "cpu",
                                    .alloc = cpu_alloc,
                                    .release = cpu_release,
                                    .zero = cpu_zero,
                                    .copy = cpu_copy,
                                    .put = cpu_put,
                                    .get = cpu_get,
                                    .finish = cpu_finish,
                                    .stream_open = cpu_stream_open,
                                    .stream_close = cpu_stream_close,
                                    .stream_wait = cpu_stream_wait,
                                    .fence = cpu_fence,
                                    .mark = cpu_mark,
                                    .mark_wait = cpu_mark_wait,
                                    .mark_close = cpu_mark_close,
                                    .encoder_fwd = cpu_encoder_fwd,
                                    .encoder_bwd = cpu_encoder_bwd,
                                    .layernorm_fwd = cpu_layernorm_fwd,
                                    .layernorm_bwd = cpu_layernorm_bwd,
                                    .matmul_fwd = cpu_matmul_fwd,
                                    .bias_fwd = cpu_bias_fwd,
                                    .bias_bwd = cpu_bias_bwd,
                                    .matmul_bwd = cpu_matmul_bwd,
                                    .attention_fwd = cpu_attention_fwd,
                                    .attention_bwd = cpu_attention_bwd,
                                    .attention_keep = cpu_attention_keep,
                                    .gelu_fwd = cpu_gelu_fwd,
                                    .gelu_bwd = cpu_gelu_bwd,
                                    .add = cpu_add,
                                    .accumulate = cpu_accumulate,
                                    .xent_fwd = cpu_xent_fwd,
                                    .xent_bwd = cpu_xent_bwd,
                                    .adamw = cpu_adamw};

const gpt_ops_t gpt_ops_cpu = {.vt = &cpu_vt, .ctx = NULL, .moe = &moe_ops_cpu};

void gpt_ops_close(gpt_ops_t *ops) {
  if (ops && ops->vt && ops->vt->close) ops->vt->close(ops->ctx);
  if (ops) *ops = gpt_ops_cpu;
}
