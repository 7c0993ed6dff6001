/* The error messages that the Failures table of docs/failures.md quotes, read back so that
 * test_faults can check them against what survivors really got: a quote that drifts from the
 * code, or code that drifts from the quote, fails the scenario. */
#ifndef WEFT_README_QUOTES_H
#define WEFT_README_QUOTES_H

#include <stddef.h>

/* Copies into out the double-quoted texts of the Failures table row (under the heading
 * "## Failures") whose first cell starts with row, one per line. Returns how many, or -1 (why
 * in out) when the file or the row is missing. The file is WEFT_TEST_README if set, else the
 * source tree's docs/failures.md (WEFT_README, set by the build). */
int readme_quotes(const char *row, char *out, size_t cap);

/* 1 when msg equals one of the quotes (lines of quotes) with every run of digits taken as
 * equal to any other, and every host name in "(host NAME)" as equal to any other: the numbers
 * (ranks, pids, ms, op counts) and the test hosts' names vary from run to run. */
int readme_quoted(const char *quotes, const char *msg);

#endif
