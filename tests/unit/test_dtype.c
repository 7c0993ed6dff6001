/* src/util/dtype.c and src/util/reduce.c: the small-float codecs round to nearest even, saturate
 * fp8, keep NaN; every integer the oracles use is exact; reductions match a scalar loop;
 * u32 and u64 wrap, compare and divide as unsigned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "reduce.h"

static int is_unsigned(int t) { return t == WEFT_U8 || t == WEFT_U32 || t == WEFT_U64; }

static void small_integers_exact(void **st) {
  (void)st;
  for (int t = 0; t < WEFT_DTYPE_COUNT; t++) {
    unsigned char buf[8];
    int lim = (t == WEFT_FP8_E5M2 || t == WEFT_FP8_E4M3) ? 8 : 100;
    for (int v = (is_unsigned(t) ? 0 : -lim); v <= lim; v++) {
      weft_dtype_store((weft_dtype_t)t, buf, 0, v);
      assert_true(weft_dtype_load((weft_dtype_t)t, buf, 0) == v);
    }
  }
}

static void codecs(void **st) {
  (void)st;
  assert_int_equal(weft_f32_to_bf16(1.0f), 0x3f80);
  assert_int_equal(weft_f32_to_bf16(1.00390625f), 0x3f80); /* tie: to even */
  assert_int_equal(weft_f32_to_bf16(1.01171875f), 0x3f82); /* tie: to even, upward */
  assert_int_equal(weft_f32_to_f16(65504.0f), 0x7bff);
  assert_int_equal(weft_f32_to_f16(1e6f), 0x7c00);          /* overflow: infinity */
  assert_int_equal(weft_f32_to_f16(5.9604645e-8f), 0x0001); /* smallest subnormal */
  assert_int_equal(weft_f32_to_e4m3(448.0f), 0x7e);
  assert_int_equal(weft_f32_to_e4m3(1e9f), 0x7e); /* saturates */
  assert_int_equal(weft_f32_to_e4m3(-1e9f), 0xfe);
  assert_int_equal(weft_f32_to_e4m3(NAN) & 0x7f, 0x7f);
  assert_true(isnan(weft_e4m3_to_f32(0x7f)));
  assert_true(weft_e4m3_to_f32(0x01) == ldexpf(1, -9)); /* smallest subnormal */
  assert_int_equal(weft_f32_to_e5m2(57344.0f), 0x7b);
  assert_int_equal(weft_f32_to_e5m2(1e9f), 0x7b);
  assert_true(weft_e5m2_to_f32(0x3c) == 1.0f);
  assert_int_equal(weft_f32_to_e4m3(1.0625f), 0x38); /* halfway 1 and 1.125: to even */
  assert_int_equal(weft_f32_to_e4m3(1.1875f), 0x3a); /* halfway 1.125 and 1.25: to even */
  for (unsigned v = 0; v < 256; v++) {               /* every fp8 value survives a round trip */
    if ((v & 0x7f) != 0x7f) assert_int_equal(weft_f32_to_e4m3(weft_e4m3_to_f32((uint8_t)v)), v);
    if ((v & 0x7f) < 0x7c) assert_int_equal(weft_f32_to_e5m2(weft_e5m2_to_f32((uint8_t)v)), v);
  }
}

static void reductions(void **st) {
  (void)st;
  enum { N = 1031 };
  for (int t = 0; t < WEFT_DTYPE_COUNT; t++)
    for (int op = 0; op < WEFT_AVG; op++) {
      unsigned char a[N * 8], b[N * 8], d[N * 8];
      for (int i = 0; i < N; i++) {
        double x = (i * 7 % 5) - 2, y = (i * 3 % 5) - 2;
        if (is_unsigned(t)) x += 2, y += 2;
        weft_dtype_store((weft_dtype_t)t, a, i, x);
        weft_dtype_store((weft_dtype_t)t, b, i, y);
      }
      weft_reduce_host((weft_dtype_t)t, (weft_op_t)op, d, a, b, N);
      for (int i = 0; i < N; i++) {
        double x = weft_dtype_load((weft_dtype_t)t, a, i),
               y = weft_dtype_load((weft_dtype_t)t, b, i);
        double want = op == WEFT_SUM    ? x + y
                      : op == WEFT_PROD ? x * y
                      : op == WEFT_MIN  ? fmin(x, y)
                                        : fmax(x, y);
        assert_true(weft_dtype_load((weft_dtype_t)t, d, i) == want);
      }
      weft_reduce_host((weft_dtype_t)t, (weft_op_t)op, a, a, b, N); /* in place */
      assert_memory_equal(a, d, N * weft_dtype_size((weft_dtype_t)t));
    }
  int32_t v[4] = {7, -7, 8, 9};
  weft_avg_host(WEFT_I32, v, 4, 2);
  assert_int_equal(v[0], 3);
  assert_int_equal(v[1], -3);
  assert_int_equal(v[3], 4);
}

