/* One process driving every GPU (tests/gpu): one device communicator per GPU, initialised
 * from one thread each, then collectives issued by the main thread, inside a group and
 * one communicator after another, small (low-latency kernel) and large (general kernel),
 * a ring of sends and receives in a group, and collectives on registered windows. Ranks
 * reach each other's staging and windows through plain pointers with peer access, not IPC
 * handles. usage: test_one_process */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

#define MAXG 8

static int n;
static weft_unique_id_t uid;
static weft_comm_t comms[MAXG];
static weft_result_t init_rc[MAXG];
static cudaStream_t streams[MAXG];

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "test_one_process: " __VA_ARGS__);                                             \
    fprintf(stderr, "\n");                                                                         \
    return 1;                                                                                      \
  } while (0)

static void *init_rank(void *arg) {
  int r = (int)(intptr_t)arg;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = r;
  cfg.timeout_ms = 60000;
  cudaSetDevice(r);
  init_rc[r] = weft_comm_init(&comms[r], n, uid, r, &cfg);
  return NULL;
}

/* in[i] = rank * 1000 + i % 977: sums are exact in f32 */
static float val(int rank, size_t i) { return (float)(rank * 1000 + (int)(i % 977)); }

static int fill(float *d, size_t count, int rank) {
  float *h = malloc(count * sizeof *h);
  if (!h) return 1;
  for (size_t i = 0; i < count; i++)
    h[i] = val(rank, i);
  int rc = cudaMemcpy(d, h, count * sizeof *h, cudaMemcpyHostToDevice) != cudaSuccess;
  free(h);
  return rc;
}

/* Waits for every rank's stream; 0 when out[r] holds what want(r, i) says. */
static int check(float **out, size_t count, float (*want)(int r, size_t i, size_t count)) {
  float *h = malloc(count * sizeof *h);
  int bad = !h;
  for (int r = 0; r < n && !bad; r++) {
    cudaSetDevice(r);
    weft_result_t e = WEFT_SUCCESS;
    if (cudaStreamSynchronize(streams[r]) != cudaSuccess ||
        weft_comm_get_async_error(comms[r], &e) != WEFT_SUCCESS || e != WEFT_SUCCESS ||
        cudaMemcpy(h, out[r], count * sizeof *h, cudaMemcpyDeviceToHost) != cudaSuccess) {
      fprintf(stderr, "rank %d: %s\n", r, weft_get_last_error(comms[r]));
      bad = 1;
      break;
    }
    for (size_t i = 0; i < count && !bad; i++)
      if (h[i] != want(r, i, count)) {
        fprintf(stderr, "rank %d: element %zu is %g, want %g\n", r, i, h[i], want(r, i, count));
        bad = 1;
      }
  }
  free(h);
  return bad;
}

static float want_sum(int r, size_t i, size_t count) {
  (void)r, (void)count;
  float s = 0;
  for (int k = 0; k < n; k++)
    s += val(k, i);
  return s;
}

/* allgather of count / n per rank: block k comes from rank k */
static float want_gather(int r, size_t i, size_t count) {
  (void)r;
  size_t per = count / (size_t)n;
  return val((int)(i / per), i % per);
}

/* ring: rank r received rank r-1's buffer */
static float want_ring(int r, size_t i, size_t count) {
  (void)count;
  return val((r + n - 1) % n, i);
}

static int run(size_t count) {
  float *in[MAXG], *out[MAXG];
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    if (cudaMalloc((void **)&in[r], count * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&out[r], count * sizeof(float)) != cudaSuccess || fill(in[r], count, r))
      FAIL("cudaMalloc of %zu floats", count);
  }
  /* a group: every GPU's kernel is launched before any is waited for */
  if (weft_group_start()) FAIL("group_start");
  for (int r = 0; r < n; r++)
    if (weft_allreduce(in[r], out[r], count, WEFT_F32, WEFT_SUM, comms[r],
                       (weft_stream_t)streams[r]))
      FAIL("allreduce issue: %s", weft_get_last_error(NULL));
  if (weft_group_end()) FAIL("group_end: %s", weft_get_last_error(NULL));
  if (check(out, count, want_sum)) FAIL("grouped allreduce of %zu floats wrong", count);
  /* no group: calls only queue work, so issuing them one after another cannot block */
  for (int r = 0; r < n; r++)
    if (weft_allgather(in[r], out[r], count / (size_t)n, WEFT_F32, comms[r],
                       (weft_stream_t)streams[r]))
      FAIL("allgather issue: %s", weft_get_last_error(NULL));
  if (check(out, count / (size_t)n * (size_t)n, want_gather))
    FAIL("allgather of %zu floats wrong", count);
  /* a ring of sends and receives in one group */
  if (weft_group_start()) FAIL("group_start");
  for (int r = 0; r < n; r++)
    if (weft_send(in[r], count, WEFT_F32, (r + 1) % n, comms[r], (weft_stream_t)streams[r]) ||
        weft_recv(out[r], count, WEFT_F32, (r + n - 1) % n, comms[r], (weft_stream_t)streams[r]))
      FAIL("send/recv issue: %s", weft_get_last_error(NULL));
  if (weft_group_end()) FAIL("group_end: %s", weft_get_last_error(NULL));
  if (check(out, count, want_ring)) FAIL("send/recv ring of %zu floats wrong", count);
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    cudaFree(in[r]);
    cudaFree(out[r]);
  }
  return 0;
}

