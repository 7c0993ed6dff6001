/* Checkpoints of the training examples (examples/common/checkpoint.c): 2 ranks train 10
 * steps with ZeRO-1 and save; 4 ranks load that with ZeRO-3 (or 2 with DDP) and train 10 more
 * on the same global batch: their losses must be those of the 2 ranks' uninterrupted 20 steps
 * within 1e-5 (only the order of the sums differs after the load). A checkpoint of another
 * model, or one beside another rank count's files, is refused on every rank.
 * With tp: 2 ranks of one tensor-parallel model (sequence parallel) save and resume; 4 ranks
 * of ZeRO-3, then 2 models of 2 shards, resume from the same file. With moe: a mixture of
 * experts saved and resumed by 2 ranks of expert parallel, then resumed by 4 (cross_main).
 * With tp gpu, the tensor-parallel and ZeRO-3 runs train on CUDA (same-shape resumption then
 * within 1e-5 for CROSS steps: CUDA's atomic sums vary from run to run).
 * usage: test_checkpoint DIR N [tp [gpu]|moe] */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ep.h"
#include "launch.h"
#include "tp.h"
#include "zero_opts.h"

enum { STEPS = 10, GLOBAL = 8 };

static zero_opts_t opts(int stage, int batch, int steps) {
  return zero_test_opts(stage, batch, steps, 9);
}

/* Every rank's communicator, and ranks 0 and 1's own (*sub NULL elsewhere). */
static int comms(int rank, int n, weft_unique_id_t id, weft_comm_t *comm, weft_comm_t *sub) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  if (weft_comm_init(comm, n, id, rank, NULL) == WEFT_SUCCESS &&
      weft_comm_split(*comm, rank < 2 ? 0 : WEFT_SPLIT_NOCOLOR, rank, sub, &cfg) == WEFT_SUCCESS)
    return 0;
  return printf("test_checkpoint: rank %d: communicators\n", rank), 1;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  const char *dir = arg;
  char prefix[4096];
  snprintf(prefix, sizeof prefix, "%s/ckpt", dir);
  float ref[2 * STEPS], got[STEPS];
  weft_comm_t comm, sub = NULL;
  if (comms(rank, n, id, &comm, &sub)) return 1;
  zero_opts_t o;
  if (sub) { /* ranks 0 and 1, ZeRO-1, 4 sequences each: 20 steps; then 10, saved */
    o = opts(1, GLOBAL / 2, 2 * STEPS);
    if (zero_train(sub, &o, ref, NULL)) return 1;
    o.steps = STEPS, o.save = prefix;
    if (zero_train(sub, &o, got, NULL)) return 1;
    weft_comm_destroy(sub);
  }
  if (weft_broadcast(ref, ref, 2 * STEPS, WEFT_F32, 0, comm, NULL) != WEFT_SUCCESS) return 1;
  /* every rank: ZeRO-3 (n = 4) or DDP (otherwise) from the checkpoint, 10 more steps */
  o = opts(n == 4 ? 3 : 0, GLOBAL / n, STEPS), o.load = prefix;
  if (zero_train(comm, &o, got, NULL)) return printf("test_checkpoint: resuming failed\n"), 1;
  double worst = parity_worst(got, ref + STEPS, STEPS);
  /* another model's checkpoint: refused */
  o = opts(0, GLOBAL / n, 1), o.load = prefix, o.model.channels = 16;
  int refused = zero_train(comm, &o, got, NULL) != 0;
  /* a stale file of another rank count under the prefix: which run is meant is not known */
  char stale[4200];
  snprintf(stale, sizeof stale, "%s.rank0-of-3", prefix);
  FILE *f = rank == 0 ? fopen(stale, "w") : NULL;
  if (f) fclose(f);
  if (weft_barrier(comm, NULL) != WEFT_SUCCESS) return 1;
  o = opts(0, GLOBAL / n, 1), o.load = prefix;
  int stale_refused = zero_train(comm, &o, got, NULL) != 0;
  if (weft_barrier(comm, NULL) != WEFT_SUCCESS) return 1;
  if (rank == 0) remove(stale);
  weft_comm_destroy(comm);
  if (rank == 0)
    printf("test_checkpoint: saved by 2 ranks (ZeRO-1), resumed by %d (%s): worst relative "
           "difference from the uninterrupted run %.2g; refused: another model's %s, beside a "
           "stale one %s\n",
           n, n == 4 ? "ZeRO-3" : "DDP", worst, refused ? "yes" : "NO",
           stale_refused ? "yes" : "NO");
  if (worst > 1e-5) return printf("test_checkpoint: rank %d: resumed losses differ\n", rank), 1;
  return refused && stale_refused ? 0 : 1;
}

/* The cross cases. Ranks 0 and 1 run the split kind 20 steps, then 10 that save, then 10
 * that load: those must be the uninterrupted run's, bit for bit (same shape, same sums).
 * Then every rank resumes from the checkpoint in other shapes for CROSS steps, within 1e-5
 * of it: their sums go in other orders, and this model's trajectories part past that (the
 * losses of two orders differ by 1e-3 a few steps later), so the first steps are what
 * shows the parameters and moments came back. */
enum { CROSS = 3 };

typedef struct {
  const char *dir, *kind;
  int gpu; /* the tensor-parallel runs and the ZeRO-3 one on CUDA */
} cross_t;

static int resume_check(const char *what, int rank, const float *got, const float *ref) {
  double worst = parity_worst(got, ref + STEPS, CROSS);
  if (rank == 0)
    printf("test_checkpoint: %s: worst relative difference from the uninterrupted run over %d "
           "steps %.2g\n",
           what, CROSS, worst);
  return worst > 1e-5;
}

