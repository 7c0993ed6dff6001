/* The examples' command line: the flags every trainer takes (the model and the run), starting
 * its ranks (forked locally, or one process per rank from WEFT_* or torchrun's variables),
 * the summary lines and the overlap report (--measure-overlap). */
#ifndef WEFT_EXAMPLES_CLI_H
#define WEFT_EXAMPLES_CLI_H

#include <stdio.h>

#include "gpt.h"
#include "run.h"

typedef struct {
  int ranks, steps, batch, overlap, measure_overlap;
  int gpu, bf16; /* --gpu: the CUDA back end; --bf16: its products in bf16 */
  gpt_config_t model;
  adamw_t opt;
  unsigned long long seed;
  const char *trace, *save, *load; /* --save PREFIX, --load PREFIX: checkpoint.h */
} cli_t;

/* The defaults: 2 ranks, 200 steps of 8 sequences, the small model, overlap on. */
cli_t cli_defaults(void);

/* getopt_long entries of the common flags (codes below 32, so an example's own flags keep
 * their letters), and their usage text. */
#define CLI_OPTIONS                                                                                \
  {"ranks", 1, 0, 1}, {"steps", 1, 0, 2}, {"batch", 1, 0, 3}, {"layers", 1, 0, 4},                 \
      {"channels", 1, 0, 5}, {"heads", 1, 0, 6}, {"seq", 1, 0, 7}, {"lr", 1, 0, 8},                \
      {"no-overlap", 0, 0, 9}, {"measure-overlap", 0, 0, 10}, {"trace", 1, 0, 11},                 \
      {"cpu", 0, 0, 12}, {"gpu", 0, 0, 13}, {"save", 1, 0, 14}, {"load", 1, 0, 15},                \
      {"bf16", 0, 0, 16}, {                                                                        \
    "help", 0, 0, 'h'                                                                              \
  }
#define CLI_USAGE                                                                                  \
  "[--ranks N] [--steps N] [--batch B] [--layers L] [--channels C] [--heads H] [--seq T] "         \
  "[--lr X] [--no-overlap] [--measure-overlap] [--trace FILE.json] [--save PREFIX] "               \
  "[--load PREFIX] [--cpu | --gpu [--bf16]]"

/* A common flag (getopt's ch and optarg): 1 taken, 0 not one of them, 2 to exit with after
 * a message (--help with usage = the example's usage line). */
int cli_option(cli_t *c, int ch, const char *arg, const char *name, const char *usage);

/* One training run of an example: mode, log (rank 0's lines or NULL) and trace (NULL: none)
 * on top of its options. 0, or -1 with a message. */
typedef int (*cli_train_fn)(weft_comm_t comm, const void *opts, run_mode_t mode, FILE *log,
                            const char *trace, float *losses, run_stats_t *st);
/* Rank 0's words for the run's shape on nranks ("stage 3", ...). */
typedef void (*cli_describe_fn)(const void *opts, int nranks, char *buf, size_t size);

/* Runs the example: every rank trains once (rank 0 printing a line a step, then the
 * summary), with --measure-overlap twice more and the report. Returns main's exit code. */
int cli_main(const char *name, const cli_t *c, cli_train_fn train, cli_describe_fn describe,
             const void *opts);

#endif
