/* The WEFT_* table (src/util/params.def through param.c): weft_params_check refuses a bad
 * integer, an out-of-range one and a bad word with a message naming the variable; unset reads
 * the default; the agreed list is the device engine's; a string's agreed value follows its
 * text. Each test starts with every WEFT_* variable unset and puts the caller's back after. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dev.h"
#include "err.h"
#include "param.h"

static char *saved[WEFT_PARAM_COUNT];

static int clear_env(void **st) {
  (void)st;
  for (int i = 0; i < WEFT_PARAM_COUNT; i++) {
    const char *name = weft_param_def((weft_param_id_t)i)->name, *v = getenv(name);
    saved[i] = v ? strdup(v) : NULL;
    unsetenv(name);
  }
  return 0;
}

static int restore_env(void **st) {
  (void)st;
  for (int i = 0; i < WEFT_PARAM_COUNT; i++) {
    const char *name = weft_param_def((weft_param_id_t)i)->name;
    if (saved[i])
      setenv(name, saved[i], 1);
    else
      unsetenv(name);
    free(saved[i]);
    saved[i] = NULL;
  }
  return 0;
}

/* weft_params_check with name=value fails, and its message holds every one of want. */
static void refused(const char *name, const char *value, const char *want[]) {
  setenv(name, value, 1);
  assert_int_equal(weft_params_check(), WEFT_ERR_INVALID_ARG);
  const char *msg = weft_thread_error();
  for (int i = 0; want[i]; i++)
    if (!strstr(msg, want[i])) fail_msg("'%s' lacks '%s'", msg, want[i]);
  unsetenv(name);
  assert_int_equal(weft_params_check(), WEFT_SUCCESS);
}

static void bad_integer_is_refused(void **st) {
  (void)st;
  refused("WEFT_P2P_STAGES", "two",
          (const char *[]){"WEFT_P2P_STAGES=two", "not an integer", "[2, 16]", NULL});
  refused("WEFT_TIMEOUT_MS", "15s", (const char *[]){"WEFT_TIMEOUT_MS=15s", "integer", NULL});
  refused("WEFT_SPIN", "99999999999999999999", /* overflows: not saturated */
          (const char *[]){"WEFT_SPIN=99999999999999999999", "not an integer", NULL});
  /* what the check refuses, the accessor reads as the default */
  setenv("WEFT_P2P_STAGES", "two", 1);
  assert_int_equal(weft_param_get_int(WEFT_PARAM_P2P_STAGES), 2);
}

static void out_of_range_is_refused(void **st) {
  (void)st;
  refused("WEFT_P2P_STAGES", "17",
          (const char *[]){"WEFT_P2P_STAGES=17", "out of range", "[2, 16]", NULL});
  refused("WEFT_P2P_CHUNK_BYTES", "512", (const char *[]){"WEFT_P2P_CHUNK_BYTES=512", NULL});
  refused("WEFT_HEARTBEAT_MS", "-1",
          (const char *[]){"WEFT_HEARTBEAT_MS=-1", "an integer from 0", NULL});
  refused("WEFT_CE_MIN_BYTES", "-5", (const char *[]){"WEFT_CE_MIN_BYTES=-5", "auto", NULL});
  /* sockets per pair: at most 8, the size of tcp.c's fds[] (collectives_3_tcp8 runs 8) */
  refused("WEFT_TCP_SOCKETS", "9",
          (const char *[]){"WEFT_TCP_SOCKETS=9", "out of range", "[0, 8]", NULL});
  setenv("WEFT_P2P_STAGES", "17", 1);
  assert_int_equal(weft_param_get_int(WEFT_PARAM_P2P_STAGES), 2);
  setenv("WEFT_P2P_STAGES", "16", 1);
  setenv("WEFT_TCP_SOCKETS", "8", 1);
  assert_int_equal(weft_params_check(), WEFT_SUCCESS);
  assert_int_equal(weft_param_get_int(WEFT_PARAM_P2P_STAGES), 16);
  assert_int_equal(weft_param_get_int(WEFT_PARAM_TCP_SOCKETS), 8);
}

