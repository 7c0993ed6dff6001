/* Checkpoints of the data-parallel example (examples/zero/checkpoint.c): 2 ranks train 10
 * steps with ZeRO-1 and save; 4 ranks load that with ZeRO-3 (or 2 with DDP) and train 10 more
 * on the same global batch: their losses must be those of the 2 ranks' uninterrupted 20 steps
 * within 1e-5 (only the order of the sums differs after the load). A checkpoint of another
 * model, or one beside another rank count's files, is refused on every rank.
 * usage: test_checkpoint DIR */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "launch.h"
#include "zero_opts.h"

enum { STEPS = 10, GLOBAL = 8 };

static zero_opts_t opts(int stage, int batch, int steps) {
  return zero_test_opts(stage, batch, steps, 9);
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  const char *dir = arg;
  char prefix[4096];
  snprintf(prefix, sizeof prefix, "%s/ckpt", dir);
  float ref[2 * STEPS], got[STEPS];
  weft_comm_t comm, sub = NULL;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  if (weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS ||
      weft_comm_split(comm, rank < 2 ? 0 : WEFT_SPLIT_NOCOLOR, rank, &sub, &cfg) != WEFT_SUCCESS)
    return printf("test_checkpoint: rank %d: communicators\n", rank), 1;
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

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  int n = atoi(argv[2]);
  if ((GLOBAL % n) || n < 2) return 2;
  mkdir(argv[1], 0700); /* it may exist: the checkpoint's files are rewritten */
  return launch_local(n, rank_main, argv[1], 300) ? 1 : 0;
}
