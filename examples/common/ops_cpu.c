/* The GPT's operations on the CPU, in f32: plain loops, written for reading (the examples
 * prove communication, not kernels). See ops.h for the shapes. */
#include <math.h>

#include <stddef.h>

#include "ops.h"

void op_encoder_fwd(float *out, const int *tokens, const float *wte, const float *wpe, int B, int T,
                    int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *o = out + ((size_t)b * T + t) * C;
      const float *e = wte + (size_t)tokens[b * T + t] * C, *p = wpe + (size_t)t * C;
      for (int i = 0; i < C; i++)
        o[i] = e[i] + p[i];
    }
}

void op_encoder_bwd(float *dwte, float *dwpe, const float *dout, const int *tokens, int B, int T,
                    int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = dout + ((size_t)b * T + t) * C;
      float *e = dwte + (size_t)tokens[b * T + t] * C, *p = dwpe + (size_t)t * C;
      for (int i = 0; i < C; i++)
        e[i] += d[i], p[i] += d[i];
    }
}

void op_layernorm_fwd(float *out, float *mean, float *rstd, const float *in, const float *w,
                      const float *b, int N, int C) {
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

void op_layernorm_bwd(float *din, float *dw, float *db, const float *dout, const float *in,
                      const float *w, const float *mean, const float *rstd, int N, int C) {
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

void op_matmul_fwd(float *out, const float *in, const float *w, const float *bias, int N, int C,
                   int OC) {
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

void op_bias_fwd(float *out, const float *bias, int N, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++)
      out[(size_t)n * OC + o] += bias[o];
}

void op_bias_bwd(float *dbias, const float *dout, int N, int OC) {
  for (int n = 0; n < N; n++)
    for (int o = 0; o < OC; o++)
      dbias[o] += dout[(size_t)n * OC + o];
}

void op_matmul_bwd(float *din, float *dw, float *dbias, const float *dout, const float *in,
                   const float *w, int N, int C, int OC) {
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

void op_attention_fwd(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
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

void op_attention_bwd(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                      int T, int C, int NH, float *datt) {
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

void op_gelu_fwd(float *out, const float *in, int n) {
  for (int i = 0; i < n; i++) {
    float x = in[i];
    out[i] = 0.5f * x * (1.0f + tanhf(GELU_S * (x + 0.044715f * x * x * x)));
  }
}

void op_gelu_bwd(float *din, const float *in, const float *dout, int n) {
  for (int i = 0; i < n; i++) {
    float x = in[i], th = tanhf(GELU_S * (x + 0.044715f * x * x * x));
    float dth = (1.0f - th * th) * GELU_S * (1.0f + 3.0f * 0.044715f * x * x);
    din[i] += dout[i] * (0.5f * (1.0f + th) + 0.5f * x * dth);
  }
}

void op_add(float *out, const float *a, const float *b, int n) {
  for (int i = 0; i < n; i++)
    out[i] = a[i] + b[i];
}

void op_accumulate(float *dst, const float *src, int n) {
  for (int i = 0; i < n; i++)
    dst[i] += src[i];
}

float op_xent_fwd(float *losses, float *probs, const float *logits, const int *targets, int N,
                  int V) {
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

void op_xent_bwd(float *dlogits, const float *probs, const int *targets, int N, int V,
                 float scale) {
  for (int n = 0; n < N; n++)
    for (int i = 0; i < V; i++)
      dlogits[(size_t)n * V + i] +=
          (probs[(size_t)n * V + i] - (i == targets[n] ? 1.0f : 0.0f)) * scale;
}
