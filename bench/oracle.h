/* Exact oracles: integer-valued inputs any rank can regenerate for any rank from a seed,
 * kept small enough that every reduction order gives the same exact result in every dtype
 * (fp8 included), so outputs are compared bit for bit. */
#ifndef WEFT_ORACLE_H
#define WEFT_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

double oracle_input(weft_dtype_t t, weft_op_t op, int rank, size_t i, uint32_t seed);
/* buf[k] = input of `rank` at element first + k, for k < count */
void oracle_fill(weft_dtype_t t, weft_op_t op, int rank, void *buf, size_t first, size_t count,
                 uint32_t seed);
/* buf[k] = op over all ranks of input at element first + k (AVG divided as weft does) */
void oracle_reduced(weft_dtype_t t, weft_op_t op, int nranks, void *buf, size_t first, size_t count,
                    uint32_t seed);

#endif
