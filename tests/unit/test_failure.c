/* Failure notices (src/core/failure.c) on a communicator with no connections: what a rank
 * told by a notice words, and what it passes on (the reporter's origin, op and words, not its
 * own), which the region proxy carries to ranks on other hosts (weft_fail_told_others). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "comm.h"
#include "err.h"

/* Rank 0 of 4, nothing set up: notices go nowhere but into c->told. */
static weft_comm_t make(void) {
  weft_comm_t c = calloc(1, sizeof *c);
  c->rank = 0;
  c->nranks = 4;
  pthread_mutex_init(&c->mu, NULL);
  atomic_init(&c->fail_origin, -1);
  return c;
}

static void done(weft_comm_t c) {
  pthread_mutex_destroy(&c->mu);
  free(c);
}

static void passes_on_the_reporters_op_and_words(void **state) {
  (void)state;
  weft_comm_t c = make();
  weft_notice_t n = {.origin = 2, .code = WEFT_ERR_TIMEOUT, .seq = 7}, out;
  snprintf(n.text, sizeof n.text, "rank 2: its kernel waited too long");
  assert_false(weft_fail_told_others(c, &out));
  assert_int_equal(weft_fail_heard(c, &n), WEFT_ERR_TIMEOUT);
  assert_string_equal(weft_get_last_error(NULL), "rank 0: rank 2 timed out in op 7 waiting for a "
                                                 "peer: rank 2: its kernel waited too long");
  /* the communicator fails in its own op 3, and tells the others what rank 2 said */
  weft_comm_fail(c, WEFT_ERR_TIMEOUT, weft_get_last_error(NULL), 3);
  assert_true(weft_fail_told_others(c, &out));
  assert_int_equal(out.origin, 2);
  assert_int_equal(out.code, WEFT_ERR_TIMEOUT);
  assert_int_equal(out.seq, 7);
  assert_string_equal(out.text, n.text);
  done(c);
}

static void own_failure_is_told_as_its_own(void **state) {
  (void)state;
  weft_comm_t c = make();
  weft_notice_t out;
  weft_comm_fail(c, WEFT_ERR_TIMEOUT, "rank 0: the device kernel waited", 5);
  assert_true(weft_fail_told_others(c, &out));
  assert_int_equal(out.origin, 0);
  assert_int_equal(out.seq, 5);
  assert_string_equal(out.text, "rank 0: the device kernel waited");
  /* once: a later failure changes nothing */
  weft_comm_fail(c, WEFT_ERR_ABORTED, "later", 6);
  assert_true(weft_fail_told_others(c, &out));
  assert_int_equal(out.code, WEFT_ERR_TIMEOUT);
  done(c);
}

/* A proxy's bare abort (op 0, no words) names the rank that aborted, not a dead one. */
static void bare_abort(void **state) {
  (void)state;
  weft_comm_t c = make();
  weft_notice_t n = {.origin = 3, .code = WEFT_ERR_ABORTED}, out;
  assert_int_equal(weft_fail_heard(c, &n), WEFT_ERR_ABORTED);
  assert_string_equal(weft_get_last_error(NULL), "rank 0: rank 3 aborted the communicator");
  weft_comm_fail(c, WEFT_ERR_ABORTED, weft_get_last_error(NULL), 2);
  assert_true(weft_fail_told_others(c, &out));
  assert_int_equal(out.origin, 3);
  assert_int_equal(out.seq, 2); /* none came with it: this rank's op */
  done(c);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(passes_on_the_reporters_op_and_words),
      cmocka_unit_test(own_failure_is_told_as_its_own),
      cmocka_unit_test(bare_abort),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
