/* The public API on a one-rank communicator: every bad argument returns
 * WEFT_ERR_INVALID_ARG with a message naming the call, and leaves the buffers alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "weft.h"

static weft_comm_t comm;

static int setup(void **st) {
  (void)st;
  weft_unique_id_t id;
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) return -1;
  return weft_comm_init(&comm, 1, id, 0, NULL) == WEFT_SUCCESS ? 0 : -1;
}

static int teardown(void **st) {
  (void)st;
  return weft_comm_destroy(comm) == WEFT_SUCCESS ? 0 : -1;
}

#define EXPECT_INVALID(call, fn)                                                                   \
  do {                                                                                             \
    assert_int_equal((call), WEFT_ERR_INVALID_ARG);                                                \
    assert_non_null(strstr(weft_get_last_error(NULL), fn));                                        \
  } while (0)

static void bad_arguments_change_nothing(void **st) {
  (void)st;
  float s[64], r[64], keep[64];
  for (int i = 0; i < 64; i++)
    s[i] = (float)i;
  memset(r, 0x5a, sizeof r);
  memcpy(keep, r, sizeof r);
  EXPECT_INVALID(weft_allreduce(s, r, 4, WEFT_F32, WEFT_SUM, NULL, NULL), "weft_allreduce");
  EXPECT_INVALID(weft_allreduce(s, r, 4, (weft_dtype_t)99, WEFT_SUM, comm, NULL), "weft_allreduce");
  EXPECT_INVALID(weft_allreduce(s, r, 4, WEFT_F32, (weft_op_t)-1, comm, NULL), "weft_allreduce");
  EXPECT_INVALID(weft_allreduce(NULL, r, 4, WEFT_F32, WEFT_SUM, comm, NULL), "weft_allreduce");
  EXPECT_INVALID(weft_allreduce(s, s + 1, 4, WEFT_F32, WEFT_SUM, comm, NULL), "overlap");
  EXPECT_INVALID(weft_allreduce(s, r, SIZE_MAX / 2, WEFT_F32, WEFT_SUM, comm, NULL), "too large");
  EXPECT_INVALID(weft_reduce_scatter(s, s + 1, 4, WEFT_F32, WEFT_SUM, comm, NULL),
                 "weft_reduce_scatter");
  EXPECT_INVALID(weft_allgather(s, NULL, 4, WEFT_F32, comm, NULL), "weft_allgather");
  EXPECT_INVALID(weft_broadcast(s, r, 4, WEFT_F32, 1, comm, NULL), "root 1");
  EXPECT_INVALID(weft_broadcast(s, r, 4, WEFT_F32, -1, comm, NULL), "weft_broadcast");
  EXPECT_INVALID(weft_reduce(s, r, 4, WEFT_F32, WEFT_SUM, 2, comm, NULL), "weft_reduce");
  EXPECT_INVALID(weft_alltoall(s, s + 2, 4, WEFT_F32, comm, NULL), "weft_alltoall");
  EXPECT_INVALID(weft_send(s, 4, WEFT_F32, 1, comm, NULL), "peer 1");
  EXPECT_INVALID(weft_recv(NULL, 4, WEFT_F32, 0, comm, NULL), "weft_recv");
  size_t c[1] = {4}, d[1] = {0}, c2[1] = {3};
  EXPECT_INVALID(weft_alltoallv(s, c, d, r, NULL, d, WEFT_F32, comm, NULL), "weft_alltoallv");
  EXPECT_INVALID(weft_alltoallv(s, c, d, r, c2, d, WEFT_F32, comm, NULL), "self block");
  /* displacements whose byte offset wraps (issue 20: these returned success and read outside
   * sendbuf; on a device communicator the kernel faulted and the CUDA context was lost) */
  size_t one[1] = {1}, zero[1] = {0}, huge[1] = {SIZE_MAX}, quarter[1] = {SIZE_MAX / 4 + 1};
  EXPECT_INVALID(weft_alltoallv(s, one, huge, r, one, zero, WEFT_F32, comm, NULL), "overflows");
  EXPECT_INVALID(weft_alltoallv(s, one, quarter, r, one, zero, WEFT_F32, comm, NULL), "overflows");
  EXPECT_INVALID(weft_alltoallv(s, one, zero, r, one, huge, WEFT_F32, comm, NULL), "overflows");
  EXPECT_INVALID(weft_alltoallv(s, zero, huge, r, zero, zero, WEFT_F32, comm, NULL), "overflows");
  EXPECT_INVALID(weft_group_end(), "weft_group_end");
  EXPECT_INVALID(weft_barrier(NULL, NULL), "weft_barrier");
  weft_window_t win = (weft_window_t)1;
  EXPECT_INVALID(weft_window_register(NULL, r, sizeof r, &win), "weft_window_register");
  assert_null(win);
  EXPECT_INVALID(weft_window_deregister(comm, NULL), "weft_window_deregister");
  /* a host communicator has no windows: a clear refusal */
  assert_int_equal(weft_window_register(comm, r, sizeof r, &win), WEFT_ERR_UNSUPPORTED);
  assert_non_null(strstr(weft_get_last_error(NULL), "device communicator"));
  assert_null(win);
  assert_memory_equal(r, keep, sizeof r);
  for (int i = 0; i < 64; i++)
    assert_true(s[i] == (float)i);
  /* the comm still works after all that */
  assert_int_equal(weft_allreduce(s, r, 64, WEFT_F32, WEFT_SUM, comm, NULL), WEFT_SUCCESS);
  assert_memory_equal(r, s, sizeof s);
}

