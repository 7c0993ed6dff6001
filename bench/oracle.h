/* Oracles: inputs any rank can regenerate for any rank from a seed. The exact ones are
 * small integers, so every reduction order gives the same result in every dtype (fp8
 * included) and outputs are compared bit for bit; the rounding ones ("wide") are values
 * whose sums round (floats) or wrap (integers), so that the order of a reduction shows. */
#ifndef WEFT_ORACLE_H
#define WEFT_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* The most ranks whose exact inputs t's sums still hold exactly in any order. */
int oracle_exact_ranks(weft_dtype_t t);
double oracle_input(weft_dtype_t t, weft_op_t op, int rank, size_t i, uint32_t seed);
/* buf[k] = input of `rank` at element first + k, for k < count */
void oracle_fill(weft_dtype_t t, weft_op_t op, int rank, void *buf, size_t first, size_t count,
                 uint32_t seed);
/* buf[k] = op over all ranks of input at element first + k (AVG divided as weft does) */
void oracle_reduced(weft_dtype_t t, weft_op_t op, int nranks, void *buf, size_t first, size_t count,
                    uint32_t seed);

/* Rounding oracle: buf[k] = wide input of `rank` at element first + k (already rounded to t). */
void oracle_fill_wide(weft_dtype_t t, weft_op_t op, int rank, void *buf, size_t first, size_t count,
                      uint32_t seed);
/* Checks got[k] against op over nranks ranks' wide inputs at element first + k: integers and
 * MIN/MAX exactly, float SUM/AVG/PROD within a bound that holds for every reduction order
 * (see oracle.c). Returns the first k out of bounds, or count; then *want, *have and *tol
 * describe that element. */
size_t oracle_check_wide(weft_dtype_t t, weft_op_t op, int nranks, const void *got, size_t first,
                         size_t count, uint32_t seed, double *want, double *have, double *tol);

#endif
