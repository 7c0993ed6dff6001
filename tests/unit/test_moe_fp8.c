/* fp8 dispatch's quantization on the host (src/moe/fp8.c): a scale per 128 elements equal to
 * the block's largest magnitude over 448 (1 for zeros), each element e4m3(x / scale) rounded
 * to nearest even, the block's largest landing on 448 exactly, a short last block, and every
 * element back within e4m3's precision. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "dtype.h"
#include "moe.h"

enum { H = 300 }; /* blocks of 128, 128 and 44 */

static float val(size_t i) {
  /* magnitudes over six binades, both signs, and a block (the second) of zeros */
  if (i >= 128 && i < 256) return 0.0f;
  return (float)((int)((i * 37) % 101) - 50) * ldexpf(1.0f, (int)(i % 6) - 3);
}

static void row_of(weft_dtype_t t, void **st) {
  (void)st;
  char x[H * 4];
  uint8_t q[H];
  float s[WEFT_MOE_FP8_BLOCKS(H)];
  for (size_t i = 0; i < H; i++)
    weft_dtype_store(t, x, i, val(i));
  weft_moe_fp8_row(t, x, H, q, s);
  assert_int_equal(WEFT_MOE_FP8_BLOCKS(H), 3);
  for (size_t b = 0; b < 3; b++) {
    size_t lo = b * 128, hi = lo + 128 < H ? lo + 128 : H;
    float amax = 0;
    for (size_t i = lo; i < hi; i++)
      amax = fmaxf(amax, fabsf((float)weft_dtype_load(t, x, i)));
    assert_true(s[b] == (amax > 0 ? amax / 448.0f : 1.0f));
    int top = 0;
    for (size_t i = lo; i < hi; i++) {
      float xi = (float)weft_dtype_load(t, x, i), back = weft_e4m3_to_f32(q[i]) * s[b];
      assert_int_equal(q[i], weft_f32_to_e4m3(xi / s[b]));
      /* three mantissa bits: within half a unit of the value's binade, or of the smallest
       * normal's below it */
      float tol = fmaxf(fabsf(xi) * 0x1p-4f, s[b] * 0x1p-10f);
      assert_true(fabsf(back - xi) <= tol);
      top |= (q[i] & 0x7f) == 0x7e; /* 448 */
    }
    assert_true(amax == 0 || top);
  }
  assert_true(s[1] == 1.0f);
  for (size_t i = 128; i < 256; i++)
    assert_int_equal(q[i], 0);
}

static void row_f32(void **st) { row_of(WEFT_F32, st); }
static void row_bf16(void **st) { row_of(WEFT_BF16, st); }
static void row_f16(void **st) { row_of(WEFT_F16, st); }

/* Ties go to the even code: 1.0625 lies halfway between 1 and 1.125 (code 0x38 and 0x39). */
static void rounding(void **st) {
  (void)st;
  float x[128] = {448.0f, 1.0625f, 1.1875f, -1.0625f};
  uint8_t q[128];
  float s;
  weft_moe_fp8_row(WEFT_F32, x, 128, q, &s);
  assert_true(s == 1.0f);
  assert_int_equal(q[0], 0x7e);
  assert_int_equal(q[1], 0x38);
  assert_int_equal(q[2], 0x3a); /* 1.1875: halfway between 1.125 and 1.25, to the even 1.25 */
  assert_int_equal(q[3], 0xb8);
}

/* A block whose largest value divided by 448 underflows to 0 takes scale 1, as zeros do:
 * nothing is divided by 0 (which would make the zeros NaN). */
static void underflow(void **st) {
  (void)st;
  float x[128] = {0};
  x[2] = 1e-44f;
  uint8_t q[128];
  float s;
  weft_moe_fp8_row(WEFT_F32, x, 128, q, &s);
  assert_true(s == 1.0f);
  for (int i = 0; i < 128; i++)
    assert_int_equal(q[i], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(row_f32), cmocka_unit_test(row_bf16),
                                     cmocka_unit_test(row_f16), cmocka_unit_test(rounding),
                                     cmocka_unit_test(underflow)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
