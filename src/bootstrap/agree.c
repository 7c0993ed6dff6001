/* Agreement on the bootstrap ring: every rank's outcome of a setup step, with the failing
 * ranks' own messages, reaches every rank. Setup steps end with it instead of a barrier, so
 * that a rank that failed still takes part, and its neighbours hear why rather than read
 * its leaving as the data of a barrier. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "err.h"

enum { TEXT = 252 };

typedef struct {
  int32_t code;
  char text[TEXT]; /* from the network: printable characters only once read */
} outcome_t;

weft_result_t weft_bootstrap_agree(weft_bootstrap_t *b, weft_result_t mine, const char *where,
                                   const char *what) {
  char own[1024];
  snprintf(own, sizeof own, "%s", weft_thread_error());
  outcome_t *all = calloc((size_t)b->nranks, sizeof *all);
  if (!all) return weft_set_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", where);
  all[b->rank].code = (int32_t)mine;
  if (mine != WEFT_SUCCESS) snprintf(all[b->rank].text, TEXT, "%.*s", TEXT - 1, own);
  weft_result_t rc = weft_bootstrap_allgather(b, all, sizeof *all);
  if (rc == WEFT_SUCCESS && mine != WEFT_SUCCESS) /* our own reason, whole */
    rc = weft_set_error(mine, "%s", own);
  for (int p = 0; p < b->nranks && rc == WEFT_SUCCESS; p++) {
    outcome_t *o = &all[p];
    if (o->code == WEFT_SUCCESS) continue;
    weft_net_text(o->text, TEXT);
    weft_result_t code = weft_net_code(o->code);
    int bad = (int32_t)code != o->code;
    rc = weft_set_error(code, "%s: rank %d %s (%s): %s", where, p, what, weft_result_string(code),
                        bad ? "an outcome no rank sends" : o->text);
  }
  free(all);
  return rc;
}

weft_result_t weft_net_code(int32_t code) {
  return code > 0 && code <= WEFT_ERR_IN_PROGRESS ? (weft_result_t)code : WEFT_ERR_PROTOCOL;
}

char *weft_net_text(char *s, size_t n) {
  if (!n) return s;
  s[n - 1] = 0;
  for (char *t = s; *t; t++)
    if (*t < 32 || *t > 126) *t = '?';
  return s;
}
