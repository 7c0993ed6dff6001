/* Device communicators beyond the oracle matrix (tests/gpu, 2+ ranks): device buffers
 * only, CUDA-graph capture and replay, the 128-byte kernel's sizes called again and again with
 * new data, several communicators and streams in flight at once, a group of collectives as one
 * launch, a group of sends and receives too large for one launch, a group over
 * WEFT_GROUP_MAX_COMMS communicators (one more refused), the device memory report, and
 * failures: a rank that never joins gives WEFT_ERR_TIMEOUT on both sides, and weft_comm_abort ends
 * a waiting kernel at once; a rank 2.5 s late: the kernels waiting for it say so at WARN every
 * second (WEFT_WAIT_REPORT_S=1, set by main), naming it, then finish.
 * usage: test_dev_comm RANKS [--share] */
#include <cuda_runtime_api.h>
#include <execinfo.h>
#include <signal.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gpu_test.h"
#include "rank_check.h"
#include "weft.h"

static int share;

static void on_fault(int sig) {
  void *frames[32];
  int n = backtrace(frames, 32);
  fprintf(stderr, "signal %d, backtrace:\n", sig);
  backtrace_symbols_fd(frames, n, 2);
  _exit(3);
}

/* in[i] = rank * 1000 + i % 977 + salt: sums are exact in f32 */
static void fill(float *h, size_t n, int rank, int salt) {
  for (size_t i = 0; i < n; i++)
    h[i] = (float)(rank * 1000 + (int)(i % 977) + salt);
}

/* Says where the first wrong element is, and how many are wrong. */
static int sum_ok(const float *h, size_t n, int nranks, int salt) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < n; i++) {
    float want = 0;
    for (int r = 0; r < nranks; r++)
      want += (float)(r * 1000 + (int)(i % 977) + salt);
    if (h[i] != want && !bad++) first = i;
  }
  if (bad)
    fprintf(stderr, "%zu of %zu elements wrong, the first at %zu: %g\n", bad, n, first,
            (double)h[first]);
  return !bad;
}

static weft_result_t settle(weft_comm_t c, cudaStream_t s) {
  weft_result_t e = WEFT_SUCCESS;
  if (cudaStreamSynchronize(s) != cudaSuccess) return WEFT_ERR_SYSTEM;
  weft_comm_get_async_error(c, &e);
  return e;
}

/* Replays ge once on new input (fill()'s pattern with salt, cnt floats copied into in on s,
 * which the graph reads) and checks the allreduce's sum in out. */
static int replay_sum(int rank, int n, weft_comm_t c, cudaStream_t s, cudaGraphExec_t ge, float *in,
                      const float *out, float *h, size_t cnt, int salt) {
  fill(h, cnt, rank, salt);
  cudaMemcpyAsync(in, h, cnt * sizeof *h, cudaMemcpyHostToDevice, s); /* ordered on s */
  cudaGraphLaunch(ge, s);
  if (settle(c, s) != WEFT_SUCCESS) FAIL("replay %d failed", salt);
  cudaMemcpy(h, out, cnt * sizeof *h, cudaMemcpyDeviceToHost);
  if (!sum_ok(h, cnt, n, salt)) FAIL("replay %d: wrong sum", salt);
  return 0;
}

/* Captures one allreduce of cnt floats, in to out, then replays it reps times with new
 * inputs (salts salt0, salt0 + 1, ...), each checked. what names it in failures. */
static int replay_allreduce(int rank, int n, weft_comm_t c, cudaStream_t s, float *in, float *out,
                            float *h, size_t cnt, int reps, int salt0, const char *what) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  weft_result_t rc = weft_allreduce(in, out, cnt, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
  if (cudaStreamEndCapture(s, &g) != cudaSuccess || rc) FAIL("%s: capture failed", what);
  if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) FAIL("%s: instantiate failed", what);
  int bad = 0;
  for (int rep = 0; rep < reps && !bad; rep++)
    bad = replay_sum(rank, n, c, s, ge, in, out, h, cnt, salt0 + rep);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return bad;
}

