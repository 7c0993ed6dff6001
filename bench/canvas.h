/* A tiny RGB canvas and PNG writer with no library (canvas.c): collbench --plot and the
 * examples' timelines draw with it. */
#ifndef WEFT_BENCH_CANVAS_H
#define WEFT_BENCH_CANVAS_H

#include <stdint.h>

#define CANVAS_SCALE 2 /* text: 3x5 glyphs at this many pixels a dot, 4 * SCALE apart */

typedef struct {
  int w, h;
  uint8_t *px; /* rows of w RGB pixels, white at first */
} canvas_t;

int canvas_new(canvas_t *c, int w, int h); /* 0, or -1 when out of memory */
void canvas_free(canvas_t *c);
void canvas_put(canvas_t *c, int x, int y, const uint8_t rgb[3]); /* clipped */
void canvas_line(canvas_t *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3], int thick);
void canvas_rect(canvas_t *c, int x0, int y0, int x1, int y1, const uint8_t rgb[3]);
void canvas_text(canvas_t *c, int x, int y, const char *s, const uint8_t rgb[3]);
int canvas_png(const char *path, const canvas_t *c); /* 0, or -1 when it cannot be written */

#endif
