/* Causal attention in fused kernels for bf16 products (tensor cores through mma.sync), in
 * tiles of 64 queries by 64 keys: the forward keeps each query row's log-sum-exp instead of
 * the [T][T] softmax, and the backward recomputes the softmax tile by tile from it, one kernel
 * for dK and dV per key tile and one for dQ per query tile (no atomics: every sum keeps its
 * order). Scores, softmax and sums stay in registers, in f32; head sizes are multiples of 16
 * up to 128. */
#include <math.h>

#include "ops_cuda.h"

namespace {

typedef __nv_bfloat16 bf16;

const int TILE = 64, THREADS = 128; /* four warps, 16 rows of the tile each */
const int NB = TILE / 8;            /* a row's 8-column blocks of scores */
const float LOG2E = 1.4426950408889634f;

/* ---- the tensor cores' fragments (PTX ISA, mma.m16n8k16 with bf16): lane l holds rows
 * l / 4 and l / 4 + 8, columns 2 (l % 4) and the next of each 8-column block ---- */

__device__ inline uint32_t smem_addr(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* the A operand of rows row0.. and columns col0.. (16 x 16) of a row-major bf16 tile */
__device__ inline void ld_a(uint32_t a[4], const bf16 *t, int ld, int row0, int col0) {
  int l = threadIdx.x % 32;
  uint32_t p = smem_addr(t + (row0 + l % 16) * ld + col0 + l / 16 * 8);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(a[0]), "=r"(a[1]), "=r"(a[2]), "=r"(a[3])
               : "r"(p));
}

/* B operands of two 8-column blocks (n0.., n0 + 8..) over k0..k0 + 15: from a tile holding
 * B^T row-major ([n][k], trans 0) or B itself ([k][n], trans 1) */
__device__ inline void ld_b2(uint32_t b[4], const bf16 *t, int ld, int k0, int n0, int trans) {
  int l = threadIdx.x % 32;
  if (!trans) {
    uint32_t p = smem_addr(t + (n0 + l % 8 + l / 16 * 8) * ld + k0 + l / 8 % 2 * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(p));
  } else {
    uint32_t p = smem_addr(t + (k0 + l % 8 + l / 8 % 2 * 8) * ld + n0 + l / 16 * 8);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(b[0]), "=r"(b[1]), "=r"(b[2]), "=r"(b[3])
                 : "r"(p));
  }
}

__device__ inline void mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ inline uint32_t pack(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}

/* s[16][64] = X[row0..][hs] . Y[64][hs]^T, X and Y row-major tiles */
template <int HS>
__device__ void rows_by_rows(float s[NB][4], const bf16 *X, const bf16 *Y, int ld, int row0) {
  for (int j = 0; j < NB; j++)
    s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
  for (int k = 0; k < HS / 16; k++) {
    uint32_t a[4];
    ld_a(a, X, ld, row0, 16 * k);
    for (int j = 0; j < NB; j += 2) {
      uint32_t b[4];
      ld_b2(b, Y, ld, 16 * k, 8 * j, 0);
      mma(s[j], a, b[0], b[1]);
      mma(s[j + 1], a, b[2], b[3]);
    }
  }
}

/* acc[16][hs] += p[16][64] (registers, as rows_by_rows leaves them) . Y[64][hs] */
template <int HS>
__device__ void regs_by_tile(float acc[HS / 8][4], const float p[NB][4], const bf16 *Y, int ld) {
  for (int k = 0; k < TILE / 16; k++) {
    uint32_t a[4] = {pack(p[2 * k][0], p[2 * k][1]), pack(p[2 * k][2], p[2 * k][3]),
                     pack(p[2 * k + 1][0], p[2 * k + 1][1]),
                     pack(p[2 * k + 1][2], p[2 * k + 1][3])};
    for (int n = 0; n < HS / 8; n += 2) {
      uint32_t b[4];
      ld_b2(b, Y, ld, 16 * k, 8 * n, 1);
      mma(acc[n], a, b[0], b[1]);
      mma(acc[n + 1], a, b[2], b[3]);
    }
  }
}

/* dst[row0 + r][c] += acc (rows past T skipped) */
template <int HS>
__device__ void add_rows(float *dst, long stride, int row0, int T, const float acc[HS / 8][4]) {
  int l = threadIdx.x % 32;
  for (int half = 0; half < 2; half++) {
    int row = row0 + l / 4 + 8 * half;
    if (row >= T) continue;
    float *d = dst + (long)row * stride + 2 * (l % 4);
    for (int n = 0; n < HS / 8; n++)
      d[8 * n] += acc[n][2 * half], d[8 * n + 1] += acc[n][2 * half + 1];
  }
}