/* reduce_scatter of count / n per rank: rank r's block of every rank's input, summed */
static float want_scatter(int r, size_t i, size_t per) {
  float s = 0;
  for (int k = 0; k < n; k++)
    s += val(k, (size_t)r * per + i);
  return s;
}

/* Registration and deregistration are collective: one thread per communicator. */
static float *win_buf[MAXG][2];
static size_t win_bytes;
static weft_window_t wins[MAXG][2];
static int win_dereg;
static void *window_rank(void *arg) {
  int r = (int)(intptr_t)arg;
  cudaSetDevice(r);
  weft_result_t rc = WEFT_SUCCESS;
  for (int b = 0; b < 2 && rc == WEFT_SUCCESS; b++)
    rc = win_dereg ? weft_window_deregister(comms[r], wins[r][b])
                   : weft_window_register(comms[r], win_buf[r][b], win_bytes, &wins[r][b]);
  init_rc[r] = rc;
  return NULL;
}
static void on_every_rank(int dereg) {
  pthread_t th[MAXG];
  win_dereg = dereg;
  for (int r = 0; r < n; r++)
    pthread_create(&th[r], NULL, window_rank, (void *)(intptr_t)r);
  for (int r = 0; r < n; r++)
    pthread_join(th[r], NULL);
}

/* Windows within one process map the peers' buffers as plain pointers: allreduce (in a
 * group), allgather and reduce_scatter of count floats run straight between the GPUs'
 * buffers. Host-staged communicators (WEFT_P2P_DISABLE=1) have none: every rank is
 * refused. */
static int run_windows(size_t count) {
  const char *off = getenv("WEFT_P2P_DISABLE");
  int staged = off && strcmp(off, "1") == 0;
  size_t per = count / (size_t)n;
  win_bytes = count * sizeof(float);
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    for (int b = 0; b < 2; b++)
      if (cudaMalloc((void **)&win_buf[r][b], win_bytes) != cudaSuccess)
        FAIL("cudaMalloc of %zu floats", count);
    if (fill(win_buf[r][0], count, r)) FAIL("fill");
  }
  on_every_rank(0);
  for (int r = 0; r < n; r++)
    if (init_rc[r] != (staged ? WEFT_ERR_UNSUPPORTED : WEFT_SUCCESS))
      FAIL("rank %d: window registration gave %s", r, weft_result_string(init_rc[r]));
  if (!staged) {
    float *out[MAXG];
    for (int r = 0; r < n; r++)
      out[r] = win_buf[r][1];
    if (weft_group_start()) FAIL("group_start");
    for (int r = 0; r < n; r++)
      if (weft_allreduce(win_buf[r][0], out[r], count, WEFT_F32, WEFT_SUM, comms[r],
                         (weft_stream_t)streams[r]))
        FAIL("allreduce on windows: %s", weft_get_last_error(NULL));
    if (weft_group_end()) FAIL("group_end: %s", weft_get_last_error(NULL));
    if (check(out, count, want_sum)) FAIL("allreduce on windows of %zu floats wrong", count);
    for (int r = 0; r < n; r++)
      if (weft_allgather(win_buf[r][0], out[r], per, WEFT_F32, comms[r], (weft_stream_t)streams[r]))
        FAIL("allgather on windows: %s", weft_get_last_error(NULL));
    if (check(out, per * (size_t)n, want_gather)) FAIL("allgather on windows wrong");
    for (int r = 0; r < n; r++)
      if (weft_reduce_scatter(win_buf[r][0], out[r], per, WEFT_F32, WEFT_SUM, comms[r],
                              (weft_stream_t)streams[r]))
        FAIL("reduce_scatter on windows: %s", weft_get_last_error(NULL));
    if (check(out, per, want_scatter)) FAIL("reduce_scatter on windows wrong");
    on_every_rank(1);
    for (int r = 0; r < n; r++)
      if (init_rc[r]) FAIL("rank %d: deregistration: %s", r, weft_result_string(init_rc[r]));
  }
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    cudaFree(win_buf[r][0]);
    cudaFree(win_buf[r][1]);
  }
  return 0;
}

int main(void) {
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 2) {
    printf("test_one_process: needs 2 GPUs, %d visible: skipped\n", ngpu);
    return 77;
  }
  n = ngpu < MAXG ? ngpu : MAXG;
  if (weft_get_unique_id(&uid)) FAIL("unique id: %s", weft_get_last_error(NULL));
  pthread_t th[MAXG];
  for (int r = 0; r < n; r++)
    pthread_create(&th[r], NULL, init_rank, (void *)(intptr_t)r);
  for (int r = 0; r < n; r++)
    pthread_join(th[r], NULL);
  for (int r = 0; r < n; r++) {
    if (init_rc[r]) FAIL("rank %d init: %s", r, weft_get_last_error(NULL));
    cudaSetDevice(r);
    cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking);
  }
  /* 1000 floats: the low-latency kernel; 3 Mi floats (12 MiB): the general one */
  size_t counts[] = {1000, (size_t)3 << 20};
  for (int i = 0; i < 2; i++)
    if (run(counts[i])) return 1;
  if (run_windows(counts[1])) return 1;
  for (int r = 0; r < n; r++) {
    weft_comm_destroy(comms[r]);
    cudaSetDevice(r);
    cudaStreamDestroy(streams[r]);
  }
  printf("test_one_process: %d GPUs in one process: ok\n", n);
  return 0;
}