static void bad_init(void **st) {
  (void)st;
  weft_unique_id_t id;
  weft_comm_t c = NULL;
  assert_int_equal(weft_get_unique_id(NULL), WEFT_ERR_INVALID_ARG);
  assert_int_equal(weft_get_unique_id(&id), WEFT_SUCCESS);
  EXPECT_INVALID(weft_comm_init(&c, 2, id, 2, NULL), "rank 2 of 2");
  EXPECT_INVALID(weft_comm_init(NULL, 1, id, 0, NULL), "comm is NULL");
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.size = 4;
  EXPECT_INVALID(weft_comm_init(&c, 1, id, 0, &cfg), "WEFT_CONFIG_INIT");
  weft_config_t dev = WEFT_CONFIG_INIT;
  dev.device = 0;
  assert_int_equal(weft_comm_init(&c, 1, id, 0, &dev), WEFT_ERR_UNSUPPORTED);
  assert_null(c);
  /* an id of a different wire version is refused before any connection */
  weft_unique_id_t bad = id;
  bad.internal[8] ^= 0x7f;
  assert_int_equal(weft_comm_init(&c, 1, bad, 0, NULL), WEFT_ERR_INVALID_ARG);
}

static void env_init(void **st) {
  (void)st;
  weft_comm_t c = NULL;
  unsetenv("MASTER_ADDR");
  setenv("WEFT_ROOT", "localhost", 1);
  setenv("WEFT_RANK", "0", 1);
  setenv("WEFT_NRANKS", "1", 1);
  EXPECT_INVALID(weft_comm_init_env(&c, NULL), "host:port");
  setenv("WEFT_ROOT", "127.0.0.1:0", 1);
  EXPECT_INVALID(weft_comm_init_env(&c, NULL), "host:port");
  setenv("WEFT_ROOT", "127.0.0.1:29517", 1);
  setenv("WEFT_RANK", "1", 1);
  EXPECT_INVALID(weft_comm_init_env(&c, NULL), "rank");
  setenv("WEFT_RANK", "0", 1);
  assert_int_equal(weft_comm_init_env(&c, NULL), WEFT_SUCCESS);
  int n = 0, r = -1;
  assert_int_equal(weft_comm_count(c, &n), WEFT_SUCCESS);
  assert_int_equal(weft_comm_rank(c, &r), WEFT_SUCCESS);
  assert_int_equal(n, 1);
  assert_int_equal(r, 0);
  assert_int_equal(weft_comm_destroy(c), WEFT_SUCCESS);
  unsetenv("WEFT_ROOT");
  unsetenv("WEFT_RANK");
  unsetenv("WEFT_NRANKS");
}

static void streams(void **st) {
  (void)st;
  weft_stream_t s;
  enum { N = 1 << 16 };
  int32_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
  for (int i = 0; i < N; i++)
    a[i] = i;
  assert_int_equal(weft_stream_create(&s), WEFT_SUCCESS);
  for (int k = 0; k < 8; k++)
    assert_int_equal(weft_allreduce(a, b, N, WEFT_I32, WEFT_SUM, comm, s), WEFT_SUCCESS);
  assert_int_equal(weft_stream_synchronize(s), WEFT_SUCCESS);
  assert_int_equal(weft_stream_query(s), WEFT_SUCCESS);
  assert_memory_equal(a, b, N * sizeof *a);
  assert_int_equal(weft_stream_destroy(s), WEFT_SUCCESS);
  assert_int_equal(weft_stream_synchronize(NULL), WEFT_ERR_INVALID_ARG);
  free(a);
  free(b);
}

