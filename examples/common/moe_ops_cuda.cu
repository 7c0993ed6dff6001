/* The mixture of experts' operations on CUDA (moe_ops.h), on the back end's stream: a warp a
 * row for the softmax and the rows' backward, a thread a token for the top-k and the gate's
 * backward, a thread a sequence for the capacity's drops (they go in token order), atomics
 * for the in-process scatter (so its sums' order varies from run to run). */
#include <math.h>

#include "ops_cuda.h"

namespace {

__global__ void k_softmax(float *p, int N, int E) {
  int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= N) return;
  float *x = p + (long)row * E, most = -INFINITY, sum = 0;
  for (int e = lane; e < E; e += 32)
    most = fmaxf(most, x[e]);
  most = warp_max(most);
  for (int e = lane; e < E; e += 32)
    sum += x[e] = expf(x[e] - most);
  sum = warp_sum(sum);
  for (int e = lane; e < E; e += 32)
    x[e] /= sum;
}

__global__ void k_topk(int *ids, float *w, const float *probs, int N, int E, int k) {
  GRID_STRIDE(n, N) {
    const float *p = probs + n * E;
    int *id = ids + n * k;
    for (int j = 0; j < k; j++) {
      int best = -1;
      for (int e = 0; e < E; e++) {
        int taken = 0;
        for (int i = 0; i < j; i++)
          taken |= id[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      id[j] = best, w[n * k + j] = p[best];
    }
  }
}

/* a sequence's choices in token order: counted (exactly: small integers), dropped past cap */
__global__ void k_capacity(int *ids, float *w, float *f, int B, int T, int E, int k, float cap) {
  GRID_STRIDE(b, B) {
    float *fb = f + b * E;
    for (int e = 0; e < E; e++)
      fb[e] = 0;
    for (long i = b * T * k; i < (b + 1) * T * k; i++) {
      int e = ids[i];
      if (cap > 0 && fb[e] >= cap) ids[i] = -1, w[i] = 0;
      fb[e] += 1.0f;
    }
    for (int e = 0; e < E; e++)
      fb[e] /= (float)(T * k);
  }
}

/* one block: each (sequence, expert) pair's f * sum of probabilities, summed in double */
__global__ void k_balance(double *out, const float *f, const float *probs, int B, int T, int E) {
  __shared__ double part[TPB];
  double acc = 0;
  for (int i = threadIdx.x; i < B * E; i += blockDim.x) {
    int b = i / E, e = i % E;
    double P = 0;
    for (int t = 0; t < T; t++)
      P += probs[((long)b * T + t) * E + e];
    acc += f[i] * P;
  }
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s /= 2) {
    if ((int)threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = part[0];
}

__global__ void k_gate_bwd(float *dp, const float *probs, const float *f, const int *ids,
                           const float *y, int N, int T, int E, int k, int C, float bal) {
  GRID_STRIDE(n, N) {
    float *d = dp + n * E, dot = 0;
    const float *p = probs + n * E, *fb = f + (n / T) * E;
    for (int e = 0; e < E; e++)
      d[e] = bal * fb[e];
    for (int j = 0; j < k; j++)
      if (ids[n * k + j] >= 0) d[ids[n * k + j]] += y[n * C + j];
    for (int e = 0; e < E; e++)
      dot += p[e] * d[e];
    for (int e = 0; e < E; e++)
      d[e] = p[e] * (d[e] - dot);
  }
}

__global__ void k_rows_bwd(float *gr, float *dy, const float *ry, const float *rw,
                           const float *slot, long R, int C) {
  long r = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32;
  if (r >= R) return;
  float *d = dy + r * C, *g = gr + r * C, s = 0;
  for (int i = lane; i < C; i += 32)
    s += d[i] * ry[r * C + i], d[i] *= rw[r], g[i] = 0;
  s = warp_sum(s);
  __syncwarp();
  if (lane == 0) g[(int)slot[r]] = s;
}

__global__ void k_gather(float *rows, float *rw, const float *x, const float *w, const int *rtok,
                         int C, int k, long n) {
  GRID_STRIDE(i, n) {
    long r = i / C;
    int c = (int)(i % C);
    rows[i] = x[(long)(rtok[r] / k) * C + c];
    if (w && c == 0) rw[r] = w[rtok[r]];
  }
}

__global__ void k_scatter(float *y, const float *rows, const float *rw, const int *rtok, int C,
                          int k, long n) {
  GRID_STRIDE(i, n) {
    long r = i / C;
    atomicAdd(&y[(long)(rtok[r] / k) * C + i % C], (rw ? rw[r] : 1.0f) * rows[i]);
  }
}

void cu_softmax(void *c, float *p, int N, int E) {
  if (N > 0) LAUNCH(c, k_softmax, (N + 7) / 8, TPB, 0, p, N, E);
}

void cu_gate(void *c, int *ids, float *w, float *f, const float *probs, int B, int T, int E, int k,
             float cap) {
  cudaStream_t s = gpt_cuda_stream(c);
  LAUNCH(c, k_topk, blocks((long)B * T), TPB, 0, ids, w, probs, B * T, E, k);
  LAUNCH(c, k_capacity, blocks(B), TPB, 0, ids, w, f, B, T, E, k, cap);
}

double cu_balance(void *c, const float *f, const float *probs, int B, int T, int E) {
  double *d = gpt_cuda_scalar(c), total = 0;
  LAUNCH(c, k_balance, 1, TPB, 0, d, f, probs, B, T, E);
  cudaMemcpyAsync(&total, d, sizeof total, cudaMemcpyDeviceToHost, gpt_cuda_stream(c));
  gpt_cuda_launched(c);
  return gpt_cuda_finish(c) ? NAN : total;
}

void cu_gate_bwd(void *c, float *dp, const float *probs, const float *f, const int *ids,
                 const float *y, int N, int T, int E, int k, int C, float bal) {
  LAUNCH(c, k_gate_bwd, blocks(N), TPB, 0, dp, probs, f, ids, y, N, T, E, k, C, bal);
}

void cu_rows_bwd(void *c, float *gr, float *dy, const float *ry, const float *rw, const float *slot,
                 long R, int C) {
  if (R > 0) LAUNCH(c, k_rows_bwd, (int)((R + 7) / 8), TPB, 0, gr, dy, ry, rw, slot, R, C);
}

void cu_gather(void *c, float *rows, float *rw, const float *x, const float *w, const int *rtok,
               long R, int C, int k) {
  long n = R * C;
  if (n > 0) LAUNCH(c, k_gather, blocks(n), TPB, 0, rows, rw, x, w, rtok, C, k, n);
}

void cu_scatter(void *c, float *y, const float *rows, const float *rw, const int *rtok, long R,
                int C, int k, int N) {
  long n = R * C;
  cudaMemsetAsync(y, 0, sizeof(float) * (size_t)N * C, gpt_cuda_stream(c));
  gpt_cuda_launched(c);
  if (n > 0) LAUNCH(c, k_scatter, blocks(n), TPB, 0, y, rows, rw, rtok, C, k, n);
}

} // namespace

const moe_ops_vt_t moe_ops_cuda = {.softmax = cu_softmax,
                                   .gate = cu_gate,
                                   .balance = cu_balance,
                                   .gate_bwd = cu_gate_bwd,
                                   .rows_bwd = cu_rows_bwd,
                                   .gather = cu_gather,
                                   .scatter = cu_scatter};