/* A bf16 tile [64][hs] (row stride ld) from rows row0.. of a row-major bf16 matrix (row
 * stride `stride`, 16-byte aligned rows); rows past T are zeros. */
template <int HS>
__device__ void load_tile(bf16 *dst, int ld, const bf16 *src, long stride, int row0, int T) {
  for (int i = threadIdx.x; i < TILE * HS / 8; i += THREADS) {
    int r = i / (HS / 8), c = i % (HS / 8) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (row0 + r < T) v = *reinterpret_cast<const uint4 *>(src + (long)(row0 + r) * stride + c);
    *reinterpret_cast<uint4 *>(dst + r * ld + c) = v;
  }
}

__device__ void load_rows(float *dst, const float *src, int row0, int T) {
  for (int i = threadIdx.x; i < TILE; i += THREADS)
    dst[i] = row0 + i < T ? src[row0 + i] : 0.0f;
}

/* Whether score (query q, key k) counts: causal, and inside the sequence. */
__device__ inline bool seen(int q, int k, int T) { return k <= q && q < T; }

template <int HS> struct tiles {
  static const int LD = HS + 8; /* rows 16-byte aligned, ldmatrix without bank conflicts */
  static const size_t ONE = (size_t)TILE * LD * sizeof(bf16);
  static const size_t FWD = 3 * ONE;
  static const size_t BWD = 4 * ONE + 2 * TILE * sizeof(float);
};

/* one block a query tile of one (batch element, head): out [B][T][C] and lse [B][NH][T] (base
 * 2, of the scores times scale) from q [B][T][3C] in bf16 */
