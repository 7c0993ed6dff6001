/* Reduction loops. Signed integer SUM and PROD wrap (computed in unsigned arithmetic) so
 * that overflow is defined and identical on every rank; unsigned ones wrap by nature, and
 * compare (MIN, MAX) and divide (AVG) as unsigned. */
#include "reduce.h"

#include <stdint.h>
#include <string.h>

#include "dtype.h"

#define MIN_(x, y) ((y) < (x) ? (y) : (x))
#define MAX_(x, y) ((y) > (x) ? (y) : (x))

#define LOOP(T, EXPR)                                                                              \
  do {                                                                                             \
    T *restrict d_ = (T *)dst;                                                                     \
    const T *a_ = (const T *)a, *b_ = (const T *)b;                                                \
    for (size_t i = 0; i < n; i++) {                                                               \
      T x = a_[i], y = b_[i];                                                                      \
      d_[i] = (EXPR);                                                                              \
    }                                                                                              \
  } while (0)

/* U is the unsigned twin of T, for wrapping SUM and PROD. */
#define NATIVE(T, U)                                                                               \
  switch (op) {                                                                                    \
  case WEFT_PROD: LOOP(T, (T)((U)x * (U)y)); break;                                                \
  case WEFT_MIN: LOOP(T, MIN_(x, y)); break;                                                       \
  case WEFT_MAX: LOOP(T, MAX_(x, y)); break;                                                       \
  default: LOOP(T, (T)((U)x + (U)y)); break;                                                       \
  }

#define FLOATS(T)                                                                                  \
  switch (op) {                                                                                    \
  case WEFT_PROD: LOOP(T, x *y); break;                                                            \
  case WEFT_MIN: LOOP(T, MIN_(x, y)); break;                                                       \
  case WEFT_MAX: LOOP(T, MAX_(x, y)); break;                                                       \
  default: LOOP(T, x + y); break;                                                                  \
  }

static void reduce_f32(weft_op_t op, float *dst, const float *a, const float *b, size_t n) {
  FLOATS(float);
}

enum { BLOCK = 512 };

static void widen(weft_dtype_t t, const char *p, float *f, size_t m) {
  uint16_t h;
  switch (t) {
  case WEFT_BF16:
    for (size_t i = 0; i < m; i++)
      memcpy(&h, p + 2 * i, 2), f[i] = weft_bf16_to_f32(h);
    break;
  case WEFT_F16:
    for (size_t i = 0; i < m; i++)
      memcpy(&h, p + 2 * i, 2), f[i] = weft_f16_to_f32(h);
    break;
  case WEFT_FP8_E4M3:
    for (size_t i = 0; i < m; i++)
      f[i] = weft_e4m3_to_f32((uint8_t)p[i]);
    break;
  default:
    for (size_t i = 0; i < m; i++)
      f[i] = weft_e5m2_to_f32((uint8_t)p[i]);
    break;
  }
}

static void narrow(weft_dtype_t t, const float *f, char *p, size_t m) {
  uint16_t h;
  switch (t) {
  case WEFT_BF16:
    for (size_t i = 0; i < m; i++)
      h = weft_f32_to_bf16(f[i]), memcpy(p + 2 * i, &h, 2);
    break;
  case WEFT_F16:
    for (size_t i = 0; i < m; i++)
      h = weft_f32_to_f16(f[i]), memcpy(p + 2 * i, &h, 2);
    break;
  case WEFT_FP8_E4M3:
    for (size_t i = 0; i < m; i++)
      p[i] = (char)weft_f32_to_e4m3(f[i]);
    break;
  default:
    for (size_t i = 0; i < m; i++)
      p[i] = (char)weft_f32_to_e5m2(f[i]);
    break;
  }
}

/* Widen a block of small floats to f32, reduce there, narrow back. */
static void reduce_small(weft_dtype_t t, weft_op_t op, void *dst, const void *a, const void *b,
                         size_t n) {
  float fa[BLOCK], fb[BLOCK];
  size_t es = weft_dtype_size(t);
  for (size_t base = 0; base < n; base += BLOCK) {
    size_t m = n - base < BLOCK ? n - base : BLOCK;
    widen(t, (const char *)a + base * es, fa, m);
    widen(t, (const char *)b + base * es, fb, m);
    reduce_f32(op, fa, fa, fb, m);
    narrow(t, fa, (char *)dst + base * es, m);
  }
}

void weft_reduce_host(weft_dtype_t t, weft_op_t op, void *dst, const void *a, const void *b,
                      size_t n) {
  switch (t) {
  case WEFT_F32: reduce_f32(op, dst, a, b, n); break;
  case WEFT_F64: FLOATS(double); break;
  case WEFT_I8: NATIVE(int8_t, uint8_t); break;
  case WEFT_U8: NATIVE(uint8_t, uint8_t); break;
  case WEFT_I32: NATIVE(int32_t, uint32_t); break;
  case WEFT_I64: NATIVE(int64_t, uint64_t); break;
  case WEFT_U32: NATIVE(uint32_t, uint32_t); break;
  case WEFT_U64: NATIVE(uint64_t, uint64_t); break;
  default: reduce_small(t, op, dst, a, b, n); break;
  }
}

#define DIV_LOOP(T)                                                                                \
  for (size_t i = 0; i < n; i++)                                                                   \
  ((T *)buf)[i] = (T)(((T *)buf)[i] / nranks)

void weft_avg_host(weft_dtype_t t, void *buf, size_t n, int nranks) {
  switch (t) {
  case WEFT_F32: DIV_LOOP(float); break;
  case WEFT_F64: DIV_LOOP(double); break;
  case WEFT_I8: DIV_LOOP(int8_t); break;
  case WEFT_U8: DIV_LOOP(uint8_t); break;
  case WEFT_I32: DIV_LOOP(int32_t); break;
  case WEFT_I64: DIV_LOOP(int64_t); break;
  case WEFT_U32: DIV_LOOP(uint32_t); break; /* nranks > 0: unsigned division */
  case WEFT_U64: DIV_LOOP(uint64_t); break;
  default:
    for (size_t i = 0; i < n; i++)
      weft_dtype_store(t, buf, i, (float)((float)weft_dtype_load(t, buf, i) / (float)nranks));
    break;
  }
}
