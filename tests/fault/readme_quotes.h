/* The error messages README.md's Failures table quotes, read back so that test_faults can
 * check them against what survivors really got: a quote that drifts from the code, or code
 * that drifts from the quote, fails the scenario. */
#ifndef WEFT_README_QUOTES_H
#define WEFT_README_QUOTES_H

#include <stddef.h>

/* Copies into out the double-quoted texts of the Failures table row whose first cell starts
 * with row, one per line. Returns how many, or -1 (why in out) when README or the row is
 * missing. The README is WEFT_TEST_README if set, else the source tree's. */
int readme_quotes(const char *row, char *out, size_t cap);

/* 1 when msg equals one of the quotes (lines of quotes) with every run of digits taken as
 * equal to any other: the numbers (ranks, pids, ms, op counts) vary from run to run. */
int readme_quoted(const char *quotes, const char *msg);

#endif
