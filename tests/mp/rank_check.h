/* For rank functions of the multi-process tests: report a failure with this rank's number
 * and the thread's last weft error, and return 1 (the launcher then fails the test). Needs
 * `rank`. That error may predate the failure (a call that returned success, or a check of
 * the test's own, sets none), so it is labelled as what it is. */
#ifndef WEFT_TEST_RANK_CHECK_H
#define WEFT_TEST_RANK_CHECK_H

#include <stdio.h>

#include "weft.h"

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "rank %d: ", rank);                                                            \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, " (last weft error on this thread: %s)\n", weft_get_last_error(NULL));         \
    return 1;                                                                                      \
  } while (0)

#endif
