/* src/util/shmseg.c: a created segment is zeroed and shared with a second mapping of its name;
 * opening a name nobody created, or asking for more than /dev/shm holds, fails with a
 * message and leaves no name behind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "shmseg.h"

/* cmocka counts a skip() as no failure: a check that could not run sets this, and the program
 * exits 77 so that meson reports the test as skipped, not passed. */
static const char *skipped;

static void name_has_magic_rank_and_suffix(void **st) {
  (void)st;
  char name[64];
  weft_shm_name(name, sizeof name, 0xabcULL, 3, "-dev");
  assert_string_equal(name, "/weft-0000000000000abc-3-dev");
}

static void created_segment_is_zeroed_and_shared(void **st) {
  (void)st;
  char name[64], *a = NULL, *b = NULL;
  weft_shm_name(name, sizeof name, (uint64_t)getpid() << 8 | 1, 0, "-test");
  const size_t bytes = 3 * 4096 + 100;
  assert_int_equal(weft_shm_map(name, bytes, 1, "hint", &a), WEFT_SUCCESS);
  assert_int_equal(weft_shm_map(name, bytes, 0, "hint", &b), WEFT_SUCCESS);
  assert_true(a != b);
  for (size_t i = 0; i < bytes; i++)
    if (a[i]) fail_msg("byte %zu of a new segment is %d", i, a[i]);
  memcpy(a + bytes - 5, "weft", 5);
  assert_string_equal(b + bytes - 5, "weft");
  /* creating again (a crashed run's leftover) starts from zero */
  char *c = NULL;
  assert_int_equal(weft_shm_map(name, bytes, 1, "hint", &c), WEFT_SUCCESS);
  assert_int_equal(c[bytes - 5], 0);
  shm_unlink(name);
  munmap(a, bytes);
  munmap(b, bytes);
  munmap(c, bytes);
}

static void missing_name_fails_clearly(void **st) {
  (void)st;
  char name[64], *p = NULL;
  weft_shm_name(name, sizeof name, (uint64_t)getpid() << 8 | 2, 0, "-test");
  assert_int_equal(weft_shm_map(name, 4096, 0, "hint", &p), WEFT_ERR_SYSTEM);
  assert_null(p);
  assert_non_null(strstr(weft_get_last_error(NULL), name));
}

static void too_large_fails_and_unlinks(void **st) {
  (void)st;
  struct statvfs vfs;
  if (statvfs("/dev/shm", &vfs) != 0) {
    skipped = "too_large_fails_and_unlinks (statvfs /dev/shm failed)";
    skip();
  }
  size_t room = (size_t)vfs.f_bavail * vfs.f_frsize;
  char name[64], *p = NULL;
  weft_shm_name(name, sizeof name, (uint64_t)getpid() << 8 | 3, 0, "-test");
  weft_result_t rc = weft_shm_map(name, room + ((size_t)1 << 30), 1, "lower THE_KNOB", &p);
  assert_int_equal(rc, WEFT_ERR_NO_MEMORY);
  assert_null(p);
  assert_non_null(strstr(weft_get_last_error(NULL), "lower THE_KNOB"));
  int fd = shm_open(name, O_RDWR, 0600);
  int err = errno;
  if (fd >= 0) close(fd);
  assert_true(fd < 0 && err == ENOENT);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(name_has_magic_rank_and_suffix),
      cmocka_unit_test(created_segment_is_zeroed_and_shared),
      cmocka_unit_test(missing_name_fails_clearly),
      cmocka_unit_test(too_large_fails_and_unlinks),
  };
  int failed = cmocka_run_group_tests(tests, NULL, NULL);
  if (failed) return 1;
  if (skipped) {
    fprintf(stderr, "skipped: %s\n", skipped);
    return 77;
  }
  return 0;
}
