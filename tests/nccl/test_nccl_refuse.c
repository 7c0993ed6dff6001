/* Ranks on two hosts (faked with WEFT_HOSTID, all on GPU 0) are served: init succeeds and an
 * allreduce of device buffers through the region proxy gives every rank the sum. So are nine
 * ranks on GPU 0, past the 8 a rank's kernels reach at once (src/gpu/slots.h): the allreduce
 * runs as a ring. What weft cannot serve there, a message to a rank that is not a ring
 * neighbour, is refused with ncclInvalidUsage and a message and fails the communicator on
 * every rank, those whose part went ahead included, in bounded time, never a crash or a hang.
 * Device machine only (suite gpu). usage: test_nccl_refuse */
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

/* An allreduce of 1 Mi floats (rank r gives r + 1 + i % 7) whose every element must be the
 * sum; what names the setup. */
static int summed(int rank, int n, ncclComm_t comm, const char *what) {
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
  printf("%d %s %s: an allreduce of %d floats, %d wrong%s\n", rank, bad || wrong ? "FAIL" : "PASS",
         what, N, wrong, bad ? " (a call failed)" : "");
  cudaFree(d);
  free(h);
  return bad || wrong;
}

/* Past 8 ranks, a gather to rank 0 by sends and receives (as ncclGather and PyTorch's gather
 * run it): rank 0's receives from far ranks, and the far ranks' sends, are refused with
 * ncclInvalidUsage naming why (want), which fails the communicator; ranks 1 and n - 1, rank
 * 0's ring neighbours, launch their sends (16 MiB: more than the staging takes without
 * credits), whose kernels must then end. Every rank must find the communicator failed
 * (ncclCommGetAsyncError) within 60 s: no hang, no send left waiting. */
static int far_refused(int rank, int n, ncclComm_t comm, const char *want) {
  enum { N = 4 << 20 };
  float *d = NULL;
  cudaStream_t s;
  if (cudaMalloc((void **)&d, sizeof(float) * N * (size_t)n) != cudaSuccess ||
      cudaStreamCreate(&s) != cudaSuccess)
    return printf("%d FAIL gather: no memory\n", rank), 1;
  double t0 = now_s();
  ncclGroupStart();
  if (rank == 0)
    for (int p = 1; p < n; p++)
      ncclRecv(d + (size_t)p * N, N, ncclFloat, p, comm, s);
  else
    ncclSend(d, N, ncclFloat, 0, comm, s);
  ncclResult_t r = ncclGroupEnd();
  char msg[1024];
  snprintf(msg, sizeof msg, "%s", ncclGetLastError(comm));
  int far = rank != 1 && rank != n - 1;
  int ok = far ? r == ncclInvalidUsage && strstr(msg, want) : r == ncclSuccess;
  ncclResult_t a = ncclSuccess;
  while (ok && (a == ncclSuccess || a == ncclInProgress) && now_s() - t0 < 60) {
    ncclCommGetAsyncError(comm, &a);
    usleep(1000);
  }
  if (!far) cudaStreamSynchronize(s); /* its send kernel ends on the failure */
  double dt = now_s() - t0;
  ok = ok && a != ncclSuccess && a != ncclInProgress && dt < 60;
  printf("%d %s a gather past the ring's neighbours: the call %s, then the communicator %s "
         "after %.1f s: %s\n",
         rank, ok ? "PASS" : "FAIL", ncclGetErrorString(r), a ? "failed" : "did not fail", dt,
         far ? msg : ncclGetLastError(comm));
  cudaFree(d);
  return !ok;
}

/* One rank. Init must succeed and the allreduce hold; past 8 ranks the gather must fail the
 * communicator (want: the refusal's words). */
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
  const char *what = fake_hosts ? "two hosts" : "nine ranks";
  int bad = r != ncclSuccess;
  if (bad)
    printf("%d FAIL %s: init: %s after %.1f s: %s\n", rank, what, ncclGetErrorString(r), dt, msg);
  bad = bad || summed(rank, n, comm, what);
  if (!bad && want) bad = far_refused(rank, n, comm, want);
  if (r == ncclSuccess) want ? ncclCommAbort(comm) : ncclCommDestroy(comm);
  return bad;
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
  bad += run(9, 0, "reach only ranks");
  printf("test_nccl_refuse: %s\n", bad ? "FAILED" : "ok");
  return bad ? 1 : 0;
}
