/* fp8 dispatch's quantization on the host: each block of WEFT_MOE_FP8_BLOCK elements of a
 * token gets the scale amax / 448 (448: e4m3's largest finite value; 1 where that is 0, as
 * for zeros) and its elements e4m3(x / scale), rounded to nearest even. ll.cu and kernels.cu do
 * the same operations in the same order on the GPU, so both give the same bits. */
#include <math.h>

#include "dtype.h"
#include "moe.h"

void weft_moe_fp8_row(weft_dtype_t t, const void *x, size_t hidden, uint8_t *q, float *scales) {
  for (size_t b0 = 0; b0 < hidden; b0 += WEFT_MOE_FP8_BLOCK) {
    size_t end = b0 + WEFT_MOE_FP8_BLOCK < hidden ? b0 + WEFT_MOE_FP8_BLOCK : hidden;
    float amax = 0.0f;
    for (size_t i = b0; i < end; i++)
      amax = fmaxf(amax, fabsf((float)weft_dtype_load(t, x, i)));
    /* a block whose largest value divides to 0 (zeros, or below f32's subnormals * 448) gets 1,
     * so that no element is divided by 0 */
    float s = amax / 448.0f, scale = s > 0.0f ? s : 1.0f;
    scales[b0 / WEFT_MOE_FP8_BLOCK] = scale;
    for (size_t i = b0; i < end; i++)
      q[i] = weft_f32_to_e4m3((float)weft_dtype_load(t, x, i) / scale);
  }
}