/* u32 and u64: SUM and PROD wrap, MIN and MAX compare as unsigned (the top bit set is the
 * largest, not negative), AVG divides as unsigned; and they store negative values wrapped. */
static void unsigned_wide(void **st) {
  (void)st;
  uint32_t a32[4] = {0x80000000u, 0xffffffffu, 3, 0x7fffffffu};
  uint32_t b32[4] = {1, 2, 0x90000000u, 0x80000000u}, d32[4];
  weft_reduce_host(WEFT_U32, WEFT_MIN, d32, a32, b32, 4);
  assert_true(d32[0] == 1 && d32[1] == 2 && d32[2] == 3 && d32[3] == 0x7fffffffu);
  weft_reduce_host(WEFT_U32, WEFT_MAX, d32, a32, b32, 4);
  assert_true(d32[0] == 0x80000000u && d32[1] == 0xffffffffu && d32[2] == 0x90000000u &&
              d32[3] == 0x80000000u);
  weft_reduce_host(WEFT_U32, WEFT_SUM, d32, a32, b32, 4);
  assert_true(d32[0] == 0x80000001u && d32[1] == 1 && d32[3] == 0xffffffffu);
  weft_reduce_host(WEFT_U32, WEFT_PROD, d32, a32, b32, 4);
  assert_true(d32[1] == 0xfffffffeu && d32[2] == 0xb0000000u && d32[3] == 0x80000000u);
  uint32_t v32[3] = {0xffffffffu, 0x80000001u, 7};
  weft_avg_host(WEFT_U32, v32, 3, 2); /* signed division would give 0 and -0x3fffffff */
  assert_true(v32[0] == 0x7fffffffu && v32[1] == 0x40000000u && v32[2] == 3);

  uint64_t a64[3] = {0x8000000000000000u, 0xffffffffffffffffu, 5};
  uint64_t b64[3] = {1, 0x7fffffffffffffffu, 0xfffffffffffffff0u}, d64[3];
  weft_reduce_host(WEFT_U64, WEFT_MIN, d64, a64, b64, 3);
  assert_true(d64[0] == 1 && d64[1] == 0x7fffffffffffffffu && d64[2] == 5);
  weft_reduce_host(WEFT_U64, WEFT_MAX, d64, a64, b64, 3);
  assert_true(d64[0] == a64[0] && d64[1] == a64[1] && d64[2] == b64[2]);
  weft_reduce_host(WEFT_U64, WEFT_SUM, d64, a64, b64, 3);
  assert_true(d64[0] == 0x8000000000000001u && d64[1] == 0x7ffffffffffffffeu &&
              d64[2] == 0xfffffffffffffff5u);
  weft_reduce_host(WEFT_U64, WEFT_PROD, d64, a64, b64, 3);
  assert_true(d64[0] == a64[0] && d64[1] == 0x8000000000000001u && d64[2] == 0xffffffffffffffb0u);
  uint64_t v64[2] = {0xffffffffffffffffu, 9};
  weft_avg_host(WEFT_U64, v64, 2, 4);
  assert_true(v64[0] == 0x3fffffffffffffffu && v64[1] == 2);

  unsigned char buf[8];
  weft_dtype_store(WEFT_U32, buf, 0, -1);
  assert_true(weft_dtype_load(WEFT_U32, buf, 0) == 4294967295.0);
  weft_dtype_store(WEFT_U64, buf, 0, -2);
  memcpy(&a64[0], buf, 8);
  assert_true(a64[0] == 0xfffffffffffffffeu);
  weft_dtype_store(WEFT_U64, buf, 0, 0x1p63);
  assert_true(weft_dtype_load(WEFT_U64, buf, 0) == 0x1p63);
  assert_string_equal(weft_dtype_name(WEFT_U32), "uint32");
  assert_string_equal(weft_dtype_name(WEFT_U64), "uint64");
  assert_int_equal(weft_dtype_size(WEFT_U32), 4);
  assert_int_equal(weft_dtype_size(WEFT_U64), 8);
  assert_false(weft_dtype_is_float(WEFT_U64));
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(small_integers_exact),
                                     cmocka_unit_test(codecs), cmocka_unit_test(reductions),
                                     cmocka_unit_test(unsigned_wide)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
