/* A rank SIGKILLed while its GPU kernels run (tests/gpu): the survivor, whose kernel waits
 * for the dead rank, must get an error well before the 20 s operation timeout (the failure
 * watch sees the dead process and aborts the kernel), must not crash, and a later call must
 * fail cleanly too. Small (low-latency kernel) and large (general kernel) allreduces.
 * usage: test_gpu_fault */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "weft.h"

typedef struct {
  atomic_int id_ready;
  weft_unique_id_t id;
  atomic_int running;   /* both ranks are in their loops */
  int64_t t_death;      /* ms, when the victim raised SIGKILL */
  int64_t t_err;        /* ms, when the survivor saw the error */
  int rc, later_rc, ok; /* survivor: the error, a later call's result, loop reached */
  char msg[256];
} shared_t;

static shared_t *sh;

static void *killer(void *arg) {
  (void)arg;
  while (atomic_load(&sh->running) < 2)
    usleep(1000);
  usleep(300000);
  sh->t_death = launch_now_ms();
  raise(SIGKILL);
  return NULL;
}

static void rank_main(int rank, size_t count) {
  if (rank == 0) {
    if (weft_get_unique_id(&sh->id)) _exit(2);
    atomic_store(&sh->id_ready, 1);
  }
  while (!atomic_load(&sh->id_ready))
    usleep(1000);
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) _exit(2);
  int dev = rank % ngpu;
  cudaSetDevice(dev);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  float *d = NULL;
  if (cudaMalloc((void **)&d, count * sizeof *d) != cudaSuccess) _exit(2);
  cudaMemset(d, 0, count * sizeof *d);
  cudaDeviceSynchronize();
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev;
  cfg.timeout_ms = 20000;
  weft_comm_t c;
  if (weft_comm_init(&c, 2, sh->id, rank, &cfg)) _exit(2);
  pthread_t t;
  if (rank == 1) pthread_create(&t, NULL, killer, NULL);
  atomic_fetch_add(&sh->running, 1);
  weft_result_t rc = WEFT_SUCCESS;
  int64_t start = launch_now_ms();
  /* Issue, and every 16 calls wait: the survivor is inside a kernel when its peer dies. */
  for (int i = 0; rc == WEFT_SUCCESS && launch_now_ms() - start < 60000; i++) {
    rc = weft_allreduce(d, d, count, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
    if (rc == WEFT_SUCCESS && i % 16 == 15) {
      if (cudaStreamSynchronize(s) != cudaSuccess) {
        rc = WEFT_ERR_SYSTEM;
        snprintf(sh->msg, sizeof sh->msg, "CUDA: %s", cudaGetErrorString(cudaGetLastError()));
        break;
      }
      weft_comm_get_async_error(c, &rc);
    }
  }
  if (rank == 0) {
    sh->t_err = launch_now_ms();
    sh->rc = rc;
    if (!sh->msg[0]) snprintf(sh->msg, sizeof sh->msg, "%s", weft_get_last_error(c));
    cudaStreamSynchronize(s); /* the aborted kernel has ended */
    sh->later_rc = weft_allreduce(d, d, 16, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
    sh->ok = cudaGetLastError() == cudaSuccess;
  }
  weft_comm_destroy(c);
  cudaFree(d);
  _exit(0);
}

/* Both ranks forked; 0 when the survivor failed cleanly in time. */
static int run(size_t count) {
  memset(sh, 0, sizeof *sh);
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] == 0) rank_main(r, count);
  }
  int st[2] = {0, 0}, bad = 0;
  int64_t deadline = launch_now_ms() + 90000;
  for (int r = 0; r < 2; r++) {
    while (waitpid(pids[r], &st[r], WNOHANG) == 0 && launch_now_ms() < deadline)
      usleep(10000);
    if (launch_now_ms() >= deadline) {
      fprintf(stderr, "rank %d hung\n", r);
      kill(pids[r], SIGKILL);
      waitpid(pids[r], &st[r], 0);
      bad = 1;
    }
  }
  int64_t took = sh->t_err - sh->t_death;
  if (!WIFSIGNALED(st[1]) || WTERMSIG(st[1]) != SIGKILL) {
    fprintf(stderr, "the victim was not killed (status %d)\n", st[1]);
    bad = 1;
  }
  if (WIFSIGNALED(st[0]) || WEXITSTATUS(st[0]) != 0) {
    fprintf(stderr, "the survivor crashed or failed to start (status %d)\n", st[0]);
    bad = 1;
  }
  if (sh->rc == WEFT_SUCCESS) {
    fprintf(stderr, "the survivor never saw an error\n");
    bad = 1;
  }
  if (took > 5000) { /* the timeout is 20 s: only the failure watch is this fast */
    fprintf(stderr, "the survivor took %lld ms to fail\n", (long long)took);
    bad = 1;
  }
  if (!strstr(sh->msg, "rank 1")) {
    fprintf(stderr, "the error does not name rank 1: %s\n", sh->msg);
    bad = 1;
  }
  if (sh->later_rc == WEFT_SUCCESS || !sh->ok) {
    fprintf(stderr, "a later call: %s, CUDA %s\n", weft_result_string(sh->later_rc),
            sh->ok ? "ok" : "broken");
    bad = 1;
  }
  printf("%zu floats: survivor failed %lld ms after the kill: %s: %s\n", count, (long long)took,
         weft_result_string(sh->rc), sh->msg);
  return bad;
}

static int cuda_devices(void) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  return n > 100 ? 100 : n;
}

int main(void) {
  /* counted in a child: CUDA must not be initialised before the ranks fork */
  if (launch_in_child(cuda_devices) < 1) {
    printf("test_gpu_fault: no GPU: skipped\n");
    return 77;
  }
  sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) return 1;
  int bad = run(1000) | run((size_t)4 << 20);
  printf("test_gpu_fault: %s\n", bad ? "FAILED" : "ok");
  return bad;
}
