/* What device.c and kernels.cu share: the MoE kernels' launchers (each returns a
 * cudaError_t as int) and their constants. Plain C, included by .c and .cu files. */
#ifndef WEFT_MOE_KERNELS_H
#define WEFT_MOE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define WEFT_MOE_K_NO_ROW UINT64_MAX
enum { WEFT_MOE_K_F32, WEFT_MOE_K_F16, WEFT_MOE_K_BF16 };

#ifdef __cplusplus
extern "C" {
#endif

/* out[e] = x[list[e]] (rows of `row` bytes) and wout[e][j] = w[list[e]][j] (1 if w NULL). */
int weft_moe_k_gather(const void *x, const uint64_t *list, uint64_t n, size_t row, void *out,
                      const float *w, float *wout, int k, void *stream);
/* Received entry i into each row row_of[i][j] (with its weight when wout), and the padding
 * rows `pad` zeroed (weight 0). */
int weft_moe_k_scatter(const void *in, const float *win, const uint64_t *row_of, uint64_t n, int k,
                       size_t row, void *out, float *wout, const uint64_t *pad, uint64_t npad,
                       void *stream);
/* out[i] = sum_j w[r] * rows[r], r = row_of[i][j] (w NULL: 1), accumulated in f32. */
int weft_moe_k_partials(int dtype, const void *rows, const float *w, const uint64_t *row_of,
                        uint64_t n, int k, size_t hidden, void *out, void *stream);
/* y[t] = sum of back[e] over t's entries (width each, NO_ROW-terminated), in f32. */
int weft_moe_k_home(int dtype, const void *back, const uint64_t *entries, int width,
                    uint64_t tokens, size_t hidden, void *y, void *stream);

#ifdef __cplusplus
}
#endif

#endif
