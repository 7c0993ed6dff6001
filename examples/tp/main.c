/* tp: train the example GPT tensor-parallel (x data-parallel) on local CPU ranks.
 * usage: tp [--tp T] [--sp] and the flags of cli.h (--tp: ranks per model, all by default)
 * Started with WEFT_ROOT, WEFT_RANK and WEFT_NRANKS (or torchrun's MASTER_ADDR, MASTER_PORT,
 * RANK, WORLD_SIZE) in the environment, each process is one rank and --ranks is ignored. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "tp.h"

static int train(weft_comm_t comm, const void *opts, run_mode_t mode, FILE *log, const char *trace,
                 float *losses, run_stats_t *st) {
  tp_opts_t o = *(const tp_opts_t *)opts;
  int n = 1;
  weft_comm_count(comm, &n);
  if (o.tp == 0) o.tp = n; /* every rank one shard of one model */
  o.mode = mode, o.log = log, o.trace = trace;
  if (mode != RUN_FULL) o.save = NULL; /* the measuring runs leave no checkpoint */
  return tp_train(comm, &o, losses, st);
}

static void describe(const void *opts, int nranks, char *buf, size_t size) {
  const tp_opts_t *o = opts;
  int tp = o->tp ? o->tp : nranks;
  snprintf(buf, size, "tensor parallel %d%s x data parallel %d", tp,
           o->sp ? " (sequence parallel)" : "", nranks / tp);
}

int main(int argc, char **argv) {
  cli_t c = cli_defaults();
  tp_opts_t o = {.tp = 0};
  const char *usage = "[--tp T] [--sp] " CLI_USAGE;
  static const struct option longs[] = {
      CLI_OPTIONS, {"tp", 1, 0, 'p'}, {"sp", 0, 0, 'q'}, {0, 0, 0, 0}};
  for (int ch, r; (ch = getopt_long(argc, argv, "h", longs, NULL)) != -1;) {
    if ((r = cli_option(&c, ch, optarg, "tp", usage)) == 2) return ch == 'h' ? 0 : 2;
    if (r) continue;
    switch (ch) {
    case 'p': o.tp = atoi(optarg); break;
    case 'q': o.sp = 1; break;
    default: return 2;
    }
  }
  if (o.tp < 0) return fprintf(stderr, "tp: --tp is at least 1\n"), 2;
  o.steps = c.steps, o.batch = c.batch, o.model = c.model, o.opt = c.opt, o.seed = c.seed;
  o.overlap = c.overlap, o.save = c.save, o.load = c.load, o.gpu = c.gpu, o.bf16 = c.bf16;
  return cli_main("tp", &c, train, describe, &o);
}
