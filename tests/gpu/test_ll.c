/* The small low-latency kernel's one-way operations (src/gpu/kernels/ll.cu): broadcasts and
 * reduces queued back to back without a sync, runs of 8 with one root, mostly reduces in even
 * runs and broadcasts in odd ones, sizes of one block and of several (and one past the
 * kernel's limit), some in place, allgathers between them. A reduce run's root starts it late,
 * a broadcast run's next rank too, so the ranks that only send run ahead of those that
 * receive. A rank that wrote a slot its peer was still reading would hang there (the 20 s
 * timeout fails the test) or deliver a wrong result; every result is checked at the end.
 * usage: test_ll RANKS [--share] */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gpu_test.h"
#include "rank_check.h"
#include "weft.h"

enum { OPS = 96, RUN = 8, MOST = 20000 };

static int share;
static log_catch_t caught;

typedef enum { REDUCE, BROADCAST, ALLGATHER } kind_t;

/* in[i] = rank * 1000 + i % 977 + salt: sums are exact in f32 */
static float value(int rank, size_t i, int salt) {
  return (float)(rank * 1000 + (int)(i % 977) + salt);
}

static void late(void *arg) { usleep((useconds_t)(uintptr_t)arg); }

typedef struct {
  kind_t kind;
  int root, in_place;
  size_t cnt;
  float *in, *out;
} op_t;

static void plan(op_t *o, int i, int n) {
  static const size_t sizes[] = {1000, 1800, 9000, 1, 20000};
  int run = i / RUN;
  kind_t one_way = run % 2 ? BROADCAST : REDUCE, other = run % 2 ? REDUCE : BROADCAST;
  o->root = run % n;
  o->kind = i % 6 == 5 ? ALLGATHER : i % 7 == 3 ? other : one_way;
  o->cnt = sizes[i % 5];
  o->in_place = o->kind != ALLGATHER && i % 3 == 1;
}

static int check(int rank, int n, int i, const op_t *o, float *h) {
  size_t all = o->kind == ALLGATHER ? o->cnt * (size_t)n : o->cnt;
  if (o->kind == REDUCE && rank != o->root) return 0; /* the output is the root's alone */
  cudaMemcpy(h, o->in_place ? o->in : o->out, all * sizeof *h, cudaMemcpyDeviceToHost);
  for (size_t j = 0; j < all; j++) {
    float want = 0;
    if (o->kind == REDUCE)
      for (int r = 0; r < n; r++)
        want += value(r, j, i);
    else if (o->kind == BROADCAST)
      want = value(o->root, j, i);
    else
      want = value((int)(j / o->cnt), j % o->cnt, i);
    if (h[j] != want)
      FAIL("op %d (%s of %zu floats, root %d%s): element %zu is %g, not %g", i,
           o->kind == REDUCE      ? "reduce"
           : o->kind == BROADCAST ? "broadcast"
                                  : "allgather",
           o->cnt, o->root, o->in_place ? ", in place" : "", j, (double)h[j], (double)want);
  }
  return 0;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  int dev = 0;
  cudaStream_t s;
  if (gpu_rank_setup(rank, share, &dev, &s)) FAIL("no GPU or no stream");
  weft_comm_t world, c;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 20000;
  if (weft_comm_init(&world, n, id, rank, NULL)) FAIL("init failed");
  cfg.device = dev;
  if (weft_comm_split(world, 0, rank, &c, &cfg)) FAIL("device comm failed");
  op_t ops[OPS];
  float *h = malloc((size_t)MOST * (size_t)n * sizeof *h);
  if (!h) FAIL("out of memory");
  for (int i = 0; i < OPS; i++) {
    op_t *o = &ops[i];
    plan(o, i, n);
    if (cudaMalloc((void **)&o->in, MOST * sizeof(float)) != cudaSuccess ||
        cudaMalloc((void **)&o->out, (size_t)MOST * (size_t)n * sizeof(float)) != cudaSuccess)
      FAIL("cudaMalloc");
    for (size_t j = 0; j < o->cnt; j++)
      h[j] = value(rank, j, i);
    h2d(o->in, h, o->cnt * sizeof *h);
  }
  weft_barrier(world, NULL);
  for (int i = 0; i < OPS; i++) {
    op_t *o = &ops[i];
    float *out = o->in_place ? o->in : o->out;
    /* a receiver starts each run 50 ms late (a reduce's root, the rank after a broadcast's):
     * the others queue and run ahead */
    int slow = (i / RUN) % 2 ? (o->root + 1) % n : o->root;
    if (i % RUN == 0 && rank == slow &&
        cudaLaunchHostFunc(s, late, (void *)(uintptr_t)50000) != cudaSuccess)
      FAIL("cudaLaunchHostFunc");
    log_catch_t *lc = i ? NULL : &caught; /* the first reduce: which kernel takes it */
    if (lc && log_catch(lc)) FAIL("cannot catch the log");
    weft_result_t rc =
        o->kind == REDUCE
            ? weft_reduce(o->in, out, o->cnt, WEFT_F32, WEFT_SUM, o->root, c, (weft_stream_t)s)
        : o->kind == BROADCAST
            ? weft_broadcast(o->in, out, o->cnt, WEFT_F32, o->root, c, (weft_stream_t)s)
            : weft_allgather(o->in, o->out, o->cnt, WEFT_F32, c, (weft_stream_t)s);
    if (lc && !strstr(log_release(lc), "reduce of 4000 bytes by the small low-latency kernel"))
      FAIL("the first reduce did not take the small kernel");
    if (rc) FAIL("op %d: issue failed", i);
  }
  weft_result_t e = WEFT_SUCCESS;
  if (cudaStreamSynchronize(s) != cudaSuccess) FAIL("stream failed");
  weft_comm_get_async_error(c, &e);
  if (e) FAIL("the operations failed: %s", weft_get_last_error(c));
  for (int i = 0; i < OPS; i++)
    if (check(rank, n, i, &ops[i], h)) return 1;
  for (int i = 0; i < OPS; i++) {
    cudaFree(ops[i].in);
    cudaFree(ops[i].out);
  }
  free(h);
  weft_comm_destroy(c);
  weft_comm_destroy(world);
  printf("rank %d: ok\n", rank);
  return 0;
}

/* The kernel's limit for these (off by default until measured on a GPU), and its INFO line. */
int main(int argc, char **argv) {
  setenv("WEFT_LL_ROOTED_BYTES", "65536", 0);
  setenv("WEFT_DEBUG", "INFO", 1);
  setenv("WEFT_DEBUG_SUBSYS", "COLL", 1);
  return gpu_test_main(argc, argv, "test_ll", rank_main, &share);
}