/* The saving kind: 20 steps, 10 saved, 10 resumed (ranks 0 and 1); 1 when resumed differs:
 * in a bit (CPU), or (CUDA, whose atomic sums vary from run to run, so that two uninterrupted
 * runs part like the cross cases) by more than 1e-5 in its first CROSS steps. */
static int same_shape(weft_comm_t sub, int moe, tp_opts_t t, ep_opts_t e, const char *prefix,
                      float *ref) {
  float got[STEPS];
  t.steps = e.steps = 2 * STEPS;
  if ((moe ? ep_train(sub, &e, ref, NULL) : tp_train(sub, &t, ref, NULL)) != 0) return -1;
  t.steps = e.steps = STEPS, t.save = e.save = prefix;
  if ((moe ? ep_train(sub, &e, got, NULL) : tp_train(sub, &t, got, NULL)) != 0) return -1;
  t.save = e.save = NULL, t.load = e.load = prefix;
  if ((moe ? ep_train(sub, &e, got, NULL) : tp_train(sub, &t, got, NULL)) != 0) return -1;
  if (t.gpu) return parity_worst(got, ref + STEPS, CROSS) > 1e-5;
  return memcmp(got, ref + STEPS, sizeof got) != 0;
}

static int cross_main(int rank, int n, weft_unique_id_t id, void *arg) {
  const cross_t *x = arg;
  int moe = !strcmp(x->kind, "moe"), bad = 0;
  char prefix[4096];
  snprintf(prefix, sizeof prefix, "%s/%s", x->dir, x->kind);
  float ref[2 * STEPS], got[STEPS];
  weft_comm_t comm, sub = NULL;
  if (comms(rank, n, id, &comm, &sub)) return 1;
  zero_opts_t z = opts(0, GLOBAL / 2, STEPS);
  z.model.heads = 4;
  if (moe) z.model.experts = 4, z.model.topk = 2, z.model.capacity = 1.0f, z.model.aux = 0.01f;
  tp_opts_t t = {.tp = 2,
                 .sp = 1,
                 .steps = STEPS,
                 .batch = GLOBAL,
                 .model = z.model,
                 .opt = z.opt,
                 .seed = z.seed,
                 .overlap = 1,
                 .gpu = x->gpu};
  ep_opts_t e = {.steps = STEPS,
                 .batch = GLOBAL / 2,
                 .model = z.model,
                 .opt = z.opt,
                 .seed = z.seed,
                 .overlap = 1};
  int differs = 0;
  if (sub) {
    differs = same_shape(sub, moe, t, e, prefix, ref);
    weft_comm_destroy(sub);
  }
  if (weft_broadcast(ref, ref, 2 * STEPS, WEFT_F32, 0, comm, NULL) != WEFT_SUCCESS ||
      weft_broadcast(&differs, &differs, 1, WEFT_I32, 0, comm, NULL) != WEFT_SUCCESS || differs < 0)
    return printf("test_checkpoint: rank %d: the runs that save\n", rank), 1;
  if (rank == 0)
    printf("test_checkpoint: %s saved by 2 ranks%s, resumed by the same: %s\n",
           moe ? "experts" : "tensor parallel 2 (sp)", x->gpu ? " on CUDA" : "",
           differs  ? "DIFFERS from the uninterrupted run"
           : x->gpu ? "the uninterrupted run within 1e-5 for 3 steps"
                    : "the uninterrupted run, bit for bit");
  bad |= differs;
  t.steps = e.steps = CROSS, t.load = e.load = prefix;
  if (moe) { /* 4 ranks of one expert each */
    e.batch = GLOBAL / n;
    if (ep_train(comm, &e, got, NULL)) return printf("test_checkpoint: resuming failed\n"), 1;
    bad |= resume_check("experts saved by 2 ranks, resumed by 4", rank, got, ref);
  } else { /* ZeRO-3 on 4 ranks, then 2 models of 2 shards */
    z = opts(3, GLOBAL / n, CROSS), z.model = t.model, z.load = prefix, z.gpu = x->gpu;
    if (zero_train(comm, &z, got, NULL)) return printf("test_checkpoint: resuming failed\n"), 1;
    bad |= resume_check("tensor parallel 2 (sp) saved, ZeRO-3 on 4 resumed", rank, got, ref);
    t.batch = GLOBAL / (n / 2);
    if (tp_train(comm, &t, got, NULL)) return printf("test_checkpoint: resuming failed\n"), 1;
    bad |= resume_check("tensor parallel 2 (sp) saved, 2 x 2 resumed", rank, got, ref);
  }
  weft_comm_destroy(comm);
  return bad;
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  int n = atoi(argv[2]);
  if ((GLOBAL % n) || n < 2) return 2;
  mkdir(argv[1], 0700); /* it may exist: the checkpoint's files are rewritten */
  if (argc > 3) {
    cross_t x = {argv[1], argv[3], argc > 4 && !strcmp(argv[4], "gpu")};
    if (n != 4 || (strcmp(x.kind, "tp") && strcmp(x.kind, "moe")) || (x.gpu && x.kind[0] != 't'))
      return 2;
    if (x.gpu && !cuda_here()) return printf("test_checkpoint: skipped: no CUDA device\n"), 77;
    return launch_local(n, cross_main, &x, 300) ? 1 : 0;
  }
  return launch_local(n, rank_main, argv[1], 300) ? 1 : 0;
}
