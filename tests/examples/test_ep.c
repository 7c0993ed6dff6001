/* Loss parity of the expert-parallel example (examples/moe/train.c): N ranks, each with its
 * share of the experts and of the batch, must follow one rank's plain run of the global
 * batch with every expert routed in process (the data-parallel example's, another code path),
 * step for step, within 1e-5 relative in f32; and a run that leaves the data-parallel
 * gradients unreduced must not (the check can fail). With gpu, the N ranks train on the CUDA
 * back end (sharing the devices there are) with device communicators and weft's device MoE
 * path, in f32 and held to the same bound: the sums go in other orders there (the gate's
 * probabilities too, so a choice between two experts whose probabilities differ by less than
 * that could go the other way; none did on these shapes).
 * usage: test_ep NRANKS TOPK CAPACITY [gpu] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ep.h"
#include "launch.h"
#include "zero_opts.h"

enum { STEPS = 20, B = 2 };

typedef struct {
  int topk, gpu;
  float capacity;
} shape_t;

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  const shape_t *sh = arg;
  float ref[STEPS], got[STEPS], late[STEPS], wrong[STEPS];
  weft_comm_t one, comm;
  weft_unique_id_t solo;
  zero_opts_t z = zero_test_opts(0, B * n, STEPS, 5);
  z.model.experts = 4, z.model.topk = sh->topk, z.model.capacity = sh->capacity;
  z.model.aux = 0.01f;
  if (weft_get_unique_id(&solo) != WEFT_SUCCESS ||
      weft_comm_init(&one, 1, solo, 0, NULL) != WEFT_SUCCESS)
    return printf("test_ep: rank %d: the 1-rank communicator\n", rank), 1;
  int rc = zero_train(one, &z, ref, NULL);
  weft_comm_destroy(one);
  if (rc || weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS)
    return printf("test_ep: rank %d: setting up\n", rank), 1;
  ep_opts_t o = {.steps = STEPS,
                 .batch = B,
                 .model = z.model,
                 .opt = z.opt,
                 .seed = z.seed,
                 .overlap = 1,
                 .gpu = sh->gpu};
  if (ep_train(comm, &o, got, NULL)) return printf("test_ep: rank %d: training\n", rank), 1;
  o.overlap = 0; /* gradients reduced after the whole backward */
  if (ep_train(comm, &o, late, NULL)) return printf("test_ep: rank %d: training\n", rank), 1;
  o.overlap = 1, o.wrong_reduction = 1;
  if (ep_train(comm, &o, wrong, NULL)) return printf("test_ep: rank %d: training\n", rank), 1;
  weft_comm_destroy(comm);
  double w = parity_worst(got, ref, STEPS), wl = parity_worst(late, ref, STEPS);
  double ww = parity_worst(wrong, ref, STEPS);
  if (rank == 0)
    printf("test_ep: %d ranks%s, 4 experts, top %d, %s: loss %.4f -> %.4f, worst relative "
           "difference from one rank's %.2g, %.2g without overlap (without the reduction: "
           "%.2g)\n",
           n, sh->gpu ? " on CUDA" : "", sh->topk, sh->capacity > 0 ? "capacity 1" : "dropless",
           ref[0], ref[STEPS - 1], w, wl, ww);
  if (w > 1e-5 || wl > 1e-5)
    return printf("test_ep: rank %d: losses differ from one rank's\n", rank), 1;
  if (n > 1 && ww <= 1e-5)
    return printf("test_ep: rank %d: a run without reduction went unnoticed\n", rank), 1;
  if (ref[STEPS - 1] >= ref[0]) return printf("test_ep: the loss did not fall\n"), 1;
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  shape_t sh = {argc > 2 ? atoi(argv[2]) : 2, argc > 4 && !strcmp(argv[4], "gpu"),
                argc > 3 ? (float)atof(argv[3]) : 0.0f};
  if (n < 1 || 4 % n || sh.topk < 1 || sh.topk > 4) return 2;
  if (sh.gpu && !cuda_here()) return printf("test_ep: skipped: no CUDA device\n"), 77;
  return launch_local(n, rank_main, &sh, 300) ? 1 : 0;
}