static void bad_word_is_refused(void **st) {
  (void)st;
  refused("WEFT_TRANSPORT", "udp", (const char *[]){"WEFT_TRANSPORT=udp", "auto, shm, tcp", NULL});
  refused("WEFT_TRANSPORT", "SHM", (const char *[]){"WEFT_TRANSPORT=SHM", NULL}); /* as comm.c */
  refused("WEFT_DEBUG", "LOUD", (const char *[]){"WEFT_DEBUG=LOUD", "WARN, INFO, TRACE", NULL});
  refused("WEFT_ALGO", "rign", (const char *[]){"WEFT_ALGO=rign", "valid: auto, ring", NULL});
  refused("WEFT_CE_MIN_BYTES", "many", (const char *[]){"WEFT_CE_MIN_BYTES=many", NULL});
  setenv("WEFT_TRANSPORT", "udp", 1);
  assert_string_equal(weft_param_get_str(WEFT_PARAM_TRANSPORT), "auto");
  /* what the readers accept passes */
  setenv("WEFT_TRANSPORT", "tcp", 1);
  setenv("WEFT_DEBUG", "info", 1); /* err.c compares without case */
  setenv("WEFT_ALGO", "OneShot", 1);
  setenv("WEFT_LL128_MAX_BYTES", "0x100000", 1);
  setenv("WEFT_CE_MIN_BYTES", "auto", 1);
  setenv("WEFT_SOCKET_IFNAME", "anything at all", 1);
  assert_int_equal(weft_params_check(), WEFT_SUCCESS);
  assert_string_equal(weft_param_get_str(WEFT_PARAM_TRANSPORT), "tcp");
  assert_string_equal(weft_param_get_str(WEFT_PARAM_DEBUG), "info");
}

static void unset_or_empty_reads_the_default(void **st) {
  (void)st;
  assert_int_equal(weft_params_check(), WEFT_SUCCESS);
  assert_int_equal(weft_param_get_int(WEFT_PARAM_TIMEOUT_MS), 300000);
  assert_int_equal(weft_param_get_int(WEFT_PARAM_DIRECT_READ_MAX_BYTES), 64 << 20);
  assert_string_equal(weft_param_get_str(WEFT_PARAM_TRANSPORT), "auto");
  assert_string_equal(weft_param_get_str(WEFT_PARAM_HOSTID), "");
  setenv("WEFT_TIMEOUT_MS", "", 1);
  setenv("WEFT_TRANSPORT", "", 1);
  assert_int_equal(weft_params_check(), WEFT_SUCCESS);
  assert_int_equal(weft_param_get_int(WEFT_PARAM_TIMEOUT_MS), 300000);
  assert_string_equal(weft_param_get_str(WEFT_PARAM_TRANSPORT), "auto");
  setenv("WEFT_TIMEOUT_MS", "0x10", 1); /* strtoll's syntax, as before */
  assert_int_equal(weft_param_get_int(WEFT_PARAM_TIMEOUT_MS), 16);
  assert_int_equal(weft_param_get_int(WEFT_PARAM_TRANSPORT), 0); /* not an integer parameter */
}

/* Every default passes its own row, and the rows whose bounds are the kernels' agree with
 * src/gpu/kernels/dev.h. */
