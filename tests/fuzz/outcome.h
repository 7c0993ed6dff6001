/* What a fuzz target decided about one input, in the words of the corpus expectations
 * (tests/fuzz/expected/<target>): "accept ..." or "refuse <weft_result_t> ...". The replay
 * compares the two; libFuzzer's entry point runs the same code and drops the words. */
#ifndef WEFT_FUZZ_OUTCOME_H
#define WEFT_FUZZ_OUTCOME_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* Runs the target on one input and writes its outcome to out (one line, no newline). */
void fuzz_outcome(const uint8_t *data, size_t size, char *out, size_t len);

/* The enumerator's name: expectations name codes as weft.h spells them. */
static inline const char *fuzz_result_name(weft_result_t rc) {
  static const char *const names[] = {
      "WEFT_SUCCESS",     "WEFT_ERR_INVALID_ARG", "WEFT_ERR_NO_MEMORY", "WEFT_ERR_SYSTEM",
      "WEFT_ERR_TIMEOUT", "WEFT_ERR_PEER_LOST",   "WEFT_ERR_PROTOCOL",  "WEFT_ERR_MISMATCH",
      "WEFT_ERR_ABORTED", "WEFT_ERR_UNSUPPORTED", "WEFT_ERR_INTERNAL",  "WEFT_ERR_IN_PROGRESS"};
  return rc >= 0 && (size_t)rc < sizeof names / sizeof names[0] ? names[rc] : "not-a-weft-result";
}

#endif
