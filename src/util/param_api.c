/* The parameter table as the API and init see it: weft_params_check turns the first refusal
 * into the thread's error, and weft_param_count / weft_param_info list the table (collbench
 * --params). Apart from param.c so that the table needs no error module (which reads it). */
#include <stdlib.h>

#include "err.h"
#include "param.h"

weft_result_t weft_params_check(void) {
  char msg[512];
  if (!weft_params_refusal(msg, sizeof msg)) return WEFT_SUCCESS;
  return weft_set_error(WEFT_ERR_INVALID_ARG, "%s", msg);
}

int weft_param_count(void) { return WEFT_PARAM_COUNT; }

/* value: the text as set (even one weft_params_check refuses, so that a listing shows what
 * the user wrote), else the default. */
weft_result_t weft_param_info(int index, const char **name, const char **value,
                              const char **default_value, const char **help) {
  if (index < 0 || index >= WEFT_PARAM_COUNT)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "param index %d not in [0, %d)", index,
                          WEFT_PARAM_COUNT);
  const weft_param_def_t *p = weft_param_def((weft_param_id_t)index);
  const char *v = getenv(p->name);
  if (name) *name = p->name;
  if (value) *value = v ? v : p->dflt;
  if (default_value) *default_value = p->dflt;
  if (help) *help = p->help;
  return WEFT_SUCCESS;
}
