/* Waiting out loud: a wait that may last (a rendezvous, a connect, an operation whose peer is
 * late) reports itself at WARN every WEFT_WAIT_REPORT_S seconds, naming who waits for whom,
 * where, for how long so far and until the timeout. The state lives on the waiter's stack. */
#ifndef WEFT_WAITLOG_H
#define WEFT_WAITLOG_H

#include <stddef.h>
#include <stdint.h>

/* Writes what the wait is for, e.g. "rank 1: waiting for rank 0 to connect (bootstrap ring)".
 * Called only when a report is due, so it may walk the waiter's state. */
typedef void (*weft_wait_describe_fn)(const void *ctx, char *buf, size_t len);

typedef struct weft_waitlog {
  int64_t start_ms, deadline_ms, next_ms;
  int64_t period_ms;    /* 0: never report */
  int64_t (*now)(void); /* the clock (weft_now_ms; tests give their own) */
  int subsys;           /* the log filter's subsystem (err.h) */
  weft_wait_describe_fn describe;
  const void *ctx;
  const char *text;           /* what the wait is for, when describe is NULL */
  int reports;                /* lines written so far */
  struct weft_waitlog *outer; /* the thread's current wait before this one (enter/leave) */
} weft_waitlog_t;

/* Starts a wait that ends at deadline_ms (weft_now_ms time) with the period of
 * WEFT_WAIT_REPORT_S (read with the log settings, once per process). text, or describe(ctx)
 * when describe is set, says what the wait is for; both must outlive the wait. */
void weft_waitlog_init(weft_waitlog_t *w, int subsys, int64_t deadline_ms, const char *text,
                       weft_wait_describe_fn describe, const void *ctx);
/* Writes the report line when one is due; returns 1 when it did. Cheap otherwise: one look at
 * the clock. */
int weft_waitlog_tick(weft_waitlog_t *w);

/* Makes w the calling thread's current wait, for the socket helpers (socket.h), which know
 * how to wait but not what for. Pairs with leave, in the same scope; nests. */
void weft_waitlog_enter(weft_waitlog_t *w);
void weft_waitlog_leave(weft_waitlog_t *w);
/* Ticks the calling thread's current wait, if any: from inside generic wait loops. */
void weft_waitlog_tick_current(void);

/* Writes "1, 3-5, 9" for the ranks r in [0, n) with missing(ctx, r) true, cut short with
 * "..." when buf is full. Returns how many ranks are missing. */
int weft_waitlog_ranks(char *buf, size_t len, int n, int (*missing)(const void *ctx, int r),
                       const void *ctx);

#endif