static void table_is_consistent(void **st) {
  (void)st;
  for (int i = 0; i < WEFT_PARAM_COUNT; i++) {
    const weft_param_def_t *p = weft_param_def((weft_param_id_t)i);
    assert_true(strncmp(p->name, "WEFT_", 5) == 0);
    if (!weft_param_valid((weft_param_id_t)i, p->dflt))
      fail_msg("%s: default '%s' breaks its own rule", p->name, p->dflt);
  }
  assert_null(weft_param_def(WEFT_PARAM_COUNT));
  assert_int_equal(weft_param_def(WEFT_PARAM_LL_MAX_BYTES)->max, WEFT_DEV_LL_MAX_BYTES);
  assert_int_equal(weft_param_def(WEFT_PARAM_LL_ROOTED_BYTES)->max, WEFT_DEV_LL_MAX_BYTES);
  assert_int_equal(weft_param_def(WEFT_PARAM_LL_BLOCK_BYTES)->max, WEFT_DEV_LL_SLOT_BYTES / 2);
  assert_int_equal(weft_param_def(WEFT_PARAM_P2P_CHANNELS)->max, WEFT_DEV_COLL_CHANNELS);
  assert_int_equal(weft_param_def(WEFT_PARAM_DIRECT_CHANNELS)->max, WEFT_DEV_DIRECT_CHANNELS);
  assert_int_equal(weft_param_def(WEFT_PARAM_P2P_SETS)->max, WEFT_DEV_P2P_MAX_SETS);
  assert_int_equal(weft_param_count(), WEFT_PARAM_COUNT);
}

/* The variables the device engine exchanges (its as_read, WEFT_LL128_MAX_BYTES there twice:
 * copies and reductions; WEFT_MOE_WINDOW_BYTES for the MoE layers made on it; the share of a
 * shared GPU's SMs; the proxy's threads, each with connections every rank sets up), each once
 * here. */
static const char *const dev_agreed[] = {
    "WEFT_P2P_CHUNK_BYTES",   "WEFT_P2P_STAGES",        "WEFT_P2P_CHANNELS",
    "WEFT_P2P_SPLIT",         "WEFT_P2P_BLOCK_BYTES",   "WEFT_P2P_SETS",
    "WEFT_P2P_ROUNDS",        "WEFT_LL_BLOCK_BYTES",    "WEFT_ONESHOT_MAX_BYTES",
    "WEFT_LL_MAX_BYTES",      "WEFT_LL128_MAX_BYTES",   "WEFT_CE_MIN_BYTES",
    "WEFT_DIRECT_MIN_BYTES",  "WEFT_DIRECT_CHANNELS",   "WEFT_DIRECT_READ_MAX_BYTES",
    "WEFT_MOE_WINDOW_BYTES",  "WEFT_SHARED_SM_PERCENT", "WEFT_PROXY_THREADS",
    "WEFT_PROXY_CHUNK_BYTES", "WEFT_PROXY_CHANNELS",    "WEFT_PROXY_STAGES",
    "WEFT_PROXY_LL_BYTES",    "WEFT_LL_ROOTED_BYTES"};
enum { NDEV = sizeof dev_agreed / sizeof dev_agreed[0] };

static void agreed_list_is_the_device_engines(void **st) {
  (void)st;
  uint64_t v[WEFT_PARAM_NAGREED + 1];
  assert_int_equal(WEFT_PARAM_NAGREED, NDEV);
  assert_int_equal(weft_param_agreed(NULL, 0), NDEV);
  assert_int_equal(weft_param_agreed(v, WEFT_PARAM_NAGREED + 1), NDEV);
  for (int k = 0; k < NDEV; k++) {
    int found = 0;
    for (int i = 0; i < NDEV; i++)
      found += strcmp(weft_param_agreed_name(i), dev_agreed[k]) == 0;
    if (found != 1) fail_msg("%s is in the agreed list %d times", dev_agreed[k], found);
  }
  assert_string_equal(weft_param_agreed_name(NDEV), "?");
  assert_string_equal(weft_param_agreed_name(-1), "?");
  /* integers agree on their value: 0x10 and 16 alike */
  int stages = -1;
  for (int i = 0; i < NDEV; i++)
    if (strcmp(weft_param_agreed_name(i), "WEFT_P2P_STAGES") == 0) stages = i;
  setenv("WEFT_P2P_STAGES", "0x10", 1);
  weft_param_agreed(v, NDEV);
  assert_int_equal(v[stages], 16);
  /* max bounds what is written */
  v[0] = 12345;
  assert_int_equal(weft_param_agreed(v, 0), NDEV);
  assert_int_equal(v[0], 12345);
}

