/* The engine interface (src/core/engine.h): the API layer, groups, the tuner and the comm
 * lifecycle reach a communicator's work only through its engine. A recording engine stands
 * in for the host one on a real one-rank communicator, as the next engine (GPU buffers
 * through a proxy thread and a network transport) would, and every public call must arrive
 * at the hook that serves it, with nothing run behind its back. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"

enum { TUNE, SUBMIT, GROUP, WATCH, CANCEL, MEMORY, BARRIER, FREE, NHOOKS };
static int calls[NHOOKS];
static int last_ntasks, group_comms;
static weft_stream_t last_stream;
static uint8_t byte_of_engine; /* what barrier_byte lends */

static weft_result_t rec_tune(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced) {
  (void)c, (void)forced;
  calls[TUNE]++;
  t->algo = WEFT_ALGO_DIRECT;
  t->args.chunk = 1;
  return WEFT_SUCCESS;
}
static weft_result_t rec_submit(struct weft_comm *c, weft_task_t *tasks, int ntasks,
                                weft_stream_t stream) {
  (void)c;
  calls[SUBMIT]++;
  last_ntasks = ntasks;
  last_stream = stream;
  for (int i = 0; i < ntasks; i++) /* submit takes what the tasks own */
    weft_task_free(&tasks[i]);
  return WEFT_SUCCESS;
}
static weft_result_t rec_group(struct weft_comm **comms, weft_work_t **ops,
                               const weft_stream_t *streams, int n) {
  (void)comms, (void)streams;
  calls[GROUP]++;
  group_comms = n;
  last_ntasks = ops[0]->ntasks;
  for (int k = 0; k < n; k++)
    weft_work_free(ops[k]);
  return WEFT_SUCCESS;
}
static void rec_watch(struct weft_comm *c) { (void)c, calls[WATCH]++; }
static void rec_cancel(struct weft_comm *c) { (void)c, calls[CANCEL]++; }
static const weft_engine_t *real; /* the engine that set the comm up */
/* Counted; then the real engine frees what it set up (its queue, caches). */
static void rec_free(struct weft_comm *c) {
  calls[FREE]++;
  real->free(c);
}
static size_t rec_memory(const struct weft_comm *c) {
  (void)c;
  calls[MEMORY]++;
  return 12345;
}
static void *rec_barrier_byte(struct weft_comm *c) {
  (void)c;
  calls[BARRIER]++;
  return &byte_of_engine;
}

static const weft_engine_t recorder = {
    .size = sizeof(weft_engine_t),
    .name = "recorder",
    .tune = rec_tune,
    .submit = rec_submit,
    .submit_group = rec_group,
    .watch = rec_watch,
    .cancel = rec_cancel,
    .free = rec_free,
    .memory = rec_memory,
    .barrier_byte = rec_barrier_byte,
};

static weft_comm_t comm;

static int setup(void **st) {
  (void)st;
  weft_unique_id_t id;
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) return -1;
  if (weft_comm_init(&comm, 1, id, 0, NULL) != WEFT_SUCCESS) return -1;
  real = comm->engine;
  comm->engine = &recorder;
  memset(calls, 0, sizeof calls);
  return 0;
}

static void calls_reach_the_engine(void **st) {
  (void)st;
  float s[8] = {1, 2, 3, 4, 5, 6, 7, 8}, r[8] = {0};
  assert_int_equal(weft_allreduce(s, r, 8, WEFT_F32, WEFT_SUM, comm, NULL), WEFT_SUCCESS);
  assert_int_equal(calls[TUNE], 1);
  assert_int_equal(calls[SUBMIT], 1);
  assert_int_equal(last_ntasks, 1);
  /* the engine ran nothing, so nothing ran: no executor behind its back */
  for (int i = 0; i < 8; i++)
    assert_true(r[i] == 0.0f);
  assert_string_equal(weft_comm_last_algo(comm), "direct");
  weft_stream_t stream = (weft_stream_t)(uintptr_t)0x1234; /* opaque to the API layer */
  assert_int_equal(weft_broadcast(s, r, 8, WEFT_F32, 0, comm, stream), WEFT_SUCCESS);
  assert_ptr_equal(last_stream, stream);
  assert_int_equal(calls[SUBMIT], 2);
}

