/* Ranks on two hosts (faked with WEFT_HOSTID, all on GPU 0) are served: init succeeds and an
 * allreduce of device buffers through the region proxy gives every rank the sum. What weft
 * cannot serve, more ranks than a device communicator takes (9 on GPU 0), fails
 * ncclCommInitRank on every rank with ncclInvalidUsage and a message (under MPS the GPU's SM
 * budget's), in bounded time, never a crash or a hang. Device machine only (suite gpu). usage:
 * test_nccl_refuse */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Two hosts: init, then an allreduce of 1 Mi floats (rank r gives r + 1 + i % 7) whose every
 * element must be the sum. */
static int two_hosts(int rank, int n, ncclComm_t comm) {
  enum { N = 1 << 20 };
  float *d = NULL, *h = malloc(sizeof(float) * N);
  cudaStream_t s;
  int bad = !h || cudaMalloc((void **)&d, sizeof(float) * N) != cudaSuccess ||
            cudaStreamCreate(&s) != cudaSuccess;
  for (int i = 0; i < N && !bad; i++)
    h[i] = (float)(rank + 1 + i % 7);
  bad = bad || cudaMemcpy(d, h, sizeof(float) * N, cudaMemcpyHostToDevice) != cudaSuccess ||
        ncclAllReduce(d, d, N, ncclFloat, ncclSum, comm, s) != ncclSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess ||
        cudaMemcpy(h, d, sizeof(float) * N, cudaMemcpyDeviceToHost) != cudaSuccess;
  int wrong = 0;
  for (int i = 0; i < N && !bad; i++)
    wrong += h[i] != (float)(n * (n + 1) / 2 + n * (i % 7));
  printf("%d %s two hosts: an allreduce of %d floats, %d wrong%s\n", rank,
         bad || wrong ? "FAIL" : "PASS", N, wrong, bad ? " (a call failed)" : "");
  cudaFree(d);
  free(h);
  return bad || wrong;
}

/* One rank. Two hosts: init must succeed and the allreduce hold. Nine ranks: init must fail
 * with ncclInvalidUsage, naming why (want), within 60 s. */
static int rank_main(int rank, int n, ncclUniqueId id, int fake_hosts, const char *want) {
  char host[32];
  if (fake_hosts) {
    snprintf(host, sizeof host, "fakehost%d", rank);
    setenv("WEFT_HOSTID", host, 1);
  }
  if (cudaSetDevice(0) != cudaSuccess) {
    printf("%d FAIL setup: no GPU\n", rank);
    return 1;
  }
  ncclComm_t comm = (ncclComm_t)1;
  double t0 = now_s();
  ncclResult_t r = ncclCommInitRank(&comm, n, id, rank);
  double dt = now_s() - t0;
  const char *msg = ncclGetLastError(NULL);
  if (fake_hosts) {
    int bad = r != ncclSuccess;
    if (bad) printf("%d FAIL two hosts: init: %s: %s\n", rank, ncclGetErrorString(r), msg);
    bad = bad || two_hosts(rank, n, comm);
    if (r == ncclSuccess) ncclCommDestroy(comm);
    return bad;
  }
  /* under MPS the GPU's SM budget refuses them first, as clearly */
  int ok = r == ncclInvalidUsage && comm == NULL &&
           (strstr(msg, want) || strstr(msg, "serves 9 ranks")) && dt < 60;
  printf("%d %s nine ranks: %s after %.1f s: %s\n", rank, ok ? "PASS" : "FAIL",
         ncclGetErrorString(r), dt, msg);
  if (r == ncclSuccess) ncclCommDestroy(comm);
  return ok ? 0 : 1;
}

/* Forks n ranks sharing one fresh id; 0 when all passed within 120 s. */
static int run(int n, int fake_hosts, const char *want) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  pid_t pid[16];
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    if (pid[r] == 0) _exit(rank_main(r, n, id, fake_hosts, want));
  }
  int bad = 0;
  double end = now_s() + 120;
  for (int left = n; left > 0;) {
    int st = 0;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      left--;
      bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
    } else if (now_s() > end) {
      printf("FAIL: ranks still running after 120 s\n");
      for (int r = 0; r < n; r++)
        kill(pid[r], SIGKILL);
      while (wait(NULL) > 0) {}
      return 1;
    } else {
      usleep(10000);
    }
  }
  return bad;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int bad = run(2, 1, NULL);
  bad += run(9, 0, "at most 8 ranks");
  printf("test_nccl_refuse: %s\n", bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}
