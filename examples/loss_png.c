/* loss_png: draws the loss curves of example runs (their "step N loss X" lines) as a PNG,
 * one colour a run, with weft's own PNG writer. usage: loss_png OUT.png RUN.txt... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "canvas.h"

enum {
  W = 900,
  H = 420,
  LEFT = 70,
  RIGHT = 20,
  TOP = 40,
  BOTTOM = 40,
  MAXRUN = 6,
  MAXSTEP = 100000
};

static const uint8_t BLACK[3] = {0, 0, 0}, GREY[3] = {215, 215, 215};
static const uint8_t COLOUR[MAXRUN][3] = {{40, 100, 200}, {210, 50, 50},  {40, 160, 80},
                                          {150, 80, 180}, {220, 140, 30}, {60, 60, 60}};

int main(int argc, char **argv) {
  if (argc < 3 || argc > 2 + MAXRUN) {
    fprintf(stderr, "usage: loss_png OUT.png RUN.txt... (at most %d runs)\n", MAXRUN);
    return 2;
  }
  int nrun = argc - 2, steps[MAXRUN] = {0}, most = 1;
  float *loss[MAXRUN] = {0}, lo = 1e30f, hi = -1e30f;
  for (int r = 0; r < nrun; r++) {
    FILE *f = fopen(argv[2 + r], "r");
    char line[512];
    if (!f || !(loss[r] = malloc(sizeof(float) * MAXSTEP)))
      return fprintf(stderr, "loss_png: cannot read %s\n", argv[2 + r]), 1;
    int s;
    float x;
    while (fgets(line, sizeof line, f) && steps[r] < MAXSTEP)
      if (sscanf(line, "step %d loss %f", &s, &x) == 2) {
        loss[r][steps[r]++] = x;
        lo = x < lo ? x : lo, hi = x > hi ? x : hi;
      }
    fclose(f);
    most = steps[r] > most ? steps[r] : most;
  }
  if (hi < lo) return fprintf(stderr, "loss_png: no \"step N loss X\" lines\n"), 1;
  if (hi - lo < 1e-6f) hi = lo + 1;
  canvas_t c;
  if (canvas_new(&c, W, H)) return fprintf(stderr, "loss_png: out of memory\n"), 1;
#define X(s) (LEFT + (int)((double)(s) / (most > 1 ? most - 1 : 1) * (W - LEFT - RIGHT)))
#define Y(v) (H - BOTTOM - (int)(((v)-lo) / (hi - lo) * (H - TOP - BOTTOM)))
  char buf[64];
  for (int k = 0; k <= 5; k++) {
    float v = lo + (hi - lo) * (float)k / 5;
    canvas_line(&c, LEFT, Y(v), W - RIGHT, Y(v), GREY, 1);
    snprintf(buf, sizeof buf, "%.2f", v);
    canvas_text(&c, 8, Y(v) - 5, buf, BLACK);
    int s = (most - 1) * k / 5;
    snprintf(buf, sizeof buf, "%d", s + 1);
    canvas_text(&c, X(s) - 8, H - BOTTOM + 8, buf, BLACK);
  }
  canvas_text(&c, LEFT, 10, "LOSS BY STEP", BLACK);
  for (int r = 0; r < nrun; r++) {
    for (int s = 1; s < steps[r]; s++)
      canvas_line(&c, X(s - 1), Y(loss[r][s - 1]), X(s), Y(loss[r][s]), COLOUR[r], 2);
    /* the legend: the file's name without its folder, a leading date and ".txt" */
    const char *name = strrchr(argv[2 + r], '/');
    name = name ? name + 1 : argv[2 + r];
    if (strlen(name) > 11 && name[4] == '-' && name[7] == '-' && name[10] == '-') name += 11;
    snprintf(buf, sizeof buf, "%.*s", (int)strcspn(name, "."), name);
    canvas_rect(&c, W - 380, TOP + 14 * r, W - 368, TOP + 14 * r + 10, COLOUR[r]);
    canvas_text(&c, W - 360, TOP + 14 * r, buf, BLACK);
    free(loss[r]);
  }
  int rc = canvas_png(argv[1], &c);
  canvas_free(&c);
  if (rc) return fprintf(stderr, "loss_png: cannot write %s\n", argv[1]), 1;
  printf("loss_png: %d runs, %d steps, into %s\n", nrun, most, argv[1]);
  return 0;
}
