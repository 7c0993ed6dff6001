/* The mixture of experts' operations on the CPU (moe_ops.h): plain loops in f32, the balance
 * loss' sum in double. */
#include <math.h>
#include <string.h>

#include "moe_ops.h"

static void cpu_softmax(void *ctx, float *p, int N, int E) {
  (void)ctx;
  for (int n = 0; n < N; n++) {
    float *x = p + (size_t)n * E, most = x[0], sum = 0;
    for (int e = 1; e < E; e++)
      most = x[e] > most ? x[e] : most;
    for (int e = 0; e < E; e++)
      sum += x[e] = expf(x[e] - most);
    for (int e = 0; e < E; e++)
      x[e] /= sum;
  }
}

static void cpu_gate(void *ctx, int *ids, float *w, float *f, const float *probs, int B, int T,
                     int E, int k, float cap) {
  (void)ctx;
  for (int n = 0; n < B * T; n++) {
    const float *p = probs + (size_t)n * E;
    int *id = ids + (size_t)n * k;
    for (int j = 0; j < k; j++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int i = 0; i < j; i++)
          taken |= id[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      id[j] = best, w[(size_t)n * k + j] = p[best];
    }
  }
  memset(f, 0, sizeof(float) * (size_t)B * E);
  for (int b = 0; b < B; b++) {
    float *fb = f + (size_t)b * E; /* choices so far (exact: small integers), then shares */
    for (int i = b * T * k; i < (b + 1) * T * k; i++) {
      int e = ids[i];
      if (cap > 0 && fb[e] >= cap) ids[i] = -1, w[i] = 0; /* full: dropped */
      fb[e] += 1.0f;
    }
    for (int e = 0; e < E; e++)
      fb[e] /= (float)(T * k);
  }
}

static double cpu_balance(void *ctx, const float *f, const float *probs, int B, int T, int E) {
  (void)ctx;
  double total = 0;
  for (int b = 0; b < B; b++)
    for (int e = 0; e < E; e++) {
      double P = 0;
      for (int t = 0; t < T; t++)
        P += probs[((size_t)b * T + t) * E + e];
      total += f[(size_t)b * E + e] * P;
    }
  return total;
}

static void cpu_gate_bwd(void *ctx, float *dp, const float *probs, const float *f, const int *ids,
                         const float *y, int N, int T, int E, int k, int C, float bal) {
  (void)ctx;
  for (int n = 0; n < N; n++) {
    float *d = dp + (size_t)n * E, dot = 0;
    const float *p = probs + (size_t)n * E, *fb = f + (size_t)(n / T) * E;
    for (int e = 0; e < E; e++)
      d[e] = bal * fb[e];
    for (int j = 0; j < k; j++)
      if (ids[n * k + j] >= 0) d[ids[n * k + j]] += y[(size_t)n * C + j];
    for (int e = 0; e < E; e++)
      dot += p[e] * d[e];
    for (int e = 0; e < E; e++)
      d[e] = p[e] * (d[e] - dot);
  }
}

static void cpu_rows_bwd(void *ctx, float *gr, float *dy, const float *ry, const float *rw,
                         const float *slot, long R, int C) {
  (void)ctx;
  memset(gr, 0, sizeof(float) * (size_t)R * C);
  for (long r = 0; r < R; r++) {
    float *d = dy + (size_t)r * C, g = 0;
    for (int i = 0; i < C; i++)
      g += d[i] * ry[(size_t)r * C + i], d[i] *= rw[r];
    gr[(size_t)r * C + (int)slot[r]] = g;
  }
}

static void cpu_gather(void *ctx, float *rows, float *rw, const float *x, const float *w,
                       const int *rtok, long R, int C, int k) {
  (void)ctx;
  for (long r = 0; r < R; r++) {
    memcpy(rows + (size_t)r * C, x + (size_t)(rtok[r] / k) * C, sizeof(float) * (size_t)C);
    if (w) rw[r] = w[rtok[r]];
  }
}

static void cpu_scatter(void *ctx, float *y, const float *rows, const float *rw, const int *rtok,
                        long R, int C, int k, int N) {
  (void)ctx;
  memset(y, 0, sizeof(float) * (size_t)N * C);
  for (long r = 0; r < R; r++) {
    float *o = y + (size_t)(rtok[r] / k) * C, s = rw ? rw[r] : 1.0f;
    for (int i = 0; i < C; i++)
      o[i] += s * rows[(size_t)r * C + i];
  }
}

const moe_ops_vt_t moe_ops_cpu = {.softmax = cpu_softmax,
                                  .gate = cpu_gate,
                                  .balance = cpu_balance,
                                  .gate_bwd = cpu_gate_bwd,
                                  .rows_bwd = cpu_rows_bwd,
                                  .gather = cpu_gather,
                                  .scatter = cpu_scatter};
