/* Error messages (src/util/err.c): a message that quotes the one before it, as the layers
 * that add their context do, keeps both whole. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "err.h"

static void a_message_quotes_the_last_one(void **st) {
  (void)st;
  weft_set_error(WEFT_ERR_TIMEOUT, "socket transfer: timed out (%d/%d sent, %d/%d received)", 32,
                 32, 0, 32);
  assert_int_equal(weft_set_error(WEFT_ERR_TIMEOUT,
                                  "bootstrap allgather (rank %d, step %d of "
                                  "%d): %s",
                                  1, 1, 1, weft_thread_error()),
                   WEFT_ERR_TIMEOUT);
  assert_string_equal(weft_thread_error(), "bootstrap allgather (rank 1, step 1 of 1): socket "
                                           "transfer: timed out (32/32 sent, 0/32 received)");
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(a_message_quotes_the_last_one)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
