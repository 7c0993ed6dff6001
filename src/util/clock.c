/* The monotonic clock and timeouts of clock.h: deadlines in milliseconds of CLOCK_MONOTONIC,
 * so that a wall-clock step never fires or stalls a timeout. */
#include "clock.h"

#include <time.h>

#include "param.h"

int64_t weft_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t weft_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t weft_default_timeout_ms(void) {
  int64_t t = weft_param_get_int(WEFT_PARAM_TIMEOUT_MS);
  return t > 0 ? t : 300000; /* 0 asks for the default (params.def) */
}

int64_t weft_deadline(int64_t timeout_ms) {
  return weft_now_ms() + (timeout_ms > 0 ? timeout_ms : weft_default_timeout_ms());
}
