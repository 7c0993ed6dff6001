/* Symmetric windows (src/gpu/window.c) on device communicators, 2+ ranks: allgather and alltoall
 * into registered buffers (the kernels writing straight into the peers' recvbufs, the copy
 * engines from WEFT_CE_MIN_BYTES where allocations are whole 2 MiB pages), reduce_scatter from them
 * (reading the peers' sendbufs) and allreduce (both), against the oracle, at 16 MiB and odd sizes,
 * a chain of operations where each reads what a peer's next one overwrites, graph replays, refused
 * registrations, and misuse: ranks at different window offsets get WEFT_ERR_INVALID_ARG with
 * nothing written, a rank outside any window a timeout that names windows. usage: test_window RANKS
 * [--share] */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_test.h"
#include "rank_check.h"
#include "weft.h"

static int share;

/* The stream's work done, then the comm's verdict; a kernel that gave up is reported by the
 * comm's watch (every 100 ms), so a failure is awaited up to `wait` seconds. */
static weft_result_t settle(weft_comm_t c, cudaStream_t s, double wait) {
  weft_result_t e = WEFT_SUCCESS;
  if (cudaStreamSynchronize(s) != cudaSuccess) return WEFT_ERR_SYSTEM;
  for (double t0 = now_s(); weft_comm_get_async_error(c, &e) == WEFT_SUCCESS && e == WEFT_SUCCESS &&
                            now_s() - t0 < wait;)
    usleep(50000);
  return e;
}

static float val(int from, int to, int salt, size_t i) {
  return (float)(from * 1000000 + to * 10000 + salt * 100 + (int)(i % 97));
}

/* Allgather, alltoall, reduce_scatter and allreduce (out of place and in place, but for
 * alltoall) of cnt floats per block at offset 4096 of the windows, then in-place alltoall
 * (the staged kernels). */
static int check_ops(int rank, int n, weft_comm_t c, cudaStream_t s, char *sb, char *rb,
                     size_t cnt) {
  const size_t blk = cnt * 4, off = 4096;
  float *h = malloc(blk * n), *send = (float *)(sb + off), *recv = (float *)(rb + off);
  if (!h) FAIL("out of memory");
  for (int pass = 0; pass < 7; pass++) {
    int a2a = pass == 1, rs = pass == 3 || pass == 4, ar = pass >= 5;
    int inplace = pass == 2 || pass == 4 || pass == 6;
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < cnt; i++)
        h[p * cnt + i] = val(rank, a2a || rs ? p : ar ? 0 : rank, pass, i);
    /* in place, allgather's sendbuf is our block of the recvbuf, allreduce's the recvbuf;
     * reduce_scatter's recvbuf is our block of the sendbuf, which lies in the recv window */
    float *src = send, *dst = recv;
    if (inplace && !rs) src = recv + (ar ? 0 : rank * cnt);
    if (inplace && rs) src = recv, dst = recv + rank * cnt;
    size_t in_b = a2a || rs ? blk * n : blk, out_b = rs || ar ? blk : blk * n;
    h2d(src, a2a || rs || ar ? h : h + rank * cnt, in_b);
    if (!inplace) cudaMemset(dst, 0xff, out_b);
    cudaDeviceSynchronize();
    weft_stream_t ws = (weft_stream_t)s;
    weft_result_t rc = a2a  ? weft_alltoall(src, dst, cnt, WEFT_F32, c, ws)
                       : rs ? weft_reduce_scatter(src, dst, cnt, WEFT_F32, WEFT_SUM, c, ws)
                       : ar ? weft_allreduce(src, dst, cnt, WEFT_F32, WEFT_SUM, c, ws)
                            : weft_allgather(src, dst, cnt, WEFT_F32, c, ws);
    if (rc || settle(c, s, 0))
      FAIL("%zu floats: pass %d failed: %s", cnt, pass, weft_get_last_error(c));
    cudaMemcpy(h, dst, out_b, cudaMemcpyDeviceToHost);
    for (int q = 0; q < (rs || ar ? 1 : n); q++)
      for (size_t i = 0; i < cnt; i++) {
        float want = val(q, a2a ? rank : q, pass, i);
        if (rs || ar) { /* sums of integers under 2^24: exact in any order */
          want = 0;
          for (int r = 0; r < n; r++)
            want += val(r, ar ? 0 : rank, pass, i);
        }
        if (h[q * cnt + i] != want)
          FAIL("%zu floats: pass %d: block %d wrong at %zu", cnt, pass, q, i);
      }
  }
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < cnt; i++)
      h[p * cnt + i] = val(rank, p, 7, i);
  h2d(recv, h, blk * n);
  if (weft_alltoall(recv, recv, cnt, WEFT_F32, c, (weft_stream_t)s) || settle(c, s, 0))
    FAIL("alltoall in place failed");
  cudaMemcpy(h, recv, blk * n, cudaMemcpyDeviceToHost);
  for (int q = 0; q < n; q++)
    if (h[q * cnt + cnt / 2] != val(q, rank, 7, cnt / 2)) FAIL("alltoall in place wrong");
  free(h);
  return 0;
}

