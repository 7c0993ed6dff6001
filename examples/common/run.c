/* The trainers' shared helpers: see run.h. */
#include "run.h"

#include <stdlib.h>
#include <time.h>

double run_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int run_any_rank(weft_comm_t comm, int bad) {
  int any = 1;
  if (weft_allreduce(&bad, &any, 1, WEFT_I32, WEFT_MAX, comm, NULL) != WEFT_SUCCESS) return 1;
  return any;
}

void *run_alloc(size_t floats, int *bad) {
  void *p = calloc(floats ? floats : 1, sizeof(float));
  *bad |= !p;
  return p;
}
