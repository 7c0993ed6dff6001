/* trace_png: draws an example's --trace timeline as a PNG: a row per rank and kind (compute
 * above, communication below), compute spans blue, waits red, communication green, the time
 * axis in milliseconds. usage: trace_png TRACE.json OUT.png [FROM_MS TO_MS] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canvas.h"

enum { W = 1400, LEFT = 140, RIGHT = 20, TOP = 40, ROW = 34, GAP = 14, BOTTOM = 40 };

typedef struct {
  char cat[16];
  double ts, dur;
  int tid;
} span_t;

static const uint8_t BLACK[3] = {0, 0, 0}, GREY[3] = {215, 215, 215}, BLUE[3] = {40, 100, 200},
                     RED[3] = {210, 50, 50}, GREEN[3] = {40, 160, 80};

int main(int argc, char **argv) {
  if (argc != 3 && argc != 5) {
    fprintf(stderr, "usage: trace_png TRACE.json OUT.png [FROM_MS TO_MS]\n");
    return 2;
  }
  FILE *f = fopen(argv[1], "r");
  if (!f) return fprintf(stderr, "trace_png: cannot read %s\n", argv[1]), 1;
  span_t *s = NULL;
  size_t n = 0, cap = 0;
  char line[1024];
  int rows = 0;
  double end = 0;
  while (fgets(line, sizeof line, f)) {
    const char *c = strstr(line, "\"cat\": \""), *ts = strstr(line, "\"ts\": ");
    const char *du = strstr(line, "\"dur\": "), *ti = strstr(line, "\"tid\": ");
    if (!c || !ts || !du || !ti) continue;
    if (n == cap) {
      span_t *m = realloc(s, (cap = cap ? 2 * cap : 1024) * sizeof *s);
      if (!m) return fprintf(stderr, "trace_png: out of memory\n"), 1;
      s = m;
    }
    span_t *p = &s[n++];
    snprintf(p->cat, sizeof p->cat, "%.*s", (int)strcspn(c + 8, "\""), c + 8);
    p->ts = strtod(ts + 6, NULL) / 1e3, p->dur = strtod(du + 7, NULL) / 1e3;
    p->tid = atoi(ti + 7);
    rows = p->tid + 1 > rows ? p->tid + 1 : rows;
    end = p->ts + p->dur > end ? p->ts + p->dur : end;
  }
  fclose(f);
  double from = argc == 5 ? atof(argv[3]) : 0, to = argc == 5 ? atof(argv[4]) : end;
  if (!n || to <= from) return fprintf(stderr, "trace_png: no spans in %s\n", argv[1]), 1;
  canvas_t cv;
  if (canvas_new(&cv, W, TOP + rows * ROW + (rows / 2) * GAP + BOTTOM))
    return fprintf(stderr, "trace_png: out of memory\n"), 1;
  int x0 = LEFT, x1 = W - RIGHT;
#define X(t)   (x0 + (int)(((t)-from) / (to - from) * (x1 - x0)))
#define Y(row) (TOP + (row)*ROW + ((row) / 2) * GAP)
  char buf[64];
  for (int r = 0; r < rows; r++) {
    snprintf(buf, sizeof buf, "rank %d %s", r / 2, r % 2 ? "comm" : "compute");
    canvas_text(&cv, 4, Y(r) + ROW / 2 - 5, buf, BLACK);
  }
  for (int k = 0; k <= 10; k++) { /* ten ticks */
    double t = from + (to - from) * k / 10;
    canvas_line(&cv, X(t), TOP - 4, X(t), Y(rows), GREY, 1);
    snprintf(buf, sizeof buf, "%.1f", t);
    canvas_text(&cv, X(t) - 8, Y(rows) + 6, buf, BLACK);
  }
  canvas_text(&cv, x0, 10, "TIME (MS) - COMPUTE BLUE - WAITING RED - COMMUNICATION GREEN", BLACK);
  for (size_t i = 0; i < n; i++) {
    const span_t *p = &s[i];
    if (p->ts + p->dur < from || p->ts > to) continue;
    const uint8_t *rgb = !strcmp(p->cat, "wait") ? RED : !strcmp(p->cat, "comm") ? GREEN : BLUE;
    int a = X(p->ts < from ? from : p->ts), b = X(p->ts + p->dur > to ? to : p->ts + p->dur);
    int inset = !strcmp(p->cat, "wait") ? 8 : 2; /* waits inside the compute row's spans */
    canvas_rect(&cv, a, Y(p->tid) + inset, b > a ? b : a + 1, Y(p->tid) + ROW - inset, rgb);
  }
  int rc = canvas_png(argv[2], &cv);
  canvas_free(&cv);
  free(s);
  if (rc) return fprintf(stderr, "trace_png: cannot write %s\n", argv[2]), 1;
  printf("trace_png: %zu spans of %d ranks, %.1f-%.1f ms, into %s\n", n, rows / 2, from, to,
         argv[2]);
  return 0;
}
