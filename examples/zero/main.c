/* zero: train the example GPT data-parallel on local CPU ranks (stage 0: DDP, 1-3: ZeRO).
 * usage: zero [--ranks N] [--stage 0-3] [--steps N] [--batch B] [--layers L] [--channels C]
 *             [--heads H] [--seq T] [--lr X] [--no-overlap] [--measure-overlap]
 *             [--trace FILE.json] [--save PREFIX] [--load PREFIX] [--cpu]
 * Started with WEFT_ROOT, WEFT_RANK and WEFT_NRANKS (or torchrun's MASTER_ADDR, MASTER_PORT,
 * RANK, WORLD_SIZE) in the environment, each process is one rank and --ranks is ignored. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data.h"
#include "launch.h"
#include "zero.h"

static int g_overlap_report; /* --measure-overlap: also the compute-only and comm-only runs */

/* One rank's runs over comm (destroyed here). */
static int run(weft_comm_t comm, const zero_opts_t *opts) {
  zero_opts_t o = *opts;
  int rank = 0, n = 1;
  weft_comm_rank(comm, &rank);
  weft_comm_count(comm, &n);
  float *losses = malloc(sizeof(float) * (size_t)(o.steps ? o.steps : 1));
  zero_stats_t st;
  o.log = rank == 0 ? stdout : NULL;
  int rc = !losses || zero_train(comm, &o, losses, &st) ? 1 : 0;
  if (!rc && rank == 0)
    printf("# %d ranks, stage %d: %.2f ms a step, %.1f%% of it waiting for communication; "
           "parameters + gradients + optimizer state: %.2f MiB per rank\n",
           n, o.stage, st.step_s * 1e3, st.step_s > 0 ? 100.0 * st.comm_wait_s / st.step_s : 0,
           (double)st.state_bytes / (1 << 20));
  zero_stats_t only[2];
  o.log = NULL, o.trace = o.save = NULL;
  for (int i = 0; i < 2 && !rc && g_overlap_report; i++) {
    o.mode = i == 0 ? ZERO_COMPUTE_ONLY : ZERO_COMM_ONLY;
    rc = zero_train(comm, &o, losses, &only[i]) ? 1 : 0;
  }
  if (!rc && g_overlap_report && rank == 0) {
    double full = st.step_s, cpu = only[0].step_s, net = only[1].step_s;
    printf("# overlap: step %.2f ms, compute only %.2f ms, communication only %.2f ms: "
           "efficiency (compute + communication - step) / communication = %.2f\n",
           full * 1e3, cpu * 1e3, net * 1e3, net > 0 ? (cpu + net - full) / net : 0);
  }
  free(losses);
  weft_comm_destroy(comm);
  return rc;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  weft_comm_t comm;
  if (weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS) {
    fprintf(stderr, "zero: rank %d: weft_comm_init: %s\n", rank, weft_get_last_error(NULL));
    return 1;
  }
  return run(comm, arg);
}

int main(int argc, char **argv) {
  zero_opts_t o = {
      .stage = 0,
      .steps = 200,
      .batch = 8,
      .model = {.vocab = DATA_VOCAB, .seq = 32, .channels = 64, .layers = 2, .heads = 4},
      .opt = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f},
      .seed = 1,
      .overlap = 1};
  int ranks = 2;
  static const struct option longs[] = {{"ranks", 1, 0, 'r'},
                                        {"stage", 1, 0, 's'},
                                        {"steps", 1, 0, 'n'},
                                        {"batch", 1, 0, 'b'},
                                        {"layers", 1, 0, 'l'},
                                        {"channels", 1, 0, 'c'},
                                        {"heads", 1, 0, 'H'},
                                        {"seq", 1, 0, 't'},
                                        {"lr", 1, 0, 'x'},
                                        {"no-overlap", 0, 0, 'o'},
                                        {"measure-overlap", 0, 0, 'M'},
                                        {"trace", 1, 0, 'T'},
                                        {"save", 1, 0, 'S'},
                                        {"load", 1, 0, 'L'},
                                        {"cpu", 0, 0, 'C'},
                                        {"gpu", 0, 0, 'G'},
                                        {"help", 0, 0, 'h'},
                                        {0, 0, 0, 0}};
  for (int ch; (ch = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
    switch (ch) {
    case 'r': ranks = atoi(optarg); break;
    case 's': o.stage = atoi(optarg); break;
    case 'n': o.steps = atoi(optarg); break;
    case 'b': o.batch = atoi(optarg); break;
    case 'l': o.model.layers = atoi(optarg); break;
    case 'c': o.model.channels = atoi(optarg); break;
    case 'H': o.model.heads = atoi(optarg); break;
    case 't': o.model.seq = atoi(optarg); break;
    case 'x': o.opt.lr = (float)atof(optarg); break;
    case 'o': o.overlap = 0; break;
    case 'M': g_overlap_report = 1; break;
    case 'T': o.trace = optarg; break;
    case 'S': o.save = optarg; break;
    case 'L': o.load = optarg; break;
    case 'C': break;
    case 'G': fprintf(stderr, "zero: the CUDA back end is not built yet (--cpu only)\n"); return 2;
    case 'h':
      printf("usage: zero [--ranks N] [--stage 0-3] [--steps N] [--batch B] [--layers L] "
             "[--channels C] [--heads H] [--seq T] [--lr X] [--no-overlap] [--measure-overlap] "
             "[--trace FILE.json] [--save PREFIX] [--load PREFIX] [--cpu]\n");
      return 0;
    default: return 2;
    }
  }
  if (ranks < 1 || o.steps < 1 || o.batch < 1 || o.stage < 0 || o.stage > 3) {
    fprintf(stderr, "zero: need ranks, steps, batch >= 1 and stage 0-3\n");
    return 2;
  }
  if (getenv("WEFT_ROOT") || getenv("MASTER_ADDR")) { /* started by torchrun or by hand */
    weft_comm_t comm;
    if (weft_comm_init_env(&comm, NULL) != WEFT_SUCCESS) {
      fprintf(stderr, "zero: weft_comm_init_env: %s\n", weft_get_last_error(NULL));
      return 1;
    }
    return run(comm, &o);
  }
  return launch_local(ranks, rank_main, &o, 3600) ? 1 : 0;
}
