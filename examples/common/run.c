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

int run_step_end(weft_comm_t dc, int replicas, float loss, float *mean, run_clock_t *clock,
                 double t0, double waited, FILE *log, int step, double tokens) {
  float total = loss * (float)replicas;
  if (dc && weft_allreduce(&loss, &total, 1, WEFT_F32, WEFT_SUM, dc, NULL) != WEFT_SUCCESS)
    return -1;
  *mean = total / (float)replicas;
  double dt = run_now_s() - t0;
  run_clock_add(clock, dt, waited);
  if (log)
    fprintf(log, "step %d loss %.6f tokens/s %.0f comm_wait %.1f%%\n", step, *mean, tokens / dt,
            100.0 * waited / dt);
  return 0;
}

void run_clock_add(run_clock_t *clock, double dt, double waited) {
  if (clock->first_all == 0)
    clock->first_all = dt, clock->first_wait = waited;
  else
    clock->all += dt, clock->wait += waited, clock->steps++;
}

void run_stats_fill(run_stats_t *stats, const run_clock_t *clock, size_t state_floats) {
  if (!stats) return;
  stats->step_s = clock->steps ? clock->all / clock->steps : clock->first_all;
  stats->comm_wait_s = clock->steps ? clock->wait / clock->steps : clock->first_wait;
  stats->state_bytes = state_floats * sizeof(float);
}

void *run_alloc(size_t floats, int *bad) {
  void *p = calloc(floats ? floats : 1, sizeof(float));
  *bad |= !p;
  return p;
}

int run_backend(const char *name, int rank, int gpu, int bf16, gpt_ops_t *ops, weft_config_t *dev) {
  char why[256];
  int n = gpt_cuda_devices();
  *ops = gpt_ops_cpu;
  if (!gpu) return 0;
  dev->device = n > 0 ? rank % n : 0;
  if (!gpt_ops_cuda_open(ops, dev->device, bf16, why, sizeof why)) return 0;
  fprintf(stderr, "%s: rank %d: %s\n", name, rank, why);
  return -1;
}

int run_wait(const gpt_ops_t *ops, void *stream, weft_comm_t c, trace_t *tr, int row,
             const char *what, double *waited) {
  double t0 = run_now_s();
  weft_result_t e = WEFT_SUCCESS;
  int bad = ops->vt->stream_wait(ops->ctx, stream) ||
            weft_comm_get_async_error(c, &e) != WEFT_SUCCESS || e != WEFT_SUCCESS;
  *waited += run_now_s() - t0;
  trace_span(tr, TRACE_WAIT, what, t0, run_now_s());
  trace_settle(tr, row, run_now_s());
  return bad ? -1 : 0;
}
