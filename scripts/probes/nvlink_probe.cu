// NVLink write ceilings between GPU 0 and GPU 1 of one process, one way and both ways at once,
// 1 GiB: the SMs' 16-byte stores into the peer (grid-stride, and a contiguous piece per block
// as weft's channels do), the SMs' 16-byte loads from the peer, bulk copies (cp.async.bulk:
// global -> shared memory -> the peer's global, the Hopper copy unit each SM has) and the copy
// engines (cudaMemcpyAsync), for the question whether anything but the copy engines passes
// the ~364 GB/s weft's kernels reach.
// usage: nvcc -O2 -gencode arch=compute_90,code=sm_90 -o nvlink_probe nvlink_probe.cu
//        && ./nvlink_probe [random] [plus64]   (the CUDA build also makes
//        build/scripts/probes/nvlink_probe, with -Dprobes=true)
#include <cstdint>
#include <cstring>

#include "probe.cuh"

static const size_t BYTES = (size_t)1 << 30;

/* n vectors from src to dst by threads t, t + nt, ..., four loads in flight per thread */
__device__ __forceinline__ void copy_vecs(uint4 *dst, const uint4 *src, size_t n, size_t t,
                                          size_t nt) {
  size_t i = t;
  for (; i + 3 * nt < n; i += 4 * nt) {
    uint4 a = src[i], b = src[i + nt], c = src[i + 2 * nt], d = src[i + 3 * nt];
    dst[i] = a, dst[i + nt] = b, dst[i + 2 * nt] = c, dst[i + 3 * nt] = d;
  }
  for (; i < n; i += nt)
    dst[i] = src[i];
}

__global__ void sm_stride(uint4 *dst, const uint4 *src, size_t n) {
  copy_vecs(dst, src, n, blockIdx.x * (size_t)blockDim.x + threadIdx.x,
            (size_t)gridDim.x * blockDim.x);
}

/* Each block copies pieces of `piece` bytes, piece b, b + grid, ... as a channel would. */
__global__ void sm_pieces(uint4 *dst, const uint4 *src, size_t n, size_t piece) {
  size_t pv = piece / 16, np = n / pv;
  for (size_t p = blockIdx.x; p < np; p += gridDim.x)
    copy_vecs(dst + p * pv, src + p * pv, pv, threadIdx.x, blockDim.x);
}

__device__ __forceinline__ uint32_t sh(const void *p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}

/* One thread per block moves pieces through S shared-memory buffers: a bulk load completes on
 * the buffer's mbarrier, a bulk store sends it to the peer; a buffer is loaded again once the
 * store before has read it (wait_group.read), so several stores stay in flight over the link. */