static int check_graph(int rank, int n, weft_comm_t c, cudaStream_t s) {
  size_t cnt = 6 << 20; /* 24 MiB: the 128-byte kernel's rings over NVLink, else the general one */
  float *d = NULL, *out = NULL, *h = malloc(cnt * sizeof *h);
  cudaMalloc((void **)&d, cnt * sizeof *d);
  cudaMalloc((void **)&out, cnt * sizeof *out);
  cudaGraph_t g;
  cudaGraphExec_t ge;
  cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
  weft_result_t rc = weft_allreduce(d, out, cnt, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
  weft_result_t rc2 = weft_allreduce(d, d, 1000, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
  if (cudaStreamEndCapture(s, &g) != cudaSuccess || rc || rc2) FAIL("capture failed");
  if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) FAIL("instantiate failed");
  for (int rep = 0; rep < 5; rep++) { /* new inputs each replay: the graph reads them */
    if (replay_sum(rank, n, c, s, ge, d, out, h, cnt, rep)) return 1;
    cudaMemcpy(h, d, 1000 * sizeof *h, cudaMemcpyDeviceToHost);
    if (!sum_ok(h, 1000, n, rep)) FAIL("replay %d: wrong in-place sum", rep);
  }
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  cudaFree(d);
  cudaFree(out);
  free(h);
  return 0;
}

/* Two comms, each on its own stream, issued in opposite orders on even and odd ranks:
 * both kernels must make progress at once. */
static int check_concurrent(int rank, int n, weft_comm_t a, weft_comm_t b) {
  size_t cnt = 1 << 20;
  float *da, *db, *h = malloc(cnt * sizeof *h);
  cudaStream_t sa, sb;
  cudaStreamCreateWithFlags(&sa, cudaStreamNonBlocking);
  cudaStreamCreateWithFlags(&sb, cudaStreamNonBlocking);
  cudaMalloc((void **)&da, cnt * 4);
  cudaMalloc((void **)&db, cnt * 4);
  fill(h, cnt, rank, 1);
  h2d(da, h, cnt * 4);
  fill(h, cnt, rank, 2);
  h2d(db, h, cnt * 4);
  for (int k = 0; k < 2; k++) {
    int first = (rank % 2) ^ k;
    weft_result_t rc = first
                           ? weft_allreduce(da, da, cnt, WEFT_F32, WEFT_SUM, a, (weft_stream_t)sa)
                           : weft_allreduce(db, db, cnt, WEFT_F32, WEFT_SUM, b, (weft_stream_t)sb);
    if (rc) FAIL("issue failed");
    if (k == 0) continue;
  }
  if (settle(a, sa) || settle(b, sb)) FAIL("concurrent comms failed");
  cudaMemcpy(h, da, cnt * 4, cudaMemcpyDeviceToHost);
  if (!sum_ok(h, cnt, n, 1)) FAIL("comm a: wrong sum");
  cudaMemcpy(h, db, cnt * 4, cudaMemcpyDeviceToHost);
  if (!sum_ok(h, cnt, n, 2)) FAIL("comm b: wrong sum");
  /* one comm, two streams: weft orders them */
  fill(h, cnt, rank, 3);
  h2d(da, h, cnt * 4);
  if (weft_allreduce(da, db, cnt, WEFT_F32, WEFT_SUM, a, (weft_stream_t)sa) ||
      weft_allreduce(db, db, 1, WEFT_F32, WEFT_SUM, a, (weft_stream_t)sb))
    FAIL("issue on two streams failed");
  if (settle(a, sa) || settle(a, sb)) FAIL("two streams failed");
  cudaMemcpy(h, db, cnt * 4, cudaMemcpyDeviceToHost);
  float first = 0, want0 = 0;
  for (int r = 0; r < n; r++)
    want0 += (float)(r * 1000 + 3);
  first = h[0];
  h[0] = want0; /* element 0 was summed again by the second call */
  if (!sum_ok(h, cnt, n, 3) || first != want0 * (float)n) FAIL("two streams: wrong result");
  /* a group of collectives is one launch */
  fill(h, cnt, rank, 4);
  h2d(da, h, cnt * 4);
  weft_group_start();
  weft_allreduce(da, db, cnt / 2, WEFT_F32, WEFT_SUM, a, (weft_stream_t)sa);
  weft_allreduce(da + cnt / 2, db + cnt / 2, cnt / 2, WEFT_F32, WEFT_SUM, a, (weft_stream_t)sa);
  if (weft_group_end() || settle(a, sa)) FAIL("group failed");
  cudaMemcpy(h, db, cnt * 4, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < cnt; i++) { /* halves start their pattern at cnt / 2 */
    float want = 0;
    for (int r = 0; r < n; r++)
      want += (float)(r * 1000 + (int)(i % 977) + 4);
    if (h[i] != want) FAIL("group: wrong sum at %zu", i);
  }
  cudaFree(da);
  cudaFree(db);
  cudaStreamDestroy(sa);
  cudaStreamDestroy(sb);
  free(h);
  return 0;
}

/* WEFT_ALGO=ring: an allreduce in place (its last segment short), a reduce_scatter and an
 * allgather in place, in one group, so three rings share the channels of one launch and
 * each runs many rounds; then the same allreduce captured and replayed in a graph. */
static int check_ring(int rank, int n, weft_comm_t c, cudaStream_t s) {
  size_t ar = ((size_t)3 << 20) + 5, blk = ((size_t)1 << 20) + 3, all = blk * (size_t)n;
  if (ar > all) all = ar;
  float *a = NULL, *b = NULL, *g = NULL, *h = malloc(all * sizeof *h);
  if (!h || cudaMalloc((void **)&a, all * 4) || cudaMalloc((void **)&b, all * 4) ||
      cudaMalloc((void **)&g, all * 4))
    FAIL("cudaMalloc");
  setenv("WEFT_ALGO", "ring", 1);
  fill(h, ar, rank, 5);
  h2d(a, h, ar * 4);
  fill(h, all, rank, 6); /* reduce_scatter: block p of every rank's input is p's */
  h2d(b, h, all * 4);
  fill(h, blk, rank, 7);
  h2d(g + (size_t)rank * blk, h, blk * 4);
  float *rs_out = NULL;
  if (cudaMalloc((void **)&rs_out, blk * 4)) FAIL("cudaMalloc");
  weft_group_start();
  weft_allreduce(a, a, ar, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
  weft_reduce_scatter(b, rs_out, blk, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
  weft_allgather(g + (size_t)rank * blk, g, blk, WEFT_F32, c, (weft_stream_t)s);
  if (weft_group_end() || settle(c, s)) FAIL("ring group failed: %s", weft_get_last_error(c));
  cudaMemcpy(h, a, ar * 4, cudaMemcpyDeviceToHost);
  if (!sum_ok(h, ar, n, 5)) FAIL("ring allreduce: wrong sum");
  cudaMemcpy(h, rs_out, blk * 4, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < blk; i++) { /* our block starts rank * blk into fill()'s pattern */
    float want = 0;
    for (int r = 0; r < n; r++)
      want += (float)(r * 1000 + (int)(((size_t)rank * blk + i) % 977) + 6);
    if (h[i] != want) FAIL("ring reduce_scatter: wrong sum at %zu: %g, not %g", i, h[i], want);
  }
  cudaMemcpy(h, g, blk * (size_t)n * 4, cudaMemcpyDeviceToHost);
  for (size_t i = 0; i < blk * (size_t)n; i++) {
    int r = (int)(i / blk);
    if (h[i] != (float)(r * 1000 + (int)((i % blk) % 977) + 7))
      FAIL("ring allgather: wrong value at %zu", i);
  }
  if (replay_allreduce(rank, n, c, s, a, b, h, ar, 3, 60, "ring allreduce graph")) return 1;
  unsetenv("WEFT_ALGO");
  cudaFree(a);
  cudaFree(b);
  cudaFree(g);
  cudaFree(rs_out);
  free(h);
  return 0;
}

/* One group with more messages to each peer than WEFT_P2P_SETS lets one launch hold, and
 * more items than a launch holds, an allreduce among them: the planner cuts it into several
 * launches, and every message must still arrive whole and in its place. */
enum { P2P_MSGS = 11 };
static size_t p2p_len(int k) {
  return k % 3 == 0 ? (size_t)1 << 20 : k % 3 == 1 ? (size_t)(1000 + k) : 65536;
}
static float p2p_val(int from, int to, int k, size_t i) {
  return (float)(from * 1000000 + to * 10000 + k * 100 + (int)(i % 97));
}

static int check_p2p_group(int rank, int n, weft_comm_t c, cudaStream_t s) {
  size_t per = 0, cnt = 1 << 18;
  for (int k = 0; k < P2P_MSGS; k++)
    per += p2p_len(k);
  float *sb = NULL, *rb = NULL, *ar = NULL, *h = malloc(per * n * sizeof *h);
  if (!h || cudaMalloc((void **)&sb, per * n * 4) != cudaSuccess ||
      cudaMalloc((void **)&rb, per * n * 4) != cudaSuccess ||
      cudaMalloc((void **)&ar, cnt * 4) != cudaSuccess)
    FAIL("p2p group: allocation failed");
  for (int q = 0; q < n; q++) /* message k to q at q * per + sum of the earlier lengths */
    for (int k = 0, off = 0; k < P2P_MSGS; off += (int)p2p_len(k), k++)
      for (size_t i = 0; i < p2p_len(k); i++)
        h[q * per + off + i] = p2p_val(rank, q, k, i);
  h2d(sb, h, per * n * 4);
  cudaMemset(rb, 0xff, per * n * 4);
  fill(h, cnt, rank, 5);
  h2d(ar, h, cnt * 4);
  weft_group_start();
  for (int k = 0, off = 0; k < P2P_MSGS; off += (int)p2p_len(k), k++) {
    for (int d = 1; d < n; d++) {
      int to = (rank + d) % n, from = (rank - d + n) % n;
      weft_send(sb + to * per + off, p2p_len(k), WEFT_F32, to, c, (weft_stream_t)s);
      weft_recv(rb + from * per + off, p2p_len(k), WEFT_F32, from, c, (weft_stream_t)s);
    }
    if (k == P2P_MSGS / 2) weft_allreduce(ar, ar, cnt, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
  }
  if (weft_group_end() || settle(c, s)) FAIL("p2p group failed: %s", weft_get_last_error(c));
  cudaMemcpy(h, rb, per * n * 4, cudaMemcpyDeviceToHost);
  for (int q = 0; q < n; q++)
    for (int k = 0, off = 0; k < P2P_MSGS; off += (int)p2p_len(k), k++)
      for (size_t i = 0; q != rank && i < p2p_len(k); i++)
        if (h[q * per + off + i] != p2p_val(q, rank, k, i))
          FAIL("p2p group: message %d from rank %d wrong at %zu", k, q, i);
  cudaMemcpy(h, ar, cnt * 4, cudaMemcpyDeviceToHost);
  if (!sum_ok(h, cnt, n, 5)) FAIL("p2p group: allreduce among the messages wrong");
  cudaFree(sb);
  cudaFree(rb);
  cudaFree(ar);
  free(h);
  return 0;
}

/* Round k of an allreduce of cnt floats (in place on odd k) and an alltoall of blk-float
 * blocks, new data each, both checked. a and b hold max(cnt, blk * n) floats, h as many. */
static int ar_a2a_round(int rank, int n, weft_comm_t c, cudaStream_t s, float *a, float *b,
                        float *h, size_t cnt, size_t blk, int k) {
  float *out = k % 2 ? a : b;
  fill(h, cnt, rank, k);
  h2d(a, h, cnt * sizeof *h);
  if (weft_allreduce(a, out, cnt, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s) ||
      settle(c, s) != WEFT_SUCCESS)
    FAIL("allreduce %d of %zu floats: %s", k, cnt, weft_get_last_error(c));
  cudaMemcpy(h, out, cnt * sizeof *h, cudaMemcpyDeviceToHost);
  if (!sum_ok(h, cnt, n, k)) FAIL("allreduce %d of %zu floats: wrong sum", k, cnt);
  for (size_t i = 0; i < blk * (size_t)n; i++) /* block p goes to rank p */
    h[i] = (float)(rank * 100000 + (int)(i % 99991) + k);
  h2d(a, h, blk * (size_t)n * sizeof *h);
  if (weft_alltoall(a, b, blk, WEFT_F32, c, (weft_stream_t)s) || settle(c, s) != WEFT_SUCCESS)
    FAIL("alltoall %d of %zu-float blocks: %s", k, blk, weft_get_last_error(c));
  cudaMemcpy(h, b, blk * (size_t)n * sizeof *h, cudaMemcpyDeviceToHost);
  for (int p = 0; p < n; p++)
    for (size_t i = 0; i < blk; i++)
      if (h[(size_t)p * blk + i] !=
          (float)(p * 100000 + (int)(((size_t)rank * blk + i) % 99991) + k))
        FAIL("alltoall %d of %zu-float blocks: block from rank %d wrong at %zu", k, blk, p, i);
  return 0;
}

/* The 128-byte kernel's sizes (on 2+ GPUs over NVLink), new data every call, so that a line
 * read before all of it landed, or a line left from an operation before, shows up: 40
 * allreduces of 5 MiB + 4 bytes (a last line part full), out of and in place, and 40 alltoalls
 * of 1.5 MiB blocks, each checked; then the allreduce replayed from a CUDA graph. */
static int check_ll128(int rank, int n, weft_comm_t c, cudaStream_t s) {
  size_t cnt = ((size_t)5 << 18) + 1, blk = (size_t)3 << 17;
  size_t all = cnt > blk * (size_t)n ? cnt : blk * (size_t)n;
  float *a = NULL, *b = NULL, *h = malloc(all * sizeof *h);
  if (!h || cudaMalloc((void **)&a, all * sizeof *a) != cudaSuccess ||
      cudaMalloc((void **)&b, all * sizeof *b) != cudaSuccess)
    FAIL("cudaMalloc");
  for (int k = 0; k < 40; k++)
    if (ar_a2a_round(rank, n, c, s, a, b, h, cnt, blk, k)) return 1;
  if (replay_allreduce(rank, n, c, s, a, b, h, cnt, 4, 50, "128-byte allreduce graph")) return 1;
  cudaFree(a);
  cudaFree(b);
  free(h);
  return 0;
}

/* Past its buffers (8.4 MiB per peer on 2 ranks) the 128-byte kernel cycles through them as
 * rings, the receivers' credits holding the senders back: allreduces of 12 MiB + 4 bytes,
 * out of and in place, alltoalls of 12 MiB + 12 byte blocks, reduce_scatters of 10 MiB + 8
 * bytes and allgathers of 9 MiB + 4 bytes, new data every call, each checked. */
static int check_ll128_ring(int rank, int n, weft_comm_t c, cudaStream_t s) {
  size_t ar = ((size_t)3 << 20) + 1, a2a = ((size_t)3 << 20) + 3, rs = ((size_t)5 << 19) + 2,
         ag = ((size_t)9 << 18) + 1, all = a2a * (size_t)n;
  if (ar > all) all = ar;
  float *a = NULL, *b = NULL, *h = malloc(all * sizeof *h);
  if (!h || cudaMalloc((void **)&a, all * sizeof *a) != cudaSuccess ||
      cudaMalloc((void **)&b, all * sizeof *b) != cudaSuccess)
    FAIL("cudaMalloc");
  for (int k = 0; k < 6; k++) {
    if (ar_a2a_round(rank, n, c, s, a, b, h, ar, a2a, k)) return 1;
    /* reduce_scatter: fill()'s pattern over the whole input, block `rank` summed here */
    fill(h, rs * (size_t)n, rank, k);
    h2d(a, h, rs * (size_t)n * sizeof *h);
    if (weft_reduce_scatter(a, b, rs, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s) ||
        settle(c, s) != WEFT_SUCCESS)
      FAIL("reduce_scatter %d: %s", k, weft_get_last_error(c));
    cudaMemcpy(h, b, rs * sizeof *h, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < rs; i++) {
      float want = 0;
      for (int r = 0; r < n; r++)
        want += (float)(r * 1000 + (int)(((size_t)rank * rs + i) % 977) + k);
      if (h[i] != want) FAIL("reduce_scatter %d: wrong at %zu", k, i);
    }
    fill(h, ag, rank, k);
    h2d(a, h, ag * sizeof *h);
    if (weft_allgather(a, b, ag, WEFT_F32, c, (weft_stream_t)s) || settle(c, s) != WEFT_SUCCESS)
      FAIL("allgather %d: %s", k, weft_get_last_error(c));
    cudaMemcpy(h, b, ag * (size_t)n * sizeof *h, cudaMemcpyDeviceToHost);
    for (int p = 0; p < n; p++)
      for (size_t i = 0; i < ag; i++)
        if (h[(size_t)p * ag + i] != (float)(p * 1000 + (int)(i % 977) + k))
          FAIL("allgather %d: block of rank %d wrong at %zu", k, p, i);
  }
  cudaFree(a);
  cudaFree(b);
  free(h);
  return 0;
}

/* Splits a device comm with name=value set on the ranks of mask (bit r: rank r) and the
 * environment restored after; 0 where that fails with WEFT_ERR_INVALID_ARG and a message
 * holding want. */
static int refused_with(int rank, int dev, weft_comm_t world, const char *name, const char *value,
                        unsigned mask, const char *want) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev;
  weft_comm_t c = NULL;
  const char *cur = getenv(name);
  char was[64];
  snprintf(was, sizeof was, "%s", cur ? cur : "");
  int mine = (mask >> rank) & 1;
  if (mine) setenv(name, value, 1);
  weft_result_t rc = weft_comm_split(world, 0, rank, &c, &cfg);
  if (mine && cur) setenv(name, was, 1);
  if (mine && !cur) unsetenv(name);
  if (rc == WEFT_SUCCESS) weft_comm_destroy(c);
  if (rc != WEFT_ERR_INVALID_ARG)
    FAIL("%s=%s on ranks %#x gave %s", name, value, mask, weft_result_string(rc));
  if (!strstr(weft_get_last_error(NULL), want))
    FAIL("%s=%s on ranks %#x: unclear message (want \"%s\")", name, value, mask, want);
  if (rank == 0) printf("rank 0: %s\n", weft_get_last_error(NULL));
  return 0;
}

/* A group over WEFT_GROUP_MAX_COMMS device communicators (one kernel a comm on s, in the same
 * order on every rank) sums on every comm; one comm more is refused with WEFT_ERR_INVALID_ARG
 * naming the limit, launches nothing and writes nothing, and the comms work on. Skipped on
 * every rank when 65 comms of per_comm bytes each, times the ranks on a GPU, would take more
 * than half of some rank's free memory (8 ranks on 2 GPUs). */
static int check_group_limit(int rank, int n, int dev, weft_comm_t world, cudaStream_t s,
                             size_t per_comm) {
  enum { N = WEFT_GROUP_MAX_COMMS + 1, CNT = 4096 };
  int ngpu = 1, fits = 0, all = 0;
  size_t free_b = 0, total = 0;
  cudaGetDeviceCount(&ngpu);
  cudaMemGetInfo(&free_b, &total);
  int here = share ? n : (n + ngpu - 1) / ngpu;
  fits = (double)per_comm * N * here < 0.5 * (double)free_b;
  if (weft_allreduce(&fits, &all, 1, WEFT_I32, WEFT_MIN, world, NULL)) FAIL("agreeing");
  if (!all) {
    if (rank == 0) printf("group limit: skipped (%d comms would not fit)\n", N);
    return 0;
  }
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev, cfg.timeout_ms = 60000;
  weft_comm_t c[N];
  float *d = NULL, *h = malloc((size_t)N * 2 * CNT * sizeof *h);
  if (!h || cudaMalloc((void **)&d, (size_t)N * 2 * CNT * sizeof *d) != cudaSuccess)
    FAIL("out of memory");
  for (int i = 0; i < N; i++)
    if (weft_comm_split(world, 0, rank, &c[i], &cfg)) FAIL("device comm %d of %d", i, N);
  for (int round = 0; round < 2; round++) { /* the limit, then one past it */
    int used = round ? N : N - 1;
    for (int i = 0; i < N; i++) /* comm i: input salt i, output poisoned */
      fill(h + (size_t)i * 2 * CNT, CNT, rank, i);
    h2d(d, h, (size_t)N * 2 * CNT * sizeof *d);
    for (int i = 0; i < N; i++)
      cudaMemset(d + (size_t)i * 2 * CNT + CNT, 0xff, CNT * sizeof *d);
    cudaDeviceSynchronize();
    weft_group_start();
    for (int i = 0; i < used; i++)
      if (weft_allreduce(d + (size_t)i * 2 * CNT, d + (size_t)i * 2 * CNT + CNT, CNT, WEFT_F32,
                         WEFT_SUM, c[i], (weft_stream_t)s))
        FAIL("queueing on comm %d", i);
    weft_result_t rc = weft_group_end();
    const char *msg = weft_get_last_error(NULL);
    if (round == 0 && rc != WEFT_SUCCESS) FAIL("a group over %d device comms: %s", used, msg);
    if (round == 1 && (rc != WEFT_ERR_INVALID_ARG || !strstr(msg, "WEFT_GROUP_MAX_COMMS")))
      FAIL("a group over %d device comms: %s \"%s\", want WEFT_ERR_INVALID_ARG", used,
           weft_result_string(rc), msg);
    for (int i = 0; i < used; i++)
      if (settle(c[i], s)) FAIL("comm %d: %s", i, weft_get_last_error(c[i]));
    cudaMemcpy(h, d, (size_t)N * 2 * CNT * sizeof *d, cudaMemcpyDeviceToHost);
    for (int i = 0; i < N; i++) {
      const float *out = h + (size_t)i * 2 * CNT + CNT;
      const unsigned char *b = (const unsigned char *)out;
      int touched = 0;
      for (size_t j = 0; j < CNT * sizeof *out; j++)
        touched |= b[j] != 0xff;
      if (round == 0 && i < used && !sum_ok(out, CNT, n, i)) FAIL("comm %d summed wrong", i);
      if ((round == 1 || i >= used) && touched)
        FAIL("the %s group wrote comm %d's output", round ? "refused" : "first", i);
    }
  }
  /* the refused group left nothing queued: the comm it would have added sums now */
  fill(h, CNT, rank, N - 1);
  h2d(d, h, CNT * sizeof *d);
  if (weft_allreduce(d, d + CNT, CNT, WEFT_F32, WEFT_SUM, c[N - 1], (weft_stream_t)s) ||
      settle(c[N - 1], s))
    FAIL("the last comm after the refusal: %s", weft_get_last_error(c[N - 1]));
  cudaMemcpy(h, d + CNT, CNT * sizeof *d, cudaMemcpyDeviceToHost);
  if (!sum_ok(h, CNT, n, N - 1)) FAIL("the last comm after the refusal summed wrong");
  for (int i = 0; i < N; i++)
    weft_comm_destroy(c[i]);
  cudaFree(d);
  free(h);
  if (rank == 0) printf("group limit: %d device comms in a group ran, %d refused\n", N - 1, N);
  return 0;
}

/* A device parameter set differently on one rank fails every rank's init, naming it (else
 * the ranks would size their regions apart or run kernels that cannot talk); a value no
 * rank can use fails it too. Nothing is left behind: the comms made later work. */
static int check_params(int rank, int dev, weft_comm_t world) {
  const char *stages = getenv("WEFT_P2P_STAGES");
  const char *other = stages && atoi(stages) == 3 ? "4" : "3";
  if (refused_with(rank, dev, world, "WEFT_P2P_STAGES", other, 2,
                   "WEFT_P2P_STAGES differs between ranks") ||
      refused_with(rank, dev, world, "WEFT_DIRECT_CHANNELS", "64", 2,
                   "WEFT_DIRECT_CHANNELS differs between ranks") ||
      refused_with(rank, dev, world, "WEFT_DIRECT_READ_MAX_BYTES", "4096", 1,
                   "WEFT_DIRECT_READ_MAX_BYTES differs between ranks") ||
      refused_with(rank, dev, world, "WEFT_CE_MIN_BYTES", "many", ~0u, "WEFT_CE_MIN_BYTES=many") ||
      refused_with(rank, dev, world, "WEFT_DIRECT_CHANNELS", "0", ~0u, "WEFT_DIRECT_CHANNELS=0"))
    return 1;
  return 0;
}

typedef struct {
  weft_comm_t c;
  double delay;
} abort_arg_t;

static void *aborter(void *p) {
  abort_arg_t *a = p;
  usleep((useconds_t)(a->delay * 1e6));
  weft_comm_abort(a->c);
  return NULL;
}

/* cnt: 1000 floats take the low-latency kernel; 3 MiB of them the 128-byte one over NVLink,
 * 12 MiB its rings (the general kernel on a shared GPU); algo: WEFT_ALGO for the allreduces
 * (the message names a ring) */
static int check_failures(int rank, int dev, weft_comm_t world, cudaStream_t s, size_t cnt,
                          const char *algo) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev;
  cfg.timeout_ms = 2000;
  weft_comm_t c;
  float *d;
  if (cudaMalloc((void **)&d, cnt * sizeof *d) != cudaSuccess) FAIL("cudaMalloc");
  /* rank 1 never calls: rank 0's kernel gives up after the timeout, both comms fail */
  if (weft_comm_split(world, 0, rank, &c, &cfg)) FAIL("split failed");
  if (algo) setenv("WEFT_ALGO", algo, 1);
  double t0 = now_s();
  if (rank == 0) {
    if (weft_allreduce(d, d, cnt, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s)) FAIL("issue failed");
    weft_result_t e = settle(c, s);
    double dt = now_s() - t0;
    if (e == WEFT_SUCCESS) { /* the watch runs every 100 ms */
      usleep(300000);
      weft_comm_get_async_error(c, &e);
    }
    if (e != WEFT_ERR_TIMEOUT) FAIL("expected a timeout, got %s", weft_result_string(e));
    if (dt < 1.5 || dt > 5) FAIL("kernel gave up after %.2f s, timeout 2 s", dt);
    /* the peer it waited for: rank 1, or in a ring the rank before it */
    int n = 0;
    char who[32];
    weft_comm_count(world, &n);
    snprintf(who, sizeof who, "for rank %d", algo ? n - 1 : 1);
    if (!strstr(weft_get_last_error(c), who) ||
        (algo && !strstr(weft_get_last_error(c), "ring allreduce")))
      FAIL("message: %s", weft_get_last_error(c));
    printf("rank 0: timeout after %.2f s: %s\n", dt, weft_get_last_error(c));
    if (weft_allreduce(d, d, 10, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s) != WEFT_ERR_TIMEOUT)
      FAIL("a failed comm accepted more work");
  } else if (rank == 1) {
    weft_result_t e = WEFT_SUCCESS;
    while (e == WEFT_SUCCESS && now_s() - t0 < 8) {
      usleep(50000);
      weft_comm_get_async_error(c, &e);
    }
    if (e == WEFT_SUCCESS) FAIL("rank 1 never heard of rank 0's timeout");
    /* across hosts too, rank 0's notice (over its proxy), not only its close */
    if (e != WEFT_ERR_TIMEOUT || !strstr(weft_get_last_error(c), "rank 0 timed out"))
      FAIL("rank 1 was told %s: %s", weft_result_string(e), weft_get_last_error(c));
    printf("rank 1: told after %.2f s: %s\n", now_s() - t0, weft_get_last_error(c));
  }
  weft_comm_destroy(c);
  /* abort from another thread ends a kernel that waits for a peer */
  cfg.timeout_ms = 60000;
  if (weft_comm_split(world, 0, rank, &c, &cfg)) FAIL("split failed");
  if (rank == 0) {
    abort_arg_t a = {c, 0.3};
    pthread_t th;
    pthread_create(&th, NULL, aborter, &a);
    t0 = now_s();
    weft_allreduce(d, d, cnt, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
    cudaStreamSynchronize(s);
    double dt = now_s() - t0;
    pthread_join(th, NULL);
    if (dt > 2) FAIL("abort took %.2f s to end the kernel", dt);
    printf("rank 0: abort ended the kernel after %.2f s\n", dt);
  }
  weft_barrier(world, NULL);
  unsetenv("WEFT_ALGO");
  weft_comm_destroy(c);
  cudaFree(d);
  return 0;
}

/* Rank 1 comes 2.5 s late to an allreduce of cnt floats: rank 0's kernel waits, and the
 * heartbeat thread says so on stderr (read back from a file) naming rank 1; all finish. */
static int check_late(int rank, int dev, weft_comm_t world, cudaStream_t s, size_t cnt) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.device = dev;
  cfg.timeout_ms = 20000;
  weft_comm_t c;
  float *d;
  static log_catch_t log;
  if (cudaMalloc((void **)&d, cnt * sizeof *d) != cudaSuccess) FAIL("cudaMalloc");
  if (weft_comm_split(world, 0, rank, &c, &cfg)) FAIL("split failed");
  if (rank == 0 && log_catch(&log)) FAIL("stderr to %s", log.path);
  if (rank == 1) usleep(2500000);
  weft_result_t rc = weft_allreduce(d, d, cnt, WEFT_F32, WEFT_SUM, c, (weft_stream_t)s);
  if (rc == WEFT_SUCCESS) rc = settle(c, s);
  if (rank == 0) { /* what it logged, shown where the case fails */
    char *text = (char *)log_release(&log);
    const char *line = log_line(text, "has waited");
    if (rc != WEFT_SUCCESS || !line || !strstr(line, "for rank 1"))
      FAIL("late peer: %s; no wait report naming rank 1 in: %s",
           rc ? weft_get_last_error(c) : "finished", text);
    printf("rank 0: %zu floats, rank 1 late: ...%s\n", cnt, line);
  }
  if (rc != WEFT_SUCCESS) FAIL("late peer: %s", weft_get_last_error(c));
  weft_barrier(world, NULL);
  weft_comm_destroy(c);
  cudaFree(d);
  return 0;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  signal(SIGSEGV, on_fault);
  int dev = 0;
  cudaStream_t s;
  if (gpu_rank_setup(rank, share, &dev, &s)) FAIL("no GPU or no stream");
  weft_comm_t world, a, b;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 60000;
  if (weft_comm_init(&world, n, id, rank, NULL)) FAIL("init failed");
  /* What the GPU really gives up, beyond what weft reports: the CUDA context's local
   * memory for the kernels' stacks grows at their first launch. */
  size_t free0 = 0, free1 = 0, free2 = 0, total = 0;
  cudaFree(NULL);
  cudaMemGetInfo(&free0, &total);
  cfg.device = dev;
  if (weft_comm_split(world, 0, rank, &a, &cfg) || weft_comm_split(world, 0, rank, &b, &cfg))
    FAIL("device comms failed");
  cudaMemGetInfo(&free1, &total);
  size_t mem = 0;
  weft_comm_device_memory(a, &mem);
  /* staging and the low-latency kernel's buffers are per peer (56 MiB), the 128-byte one's 18
   * MiB are not, and only held where it can run: not between ranks on one GPU. Across fake
   * hosts a region takes the proxy's layout instead: 96 MiB per peer (docs/hosts.md). */
  const char *hosts = getenv("WEFT_TEST_HOSTS");
  size_t peer = (size_t)(hosts && atoi(hosts) > 1 ? 97 : 56) << 20;
  size_t most = peer * (size_t)(n - 1) + ((size_t)(share ? 2 : 20) << 20);
  if (mem == 0 || mem > most) FAIL("device memory %zu bytes, more than %zu", mem, most);
  if (rank == 0) printf("device memory per comm: %.1f MiB\n", mem / 1048576.0);
  /* host buffers are refused, and nothing runs */
  float hostbuf[4] = {0};
  if (weft_allreduce(hostbuf, hostbuf, 4, WEFT_F32, WEFT_SUM, a, (weft_stream_t)s) !=
      WEFT_ERR_INVALID_ARG)
    FAIL("host buffer accepted");
  if (!strstr(weft_get_last_error(NULL), "host memory")) FAIL("unclear message");
  float *probe = NULL;
  /* a displacement whose byte offset wraps is refused before anything runs (it used to pass,
   * and the kernel faulted, losing the CUDA context); the comm goes on working below */
  size_t pn = (size_t)1 << 22;
  if (cudaMalloc((void **)&probe, pn * sizeof *probe) != cudaSuccess) FAIL("cudaMalloc");
  size_t ones[64], zeros[64] = {0}, huge[64];
  for (int p = 0; p < n && p < 64; p++)
    ones[p] = 1, huge[p] = SIZE_MAX;
  if (weft_alltoallv(probe, ones, huge, probe + pn / 2, ones, zeros, WEFT_F32, a,
                     (weft_stream_t)s) != WEFT_ERR_INVALID_ARG ||
      !strstr(weft_get_last_error(NULL), "overflows"))
    FAIL("alltoallv with displacement SIZE_MAX not refused: %s", weft_get_last_error(NULL));
  /* a broadcast: the general kernel (past the small kernel's limit); 256 floats of
   * allreduce: the small one */
  cudaMemset(probe, 0, pn * sizeof *probe);
  cudaDeviceSynchronize();
  size_t before = 0;
  cudaMemGetInfo(&before, &total);
  if (weft_broadcast(probe, probe, pn, WEFT_F32, 0, a, (weft_stream_t)s) ||
      weft_allreduce(probe, probe, 256, WEFT_F32, WEFT_SUM, a, (weft_stream_t)s) ||
      cudaStreamSynchronize(s) != cudaSuccess)
    FAIL("first allreduces failed: %s", weft_get_last_error(a));
  cudaMemGetInfo(&free2, &total);
  cudaFree(probe);
  if (rank == 0 && !share)
    printf("GPU memory taken: %.1f MiB by 2 comms' init, %.1f MiB more by their first "
           "launches\n",
           ((double)free0 - (double)free1) / 1048576.0,
           ((double)before - (double)free2) / 1048576.0);
  if (check_graph(rank, n, a, s)) return 1;
  if (check_ll128(rank, n, a, s)) return 1;
  if (check_ll128_ring(rank, n, a, s)) return 1;
  if (check_concurrent(rank, n, a, b)) return 1;
  if (check_ring(rank, n, a, s)) return 1;
  if (check_p2p_group(rank, n, a, s)) return 1;
  if (check_group_limit(rank, n, dev, world, s, mem)) return 1;
  weft_comm_destroy(a);
  weft_comm_destroy(b);
  if (check_params(rank, dev, world)) return 1;
  if (check_failures(rank, dev, world, s, 1000, NULL)) return 1;
  if (check_failures(rank, dev, world, s, (size_t)3 << 18, NULL)) return 1;
  if (check_failures(rank, dev, world, s, (size_t)3 << 20, NULL)) return 1;
  if (check_failures(rank, dev, world, s, (size_t)3 << 20, "ring")) return 1;
  if (check_late(rank, dev, world, s, 1000)) return 1;
  if (check_late(rank, dev, world, s, (size_t)3 << 20)) return 1;
  weft_comm_destroy(world);
  printf("rank %d: ok\n", rank);
  return 0;
}

int main(int argc, char **argv) {
  gpu_test_wait_reports();
  return gpu_test_main(argc, argv, "test_dev_comm", rank_main, &share);
}
