// Copy-engine peer copies between GPU 0 and GPU 1 of one process, as numbers for a future
// copy-engine path: one way and both ways at once, 1 GiB, one way cut into chunks of 1-64 MiB
// issued back to back on one stream (what a chunked pipeline would pay per copy), and an
// alltoall of 4 GiB done the way a path on registered buffers would: each GPU copies its
// peer's block into the peer's output and, on a second stream, its own block locally.
// usage: nvcc -O2 -gencode arch=compute_90,code=sm_90 -o ce_probe ce_probe.cu && ./ce_probe
#include "probe.cuh"

static const size_t BYTES = (size_t)1 << 30;

// Seconds for `reps` rounds of copying BYTES from a (GPU 0) to b (GPU 1) in chunks of
// `chunk` on s0, and, when both, the same from b2 to a2 on s1 at once.
static int timed(char *a, char *b, char *a2, char *b2, size_t chunk, bool both, int reps,
                 cudaStream_t s0, cudaStream_t s1, double *secs) {
  cudaEvent_t e0, e1, f1;
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaSetDevice(1));
  CK(cudaEventCreate(&f1));
  CK(cudaSetDevice(0));
  CK(cudaEventRecord(e0, s0));
  CK(cudaSetDevice(1));
  CK(cudaStreamWaitEvent(s1, e0, 0));
  for (int r = 0; r < reps; r++)
    for (size_t off = 0; off < BYTES; off += chunk) {
      CK(cudaMemcpyAsync(b + off, a + off, chunk, cudaMemcpyDeviceToDevice, s0));
      if (both) CK(cudaMemcpyAsync(a2 + off, b2 + off, chunk, cudaMemcpyDeviceToDevice, s1));
    }
  CK(cudaEventRecord(f1, s1));
  CK(cudaSetDevice(0));
  CK(cudaStreamWaitEvent(s0, f1, 0));
  CK(cudaEventRecord(e1, s0));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  *secs = ms * 1e-3 / reps;
  return 0;
}

/* Alltoall of 2 x half bytes per GPU: snd[g] block 1-g goes to rcv[1-g] block g over the
 * link, block g to rcv[g] block g locally (on a second stream, unless peer_only). */
static int alltoall(size_t half, bool peer_only, double *secs) {
  char *snd[2], *rcv[2];
  cudaStream_t s[2], t[2];
  cudaEvent_t start, done[2], local[2], stop;
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaMalloc(&snd[g], 2 * half));
    CK(cudaMalloc(&rcv[g], 2 * half));
    CK(cudaMemset(snd[g], g + 1, 2 * half));
    CK(cudaStreamCreateWithFlags(&s[g], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&t[g], cudaStreamNonBlocking));
    CK(cudaEventCreate(&done[g]));
    CK(cudaEventCreate(&local[g]));
  }
  CK(cudaSetDevice(0));
  CK(cudaEventCreate(&start));
  CK(cudaEventCreate(&stop));
  CK(cudaDeviceSynchronize());
  CK(cudaSetDevice(1));
  CK(cudaDeviceSynchronize());
  float best = 1e30f;
  for (int rep = 0; rep < 4; rep++) { /* the first warms */
    CK(cudaSetDevice(0));
    CK(cudaEventRecord(start, s[0]));
    for (int g = 0; g < 2; g++) {
      CK(cudaSetDevice(g));
      CK(cudaStreamWaitEvent(s[g], start, 0));
      CK(cudaStreamWaitEvent(t[g], start, 0));
      CK(cudaMemcpyAsync(rcv[1 - g] + g * half, snd[g] + (1 - g) * half, half,
                         cudaMemcpyDeviceToDevice, s[g]));
      if (!peer_only)
        CK(cudaMemcpyAsync(rcv[g] + g * half, snd[g] + g * half, half, cudaMemcpyDeviceToDevice,
                           t[g]));
      CK(cudaEventRecord(done[g], s[g]));
      CK(cudaEventRecord(local[g], t[g]));
    }
    CK(cudaSetDevice(0));
    for (int g = 0; g < 2; g++) {
      CK(cudaStreamWaitEvent(s[0], done[g], 0));
      CK(cudaStreamWaitEvent(s[0], local[g], 0));
    }
    CK(cudaEventRecord(stop, s[0]));
    CK(cudaEventSynchronize(stop));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, start, stop));
    if (rep && ms < best) best = ms;
  }
  *secs = best * 1e-3;
  for (int g = 0; g < 2; g++) {
    CK(cudaSetDevice(g));
    CK(cudaFree(snd[g]));
    CK(cudaFree(rcv[g]));
  }
  return 0;
}

int main() {
  int n = 0, ok01 = 0, ok10 = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "need 2 GPUs\n");
    return 1;
  }
  CK(cudaDeviceCanAccessPeer(&ok01, 0, 1));
  CK(cudaDeviceCanAccessPeer(&ok10, 1, 0));
  char *a, *a2, *b, *b2;
  cudaStream_t s0, s1;
  CK(cudaSetDevice(0));
  if (ok01) CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaMalloc(&a, BYTES));
  CK(cudaMalloc(&a2, BYTES));
  CK(cudaMemset(a, 1, BYTES));
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaSetDevice(1));
  if (ok10) CK(cudaDeviceEnablePeerAccess(0, 0));
  CK(cudaMalloc(&b, BYTES));
  CK(cudaMalloc(&b2, BYTES));
  CK(cudaMemset(b2, 2, BYTES));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CK(cudaDeviceSynchronize());
  printf("peer access 0->1 %d, 1->0 %d\n", ok01, ok10);
  double t = 0;
  if (timed(a, b, a2, b2, BYTES, false, 1, s0, s1, &t)) return 1; /* warm */
  if (timed(a, b, a2, b2, BYTES, false, 5, s0, s1, &t)) return 1;
  printf("one way, 1 GiB copies:           %6.1f GB/s\n", BYTES / t / 1e9);
  if (timed(a, b, a2, b2, BYTES, true, 5, s0, s1, &t)) return 1;
  printf("both ways at once, 1 GiB copies: %6.1f GB/s each way\n", BYTES / t / 1e9);
  for (size_t chunk = (size_t)1 << 20; chunk <= ((size_t)64 << 20); chunk *= 4) {
    if (timed(a, b, a2, b2, chunk, false, 3, s0, s1, &t)) return 1;
    printf("one way, %2zu MiB copies:          %6.1f GB/s\n", chunk >> 20, BYTES / t / 1e9);
  }
  CK(cudaSetDevice(0));
  CK(cudaFree(a));
  CK(cudaFree(a2));
  CK(cudaSetDevice(1));
  CK(cudaFree(b));
  CK(cudaFree(b2));
  const size_t half = (size_t)2 << 30; /* alltoall of 4 GiB: 2 GiB blocks */
  for (int peer_only = 0; peer_only < 2; peer_only++) {
    if (alltoall(half, peer_only, &t)) return 1;
    printf("alltoall 4 GiB%s: %.3f ms, busbw %.1f GB/s (best of 3)\n",
           peer_only ? ", peer blocks only" : ", own block on a second stream", t * 1e3,
           (double)half / t / 1e9);
  }
  return 0;
}
