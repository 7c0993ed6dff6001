/* Loss parity of the data-parallel example (examples/zero/train.c): N ranks of B sequences at
 * a ZeRO stage, with and without overlap, must follow one rank's plain data-parallel run of
 * N x B sequences on the CPU, step for step, within 1e-5 relative in f32 (only the order of
 * the sums differs); and a run whose reduction is left out must not (the check can fail).
 * The first step's reduced gradients themselves, each rank's part of them, must be that one
 * rank's full-batch gradient (GRAD_TOL): Adam barely notices a uniform scale, so a gradient
 * summed but not averaged (the 1/N left out) passed the loss parity on 2 and 4 ranks.
 * With gpu, the N ranks train on the CUDA back end (sharing the devices there are), still in
 * f32 and held to the same bound: every operation sums in another order there, which moved
 * the losses by at most 1.8e-7 on an H200, against 1.7e-2 or more without the reduction.
 * With bf16, the products read bf16 copies of their inputs: the bound is BF16_TOL (below).
 * usage: test_zero NRANKS STAGE [gpu|bf16] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "zero_opts.h"

enum { STEPS = 20, B = 2 };

/* bf16 keeps 8 significant bits: each product's inputs move by up to 2^-9 (2e-3) of
 * themselves. Over 20 steps that moved the losses by at most 5.5e-4 on an H200 (4 ranks,
 * ZeRO-3), while a run without the gradient reduction is off by 1.6e-2 or more: the bound
 * sits between, 4x above the one and 8x below the other. */
static const double BF16_TOL = 2e-3;

/* The first step's gradients, each element's difference from the reference over the
 * reference's largest magnitude: only the order of the sums differs in f32 (on the CPU, stages
 * 0-3 on 1-4 ranks: 4e-7 at most); a gradient summed and not averaged is off by N - 1 of it,
 * one not reduced by 0.36 to 0.83. bf16 products round their inputs to 8 bits (2^-9 each):
 * on an H100 that moved the gradients by 0.0011 to 0.0037 (1, 2 and 4 ranks), against 0.41 and
 * more without the reduction (bench/results/2026-12-06-h100-exact-limits.txt); the bound sits
 * 4x above the one and 27x below the other. */
static const double GRAD_TOL = 1e-4, BF16_GRAD_TOL = 1.5e-2;

typedef struct {
  int stage, gpu, bf16;
} arg_t;

static zero_opts_t opts(int stage, int batch) { return zero_test_opts(stage, batch, STEPS, 5); }

/* The worst difference of the elements of got this rank filled (the others stay NaN) from
 * ref's, over ref's largest magnitude; *filled: how many it filled. */
static double grads_worst(const float *got, const float *ref, size_t P, int64_t *filled) {
  double big = 0, worst = 0;
  for (size_t i = 0; i < P; i++)
    big = fabs((double)ref[i]) > big ? fabs((double)ref[i]) : big;
  *filled = 0;
  for (size_t i = 0; i < P; i++) {
    if (isnan(got[i])) continue;
    ++*filled;
    double d = fabs((double)got[i] - ref[i]) / (big > 0 ? big : 1);
    worst = d > worst ? d : worst;
  }
  return worst;
}

