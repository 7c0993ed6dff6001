/* The sharers' registry (src/gpu/sharers.c) with real processes: each joiner counts once
 * however many communicators it holds, a process that leaves or dies stops counting (its
 * slot is taken back), a full registry still counts what it holds, and the last to leave
 * removes the segment from /dev/shm, also where a crashed process's slot remains. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sharers.h"

static char name[64];

/* Whether the segment is still in /dev/shm. */
static int listed_in_dev_shm(void) {
  char path[128];
  snprintf(path, sizeof path, "/dev/shm%s", name);
  return access(path, F_OK) == 0;
}

static int setup(void **st) {
  (void)st;
  char bus[32];
  snprintf(bus, sizeof bus, "test-%d", (int)getpid());
  weft_sharers_name(name, sizeof name, bus);
  shm_unlink(name);
  return 0;
}

static int teardown(void **st) {
  (void)st;
  shm_unlink(name);
  return 0;
}

/* A child that joins, says so on `up`, then waits for a byte on `go`: 'l' leaves, anything
 * else exits holding its slot. */
static pid_t child(int up, int go) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  weft_sharers_t *s = NULL;
  char c = weft_sharers_join(name, &s) == WEFT_SUCCESS ? (char)('0' + weft_sharers_count(s)) : 'x';
  if (write(up, &c, 1) != 1 || read(go, &c, 1) != 1) _exit(2);
  if (c == 'l') weft_sharers_leave(s);
  _exit(0);
}

static void counts_processes(void **st) {
  (void)st;
  weft_sharers_t *a = NULL, *b = NULL;
  assert_int_equal(weft_sharers_join(name, &a), WEFT_SUCCESS);
  assert_int_equal(weft_sharers_count(a), 1);
  int up[2], go[3][2];
  pid_t pid[3];
  assert_int_equal(pipe(up), 0);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(pipe(go[i]), 0);
    pid[i] = child(up[1], go[i][0]);
    char c = 0;
    assert_int_equal(read(up[0], &c, 1), 1);
    assert_int_equal(c, '0' + 2 + i); /* itself, the parent and the earlier children */
  }
  assert_int_equal(weft_sharers_count(a), 4);
  assert_int_equal(weft_sharers_join(name, &b), WEFT_SUCCESS); /* a second communicator */
  assert_int_equal(weft_sharers_count(b), 4);
  int status = 0;
  assert_int_equal(write(go[0][1], "l", 1), 1); /* leaves */
  assert_int_equal(waitpid(pid[0], &status, 0), pid[0]);
  assert_int_equal(weft_sharers_count(a), 3);
  assert_int_equal(write(go[1][1], "x", 1), 1); /* exits with its slot */
  assert_int_equal(waitpid(pid[1], &status, 0), pid[1]);
  assert_int_equal(weft_sharers_count(a), 2);
  weft_sharers_leave(b);
  assert_int_equal(weft_sharers_count(a), 2);
  assert_int_equal(write(go[2][1], "l", 1), 1);
  assert_int_equal(waitpid(pid[2], &status, 0), pid[2]);
  assert_int_equal(weft_sharers_count(a), 1);
  assert_true(listed_in_dev_shm());
  weft_sharers_leave(a); /* the last: nothing stays behind */
  assert_false(listed_in_dev_shm());
  for (int i = 0; i < 3; i++)
    close(go[i][0]), close(go[i][1]);
  close(up[0]);
  close(up[1]);
}

/* The dead child's slot is taken back: this process fills every slot, a later joiner finds
 * none (it counts itself and this process; this process does not list it), and once this
 * process leaves, every slot is free again. */
static void full_and_reclaimed(void **st) {
  (void)st;
  static weft_sharers_t *s[WEFT_SHARERS_SLOTS + 1];
  int up[2], go[2], status = 0;
  assert_int_equal(pipe(up), 0);
  assert_int_equal(pipe(go), 0);
  pid_t pid = child(up[1], go[0]); /* dies holding a slot */
  char c = 0;
  assert_int_equal(read(up[0], &c, 1), 1);
  assert_int_equal(write(go[1], "x", 1), 1);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(listed_in_dev_shm()); /* its slot is still taken */
  for (int i = 0; i <= WEFT_SHARERS_SLOTS; i++)
    assert_int_equal(weft_sharers_join(name, &s[i]), WEFT_SUCCESS);
  assert_int_equal(weft_sharers_count(s[0]), 1);
  pid = child(up[1], go[0]);
  assert_int_equal(read(up[0], &c, 1), 1);
  assert_int_equal(c, '2');
  assert_int_equal(weft_sharers_count(s[0]), 1); /* not listed: no slot was free */
  assert_int_equal(write(go[1], "l", 1), 1);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  for (int i = 0; i <= WEFT_SHARERS_SLOTS; i++)
    weft_sharers_leave(s[i]);
  pid = child(up[1], go[0]);
  assert_int_equal(read(up[0], &c, 1), 1);
  assert_int_equal(c, '1');
  assert_int_equal(write(go[1], "l", 1), 1);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_false(listed_in_dev_shm());
  close(up[0]), close(up[1]), close(go[0]), close(go[1]);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(counts_processes, setup, teardown),
      cmocka_unit_test_setup_teardown(full_and_reclaimed, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
