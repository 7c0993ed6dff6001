/* Ranks sharing one GPU (src/gpu/share.c). Pairs split from a device world of RANKS ranks see
 * two ranks on the GPU, which serves RANKS: the sharers' registry must give them the budget of
 * RANKS, or their kernels, launched by every pair at once, cannot all be resident. The pairs
 * run allreduces of the low-latency and the general kernel's sizes and groups of sends and
 * receives, each checked; then the world does, on its own budget. With --refuse, a budget too
 * small for the kernels (the suite sets WEFT_SHARED_SM_PERCENT or MPS's active thread
 * percentage) fails the device init on every rank at once with WEFT_ERR_UNSUPPORTED and a
 * message naming the limit. usage: test_share RANKS [--refuse] */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "rank_check.h"
#include "weft.h"

enum { ROUNDS = 40 };
static int refuse;

/* in[i] = rank * 1000 + i % 977 + salt: sums exact in f32 */
static void fill(float *h, size_t n, int rank, int salt) {
  for (size_t i = 0; i < n; i++)
    h[i] = (float)(rank * 1000 + (int)(i % 977) + salt);
}

static int sums(const float *h, size_t n, const int *ranks, int nr, int salt) {
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int r = 0; r < nr; r++)
      want += (float)(ranks[r] * 1000 + (int)(i % 977) + salt);
    if (h[i] != want) return 0;
  }
  return 1;
}

static weft_result_t settle(weft_comm_t c, cudaStream_t s) {
  weft_result_t e = WEFT_SUCCESS;
  if (cudaStreamSynchronize(s) != cudaSuccess) return WEFT_ERR_SYSTEM;
  weft_comm_get_async_error(c, &e);
  return e;
}

/* Allreduces on c (whose ranks are `ranks`, this one among them) of sizes from a few packets
 * to the general kernel's, then a group that sends to and receives from every peer. */
static int exercise(int rank, weft_comm_t c, const int *ranks, int nr, cudaStream_t s, float *in,
                    float *out, float *h, int salt0) {
  static const size_t counts[] = {3, 1000, 24 * 1024, 96 * 1024, 1 << 20};
  int me = 0;
  weft_comm_rank(c, &me);
  for (int round = 0; round < ROUNDS; round++)
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
      size_t n = counts[k];
      int salt = salt0 + round * 7 + (int)k;
      fill(h, n, rank, salt);
      cudaMemcpyAsync(in, h, n * sizeof *h, cudaMemcpyHostToDevice, s);
      if (weft_allreduce(in, out, n, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s) ||
          settle(c, s) != WEFT_SUCCESS)
        FAIL("allreduce of %zu floats, round %d", n, round);
      cudaMemcpy(h, out, n * sizeof *h, cudaMemcpyDeviceToHost);
      if (!sums(h, n, ranks, nr, salt)) FAIL("allreduce of %zu floats, round %d: wrong", n, round);
    }
  /* each peer gets 64 Ki floats of ours; ours from q lands in block q */
  size_t blk = 64 * 1024;
  fill(h, blk, rank, salt0);
  cudaMemcpy(in, h, blk * sizeof *h, cudaMemcpyHostToDevice);
  weft_group_start();
  for (int q = 0; q < nr; q++)
    if (q != me) {
      weft_send(in, blk, WEFT_F32, q, c, (weft_stream_t)s);
      weft_recv(out + (size_t)q * blk, blk, WEFT_F32, q, c, (weft_stream_t)s);
    }
  if (weft_group_end() || settle(c, s) != WEFT_SUCCESS) FAIL("send/recv group");
  for (int q = 0; q < nr; q++) {
    if (q == me) continue;
    cudaMemcpy(h, out + (size_t)q * blk, blk * sizeof *h, cudaMemcpyDeviceToHost);
    if (!sums(h, blk, &ranks[q], 1, salt0)) FAIL("message from rank %d wrong", ranks[q]);
  }
  return 0;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  int dev = 0;
  cudaStream_t s;
  if (gpu_rank_setup(rank, 1, &dev, &s)) FAIL("no GPU or no stream");
  weft_comm_t host, world, pair;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  if (weft_comm_init(&host, n, id, rank, NULL)) FAIL("init failed");
  cfg.device = dev;
  if (refuse) {
    double t0 = now_s();
    weft_result_t rc = weft_comm_split(host, 0, rank, &world, &cfg);
    const char *msg = weft_get_last_error(NULL);
    if (rc != WEFT_ERR_UNSUPPORTED || !strstr(msg, "WEFT_SHARED_SM_PERCENT"))
      FAIL("a budget too small was not refused (%d): %s", (int)rc, msg);
    if (now_s() - t0 > 30) FAIL("the refusal took %.0f s", now_s() - t0);
    if (rank == 0) printf("refused, as it must be: %s\n", msg);
    weft_comm_destroy(host);
    printf("rank %d: ok\n", rank);
    return 0;
  }
  if (weft_comm_split(host, 0, rank, &world, &cfg)) FAIL("device world failed");
  if (weft_comm_split(world, rank / 2, rank, &pair, &cfg)) FAIL("device pair failed");
  size_t most = (size_t)(1 << 20) > 64 * 1024 * (size_t)n ? (size_t)1 << 20 : 64 * 1024 * (size_t)n;
  float *in = NULL, *out = NULL, *h = malloc(most * sizeof *h);
  if (!h || cudaMalloc((void **)&in, most * sizeof *in) != cudaSuccess ||
      cudaMalloc((void **)&out, most * sizeof *out) != cudaSuccess)
    FAIL("out of memory");
  int np = 0, all[8], two[2] = {rank / 2 * 2, rank / 2 * 2 + 1};
  weft_comm_count(pair, &np);
  for (int r = 0; r < n && r < 8; r++)
    all[r] = r;
  if (exercise(rank, pair, two, np, s, in, out, h, 1)) return 1;
  if (exercise(rank, world, all, n, s, in, out, h, 2)) return 1;
  weft_comm_destroy(pair);
  weft_comm_destroy(world);
  weft_comm_destroy(host);
  cudaFree(in);
  cudaFree(out);
  free(h);
  printf("rank %d: ok\n", rank);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  refuse = argc > 2 && strcmp(argv[2], "--refuse") == 0;
  if (n < 2 || n > 8 || (n % 2 && !refuse)) {
    fprintf(stderr, "usage: %s RANKS [--refuse]   (RANKS even, 2-8, without --refuse)\n", argv[0]);
    return 2;
  }
  int rc = launch_local(n, rank_main, NULL, 600);
  printf("test_share: %d ranks on one GPU%s: %s\n", n, refuse ? ", too small a budget" : "",
         rc ? "FAILED" : "ok");
  return rc;
}
