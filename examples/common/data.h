/* The examples' training data: a deterministic token stream of additions ("12+7=19;"), so
 * that the loss visibly falls within a few hundred steps with nothing to download. Sample g
 * of the run is the same whatever the rank count, so a data-parallel run over N ranks sees
 * exactly the single-rank run's global batch. */
#ifndef WEFT_EXAMPLES_DATA_H
#define WEFT_EXAMPLES_DATA_H

#include <stddef.h>

enum { DATA_VOCAB = 13 }; /* digits, '+', '=', ';' */

typedef struct {
  int *stream;
  size_t len;
} data_t;

/* A stream of len tokens from seed; 0, or -1 when out of memory. */
int data_init(data_t *d, size_t len, unsigned long long seed);
void data_free(data_t *d);
/* Sample g: T tokens and the T that follow each (the targets). */
void data_sample(const data_t *d, size_t g, int T, int *tokens, int *targets);

#endif
