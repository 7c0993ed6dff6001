/* The NCCL ABI tests' check: a failed condition is printed with file:line and counted, and the
 * test goes on, so one run lists every failure (main returns nonzero when expect_failures). */
#ifndef WEFT_TEST_NCCL_EXPECT_H
#define WEFT_TEST_NCCL_EXPECT_H

#include <stdio.h>

static int expect_failures;
#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      expect_failures++;                                                                           \
      fprintf(stderr, "%s:%d: FAIL %s: ", __FILE__, __LINE__, #cond);                              \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, "\n");                                                                       \
    }                                                                                              \
  } while (0)

#endif