template <int S>
__global__ void bulk_push(char *dst, const char *src, size_t bytes, uint32_t piece) {
  extern __shared__ __align__(128) char buf[];
  __shared__ __align__(8) uint64_t bar[S];
  if (threadIdx.x != 0) return;
  size_t np = bytes / piece;
  for (int s = 0; s < S; s++)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sh(&bar[s])));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  auto load = [&](size_t k) {
    size_t p = blockIdx.x + k * gridDim.x;
    if (p >= np) return;
    int s = (int)(k % S);
    uint64_t st;
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;"
                 : "=l"(st)
                 : "r"(sh(&bar[s])), "r"(piece)
                 : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(sh(buf + (size_t)s * piece)),
                 "l"(src + p * piece), "r"(piece), "r"(sh(&bar[s]))
                 : "memory");
  };
  for (int k = 0; k < S; k++)
    load(k);
  for (size_t k = 0;; k++) {
    size_t p = blockIdx.x + k * gridDim.x;
    if (p >= np) break;
    int s = (int)(k % S);
    uint32_t parity = (uint32_t)((k / S) & 1), done = 0;
    while (!done)
      asm volatile("{ .reg .pred q; mbarrier.try_wait.parity.shared::cta.b64 q, [%1], %2; "
                   "selp.u32 %0, 1, 0, q; }"
                   : "=r"(done)
                   : "r"(sh(&bar[s])), "r"(parity)
                   : "memory");
    asm volatile(
        "cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst + p * piece),
        "r"(sh(buf + (size_t)s * piece)), "r"(piece)
        : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    load(k + S);
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

enum { SM_STRIDE, SM_PIECES, SM_PULL, BULK, CE };
struct Cfg {
  int how, blocks, threads;
  uint32_t piece;
};

/* Seconds per copy of BYTES: GPU 0 writes a into b (on GPU 1), and when both, GPU 1 writes b2
 * into a2 (on GPU 0) at the same time. A pull is the same traffic read by the other side. */
static int run(const Cfg &c, char *a, char *b, char *a2, char *b2, bool both, int reps,
               cudaStream_t s[2], double *secs) {
  cudaEvent_t e0, e1, f1;
  CK(cudaSetDevice(1));
  CK(cudaEventCreate(&f1));
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaEventRecord(e0, s[0]));
  CK(cudaSetDevice(1));
  CK(cudaStreamWaitEvent(s[1], e0, 0));
  const size_t smem = (size_t)4 * c.piece;
  for (int g = 0; g < 2 && c.how == BULK; g++) {
    CK(cudaSetDevice(g));
    CK(cudaFuncSetAttribute(bulk_push<4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
  }
  for (int r = 0; r < reps; r++)
    for (int g = 0; g < (both ? 2 : 1); g++) {
      /* the traffic: from GPU g's src to GPU 1-g's dst */
      char *src = g ? b2 : a, *dst = g ? a2 : b;
      int runner = c.how == SM_PULL ? 1 - g : g; /* a pull runs on the receiving GPU */
      CK(cudaSetDevice(runner));
      switch (c.how) {
      case SM_STRIDE:
      case SM_PULL:
        sm_stride<<<c.blocks, c.threads, 0, s[runner]>>>((uint4 *)dst, (const uint4 *)src,
                                                         BYTES / 16);
        break;
      case SM_PIECES:
        sm_pieces<<<c.blocks, c.threads, 0, s[runner]>>>((uint4 *)dst, (const uint4 *)src,
                                                         BYTES / 16, c.piece);
        break;
      case BULK: bulk_push<4><<<c.blocks, 32, smem, s[runner]>>>(dst, src, BYTES, c.piece); break;
      default: CK(cudaMemcpyAsync(dst, src, BYTES, cudaMemcpyDeviceToDevice, s[runner]));
      }
      CK(cudaGetLastError());
    }
  CK(cudaSetDevice(1));
  CK(cudaEventRecord(f1, s[1]));
  CK(cudaSetDevice(0));
  CK(cudaStreamWaitEvent(s[0], f1, 0));
  CK(cudaEventRecord(e1, s[0]));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  *secs = ms * 1e-3 / reps;
  return 0;
}

/* option: random (the sources hold varied bytes instead of one repeated byte) */
int main(int argc, char **argv) {
  bool random_fill = false;
  size_t extra = 0; /* bytes allocated past BYTES: plus64 as collbench did (max + 64) */
  for (int i = 1; i < argc; i++) {
    random_fill |= !strcmp(argv[i], "random");
    if (!strcmp(argv[i], "plus64")) extra = 64;
  }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "need 2 GPUs\n");
    return 1;
  }
  char *a, *a2, *b, *b2;
  cudaStream_t s[2];
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaDeviceEnablePeerAccess(1 - g, 0));
    CK(cudaStreamCreateWithFlags(&s[g], cudaStreamNonBlocking));
  }
  CK(cudaSetDevice(0));
  CK(cudaMalloc(&a, BYTES + extra));
  CK(cudaMalloc(&a2, BYTES + extra));
  CK(cudaMemset(a, 1, BYTES));
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&b, BYTES + extra));
  CK(cudaMalloc(&b2, BYTES + extra));
  CK(cudaMemset(b2, 2, BYTES));
  if (random_fill) {
    fill<<<1024, 256>>>((unsigned *)b2, BYTES / 4, 2u);
    CK(cudaSetDevice(0));
    fill<<<1024, 256>>>((unsigned *)a, BYTES / 4, 1u);
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(1));
  }
  CK(cudaDeviceSynchronize());
  const Cfg cfgs[] = {
      {CE, 0, 0, 0},
      {SM_STRIDE, 64, 512, 0},
      {SM_STRIDE, 128, 512, 0},
      {SM_STRIDE, 264, 512, 0},
      {SM_STRIDE, 132, 1024, 0},
      {SM_PIECES, 64, 512, 1 << 19},
      {SM_PIECES, 128, 512, 1 << 19},
      {SM_PIECES, 128, 512, 1 << 20},
      {SM_PULL, 128, 512, 0},
      {SM_PULL, 264, 512, 0},
      {BULK, 64, 32, 1 << 15},
      {BULK, 132, 32, 1 << 15},
      {BULK, 264, 32, 1 << 14},
      {BULK, 132, 32, 1 << 14},
      {BULK, 132, 32, 1 << 13},
      {BULK, 264, 32, 1 << 15},
  };
  const char *names[] = {"sm stores, grid-stride", "sm stores, a piece per block",
                         "sm loads from the peer", "bulk copies via shared memory",
                         "copy engine (cudaMemcpyAsync)"};
  printf("# %-30s %7s %7s %8s %12s %12s\n", "how", "blocks", "threads", "piece", "one way",
         "each way (both)");
  for (const Cfg &c : cfgs) {
    double t1 = 0, t2 = 0;
    if (run(c, a, b, a2, b2, false, 1, s, &t1)) return 1; /* warm */
    if (run(c, a, b, a2, b2, false, 5, s, &t1)) return 1;
    if (run(c, a, b, a2, b2, true, 5, s, &t2)) return 1;
    printf("  %-30s %7d %7d %8u %7.1f GB/s %7.1f GB/s\n", names[c.how], c.blocks, c.threads,
           c.piece, BYTES / t1 / 1e9, BYTES / t2 / 1e9);
  }
  /* the bulk copies deliver every byte: one more run into a cleared buffer, read back */
  const Cfg chk = {BULK, 132, 32, 1 << 14};
  double t = 0;
  CK(cudaSetDevice(0));
  CK(cudaMemset(a, 1, BYTES)); /* a known source, random or not before */
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(1));
  CK(cudaMemset(b, 0, BYTES));
  CK(cudaDeviceSynchronize());
  if (run(chk, a, b, a2, b2, false, 1, s, &t)) return 1;
  static unsigned char h[1 << 20];
  size_t wrong = 0;
  CK(cudaSetDevice(1));
  for (size_t off = 0; off < BYTES; off += sizeof h) {
    CK(cudaMemcpy(h, b + off, sizeof h, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof h; i++)
      wrong += h[i] != 1;
  }
  printf("# check: %zu of %zu bytes wrong after a bulk copy\n", wrong, BYTES);
  return 0;
}