static void bad_arguments_never_reach_it(void **st) {
  (void)st;
  float s[8] = {0};
  assert_int_equal(weft_allreduce(s, s + 1, 4, WEFT_F32, WEFT_SUM, comm, NULL),
                   WEFT_ERR_INVALID_ARG);
  assert_int_equal(calls[TUNE] + calls[SUBMIT] + calls[GROUP], 0);
}

static void barrier_uses_the_engines_byte(void **st) {
  (void)st;
  assert_int_equal(weft_barrier(comm, NULL), WEFT_SUCCESS);
  assert_int_equal(calls[BARRIER], 1);
  assert_int_equal(calls[SUBMIT], 1);
}

static void groups_go_to_submit_group(void **st) {
  (void)st;
  float a[4] = {0}, b[4] = {0};
  assert_int_equal(weft_group_start(), WEFT_SUCCESS);
  assert_int_equal(weft_send(a, 4, WEFT_F32, 0, comm, NULL), WEFT_SUCCESS);
  assert_int_equal(weft_recv(b, 4, WEFT_F32, 0, comm, NULL), WEFT_SUCCESS);
  assert_int_equal(calls[SUBMIT], 0);
  assert_int_equal(weft_group_end(), WEFT_SUCCESS);
  assert_int_equal(calls[GROUP], 1);
  assert_int_equal(group_comms, 1);
  assert_int_equal(last_ntasks, 2);
  assert_int_equal(calls[SUBMIT], 0);
}

static void lifecycle_and_queries(void **st) {
  (void)st;
  size_t bytes = 0;
  assert_int_equal(weft_comm_device_memory(comm, &bytes), WEFT_SUCCESS);
  assert_int_equal(bytes, 12345);
  weft_result_t err = WEFT_ERR_INTERNAL;
  assert_int_equal(weft_comm_get_async_error(comm, &err), WEFT_SUCCESS);
  assert_int_equal(err, WEFT_SUCCESS);
  assert_int_equal(calls[WATCH], 1);
  assert_int_equal(weft_comm_abort(comm), WEFT_SUCCESS);
  assert_int_equal(calls[CANCEL], 1);
  assert_int_equal(weft_comm_destroy(comm), WEFT_SUCCESS);
  assert_int_equal(calls[FREE], 1);
  comm = NULL;
}

static int teardown(void **st) {
  (void)st;
  if (!comm) return 0;
  comm->engine = real; /* the real engine frees what it set up */
  return weft_comm_destroy(comm) == WEFT_SUCCESS ? 0 : -1;
}

/* Every engine of the build fills every hook: the API layer calls them unconditionally. */
static void every_engine_is_whole(void **st) {
  (void)st;
  assert_true(weft_nengines >= 2);
  for (int e = 0; e < weft_nengines; e++) {
    const weft_engine_t *x = weft_engines[e];
    assert_int_equal(x->size, sizeof(weft_engine_t));
    assert_non_null(x->name);
    assert_true(x->serves && x->setup && x->free && x->tune && x->submit && x->submit_group &&
                x->watch && x->cancel && x->memory && x->barrier_byte);
  }
  /* host comms go to an engine that is not the device one, and device ones elsewhere */
  weft_config_t host = WEFT_CONFIG_INIT, dev = WEFT_CONFIG_INIT;
  dev.device = 0;
  int h = -1, d = -1;
  for (int e = weft_nengines - 1; e >= 0; e--) {
    if (weft_engines[e]->serves(&host)) h = e;
    if (weft_engines[e]->serves(&dev)) d = e;
  }
  assert_true(h >= 0 && d >= 0 && h != d);
  assert_true(weft_engines[h]->serves(NULL));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(calls_reach_the_engine, setup, teardown),
      cmocka_unit_test_setup_teardown(bad_arguments_never_reach_it, setup, teardown),
      cmocka_unit_test_setup_teardown(barrier_uses_the_engines_byte, setup, teardown),
      cmocka_unit_test_setup_teardown(groups_go_to_submit_group, setup, teardown),
      cmocka_unit_test_setup_teardown(lifecycle_and_queries, setup, teardown),
      cmocka_unit_test(every_engine_is_whole),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
