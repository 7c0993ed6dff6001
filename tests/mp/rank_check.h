/* For rank functions of the multi-process tests: report a failure with this rank's number
 * and weft's last error, and return 1 (the launcher then fails the test). Needs `rank`. */
#ifndef WEFT_TEST_RANK_CHECK_H
#define WEFT_TEST_RANK_CHECK_H

#include <stdio.h>

#include "weft.h"

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "rank %d: ", rank);                                                            \
    fprintf(stderr, __VA_ARGS__);                                                                  \
    fprintf(stderr, " (%s)\n", weft_get_last_error(NULL));                                         \
    return 1;                                                                                      \
  } while (0)

#endif