/* Without a host sync between them: allgather x into R, alltoall R into Q, allgather y into
 * R, alltoall R into Q2. A peer's second allgather must not land in our R before our
 * alltoall has read it: Q holds x_rank in every block, Q2 y_rank. Then the same four as a
 * graph, replayed three times with new inputs. */
static int check_chain(int rank, int n, weft_comm_t c, cudaStream_t s, char *win, size_t cnt) {
  const size_t blk = cnt * 4;
  float *x = (float *)win, *y = x + cnt, *R = y + cnt, *Q = R + cnt * n, *Q2 = Q + cnt * n;
  float *h = malloc(blk * n);
  if (!h) FAIL("out of memory");
  cudaGraph_t g = NULL;
  cudaGraphExec_t ge = NULL;
  for (int round = 0; round < 4; round++) {
    for (size_t i = 0; i < cnt; i++)
      h[i] = val(rank, 0, round, i), h[cnt + i] = val(rank, 1, round, i);
    h2d(x, h, 2 * blk);
    cudaMemset(Q, 0, 2 * blk * n);
    cudaDeviceSynchronize();
    if (round == 1 && cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess)
      FAIL("capture did not begin");
    if (round <= 1) {
      weft_stream_t ws = (weft_stream_t)s;
      if (weft_allgather(x, R, cnt, WEFT_F32, c, ws) || weft_alltoall(R, Q, cnt, WEFT_F32, c, ws) ||
          weft_allgather(y, R, cnt, WEFT_F32, c, ws) || weft_alltoall(R, Q2, cnt, WEFT_F32, c, ws))
        FAIL("chain round %d not issued: %s", round, weft_get_last_error(c));
    }
    if (round == 1 && (cudaStreamEndCapture(s, &g) != cudaSuccess ||
                       cudaGraphInstantiate(&ge, g, 0) != cudaSuccess))
      FAIL("capture failed");
    if (round >= 1 && cudaGraphLaunch(ge, s) != cudaSuccess) FAIL("graph launch failed");
    if (settle(c, s, 0)) FAIL("chain round %d failed: %s", round, weft_get_last_error(c));
    for (int twice = 0; twice < 2; twice++) {
      cudaMemcpy(h, twice ? Q2 : Q, blk * n, cudaMemcpyDeviceToHost);
      for (int q = 0; q < n; q++)
        for (size_t i = 0; i < cnt; i++)
          if (h[q * cnt + i] != val(rank, twice, round, i))
            FAIL("chain round %d: %s block %d wrong at %zu", round, twice ? "Q2" : "Q", q, i);
    }
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  free(h);
  return 0;
}

/* Bytes rounded up to whole 2 MiB pages: only windows in such allocations take the copy
 * engines (src/gpu/window.c). */
static size_t pages(size_t bytes) {
  const size_t pg = (size_t)2 << 20;
  return (bytes + pg - 1) / pg * pg;
}

static int check_windows(int rank, int n, weft_comm_t c, cudaStream_t s) {
  const size_t cnt = (size_t)4 << 20, blk = cnt * 4, off = 4096; /* 16 MiB blocks */
  const size_t alloc = pages(blk * n + off);
  char *sb = NULL, *rb = NULL;
  if (cudaMalloc((void **)&sb, alloc) != cudaSuccess ||
      cudaMalloc((void **)&rb, alloc) != cudaSuccess)
    FAIL("allocation failed");
  weft_window_t ws = NULL, wr = NULL, bad = NULL;
  float host[4];
  if (weft_window_register(c, host, sizeof host, &bad) != WEFT_ERR_INVALID_ARG || bad)
    FAIL("host memory accepted");
  if (weft_window_register(c, rb + off, alloc - off + 1, &bad) != WEFT_ERR_INVALID_ARG || bad)
    FAIL("a window past its allocation accepted");
  if (weft_window_register(c, sb, blk * n + off, &ws) ||
      weft_window_register(c, rb, blk * n + off, &wr))
    FAIL("register failed: %s", weft_get_last_error(c));
  /* 16 MiB, then blocks of 4 MiB (the copy engines' in the GPU suite, graph replays too), 1 MiB
   * and 4004 bytes: no 16-byte alignment past the first */
  if (check_ops(rank, n, c, s, sb, rb, cnt) || check_ops(rank, n, c, s, sb, rb, 1001) ||
      check_chain(rank, n, c, s, rb, 1 << 20) || check_chain(rank, n, c, s, rb, 1 << 18) ||
      check_chain(rank, n, c, s, rb, 1001))
    return 1;
  if (weft_window_deregister(c, ws) || weft_window_deregister(c, wr))
    FAIL("deregister failed: %s", weft_get_last_error(c));
  if (weft_window_deregister(c, wr) != WEFT_ERR_INVALID_ARG) FAIL("a window deregistered twice");
  if (weft_allgather(sb, rb, cnt, WEFT_F32, c, (weft_stream_t)s) || settle(c, s, 0))
    FAIL("allgather after deregistration failed");
  cudaFree(sb);
  cudaFree(rb);
  /* windows in allocations of 64 bytes past whole pages: the kernels write into them even
   * where the copy engines would (each rank logs that once) */
  if (cudaMalloc((void **)&sb, alloc + 64) != cudaSuccess ||
      cudaMalloc((void **)&rb, alloc + 64) != cudaSuccess)
    FAIL("allocation failed");
  if (weft_window_register(c, sb, alloc + 64, &ws) || weft_window_register(c, rb, alloc + 64, &wr))
    FAIL("register failed: %s", weft_get_last_error(c));
  if (check_ops(rank, n, c, s, sb, rb, cnt)) return 1;
  if (weft_window_deregister(c, ws) || weft_window_deregister(c, wr))
    FAIL("deregister failed: %s", weft_get_last_error(c));
  cudaFree(sb);
  cudaFree(rb);
  return 0;
}

/* Misuse on communicators of their own (they fail): rank 0's recvbuf one block further into
 * the window than the others', then rank 0 in a window and the others not. */
static int check_misuse(int rank, int n, int dev, weft_comm_t world, cudaStream_t s) {
  const size_t cnt = 1 << 16, blk = cnt * 4;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev;
  cfg.timeout_ms = 2000;
  char *buf = NULL, *plain = NULL, *h = malloc(blk * n);
  if (!h || cudaMalloc((void **)&buf, blk * (n + 1)) != cudaSuccess ||
      cudaMalloc((void **)&plain, blk * n) != cudaSuccess)
    FAIL("allocation failed");
  for (int kase = 0; kase < 2; kase++) {
    weft_comm_t c;
    weft_window_t w;
    /* outside a window, rank 0's kernel must time out first, so that its own message (the
     * one naming windows) is what it reports, not a peer's timeout notice arriving first */
    cfg.timeout_ms = kase == 1 && rank != 0 ? 5000 : 2000;
    if (weft_comm_split(world, 0, rank, &c, &cfg)) FAIL("split failed");
    if (weft_window_register(c, buf, blk * (n + 1), &w)) FAIL("register failed");
    char *recv = kase == 0 ? buf + (rank == 0 ? blk : 0) : rank == 0 ? buf : plain;
    cudaMemset(recv, 0xff, blk * n);
    cudaMemset(recv + blk * rank, 0, blk);
    cudaDeviceSynchronize();
    double t0 = now_s();
    weft_result_t e = weft_allgather(recv + blk * rank, recv, cnt, WEFT_F32, c, (weft_stream_t)s);
    if (e == WEFT_SUCCESS) e = settle(c, s, 8);
    const char *msg = weft_get_last_error(c);
    printf("rank %d: %s after %.2f s: %s\n", rank, kase ? "outside a window" : "offsets differ",
           now_s() - t0, msg);
    if (kase == 0) {
      if (e != WEFT_ERR_INVALID_ARG || !strstr(msg, "offset"))
        FAIL("offsets differ: got %s: %s", weft_result_string(e), msg);
      /* ranks that agree may have written into each other before meeting rank 0 */
      cudaMemcpy(h, recv, blk * n, cudaMemcpyDeviceToHost);
      for (size_t i = 0; i < blk * n; i++)
        if (i / blk != (size_t)rank && (rank == 0 || i / blk == 0) && (unsigned char)h[i] != 0xff)
          FAIL("offsets differ, yet byte %zu was written", i);
    } else if (e == WEFT_SUCCESS ||
               (rank == 0 && (e != WEFT_ERR_TIMEOUT || !strstr(msg, "window"))))
      FAIL("outside a window: got %s: %s", weft_result_string(e), msg);
    weft_comm_destroy(c);
  }
  cudaFree(buf);
  cudaFree(plain);
  free(h);
  return 0;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  int dev = 0;
  cudaStream_t s;
  if (gpu_rank_setup(rank, share, &dev, &s)) FAIL("no GPU or no stream");
  weft_comm_t world, c;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  cfg.device = dev;
  if (weft_comm_init(&world, n, id, rank, NULL) || weft_comm_split(world, 0, rank, &c, &cfg))
    FAIL("init failed");
  if (check_windows(rank, n, c, s)) return 1;
  weft_comm_destroy(c);
  if (check_misuse(rank, n, dev, world, s)) return 1;
  weft_comm_destroy(world);
  printf("rank %d: ok\n", rank);
  return 0;
}

int main(int argc, char **argv) {
  /* the low-latency kernels, which keep blocks up to 256 KiB (1-2 MiB without NVLink) and
   * then up to 8.4 MiB from the window paths, take none of this test's */
  setenv("WEFT_LL_MAX_BYTES", "16", 1);
  setenv("WEFT_LL128_MAX_BYTES", "0", 1);
  return gpu_test_main(argc, argv, "test_window", rank_main, &share);
}