static uint64_t agreed_of(const char *name) {
  uint64_t v[WEFT_PARAM_NAGREED];
  weft_param_agreed(v, WEFT_PARAM_NAGREED);
  for (int i = 0; i < WEFT_PARAM_NAGREED; i++)
    if (strcmp(weft_param_agreed_name(i), name) == 0) return v[i];
  fail_msg("%s is not agreed", name);
  return 0;
}

static void string_agreed_value_follows_its_text(void **st) {
  (void)st;
  const char *name = "WEFT_LL128_MAX_BYTES";
  uint64_t unset = agreed_of(name);
  setenv(name, "auto", 1); /* the default, spelt out */
  assert_true(agreed_of(name) == unset);
  setenv(name, "1048576", 1);
  uint64_t mib = agreed_of(name);
  assert_true(mib != unset);
  setenv(name, "0x100000", 1); /* the same count */
  assert_true(agreed_of(name) == mib);
  setenv(name, "0", 1);
  assert_true(agreed_of(name) != mib && agreed_of(name) != unset);
  setenv("WEFT_CE_MIN_BYTES", "auto", 1);
  assert_true(agreed_of("WEFT_CE_MIN_BYTES") != agreed_of(name));
}

/* The first agreed parameter in which some rank differs from rank 0, and that rank; each
 * has a row the device engine's error names. */
static void first_difference_is_found(void **st) {
  (void)st;
  enum { N = 4, P = WEFT_PARAM_NAGREED };
  uint64_t all[N * P];
  for (int r = 0; r < N; r++)
    for (int i = 0; i < P; i++)
      all[r * P + i] = 1000 + (uint64_t)i;
  int rank = -7;
  assert_int_equal(weft_param_differ(all, N, P, &rank), -1);
  assert_int_equal(rank, -7);
  assert_int_equal(weft_param_differ(all, 1, P, &rank), -1);
  all[3 * P + 5] = 1;
  all[2 * P + 9] = 1;
  assert_int_equal(weft_param_differ(all, N, P, &rank), 5);
  assert_int_equal(rank, 3);
  assert_int_equal(weft_param_differ(all, 3, P, &rank), 9); /* rank 3 not among them */
  assert_int_equal(rank, 2);
  all[0] = 7; /* rank 0 alone differs: the first other rank is named */
  assert_int_equal(weft_param_differ(all, N, P, &rank), 0);
  assert_int_equal(rank, 1);
  for (int i = 0; i < P; i++) {
    const weft_param_def_t *d = weft_param_agreed_def(i);
    assert_non_null(d);
    assert_true(d->agreed);
    assert_string_equal(d->name, weft_param_agreed_name(i));
  }
  assert_null(weft_param_agreed_def(P));
  assert_null(weft_param_agreed_def(-1));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(bad_integer_is_refused, clear_env, restore_env),
      cmocka_unit_test_setup_teardown(out_of_range_is_refused, clear_env, restore_env),
      cmocka_unit_test_setup_teardown(bad_word_is_refused, clear_env, restore_env),
      cmocka_unit_test_setup_teardown(unset_or_empty_reads_the_default, clear_env, restore_env),
      cmocka_unit_test_setup_teardown(table_is_consistent, clear_env, restore_env),
      cmocka_unit_test_setup_teardown(agreed_list_is_the_device_engines, clear_env, restore_env),
      cmocka_unit_test_setup_teardown(string_agreed_value_follows_its_text, clear_env, restore_env),
      cmocka_unit_test(first_difference_is_found),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