template <int HS>
__global__ void __launch_bounds__(THREADS)
    k_fwd(float *out, float *lse, const bf16 *qkv, int T, int C, int NH, float scale2) {
  typedef tiles<HS> L;
  extern __shared__ __align__(128) unsigned char sm[];
  bf16 *sQ = reinterpret_cast<bf16 *>(sm), *sK = sQ + TILE * L::LD, *sV = sK + TILE * L::LD;
  int qt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, w = threadIdx.x / 32;
  int l = threadIdx.x % 32, q0 = qt * TILE + 16 * w + l / 4; /* and q0 + 8 */
  long q3 = 3L * C;
  const bf16 *base = qkv + (long)b * T * q3 + h * HS;
  load_tile<HS>(sQ, L::LD, base, q3, qt * TILE, T);
  float o[HS / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, sum[2] = {0, 0};
  for (int kt = 0; kt <= qt; kt++) {
    __syncthreads(); /* the last tile's readers are done */
    load_tile<HS>(sK, L::LD, base + C, q3, kt * TILE, T);
    load_tile<HS>(sV, L::LD, base + 2 * C, q3, kt * TILE, T);
    __syncthreads();
    float s[NB][4];
    rows_by_rows<HS>(s, sQ, sK, L::LD, 16 * w);
    float most[2] = {-INFINITY, -INFINITY};
    for (int j = 0; j < NB; j++)
      for (int e = 0; e < 4; e++) {
        int k = kt * TILE + 8 * j + 2 * (l % 4) + e % 2, r = e / 2;
        s[j][e] = seen(q0 + 8 * r, k, T) ? s[j][e] * scale2 : -INFINITY;
        most[r] = fmaxf(most[r], s[j][e]);
      }
    float alpha[2], add[2] = {0, 0};
    for (int r = 0; r < 2; r++) {
      most[r] = fmaxf(most[r], __shfl_xor_sync(0xffffffffu, most[r], 1));
      most[r] = fmaxf(most[r], __shfl_xor_sync(0xffffffffu, most[r], 2));
      float mn = fmaxf(m[r], most[r]);
      alpha[r] = mn == -INFINITY ? 1.0f : exp2f(m[r] - mn);
      m[r] = mn;
    }
    for (int j = 0; j < NB; j++)
      for (int e = 0; e < 4; e++) {
        int r = e / 2;
        s[j][e] = s[j][e] == -INFINITY ? 0.0f : exp2f(s[j][e] - m[r]);
        add[r] += s[j][e];
      }
    for (int r = 0; r < 2; r++) {
      add[r] += __shfl_xor_sync(0xffffffffu, add[r], 1);
      add[r] += __shfl_xor_sync(0xffffffffu, add[r], 2);
      sum[r] = sum[r] * alpha[r] + add[r];
    }
    for (int n = 0; n < HS / 8; n++)
      for (int e = 0; e < 4; e++)
        o[n][e] *= alpha[e / 2];
    regs_by_tile<HS>(o, s, sV, L::LD);
  }
  for (int r = 0; r < 2; r++) {
    int q = q0 + 8 * r;
    if (q >= T) continue;
    float *d = out + ((long)b * T + q) * C + h * HS + 2 * (l % 4);
    for (int n = 0; n < HS / 8; n++)
      d[8 * n] = o[n][2 * r] / sum[r], d[8 * n + 1] = o[n][2 * r + 1] / sum[r];
    if (l % 4 == 0) lse[(long)bh * T + q] = m[r] + log2f(sum[r]);
  }
}

/* D[b][h][t] = dout . out over the head's columns: the softmax backward's row term; a warp
 * a row, rows in (b, t, h) order so that a block's warps share cache lines */
__global__ void k_delta(float *D, const float *dout, const float *out, int T, int C, int NH,
                        long rows) {
  long row = (long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  int lane = threadIdx.x % 32, hs = C / NH;
  if (row >= rows) return;
  long bt = row / NH;
  int h = (int)(row % NH);
  const float *d = dout + bt * C + h * hs, *o = out + bt * C + h * hs;
  float acc = 0;
  for (int i = lane; i < hs; i += 32)
    acc += d[i] * o[i];
  acc = warp_sum(acc);
  long b = bt / T, t = bt % T;
  if (!lane) D[(b * NH + h) * T + t] = acc;
}

/* p = the softmax of scores s (base 2, scaled) against lse, then (dp given) ds = p (dp - D)
 * scale, in place; rows and columns of the registers as queries or keys (keys_rows: the rows
 * are keys, the dK/dV kernel's transposed tiles). lse and D: per query, from shared memory
 * (kernel dK/dV: the columns') or registers (dQ: the two rows'). */
__device__ inline void softmax_p(float s[NB][4], int row0, int col0, int T, float scale2,
                                 const float *lse_c, const float lse_r[2], int keys_rows) {
  int l = threadIdx.x % 32;
  for (int j = 0; j < NB; j++)
    for (int e = 0; e < 4; e++) {
      int row = row0 + l / 4 + 8 * (e / 2), col = col0 + 8 * j + 2 * (l % 4) + e % 2;
      int q = keys_rows ? col : row, k = keys_rows ? row : col;
      float lq = keys_rows ? lse_c[col - col0] : lse_r[e / 2];
      s[j][e] = seen(q, k, T) ? exp2f(s[j][e] * scale2 - lq) : 0.0f;
    }
}

__device__ inline void softmax_ds(float p[NB][4], const float dp[NB][4], const float *D_c,
                                  const float D_r[2], float scale, int keys_rows) {
  int l = threadIdx.x % 32;
  for (int j = 0; j < NB; j++)
    for (int e = 0; e < 4; e++)
      p[j][e] *= (dp[j][e] - (keys_rows ? D_c[8 * j + 2 * (l % 4) + e % 2] : D_r[e / 2])) * scale;
}

/* one block a key tile: dK and dV added into dqkv (f32), from q, k, v and dout in bf16 */
template <int HS>
__global__ void __launch_bounds__(THREADS)
    k_dkdv(float *dqkv, const bf16 *qkv, const bf16 *dout, const float *lse, const float *D, int T,
           int C, int NH, float scale, float scale2) {
  typedef tiles<HS> L;
  extern __shared__ __align__(128) unsigned char sm[];
  bf16 *sK = reinterpret_cast<bf16 *>(sm), *sV = sK + TILE * L::LD, *sQ = sV + TILE * L::LD;
  bf16 *sdO = sQ + TILE * L::LD;
  float *sL = reinterpret_cast<float *>(sdO + TILE * L::LD), *sD = sL + TILE;
  int kt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, w = threadIdx.x / 32;
  long q3 = 3L * C;
  const bf16 *base = qkv + (long)b * T * q3 + h * HS, *dy = dout + (long)b * T * C + h * HS;
  load_tile<HS>(sK, L::LD, base + C, q3, kt * TILE, T);
  load_tile<HS>(sV, L::LD, base + 2 * C, q3, kt * TILE, T);
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  const float none[2] = {0, 0};
  for (int qt = kt; qt * TILE < T; qt++) {
    __syncthreads();
    load_tile<HS>(sQ, L::LD, base, q3, qt * TILE, T);
    load_tile<HS>(sdO, L::LD, dy, C, qt * TILE, T);
    load_rows(sL, lse + (long)bh * T, qt * TILE, T);
    load_rows(sD, D + (long)bh * T, qt * TILE, T);
    __syncthreads();
    float p[NB][4], dp[NB][4];
    rows_by_rows<HS>(p, sK, sQ, L::LD, 16 * w); /* S^T = K Q^T */
    softmax_p(p, kt * TILE + 16 * w, qt * TILE, T, scale2, sL, none, 1);
    regs_by_tile<HS>(dv, p, sdO, L::LD);          /* dV += P^T dO */
    rows_by_rows<HS>(dp, sV, sdO, L::LD, 16 * w); /* dP^T = V dO^T */
    softmax_ds(p, dp, sD, none, scale, 1);
    regs_by_tile<HS>(dk, p, sQ, L::LD); /* dK += dS^T Q */
  }
  float *dst = dqkv + (long)b * T * q3 + h * HS;
  add_rows<HS>(dst + C, q3, kt * TILE + 16 * w, T, dk);
  add_rows<HS>(dst + 2 * C, q3, kt * TILE + 16 * w, T, dv);
}

/* one block a query tile: dQ added into dqkv */
template <int HS>
__global__ void __launch_bounds__(THREADS)
    k_dq(float *dqkv, const bf16 *qkv, const bf16 *dout, const float *lse, const float *D, int T,
         int C, int NH, float scale, float scale2) {
  typedef tiles<HS> L;
  extern __shared__ __align__(128) unsigned char sm[];
  bf16 *sQ = reinterpret_cast<bf16 *>(sm), *sdO = sQ + TILE * L::LD, *sK = sdO + TILE * L::LD;
  bf16 *sV = sK + TILE * L::LD;
  int qt = blockIdx.x, bh = blockIdx.y, b = bh / NH, h = bh % NH, w = threadIdx.x / 32;
  int l = threadIdx.x % 32, q0 = qt * TILE + 16 * w + l / 4;
  long q3 = 3L * C;
  const bf16 *base = qkv + (long)b * T * q3 + h * HS, *dy = dout + (long)b * T * C + h * HS;
  load_tile<HS>(sQ, L::LD, base, q3, qt * TILE, T);
  load_tile<HS>(sdO, L::LD, dy, C, qt * TILE, T);
  float lq[2], dq_[2];
  for (int r = 0; r < 2; r++) {
    int q = q0 + 8 * r;
    lq[r] = q < T ? lse[(long)bh * T + q] : 0.0f, dq_[r] = q < T ? D[(long)bh * T + q] : 0.0f;
  }
  float dq[HS / 8][4] = {};
  for (int kt = 0; kt <= qt; kt++) {
    __syncthreads();
    load_tile<HS>(sK, L::LD, base + C, q3, kt * TILE, T);
    load_tile<HS>(sV, L::LD, base + 2 * C, q3, kt * TILE, T);
    __syncthreads();
    float p[NB][4], dp[NB][4];
    rows_by_rows<HS>(p, sQ, sK, L::LD, 16 * w); /* S = Q K^T */
    softmax_p(p, qt * TILE + 16 * w, kt * TILE, T, scale2, nullptr, lq, 0);
    rows_by_rows<HS>(dp, sdO, sV, L::LD, 16 * w); /* dP = dO V^T */
    softmax_ds(p, dp, nullptr, dq_, scale, 0);
    regs_by_tile<HS>(dq, p, sK, L::LD); /* dQ += dS K */
  }
  add_rows<HS>(dqkv + (long)b * T * q3 + h * HS, q3, qt * TILE + 16 * w, T, dq);
}

/* The kernels of one head size: their shared memory allowed (once a context), launched. */
template <int HS> struct fused {
  static int fits(gpt_cuda_t *x) {
    const unsigned bit = 1u << (HS / 16);
    if (x->fused_ready & bit) return 0;
    if (cudaFuncSetAttribute(k_fwd<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)tiles<HS>::FWD) != cudaSuccess ||
        cudaFuncSetAttribute(k_dkdv<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)tiles<HS>::BWD) != cudaSuccess ||
        cudaFuncSetAttribute(k_dq<HS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)tiles<HS>::BWD) != cudaSuccess) {
      cudaGetLastError(); /* not here: the unfused path serves */
      return -1;
    }
    x->fused_ready |= bit;
    return 0;
  }
  static int fwd(gpt_cuda_t *x, float *out, float *lse, const bf16 *qkv, int B, int T, int C,
                 int NH, float scale) {
    dim3 grid((T + TILE - 1) / TILE, B * NH);
    LAUNCH(x, k_fwd<HS>, grid, THREADS, tiles<HS>::FWD, out, lse, qkv, T, C, NH, scale * LOG2E);
    return 0;
  }
  static int bwd(gpt_cuda_t *x, float *dqkv, const bf16 *dout, const bf16 *qkv, const float *lse,
                 const float *D, int B, int T, int C, int NH, float scale) {
    dim3 grid((T + TILE - 1) / TILE, B * NH);
    LAUNCH(x, k_dkdv<HS>, grid, THREADS, tiles<HS>::BWD, dqkv, qkv, dout, lse, D, T, C, NH, scale,
           scale * LOG2E);
    LAUNCH(x, k_dq<HS>, grid, THREADS, tiles<HS>::BWD, dqkv, qkv, dout, lse, D, T, C, NH, scale,
           scale * LOG2E);
    return 0;
  }
};

} // namespace

