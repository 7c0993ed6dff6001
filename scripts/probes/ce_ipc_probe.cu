// Copy-engine peer copies between two processes, one per GPU, through CUDA IPC mappings (as
// weft's windows map their peers): one way, both ways at once, pulls, and both ways on two
// streams each; the single-process numbers are in ce_probe.cu. Answers: such copies
// run at 392 GB/s each way as within a process, but at 272-296 into allocations that are not
// whole 2 MiB pages (plus64), and at half that beside a kernel polling host memory (hostspin);
// the SMs' stores (sm) reach 365 either way (bench/results/2026-11-30-h200x2-ipc-probe.txt).
// usage: nvcc -O2 -gencode arch=compute_90,code=sm_90 -o ce_ipc_probe ce_ipc_probe.cu
//        && ./ce_ipc_probe [peer] [spin|hostspin] [random] [plus64] [sm]
//        (the CUDA build also makes it: build/ce_ipc_probe, with -Dprobes=true)
#include <cstring>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "probe.cuh"

static const size_t BYTES = (size_t)1 << 30;
static int spin_mode;   /* 1: a kernel polls local memory during the copies, 2: host memory */
static int random_fill; /* src holds varied bytes instead of one repeated byte */
static size_t extra;    /* bytes allocated past BYTES (collbench allocated max + 64) */
static int sm_copies;   /* the SMs' 16-byte stores (or loads) instead of the copy engines */

__global__ void sm_copy(uint4 *dst, const uint4 *src, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

/* What a waiting weft kernel does beside the copies: one block polls a line for `ns`. */
__global__ void spin(const volatile unsigned *line, unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  unsigned sink = 0;
  do {
    sink += *line;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  } while (t - t0 < ns);
  if (sink == 12345u) printf("");
}

static int xchg(int fd, const void *mine, void *theirs, size_t n) {
  if (write(fd, mine, n) != (ssize_t)n) return 1;
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, (char *)theirs + got, n - got);
    if (r <= 0) return 1;
    got += (size_t)r;
  }
  return 0;
}

static int barrier(int fd) {
  char a = 0, b = 0;
  return xchg(fd, &a, &b, 1);
}

/* Each rank's copies: `active` says whether this rank copies in this test; pieces of `chunk`
 * spread round-robin over `nstreams` streams; pull reads the peer's src into the own dst. */
static int test(int rank, int fd, const char *name, bool active, bool pull, int nstreams,
                size_t chunk, char *src, char *dst, char *peer_src, char *peer_dst,
                cudaStream_t *s) {
  const int reps = 5;
  cudaEvent_t e0, e1, done[4];
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < nstreams; i++)
    CK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
  CK(cudaDeviceSynchronize());
  if (barrier(fd)) return 1;
  static unsigned *line;
  if (spin_mode && !line) {
    if (spin_mode == 1)
      CK(cudaMalloc(&line, 128));
    else
      CK(cudaHostAlloc(&line, 128, cudaHostAllocMapped));
  }
  if (spin_mode) spin<<<1, 256, 0, s[3]>>>(line, 40000000ull);
  CK(cudaEventRecord(e0, s[0]));
  for (int i = 1; i < nstreams; i++)
    CK(cudaStreamWaitEvent(s[i], e0, 0));
  if (active)
    for (int r = 0; r < reps; r++)
      for (size_t off = 0, k = 0; off < BYTES; off += chunk, k++) {
        char *to = pull ? dst + off : peer_dst + off;
        const char *from = pull ? peer_src + off : src + off;
        if (sm_copies)
          sm_copy<<<264, 512, 0, s[k % nstreams]>>>((uint4 *)to, (const uint4 *)from, chunk / 16);
        else
          CK(cudaMemcpyAsync(to, from, chunk, cudaMemcpyDeviceToDevice, s[k % nstreams]));
      }
  for (int i = 1; i < nstreams; i++) {
    CK(cudaEventRecord(done[i], s[i]));
    CK(cudaStreamWaitEvent(s[0], done[i], 0));
  }
  CK(cudaEventRecord(e1, s[0]));
  CK(cudaEventSynchronize(e1));
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, e0, e1));
  if (active && strcmp(name, "warm"))
    printf("rank %d %-40s %7.1f GB/s\n", rank, name, BYTES * reps / (ms * 1e-3) / 1e9);
  fflush(stdout);
  if (barrier(fd)) return 1;
  return 0;
}