static void tables(void **st) {
  (void)st;
  assert_int_equal(weft_get_version(), WEFT_VERSION_CODE);
  for (int r = 0; r <= WEFT_ERR_IN_PROGRESS; r++)
    assert_string_not_equal(weft_result_string((weft_result_t)r), "unknown result");
  assert_true(weft_param_count() > 10);
  for (int i = 0; i < weft_param_count(); i++) {
    const char *name, *value, *dflt, *help;
    assert_int_equal(weft_param_info(i, &name, &value, &dflt, &help), WEFT_SUCCESS);
    assert_true(strncmp(name, "WEFT_", 5) == 0);
    assert_true(strlen(help) > 10);
  }
  assert_int_equal(weft_param_info(weft_param_count(), NULL, NULL, NULL, NULL),
                   WEFT_ERR_INVALID_ARG);
  for (int t = 0; t < WEFT_DTYPE_COUNT; t++)
    assert_true(weft_dtype_size((weft_dtype_t)t) > 0);
  assert_int_equal(weft_dtype_size(WEFT_DTYPE_COUNT), 0);
}

/* docs/parameters.md documents every variable of the param table. */
static void docs_list_every_param(void **st) {
  (void)st;
  FILE *f = fopen(WEFT_SOURCE_ROOT "/docs/parameters.md", "r");
  assert_non_null(f);
  static char text[1 << 17];
  size_t n = fread(text, 1, sizeof text - 1, f);
  fclose(f);
  text[n] = 0;
  for (int i = 0; i < weft_param_count(); i++) {
    const char *name;
    char cell[64];
    weft_param_info(i, &name, NULL, NULL, NULL);
    snprintf(cell, sizeof cell, "| `%s` |", name);
    if (!strstr(text, cell)) fail_msg("docs/parameters.md has no table row for %s", name);
  }
}

/* weft's own threads never read the environment, so a program may change it while they
 * run: here each weft_get_unique_id starts a rendezvous thread and the caller rewrites the
 * environment at once (getenv racing setenv crashes a process). */
static void own_threads_leave_the_environment_alone(void **st) {
  (void)st;
  setenv("WEFT_TIMEOUT_MS", "300", 1); /* the idle rendezvous threads end soon */
  char name[32], value[32];
  for (int i = 0; i < 300; i++) {
    weft_unique_id_t id;
    assert_int_equal(weft_get_unique_id(&id), WEFT_SUCCESS);
    for (int k = 0; k < 40; k++) {
      snprintf(name, sizeof name, "WEFT_TEST_CHURN_%d", k);
      snprintf(value, sizeof value, "%d", i * 40 + k);
      setenv(name, value, 1);
      if (k % 2) unsetenv(name);
    }
  }
  unsetenv("WEFT_TIMEOUT_MS");
}

/* A discarded group runs nothing; the communicator goes on as if it never was. */
static void discarded_group_runs_nothing(void **st) {
  (void)st;
  float s[8], r[8], keep[8];
  for (int i = 0; i < 8; i++)
    s[i] = (float)(i + 1);
  memset(r, 0x5a, sizeof r);
  memcpy(keep, r, sizeof r);
  EXPECT_INVALID(weft_group_discard(), "weft_group_discard");
  assert_int_equal(weft_group_start(), WEFT_SUCCESS);
  assert_int_equal(weft_group_start(), WEFT_SUCCESS);
  assert_int_equal(weft_allreduce(s, r, 8, WEFT_F32, WEFT_SUM, comm, NULL), WEFT_SUCCESS);
  assert_int_equal(weft_group_discard(), WEFT_SUCCESS); /* inner level: just ends */
  assert_int_equal(weft_send(s, 4, WEFT_F32, 0, comm, NULL), WEFT_SUCCESS);
  assert_int_equal(weft_recv(r + 4, 4, WEFT_F32, 0, comm, NULL), WEFT_SUCCESS);
  assert_int_equal(weft_group_discard(), WEFT_SUCCESS);
  assert_memory_equal(r, keep, sizeof r);
  EXPECT_INVALID(weft_group_end(), "weft_group_end"); /* the group is over */
  assert_int_equal(weft_allreduce(s, r, 8, WEFT_F32, WEFT_SUM, comm, NULL), WEFT_SUCCESS);
  assert_memory_equal(r, s, sizeof r);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(bad_arguments_change_nothing),
                                     cmocka_unit_test(bad_init),
                                     cmocka_unit_test(env_init),
                                     cmocka_unit_test(streams),
                                     cmocka_unit_test(discarded_group_runs_nothing),
                                     cmocka_unit_test(tables),
                                     cmocka_unit_test(docs_list_every_param),
                                     cmocka_unit_test(own_threads_leave_the_environment_alone)};
  return cmocka_run_group_tests(tests, setup, teardown);
}
