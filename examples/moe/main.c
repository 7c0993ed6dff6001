/* moe: train the example GPT as a mixture of experts, expert-parallel, on local CPU ranks
 * or (--gpu) on GPUs.
 * usage: moe [--experts E] [--topk K] [--capacity X] [--aux X] and the flags of cli.h
 * (defaults: 4 experts, top 2, dropless, balance loss weight 0.01).
 * Started with WEFT_ROOT, WEFT_RANK and WEFT_NRANKS (or torchrun's MASTER_ADDR, MASTER_PORT,
 * RANK, WORLD_SIZE) in the environment, each process is one rank and --ranks is ignored. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "ep.h"

static int train(weft_comm_t comm, const void *opts, run_mode_t mode, FILE *log, const char *trace,
                 float *losses, run_stats_t *st) {
  ep_opts_t o = *(const ep_opts_t *)opts;
  o.mode = mode, o.log = log, o.trace = trace;
  if (mode != RUN_FULL) o.save = NULL; /* the measuring runs leave no checkpoint */
  return ep_train(comm, &o, losses, st);
}

static void describe(const void *opts, int nranks, char *buf, size_t size) {
  const gpt_config_t *c = &((const ep_opts_t *)opts)->model;
  snprintf(buf, size, "%d experts (%d a rank), top %d, %s", c->experts, c->experts / nranks,
           c->topk, c->capacity > 0 ? "capacity-limited" : "dropless");
}

int main(int argc, char **argv) {
  cli_t c = cli_defaults();
  ep_opts_t o = {.model = {.experts = 4, .topk = 2, .aux = 0.01f}};
  const char *usage = "[--experts E] [--topk K] [--capacity X] [--aux X] " CLI_USAGE;
  static const struct option longs[] = {CLI_OPTIONS,         {"experts", 1, 0, 'e'},
                                        {"topk", 1, 0, 'k'}, {"capacity", 1, 0, 'y'},
                                        {"aux", 1, 0, 'a'},  {0, 0, 0, 0}};
  for (int ch, r; (ch = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
    if ((r = cli_option(&c, ch, optarg, "moe", usage)) == 2) return ch == 'h' ? 0 : 2;
    if (r) continue;
    switch (ch) {
    case 'e': o.model.experts = atoi(optarg); break;
    case 'k': o.model.topk = atoi(optarg); break;
    case 'y': o.model.capacity = (float)atof(optarg); break;
    case 'a': o.model.aux = (float)atof(optarg); break;
    default: return 2;
    }
  }
  if (o.model.capacity < 0 || o.model.aux < 0)
    return fprintf(stderr, "moe: capacity and aux are at least 0\n"), 2;
  gpt_config_t m = c.model;
  m.experts = o.model.experts, m.topk = o.model.topk, m.capacity = o.model.capacity;
  m.aux = o.model.aux;
  o.steps = c.steps, o.batch = c.batch, o.model = m, o.opt = c.opt, o.seed = c.seed;
  o.overlap = c.overlap, o.save = c.save, o.load = c.load, o.gpu = c.gpu, o.bf16 = c.bf16;
  return cli_main("moe", &c, train, describe, &o);
}
