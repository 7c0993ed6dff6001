/* Time for every wait in weft: a monotonic clock in milliseconds and deadlines from a
 * timeout (WEFT_TIMEOUT_MS when none is given), so that no wait is unbounded. */
#ifndef WEFT_CLOCK_H
#define WEFT_CLOCK_H

#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds, and in microseconds. */
int64_t weft_now_ms(void);
int64_t weft_now_us(void);
/* WEFT_TIMEOUT_MS, or 300000 when unset or not positive. */
int64_t weft_default_timeout_ms(void);
/* deadline for a timeout in ms from now (timeout <= 0: the default) */
int64_t weft_deadline(int64_t timeout_ms);

/* One pause of a spinning wait (x86's PAUSE: yields the core's pipeline to its sibling). */
static inline void weft_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

#endif
