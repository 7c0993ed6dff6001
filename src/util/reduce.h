/* Host reduction kernels: dst[i] = a[i] op b[i] (dst may alias a or b), written as plain
 * loops the compiler vectorises. 16- and 8-bit floats go through f32 in blocks. */
#ifndef WEFT_REDUCE_H
#define WEFT_REDUCE_H

#include <stddef.h>

#include "weft.h"

/* op must not be WEFT_AVG: callers reduce with SUM and call weft_avg_host once at the end. */
void weft_reduce_host(weft_dtype_t t, weft_op_t op, void *dst, const void *a, const void *b,
                      size_t n);
/* buf[i] /= nranks, integer division for integer types. */
void weft_avg_host(weft_dtype_t t, void *buf, size_t n, int nranks);

#endif