/* A host array of the model's parameter count, every element NaN; NULL when out of memory. */
static float *nan_grads(const zero_opts_t *o, size_t *P) {
  gpt_t m;
  if (gpt_init(&m, &o->model, 1)) return NULL;
  *P = m.nparams;
  gpt_free(&m);
  float *g = malloc(*P * sizeof *g);
  for (size_t i = 0; g && i < *P; i++)
    g[i] = NAN;
  return g;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  const arg_t *a = arg;
  int stage = a->stage;
  float ref[STEPS], got[STEPS], late[STEPS], wrong[STEPS];
  weft_comm_t one, comm;
  weft_unique_id_t solo;
  /* the reference: this process alone, plain data parallel (nothing sharded), the whole
   * global batch */
  if (weft_get_unique_id(&solo) != WEFT_SUCCESS ||
      weft_comm_init(&one, 1, solo, 0, NULL) != WEFT_SUCCESS)
    return printf("test_zero: rank %d: the 1-rank communicator\n", rank), 1;
  zero_opts_t o = opts(0, B * n);
  size_t P = 0;
  float *ref_g = nan_grads(&o, &P), *got_g = nan_grads(&o, &P), *wrong_g = nan_grads(&o, &P);
  if (!ref_g || !got_g || !wrong_g) return printf("test_zero: rank %d: out of memory\n", rank), 1;
  o.first_grads = ref_g;
  int rc = zero_train(one, &o, ref, NULL);
  weft_comm_destroy(one);
  if (rc || weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS)
    return printf("test_zero: rank %d: setting up\n", rank), 1;
  o = opts(stage, B);
  o.gpu = a->gpu, o.bf16 = a->bf16;
  double tol = a->bf16 ? BF16_TOL : 1e-5, gtol = a->bf16 ? BF16_GRAD_TOL : GRAD_TOL;
  o.first_grads = got_g;
  if (zero_train(comm, &o, got, NULL)) return printf("test_zero: rank %d: training\n", rank), 1;
  o.overlap = 0, o.first_grads = NULL; /* every reduction after the whole backward */
  if (zero_train(comm, &o, late, NULL)) return printf("test_zero: rank %d: training\n", rank), 1;
  o.overlap = 1, o.wrong_reduction = 1, o.first_grads = wrong_g;
  if (zero_train(comm, &o, wrong, NULL)) return printf("test_zero: rank %d: training\n", rank), 1;
  /* every gradient compared once (stage 0: on every rank), each rank its part */
  int64_t filled = 0, filled_wrong = 0, all = 0, want_all = (int64_t)P * (stage == 0 ? n : 1);
  double g = grads_worst(got_g, ref_g, P, &filled),
         gw = grads_worst(wrong_g, ref_g, P, &filled_wrong);
  if (weft_allreduce(&filled, &all, 1, WEFT_I64, WEFT_SUM, comm, NULL) != WEFT_SUCCESS)
    return printf("test_zero: rank %d: counting the gradients\n", rank), 1;
  weft_comm_destroy(comm);
  double w = parity_worst(got, ref, STEPS), wl = parity_worst(late, ref, STEPS),
         ww = parity_worst(wrong, ref, STEPS);
  if (rank == 0)
    printf("test_zero: %d ranks%s, stage %d: loss %.4f -> %.4f, worst relative difference from "
           "one rank's DDP %.2g, %.2g without overlap (without the reduction: %.2g); step 1's "
           "gradients %.2g of the largest (without the reduction: %.2g)\n",
           n,
           a->bf16  ? " on CUDA, bf16 products"
           : a->gpu ? " on CUDA"
                    : "",
           stage, ref[0], ref[STEPS - 1], w, wl, ww, g, gw);
  if (all != want_all)
    return printf("test_zero: rank %d: %lld gradients compared over the ranks, want %lld\n", rank,
                  (long long)all, (long long)want_all),
           1;
  if (g > gtol)
    return printf("test_zero: rank %d: step 1's averaged gradients differ from one rank's by %.3g "
                  "of the largest\n",
                  rank, g),
           1;
  if (n > 1 && gw <= gtol)
    return printf("test_zero: rank %d: gradients without reduction went unnoticed\n", rank), 1;
  free(ref_g), free(got_g), free(wrong_g);
  if (w > tol || wl > tol)
    return printf("test_zero: rank %d: losses differ from one rank's\n", rank), 1;
  if (n > 1 && ww <= tol)
    return printf("test_zero: rank %d: a run without reduction went unnoticed\n", rank), 1;
  if (ref[STEPS - 1] >= ref[0]) return printf("test_zero: the loss did not fall\n"), 1;
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  const char *mode = argc > 3 ? argv[3] : "cpu";
  arg_t a = {.stage = argc > 2 ? atoi(argv[2]) : 0,
             .gpu = !strcmp(mode, "gpu") || !strcmp(mode, "bf16"),
             .bf16 = !strcmp(mode, "bf16")};
  if (n < 1 || a.stage < 0 || a.stage > 3) return 2;
  if (a.gpu && !cuda_here()) return printf("test_zero: skipped: no CUDA device\n"), 77;
  return launch_local(n, rank_main, &a, 300) ? 1 : 0;
}
