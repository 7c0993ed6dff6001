/* collbench --plot: busbw against size, a panel per collective, drawn on canvas.c. */
#include "plot.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canvas.h"

enum { W = 800, PANEL_H = 260, LEFT = 64, RIGHT = 20, TOP = 26, BOTTOM = 34, SCALE = CANVAS_SCALE };

static void size_label(char *buf, size_t len, double bytes) {
  static const char *unit[] = {"", "K", "M", "G", "T"};
  int u = 0;
  while (bytes >= 1024 && u < 4)
    bytes /= 1024, u++;
  snprintf(buf, len, "%.0f%s", bytes, unit[u]);
}

static const uint8_t BLACK[3] = {0, 0, 0}, GREY[3] = {215, 215, 215}, BLUE[3] = {20, 90, 200},
                     RED[3] = {205, 40, 40};

static void panel(canvas_t *c, int y0, const plot_point_t *p, size_t n, const char *peer) {
  double xmin = log2(p[0].bytes), xmax = log2(p[n - 1].bytes), ymax = 1;
  for (size_t i = 0; i < n; i++) {
    if (p[i].busbw > ymax) ymax = p[i].busbw;
    if (p[i].peer_busbw > ymax) ymax = p[i].peer_busbw;
  }
  double step = pow(10, floor(log10(ymax / 4)));
  while (ymax / step > 6)
    step *= 2;
  ymax = ceil(ymax / step) * step;
  if (xmax <= xmin) xmax = xmin + 1;
  int px0 = LEFT, px1 = W - RIGHT, py0 = y0 + TOP, py1 = y0 + PANEL_H - BOTTOM;
#define X(b) (px0 + (int)((log2(b) - xmin) / (xmax - xmin) * (px1 - px0)))
#define Y(v) (py1 - (int)((v) / ymax * (py1 - py0)))
  char buf[160];
  for (double v = 0; v <= ymax + step / 2; v += step) {
    canvas_line(c, px0, Y(v), px1, Y(v), GREY, 1);
    snprintf(buf, sizeof buf, "%.0f", v);
    canvas_text(c, px0 - 6 - (int)strlen(buf) * 4 * SCALE, Y(v) - 5, buf, BLACK);
  }
  for (double e = ceil(xmin); e <= xmax; e += 2) {
    double b = pow(2, e);
    canvas_line(c, X(b), py0, X(b), py1, GREY, 1);
    size_label(buf, sizeof buf, b);
    canvas_text(c, X(b) - (int)strlen(buf) * 2 * SCALE, py1 + 6, buf, BLACK);
  }
  canvas_line(c, px0, py0, px0, py1, BLACK, 1);
  canvas_line(c, px0, py1, px1, py1, BLACK, 1);
  snprintf(buf, sizeof buf, "%s busbw GB/s   weft: blue%s%s%s", p[0].coll, peer ? "   " : "",
           peer ? peer : "", peer ? ": red" : "");
  canvas_text(c, px0, y0 + 6, buf, BLACK);
  for (size_t i = 1; i < n; i++) {
    canvas_line(c, X(p[i - 1].bytes), Y(p[i - 1].busbw), X(p[i].bytes), Y(p[i].busbw), BLUE, 2);
    if (p[i - 1].peer_busbw > 0 && p[i].peer_busbw > 0)
      canvas_line(c, X(p[i - 1].bytes), Y(p[i - 1].peer_busbw), X(p[i].bytes), Y(p[i].peer_busbw),
                  RED, 2);
  }
#undef X
#undef Y
}

int plot_png(const char *path, const plot_point_t *pts, size_t n, const char *peer_name) {
  size_t npanels = 0;
  for (size_t i = 0; i < n; i++)
    npanels += i == 0 || strcmp(pts[i].coll, pts[i - 1].coll) != 0;
  if (npanels == 0) npanels = 1;
  canvas_t c;
  if (canvas_new(&c, W, (int)(PANEL_H * npanels))) return -1;
  int k = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && strcmp(pts[j].coll, pts[i].coll) == 0)
      j++;
    panel(&c, k++ * PANEL_H, pts + i, j - i, peer_name);
    i = j;
  }
  int rc = canvas_png(path, &c);
  canvas_free(&c);
  return rc;
}
