/* The host tuner (src/host/tuner.c): what WEFT_ALGO may force and what it must refuse, that the
 * cost model only ever picks an algorithm that can serve the call, and that the last choice
 * is what weft_comm_last_algo reports. Runs on a bare communicator struct: no ranks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "err.h"

typedef struct {
  struct weft_comm c;
  uint8_t tr[16];
} fake_t;

extern const weft_engine_t weft_engine_host;

static int transport_named(const char *name) {
  for (int t = 0; t < weft_ntransports; t++)
    if (strcmp(weft_transports[t]->name, name) == 0) return t;
  fail_msg("no transport %s", name);
  return -1;
}

/* remote: every peer but rank 0 over tcp, as between hosts */
static fake_t *fake(int nranks, int remote) {
  fake_t *f = calloc(1, sizeof *f);
  f->c.nranks = nranks;
  f->c.engine = &weft_engine_host;
  f->c.peer_tr = f->tr;
  int shm = transport_named("shm"), tcp = transport_named("tcp");
  f->c.tr[shm] = weft_transports[shm];
  f->c.tr[tcp] = weft_transports[tcp];
  for (int p = 0; p < nranks; p++)
    f->tr[p] = (uint8_t)(remote && p ? tcp : shm);
  return f;
}

static weft_task_t task(weft_coll_t coll, int nranks, uint64_t count) {
  return (weft_task_t){
      .args = {.coll = coll, .nranks = nranks, .count = count}, .dtype = WEFT_F32, .op = WEFT_SUM};
}

static void last_algo_starts_at_none(void **st) {
  (void)st;
  fake_t *f = fake(4, 0);
  assert_string_equal(weft_comm_last_algo(&f->c), "none");
  assert_string_equal(weft_comm_last_algo(NULL), "none");
  unsetenv("WEFT_ALGO");
  weft_task_t t = task(WEFT_COLL_ALLREDUCE, 4, 1000);
  assert_int_equal(weft_tune(&f->c, &t), WEFT_SUCCESS);
  assert_string_equal(weft_comm_last_algo(&f->c), weft_algo_name(t.algo));
  free(f);
}

static void unknown_name_fails_naming_the_valid_ones(void **st) {
  (void)st;
  fake_t *f = fake(4, 0);
  setenv("WEFT_ALGO", "rign", 1);
  weft_task_t t = task(WEFT_COLL_ALLREDUCE, 4, 1000);
  assert_int_equal(weft_tune(&f->c, &t), WEFT_ERR_INVALID_ARG);
  const char *msg = weft_thread_error();
  assert_non_null(strstr(msg, "WEFT_ALGO=rign"));
  assert_non_null(strstr(msg, "ring, rhd, tree, direct, pairwise, chain"));
  assert_string_equal(weft_comm_last_algo(&f->c), "none");
  unsetenv("WEFT_ALGO");
  free(f);
}

static void forced_algorithm_runs_or_is_refused(void **st) {
  (void)st;
  for (int n = 1; n <= 9; n++) {
    fake_t *f = fake(n, 0);
    int pow2 = (n & (n - 1)) == 0;
    setenv("WEFT_ALGO", "RHD", 1); /* names are case-insensitive */
    weft_coll_t colls[] = {WEFT_COLL_ALLREDUCE, WEFT_COLL_REDUCE_SCATTER, WEFT_COLL_ALLGATHER};
    for (int i = 0; i < 3; i++) {
      weft_task_t t = task(colls[i], n, 777);
      weft_result_t rc = weft_tune(&f->c, &t);
      if (colls[i] == WEFT_COLL_ALLREDUCE || pow2) {
        assert_int_equal(rc, WEFT_SUCCESS);
        assert_int_equal(t.algo, WEFT_ALGO_RHD);
        assert_string_equal(weft_comm_last_algo(&f->c), "rhd");
      } else {
        assert_int_equal(rc, WEFT_ERR_UNSUPPORTED);
        assert_non_null(strstr(weft_thread_error(), "power-of-two"));
      }
    }
    /* a collective without the forced algorithm keeps the tuner's choice */
    setenv("WEFT_ALGO", "ring", 1);
    weft_task_t b = task(WEFT_COLL_BROADCAST, n, 777);
    assert_int_equal(weft_tune(&f->c, &b), WEFT_SUCCESS);
    assert_true(b.algo == WEFT_ALGO_CHAIN || b.algo == WEFT_ALGO_TREE);
    unsetenv("WEFT_ALGO");
    free(f);
  }
}

/* Every automatic choice has a generator and can serve the call, over ranks, sizes, link
 * classes and collectives. */
static void automatic_choice_always_serves(void **st) {
  (void)st;
  unsetenv("WEFT_ALGO");
  for (int n = 1; n <= 12; n++)
    for (int remote = 0; remote <= 1; remote++) {
      fake_t *f = fake(n, remote);
      for (int k = 0; k < WEFT_COLL_COUNT; k++)
        for (uint64_t count = 1; count <= (1u << 26); count *= 16) {
          weft_task_t t = task((weft_coll_t)k, n, count);
          assert_int_equal(weft_tune(&f->c, &t), WEFT_SUCCESS);
          assert_non_null(weft_algo_lookup((weft_coll_t)k, t.algo));
          if (t.algo == WEFT_ALGO_RHD && k != WEFT_COLL_ALLREDUCE) assert_int_equal(n & (n - 1), 0);
          assert_true(t.args.chunk > 0);
        }
      free(f);
    }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(last_algo_starts_at_none),
      cmocka_unit_test(unknown_name_fails_naming_the_valid_ones),
      cmocka_unit_test(forced_algorithm_runs_or_is_refused),
      cmocka_unit_test(automatic_choice_always_serves),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