/* The head sizes with kernels: a switch over the template's instances (-1: none). */
#define FUSED_SIZES(hs, f, ...)                                                                    \
  switch (hs) {                                                                                    \
  case 16: return fused<16>::f(__VA_ARGS__);                                                       \
  case 32: return fused<32>::f(__VA_ARGS__);                                                       \
  case 48: return fused<48>::f(__VA_ARGS__);                                                       \
  case 64: return fused<64>::f(__VA_ARGS__);                                                       \
  case 80: return fused<80>::f(__VA_ARGS__);                                                       \
  case 96: return fused<96>::f(__VA_ARGS__);                                                       \
  case 112: return fused<112>::f(__VA_ARGS__);                                                     \
  case 128: return fused<128>::f(__VA_ARGS__);                                                     \
  default: return -1;                                                                              \
  }

/* bf16 products and a head size above */
int gpt_cuda_fused_serves(gpt_cuda_t *x, int C, int NH) {
  if (!x->bf16 || NH < 1 || C % NH) return -1;
  FUSED_SIZES(C / NH, fits, x)
}

int gpt_cuda_fused_fwd(gpt_cuda_t *x, float *out, float *att, const float *qkv, int B, int T, int C,
                       int NH) {
  if (gpt_cuda_fused_serves(x, C, NH)) return -1;
  float scale = 1.0f / sqrtf((float)(C / NH));
  if ((long)B * T == 0) return 0;
  const bf16 *Q = static_cast<const bf16 *>(gpt_cuda_in(x, 0, qkv, (size_t)B * T * 3 * C));
  if (!Q) return 0; /* x->oom: the next finish reports it */
  FUSED_SIZES(C / NH, fwd, x, out, att, Q, B, T, C, NH, scale)
}

int gpt_cuda_fused_bwd(gpt_cuda_t *x, float *dqkv, const float *dout, const float *qkv,
                       const float *out, const float *att, int B, int T, int C, int NH) {
  if (gpt_cuda_fused_serves(x, C, NH)) return -1;
  long rows = (long)B * T * NH;
  float scale = 1.0f / sqrtf((float)(C / NH));
  if (!rows) return 0;
  float *D = gpt_cuda_scratch(x, (size_t)rows);
  const bf16 *Q = static_cast<const bf16 *>(gpt_cuda_in(x, 0, qkv, (size_t)B * T * 3 * C));
  const bf16 *DY = static_cast<const bf16 *>(gpt_cuda_in(x, 2, dout, (size_t)B * T * C));
  if (!D || !Q || !DY) return 0; /* x->oom: the next finish reports it */
  LAUNCH(x, k_delta, (int)((rows + 7) / 8), TPB, 0, D, dout, out, T, C, NH, rows);
  FUSED_SIZES(C / NH, bwd, x, dqkv, DY, Q, att, D, B, T, C, NH, scale)
}