static int rank_main(int rank, int fd, bool peer) {
  probe_who = rank ? "rank 1: " : "rank 0: ";
  CK(cudaSetDevice(rank));
  if (peer) CK(cudaDeviceEnablePeerAccess(1 - rank, 0));
  char *src, *dst, *peer_src = nullptr, *peer_dst = nullptr;
  cudaStream_t s[4];
  for (int i = 0; i < 4; i++)
    CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
  CK(cudaMalloc(&src, BYTES + extra));
  CK(cudaMalloc(&dst, BYTES + extra));
  CK(cudaMemset(src, rank + 1, BYTES));
  if (random_fill) {
    fill<<<1024, 256>>>((unsigned *)src, BYTES / 4, 77u + rank);
    CK(cudaDeviceSynchronize());
  }
  CK(cudaMemset(dst, 0, BYTES));
  cudaIpcMemHandle_t mine[2], theirs[2];
  CK(cudaIpcGetMemHandle(&mine[0], src));
  CK(cudaIpcGetMemHandle(&mine[1], dst));
  if (xchg(fd, mine, theirs, sizeof mine)) return 1;
  CK(cudaIpcOpenMemHandle((void **)&peer_src, theirs[0], cudaIpcMemLazyEnablePeerAccess));
  CK(cudaIpcOpenMemHandle((void **)&peer_dst, theirs[1], cudaIpcMemLazyEnablePeerAccess));
  const size_t G = BYTES, M64 = (size_t)64 << 20;
  struct {
    const char *name;
    bool only0, pull;
    int nstreams;
    size_t chunk;
  } t[] = {
      {"push, one way, 1 GiB copies", true, false, 1, G},
      {"push, both ways, 1 GiB copies", false, false, 1, G},
      {"push, both ways, 64 MiB copies", false, false, 1, M64},
      {"push, both ways, 64 MiB on 2 streams", false, false, 2, M64},
      {"push, both ways, 64 MiB on 4 streams", false, false, 4, M64},
      {"pull, one way, 1 GiB copies", true, true, 1, G},
      {"pull, both ways, 1 GiB copies", false, true, 1, G},
  };
  for (auto &x : t) {
    if (test(rank, fd, "warm", !x.only0 || rank == 0, x.pull, x.nstreams, x.chunk, src, dst,
             peer_src, peer_dst, s))
      return 1;
    if (test(rank, fd, x.name, !x.only0 || rank == 0, x.pull, x.nstreams, x.chunk, src, dst,
             peer_src, peer_dst, s))
      return 1;
  }
  /* the peer's pushes and this rank's pulls both filled dst with the peer's byte */
  unsigned char h[2] = {0, 0};
  CK(cudaMemcpy(&h[0], dst, 1, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(&h[1], dst + BYTES - 1, 1, cudaMemcpyDeviceToHost));
  printf("rank %d check: dst holds %u and %u (want %d)\n", rank, h[0], h[1], 2 - rank);
  CK(cudaIpcCloseMemHandle(peer_src));
  CK(cudaIpcCloseMemHandle(peer_dst));
  return !random_fill && (h[0] != 2 - rank || h[1] != 2 - rank);
}

/* options: peer (cudaDeviceEnablePeerAccess as well), spin or hostspin (a polling kernel
 * beside the copies) */
int main(int argc, char **argv) {
  bool peer = false;
  for (int i = 1; i < argc; i++) {
    peer |= !strcmp(argv[i], "peer");
    if (!strcmp(argv[i], "spin")) spin_mode = 1;
    if (!strcmp(argv[i], "hostspin")) spin_mode = 2;
    if (!strcmp(argv[i], "random")) random_fill = 1;
    if (!strcmp(argv[i], "plus64")) extra = 64;
    if (!strcmp(argv[i], "sm")) sm_copies = 1;
  }
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv)) return 1;
  pid_t pid = fork(); /* before any CUDA call: each process gets its own context */
  if (pid < 0) return 1;
  if (pid == 0) {
    close(sv[0]);
    return rank_main(1, sv[1], peer);
  }
  close(sv[1]);
  int rc = rank_main(0, sv[0], peer), st = 0;
  waitpid(pid, &st, 0);
  return rc || !WIFEXITED(st) || WEXITSTATUS(st);
}
