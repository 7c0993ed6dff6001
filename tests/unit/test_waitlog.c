/* Wait reports (src/util/waitlog.c) on a fake clock: when a line is due, what it says (read
 * back from WEFT_DEBUG_FILE), the current wait of a thread across nested scopes, and the list
 * of missing ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "clock.h"
#include "err.h"
#include "waitlog.h"

static int64_t fake_ms;
static int64_t fake_now(void) { return fake_ms; }
static char log_path[64];

/* The log file's text from offset *at on; moves *at to its end. */
static char *log_since(long *at) {
  static char buf[8192];
  FILE *f = fopen(log_path, "r");
  assert_non_null(f);
  fseek(f, *at, SEEK_SET);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = 0;
  *at += (long)n;
  fclose(f);
  return buf;
}

static void start(weft_waitlog_t *w, int64_t period_ms, const char *text, weft_wait_describe_fn fn,
                  const void *ctx) {
  weft_waitlog_init(w, WEFT_SUB_BOOT, 0, text, fn, ctx);
  fake_ms = 1000;
  w->now = fake_now;
  w->start_ms = fake_ms;
  w->deadline_ms = fake_ms + 10000;
  w->period_ms = period_ms;
  w->next_ms = fake_ms + period_ms;
}

static void the_period_comes_from_the_environment(void **st) {
  (void)st;
  weft_waitlog_t w;
  weft_waitlog_init(&w, WEFT_SUB_BOOT, weft_now_ms() + 5000, "x", NULL, NULL);
  assert_int_equal(w.period_ms, 7000); /* main set WEFT_WAIT_REPORT_S=7 */
  assert_int_equal(w.next_ms - w.start_ms, 7000);
  assert_int_equal(weft_waitlog_tick(&w), 0); /* not due for 7 s */
}

static void reports_every_period_and_say_how_long(void **st) {
  (void)st;
  long at = 0;
  log_since(&at);
  weft_waitlog_t w;
  start(&w, 2000, "rank 1 of 2: waiting for rank 0", NULL, NULL);
  fake_ms += 1999;
  assert_int_equal(weft_waitlog_tick(&w), 0);
  fake_ms += 1;
  assert_int_equal(weft_waitlog_tick(&w), 1);
  assert_int_equal(weft_waitlog_tick(&w), 0); /* once per period */
  const char *text = log_since(&at);
  assert_non_null(strstr(text, " weft WARN "));
  assert_non_null(strstr(text, "rank 1 of 2: waiting for rank 0; for 2.0 s so far, 8.0 s left "
                               "before the timeout\n"));
  fake_ms += 2000;
  assert_int_equal(weft_waitlog_tick(&w), 1);
  assert_non_null(strstr(log_since(&at), "for 4.0 s so far, 6.0 s left"));
  /* a wait not looked at for 3 periods reports once, then keeps the period from then */
  fake_ms += 6500;
  assert_int_equal(weft_waitlog_tick(&w), 1);
  assert_non_null(strstr(log_since(&at), "for 10.5 s so far, 0.0 s left"));
  assert_int_equal(weft_waitlog_tick(&w), 0);
  fake_ms += 1999;
  assert_int_equal(weft_waitlog_tick(&w), 0);
  fake_ms += 1;
  assert_int_equal(weft_waitlog_tick(&w), 1);
  assert_int_equal(w.reports, 4);
}

static void period_zero_never_reports(void **st) {
  (void)st;
  weft_waitlog_t w;
  start(&w, 0, "quiet", NULL, NULL);
  fake_ms += 1000000;
  assert_int_equal(weft_waitlog_tick(&w), 0);
  assert_int_equal(weft_waitlog_tick(NULL), 0);
  assert_int_equal(w.reports, 0);
}

static int described;
static void describe(const void *ctx, char *buf, size_t len) {
  described++;
  snprintf(buf, len, "step %d", *(const int *)ctx);
}

static void describe_runs_only_when_due(void **st) {
  (void)st;
  long at = 0;
  log_since(&at);
  int step = 3;
  weft_waitlog_t w;
  start(&w, 1000, NULL, describe, &step);
  described = 0;
  for (int i = 0; i < 999; i++) {
    fake_ms++;
    weft_waitlog_tick(&w);
  }
  assert_int_equal(described, 0);
  fake_ms++;
  step = 4; /* read when the line is written, not at init */
  weft_waitlog_tick(&w);
  assert_int_equal(described, 1);
  assert_non_null(strstr(log_since(&at), "step 4; for 1.0 s so far"));
}

static void the_current_wait_nests(void **st) {
  (void)st;
  weft_waitlog_t outer, inner;
  start(&outer, 1000, "outer", NULL, NULL);
  start(&inner, 1000, "inner", NULL, NULL);
  weft_waitlog_tick_current(); /* none: nothing happens */
  weft_waitlog_enter(&outer);
  weft_waitlog_enter(&inner);
  fake_ms += 1000;
  weft_waitlog_tick_current();
  assert_int_equal(inner.reports, 1);
  assert_int_equal(outer.reports, 0);
  weft_waitlog_leave(&inner);
  weft_waitlog_tick_current();
  assert_int_equal(outer.reports, 1);
  weft_waitlog_leave(&outer);
  fake_ms += 1000;
  weft_waitlog_tick_current();
  assert_int_equal(outer.reports + inner.reports, 2);
}

static const char *missing_map;
static int missing(const void *ctx, int r) {
  (void)ctx;
  return missing_map[r] == 'x';
}

static void missing_ranks_are_listed_as_ranges(void **st) {
  (void)st;
  char buf[64];
  missing_map = ".x.xxx...x";
  assert_int_equal(weft_waitlog_ranks(buf, sizeof buf, 10, missing, NULL), 5);
  assert_string_equal(buf, "1, 3-5, 9");
  missing_map = "..........";
  assert_int_equal(weft_waitlog_ranks(buf, sizeof buf, 10, missing, NULL), 0);
  assert_string_equal(buf, "");
  missing_map = "xxxx";
  assert_int_equal(weft_waitlog_ranks(buf, sizeof buf, 4, missing, NULL), 4);
  assert_string_equal(buf, "0-3");
  /* more than fits: cut short, the count stays whole */
  static char many[200];
  for (int i = 0; i < 199; i++)
    many[i] = i % 2 ? 'x' : '.';
  missing_map = many;
  char small[24];
  assert_int_equal(weft_waitlog_ranks(small, sizeof small, 199, missing, NULL), 99);
  assert_string_equal(small, "1, 3, 5, 7, 9, 11, ...");
}

int main(void) {
  snprintf(log_path, sizeof log_path, "/tmp/weft-test-waitlog-%d.log", (int)getpid());
  /* read once, at the first log call: before any */
  setenv("WEFT_DEBUG_FILE", log_path, 1);
  setenv("WEFT_WAIT_REPORT_S", "7", 1);
  unsetenv("WEFT_DEBUG"); /* reports are written unasked */
  unsetenv("WEFT_DEBUG_SUBSYS");
  const struct CMUnitTest tests[] = {cmocka_unit_test(the_period_comes_from_the_environment),
                                     cmocka_unit_test(reports_every_period_and_say_how_long),
                                     cmocka_unit_test(period_zero_never_reports),
                                     cmocka_unit_test(describe_runs_only_when_due),
                                     cmocka_unit_test(the_current_wait_nests),
                                     cmocka_unit_test(missing_ranks_are_listed_as_ranges)};
  int rc = cmocka_run_group_tests(tests, NULL, NULL);
  unlink(log_path);
  return rc;
}
