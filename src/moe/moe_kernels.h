/* What the MoE device code (device.c, device_layout.c) and its kernels (kernels.cu,
 * route.cu) share: the launchers (each returns a cudaError_t as int) and their constants.
 * Plain C, included by .c and .cu files. */
#ifndef WEFT_MOE_KERNELS_H
#define WEFT_MOE_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define WEFT_MOE_K_NO_ROW   UINT64_MAX
#define WEFT_MOE_K_MAX_TOPK 32 /* WEFT_MOE_MAX_TOPK; width <= topk */
enum { WEFT_MOE_K_F32, WEFT_MOE_K_F16, WEFT_MOE_K_BF16 };

#ifdef __cplusplus
extern "C" {
#endif

/* A layout's send side on the GPU (route.cu): ids [tokens][k] of id_bytes (4 or 8) in,
 * every array below out. */
typedef struct {
  const void *ids;
  int id_bytes, k, experts, nranks, local, width; /* width: min(k, nranks) */
  uint64_t tokens;
  unsigned long long *bad; /* the lowest t * k + j whose id breaks the rules; all ones if none */
  int64_t *counts;         /* [experts + nranks] choices of each expert, tokens for each rank */
  int32_t *slot;           /* [tokens][k] the choice's index among its expert's choices */
  int32_t *pos;            /* [tokens][nranks] the token's index among those for rank r, or -1 */
  uint64_t *send_off;      /* [nranks + 1] first entry of each rank's list */
  uint64_t *send_list;     /* [entries] the token of each entry */
  uint64_t *entries;       /* [tokens][width] a token's entries in rank order, NO_ROW after */
  int32_t *meta;           /* [entries][k][2] per choice: local expert there (or -1), index */
} weft_moe_k_route_t;

int weft_moe_k_route(const weft_moe_k_route_t *a, void *stream);
/* row_of[c] = base[s][l] + index for received choice c = (l, index) of meta from source s
 * (recv_off gives each source's entries), NO_ROW where l is -1. */
int weft_moe_k_rows(const int32_t *meta, uint64_t choices, int k, const uint64_t *recv_off,
                    int nranks, int local, const uint64_t *base, uint64_t *row_of, void *stream);

/* The entries a rank sends itself, received as entries [lo, hi): they skip the staging and
 * the alltoallv. Dispatch reads them from the tokens x (list: their tokens, w: the weights,
 * may be NULL); combine writes their partials to out. */
typedef struct {
  uint64_t lo, hi;
  const void *x;
  const uint64_t *list;
  const float *w;
  void *out;
} weft_moe_k_self_t;

/* out[e] = x[list[e]] (rows of `row` bytes) and wout[e][j] = w[list[e]][j] (1 if w NULL), for
 * the entries outside [lo, hi). */
int weft_moe_k_gather(const void *x, const uint64_t *list, uint64_t n, uint64_t lo, uint64_t hi,
                      size_t row, void *out, const float *w, float *wout, int k, void *stream);
/* Received entry i into each row row_of[i][j] (with its weight when wout), the own entries
 * from their tokens, and the padding rows `pad` zeroed (weight 0). */
int weft_moe_k_scatter(const void *in, const float *win, const uint64_t *row_of, uint64_t n, int k,
                       size_t row, void *out, float *wout, const uint64_t *pad, uint64_t npad,
                       weft_moe_k_self_t own, void *stream);
/* out[i] = sum_j w[r] * rows[r], r = row_of[i][j] (w NULL: 1), accumulated in f32; the own
 * entries' sums into own.out instead. */
int weft_moe_k_partials(int dtype, const void *rows, const float *w, const uint64_t *row_of,
                        uint64_t n, int k, size_t hidden, void *out, weft_moe_k_self_t own,
                        void *stream);
/* y[t] = sum of back[e] over t's entries (width each, NO_ROW-terminated), in f32. */
int weft_moe_k_home(int dtype, const void *back, const uint64_t *entries, int width,
                    uint64_t tokens, size_t hidden, void *y, void *stream);

#ifdef __cplusplus
}
#endif

#endif
