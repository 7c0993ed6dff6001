/* Loss parity of the tensor-parallel example (examples/tp/train.c): N ranks in models of TP
 * shards (with or without sequence parallel, ring allgathers or plain ones) must follow one
 * rank's plain run of the global batch (the data-parallel example's, a separate code path),
 * step for step, within 1e-5 relative in f32 (only the order of the sums differs); and a run
 * whose forward reductions keep each shard's own part must not (the check can fail). With
 * gpu, the N ranks train on the CUDA back end (sharing the devices there are), held to the
 * same bound (see test_zero.c). usage: test_tp NRANKS TP SP [gpu] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "tp.h"
#include "zero_opts.h"

enum { STEPS = 20, B = 2 };

typedef struct {
  int tp, sp, gpu;
} shape_t;

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  const shape_t *sh = arg;
  int dp = n / sh->tp;
  float ref[STEPS], got[STEPS], plain[STEPS], wrong[STEPS];
  weft_comm_t one, comm;
  weft_unique_id_t solo;
  zero_opts_t z = zero_test_opts(0, B * dp, STEPS, 5);
  z.model.heads = 4; /* so that 4 shards get one head each */
  if (weft_get_unique_id(&solo) != WEFT_SUCCESS ||
      weft_comm_init(&one, 1, solo, 0, NULL) != WEFT_SUCCESS)
    return printf("test_tp: rank %d: the 1-rank communicator\n", rank), 1;
  int rc = zero_train(one, &z, ref, NULL);
  weft_comm_destroy(one);
  if (rc || weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS)
    return printf("test_tp: rank %d: setting up\n", rank), 1;
  tp_opts_t o = {.tp = sh->tp,
                 .sp = sh->sp,
                 .steps = STEPS,
                 .batch = B,
                 .model = z.model,
                 .opt = z.opt,
                 .seed = z.seed,
                 .overlap = 1,
                 .gpu = sh->gpu};
  if (tp_train(comm, &o, got, NULL)) return printf("test_tp: rank %d: training\n", rank), 1;
  o.overlap = 0; /* plain allgathers; gradients reduced after the whole backward */
  if (tp_train(comm, &o, plain, NULL)) return printf("test_tp: rank %d: training\n", rank), 1;
  o.overlap = 1, o.wrong_reduction = 1;
  if (tp_train(comm, &o, wrong, NULL)) return printf("test_tp: rank %d: training\n", rank), 1;
  weft_comm_destroy(comm);
  double w = parity_worst(got, ref, STEPS), wp = parity_worst(plain, ref, STEPS),
         ww = parity_worst(wrong, ref, STEPS);
  if (rank == 0)
    printf("test_tp: %d ranks%s, tensor parallel %d%s x data parallel %d: loss %.4f -> %.4f, "
           "worst relative difference from one rank's %.2g, %.2g without overlap (without the "
           "reductions: %.2g)\n",
           n, sh->gpu ? " on CUDA" : "", sh->tp, sh->sp ? " (sequence parallel)" : "", dp, ref[0],
           ref[STEPS - 1], w, wp, ww);
  if (w > 1e-5 || wp > 1e-5)
    return printf("test_tp: rank %d: losses differ from one rank's\n", rank), 1;
  if (sh->tp > 1 && ww <= 1e-5)
    return printf("test_tp: rank %d: a run without reductions went unnoticed\n", rank), 1;
  if (ref[STEPS - 1] >= ref[0]) return printf("test_tp: the loss did not fall\n"), 1;
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  shape_t sh = {argc > 2 ? atoi(argv[2]) : n, argc > 3 ? atoi(argv[3]) : 0,
                argc > 4 && !strcmp(argv[4], "gpu")};
  if (n < 1 || sh.tp < 1 || n % sh.tp) return 2;
  if (sh.gpu && !cuda_here()) return printf("test_tp: skipped: no CUDA device\n"), 77;
  return launch_local(n, rank_main, &sh, 300) ? 1 : 0;
}
