/* The wait reports of waitlog.h. The only state beyond the waiter's own struct is the calling
 * thread's pointer to its innermost wait, set and cleared by that waiter's scope, so that the
 * socket helpers can report a wait without a parameter for it in every call. */
#include "waitlog.h"

#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "err.h"

static _Thread_local weft_waitlog_t *current;

void weft_waitlog_init(weft_waitlog_t *w, int subsys, int64_t deadline_ms, const char *text,
                       weft_wait_describe_fn describe, const void *ctx) {
  int64_t now = weft_now_ms(), period = weft_log_wait_report_ms();
  *w = (weft_waitlog_t){.start_ms = now,
                        .deadline_ms = deadline_ms,
                        .next_ms = now + period,
                        .period_ms = period,
                        .now = weft_now_ms,
                        .subsys = subsys,
                        .describe = describe,
                        .ctx = ctx,
                        .text = text ? text : "waiting"};
}

int weft_waitlog_tick(weft_waitlog_t *w) {
  if (!w || w->period_ms <= 0) return 0;
  int64_t now = w->now();
  if (now < w->next_ms) return 0;
  /* A wait that was not looked at for several periods (a long poll, a stopped process)
   * reports once, then keeps to the period from now. */
  w->next_ms += w->period_ms;
  if (w->next_ms <= now) w->next_ms = now + w->period_ms;
  char what[512];
  if (w->describe)
    w->describe(w->ctx, what, sizeof what);
  else
    snprintf(what, sizeof what, "%s", w->text);
  int64_t left = w->deadline_ms - now;
  weft_log(WEFT_LOG_WARN | WEFT_LOG_FORCE, w->subsys, __FILE__, __LINE__,
           "%s; for %.1f s so far, %.1f s left before the timeout", what,
           (double)(now - w->start_ms) / 1000.0, (double)(left > 0 ? left : 0) / 1000.0);
  w->reports++;
  return 1;
}

void weft_waitlog_enter(weft_waitlog_t *w) {
  w->outer = current;
  current = w;
}

void weft_waitlog_leave(weft_waitlog_t *w) {
  if (current == w) current = w->outer;
}

void weft_waitlog_tick_current(void) { weft_waitlog_tick(current); }

int weft_waitlog_ranks(char *buf, size_t len, int n, int (*missing)(const void *ctx, int r),
                       const void *ctx) {
  size_t o = 0;
  int count = 0, full = 0;
  if (len) buf[0] = 0;
  for (int r = 0; r < n; r++) {
    if (!missing(ctx, r)) continue;
    count++;
    int last = r;
    while (last + 1 < n && missing(ctx, last + 1))
      last++;
    count += last - r;
    if (!full && len) {
      char one[48];
      if (last == r)
        snprintf(one, sizeof one, "%s%d", o ? ", " : "", r);
      else
        snprintf(one, sizeof one, "%s%d-%d", o ? ", " : "", r, last);
      /* room for the item and a trailing ", ..." */
      size_t k = strlen(one);
      if (o + k + 6 < len) {
        snprintf(buf + o, len - o, "%s", one);
        o += k;
      } else {
        snprintf(buf + o, len - o, "%s...", o ? ", " : "");
        full = 1;
      }
    }
    r = last;
  }
  return count;
}
