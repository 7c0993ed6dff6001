/* The examples' command line and launch: see cli.h. */
#include "cli.h"

#include <stdlib.h>

#include "data.h"
#include "launch.h"

cli_t cli_defaults(void) {
  return (cli_t){
      .ranks = 2,
      .steps = 200,
      .batch = 8,
      .overlap = 1,
      .model = {.vocab = DATA_VOCAB, .seq = 32, .channels = 64, .layers = 2, .heads = 4},
      .opt = {.lr = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.0f},
      .seed = 1};
}

int cli_option(cli_t *c, int ch, const char *arg, const char *name, const char *usage) {
  switch (ch) {
  case 1: c->ranks = atoi(arg); break;
  case 2: c->steps = atoi(arg); break;
  case 3: c->batch = atoi(arg); break;
  case 4: c->model.layers = atoi(arg); break;
  case 5: c->model.channels = atoi(arg); break;
  case 6: c->model.heads = atoi(arg); break;
  case 7: c->model.seq = atoi(arg); break;
  case 8: c->opt.lr = (float)atof(arg); break;
  case 9: c->overlap = 0; break;
  case 10: c->measure_overlap = 1; break;
  case 11: c->trace = arg; break;
  case 12: c->gpu = c->bf16 = 0; break;
  case 13: c->gpu = 1; break;
  case 14: c->save = arg; break;
  case 15: c->load = arg; break;
  case 16: c->gpu = c->bf16 = 1; break;
  case 'h': printf("usage: %s %s\n", name, usage); return 2;
  default: return 0;
  }
  return 1;
}

typedef struct {
  const char *name;
  const cli_t *c;
  cli_train_fn train;
  cli_describe_fn describe;
  const void *opts;
} job_t;

/* One rank's runs over comm (destroyed here). */
static int run(weft_comm_t comm, const job_t *j) {
  int rank = 0, n = 1, steps = j->c->steps;
  weft_comm_rank(comm, &rank);
  weft_comm_count(comm, &n);
  float *losses = malloc(sizeof(float) * (size_t)(steps > 0 ? steps : 1));
  run_stats_t st, only[2];
  char what[160];
  int rc = !losses || j->train(comm, j->opts, RUN_FULL, rank == 0 ? stdout : NULL, j->c->trace,
                               losses, &st)
               ? 1
               : 0;
  if (!rc && rank == 0) {
    j->describe(j->opts, n, what, sizeof what);
    printf("# %d ranks, %s: %.2f ms a step, %.1f%% of it waiting for communication; "
           "parameters + gradients + optimizer state: %.2f MiB per rank\n",
           n, what, st.step_s * 1e3, st.step_s > 0 ? 100.0 * st.comm_wait_s / st.step_s : 0,
           (double)st.state_bytes / (1 << 20));
  }
  for (int i = 0; i < 2 && !rc && j->c->measure_overlap; i++)
    rc = j->train(comm, j->opts, i == 0 ? RUN_COMPUTE_ONLY : RUN_COMM_ONLY, NULL, NULL, losses,
                  &only[i])
             ? 1
             : 0;
  if (!rc && j->c->measure_overlap && rank == 0) {
    double full = st.step_s, cpu = only[0].step_s, net = only[1].step_s;
    printf("# overlap: step %.2f ms, compute only %.2f ms, communication only %.2f ms", full * 1e3,
           cpu * 1e3, net * 1e3);
    if (n > 1)
      printf(": efficiency (compute + communication - step) / communication = %.2f\n",
             net > 0 ? (cpu + net - full) / net : 0);
    else
      printf(" (one rank: nothing to overlap)\n");
  }
  free(losses);
  weft_comm_destroy(comm);
  return rc;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  const job_t *j = arg;
  weft_comm_t comm;
  if (weft_comm_init(&comm, n, id, rank, NULL) != WEFT_SUCCESS) {
    fprintf(stderr, "%s: rank %d: weft_comm_init: %s\n", j->name, rank, weft_get_last_error(NULL));
    return 1;
  }
  return run(comm, j);
}

int cli_main(const char *name, const cli_t *c, cli_train_fn train, cli_describe_fn describe,
             const void *opts) {
  job_t j = {name, c, train, describe, opts};
  if (c->ranks < 1 || c->steps < 1 || c->batch < 1) {
    fprintf(stderr, "%s: need ranks, steps and batch >= 1\n", name);
    return 2;
  }
  if (getenv("WEFT_ROOT") || getenv("MASTER_ADDR")) { /* started by torchrun or by hand */
    weft_comm_t comm;
    if (weft_comm_init_env(&comm, NULL) != WEFT_SUCCESS) {
      fprintf(stderr, "%s: weft_comm_init_env: %s\n", name, weft_get_last_error(NULL));
      return 1;
    }
    return run(comm, &j);
  }
  return launch_local(c->ranks, rank_main, &j, 3600) ? 1 : 0;
}
