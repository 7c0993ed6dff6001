/* zero: train the example GPT data-parallel on local ranks, on the CPU or with --gpu on CUDA
 * devices (stage 0: DDP, 1-3: ZeRO).
 * usage: zero [--stage 0-3] and the flags of cli.h
 * Started with WEFT_ROOT, WEFT_RANK and WEFT_NRANKS (or torchrun's MASTER_ADDR, MASTER_PORT,
 * RANK, WORLD_SIZE) in the environment, each process is one rank and --ranks is ignored. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "zero.h"

static int train(weft_comm_t comm, const void *opts, run_mode_t mode, FILE *log, const char *trace,
                 float *losses, run_stats_t *st) {
  zero_opts_t o = *(const zero_opts_t *)opts;
  o.mode = mode, o.log = log, o.trace = trace;
  if (mode != RUN_FULL) o.save = NULL; /* the measuring runs leave no checkpoint */
  return zero_train(comm, &o, losses, st);
}

static void describe(const void *opts, int nranks, char *buf, size_t size) {
  (void)nranks;
  const zero_opts_t *o = opts;
  snprintf(buf, size, "stage %d%s", o->stage, o->gpu ? ", CUDA" : "");
}

int main(int argc, char **argv) {
  cli_t c = cli_defaults();
  zero_opts_t o = {.stage = 0};
  const char *usage = "[--stage 0-3] " CLI_USAGE;
  static const struct option longs[] = {CLI_OPTIONS, {"stage", 1, 0, 's'}, {0, 0, 0, 0}};
  for (int ch, r; (ch = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
    if ((r = cli_option(&c, ch, optarg, "zero", usage)) == 2) return ch == 'h' ? 0 : 2;
    if (r) continue;
    switch (ch) {
    case 's': o.stage = atoi(optarg); break;
    default: return 2;
    }
  }
  if (o.stage < 0 || o.stage > 3) return fprintf(stderr, "zero: the stage is 0-3\n"), 2;
  o.steps = c.steps, o.batch = c.batch, o.model = c.model, o.opt = c.opt, o.seed = c.seed;
  o.overlap = c.overlap, o.save = c.save, o.load = c.load, o.gpu = c.gpu, o.bf16 = c.bf16;
  return cli_main("zero", &c, train, describe, &o);
}
