/* Input values: SUM/AVG in [-1, 1] (8 ranks stay within fp8 e5m2's exact integers),
 * MIN/MAX in [-3, 3], PROD in {-1, 1, 2} with few 2s; unsigned types shift up. */
#include "oracle.h"

#include "dtype.h"

static uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

double oracle_input(weft_dtype_t t, weft_op_t op, int rank, size_t i, uint32_t seed) {
  uint32_t h =
      mix((uint32_t)i * 2654435761U ^ (uint32_t)rank * 40503U ^ seed * 97U ^ (uint32_t)(i >> 32));
  int is_unsigned = t == WEFT_U8;
  switch (op) {
  case WEFT_PROD:
    if ((rank + i) % 4 == 0) return 2;
    return (!is_unsigned && h % 3 == 0) ? -1 : 1;
  case WEFT_MIN:
  case WEFT_MAX: return (double)(h % 7) - (is_unsigned ? 0 : 3);
  default: return (double)(h % 3) - (is_unsigned ? 0 : 1);
  }
}

void oracle_fill(weft_dtype_t t, weft_op_t op, int rank, void *buf, size_t first, size_t count,
                 uint32_t seed) {
  for (size_t k = 0; k < count; k++)
    weft_dtype_store(t, buf, k, oracle_input(t, op, rank, first + k, seed));
}

void oracle_reduced(weft_dtype_t t, weft_op_t op, int nranks, void *buf, size_t first, size_t count,
                    uint32_t seed) {
  for (size_t k = 0; k < count; k++) {
    double v = oracle_input(t, op, 0, first + k, seed);
    for (int r = 1; r < nranks; r++) {
      double x = oracle_input(t, op, r, first + k, seed);
      switch (op) {
      case WEFT_PROD: v *= x; break;
      case WEFT_MIN: v = x < v ? x : v; break;
      case WEFT_MAX: v = x > v ? x : v; break;
      default: v += x; break;
      }
    }
    if (op == WEFT_AVG) {
      if (weft_dtype_is_float(t) && t != WEFT_F64)
        v = (float)((float)v / (float)nranks);
      else if (t == WEFT_F64)
        v = v / nranks;
      else
        v = (double)((int64_t)v / nranks); /* C division truncates, as weft's does */
    }
    weft_dtype_store(t, buf, k, v);
  }
}
