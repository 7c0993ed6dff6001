/* The tuning step every call takes: WEFT_ALGO read and checked here, the choice left to the
 * communicator's engine, and the last choice kept for weft_comm_last_algo. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "err.h"

/* WEFT_ALGO as the engines read it: WEFT_ALGO_AUTO when unset, an error naming the valid
 * values when it is not an algorithm's name. */
static weft_result_t algo_forced(const char *value, weft_algo_t *algo) {
  *algo = value && value[0] ? weft_algo_parse(value) : WEFT_ALGO_AUTO;
  if (*algo != WEFT_ALGO_COUNT) return WEFT_SUCCESS;
  char names[160] = "";
  for (int a = 0; a < WEFT_ALGO_COUNT; a++)
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", a ? ", " : "",
             weft_algo_name((weft_algo_t)a));
  return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_ALGO=%.40s is not an algorithm (valid: %s)",
                        value, names);
}

weft_result_t weft_tune(struct weft_comm *c, weft_task_t *t) {
  /* getenv itself, not the parameter table: this runs on every call, and on device
   * communicators queueing is what limits small operations. */
  weft_algo_t forced;
  CHECK(algo_forced(getenv("WEFT_ALGO"), &forced));
  CHECK(c->engine->tune(c, t, forced));
  atomic_store(&c->last_algo, (int)t->algo);
  return WEFT_SUCCESS;
}

const char *weft_comm_last_algo(weft_comm_t comm) {
  int a = comm ? atomic_load(&comm->last_algo) : WEFT_ALGO_AUTO;
  return a == WEFT_ALGO_AUTO ? "none" : weft_algo_name((weft_algo_t)a);
}
