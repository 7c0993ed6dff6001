/* collbench --plot: busbw against size, one panel per collective, weft in blue and the
 * peer (NCCL or MPI) in red, written as a PNG with no library. */
#ifndef WEFT_BENCH_PLOT_H
#define WEFT_BENCH_PLOT_H

#include <stddef.h>

typedef struct {
  const char *coll;
  double bytes, busbw, peer_busbw; /* peer_busbw <= 0: none */
} plot_point_t;

/* Points come grouped by collective, sizes ascending. Returns 0, or -1 when the file cannot
 * be written. */
int plot_png(const char *path, const plot_point_t *pts, size_t n, const char *peer_name);

#endif
