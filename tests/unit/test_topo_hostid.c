/* src/topo/hostid.c: the identity's two forms (WEFT_HOSTID with the machine's key, else host
 * name / boot id), its NUL padding to 64 bytes and truncation, and local ranks, hosts and the
 * ranks of one machine from a table of them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "topo.h"

/* "id:<name>" (43 characters at most), NULs, then the machine's key in bytes 47-62. */
static void forced_identity(void **st) {
  (void)st;
  char id[WEFT_HOSTID_BYTES], other[WEFT_HOSTID_BYTES];
  setenv("WEFT_HOSTID", "rack7-node3", 1);
  memset(id, 'x', sizeof id);
  weft_topo_host_identity(id);
  assert_string_equal(id, "id:rack7-node3");
  for (size_t i = strlen(id); i < 47; i++)
    assert_int_equal(id[i], 0);
  for (size_t i = 47; i < 63; i++)
    assert_non_null(strchr("0123456789abcdef", id[i]));
  assert_int_equal(id[63], 0);
  setenv("WEFT_HOSTID", "rack7-node4", 1);
  weft_topo_host_identity(other);
  assert_memory_equal(id + 47, other + 47, 16); /* one machine, two fake hosts */
  char longid[200];
  memset(longid, 'a', sizeof longid - 1);
  longid[sizeof longid - 1] = 0;
  setenv("WEFT_HOSTID", longid, 1);
  weft_topo_host_identity(id);
  assert_int_equal(strlen(id), 46); /* "id:" and 43 characters, then the key */
  char label[WEFT_HOST_LABEL_BYTES];
  weft_topo_host_label(id, label);
  assert_int_equal(strncmp(label, longid, strlen(label)), 0);
  unsetenv("WEFT_HOSTID");
}

/* Fake hosts of one machine count as its ranks; another machine's (another key) do not. */
static void machine_ranks_see_through_fake_hosts(void **st) {
  (void)st;
  char hosts[5][WEFT_HOSTID_BYTES];
  const char *names[5] = {"a", "b", "a", "c", NULL};
  for (int r = 0; r < 4; r++) {
    setenv("WEFT_HOSTID", names[r], 1);
    weft_topo_host_identity(hosts[r]);
  }
  unsetenv("WEFT_HOSTID");
  weft_topo_host_identity(hosts[4]); /* the machine's own identity, unforced */
  int local[5], host_of[5];
  assert_int_equal(
      weft_topo_local_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, 5, 0, local, host_of), 2);
  assert_int_equal(weft_topo_machine_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, 5, 0), 5);
  assert_int_equal(weft_topo_machine_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, 5, 4), 5);
  hosts[3][50] = hosts[3][50] == '0' ? '1' : '0'; /* rank 3 on another machine */
  assert_int_equal(weft_topo_machine_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, 5, 0), 4);
  assert_int_equal(weft_topo_machine_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, 5, 3), 1);
}

static void host_name_and_boot_id(void **st) {
  (void)st;
  unsetenv("WEFT_HOSTID");
  char id[WEFT_HOSTID_BYTES], again[WEFT_HOSTID_BYTES], host[64] = "";
  weft_topo_host_identity(id);
  weft_topo_host_identity(again);
  assert_memory_equal(id, again, sizeof id);
  gethostname(host, sizeof host - 1);
  host[26] = 0;
  assert_int_equal(strncmp(id, host, strlen(host)), 0);
  assert_int_equal(id[strlen(host)], '/');
  assert_int_equal(id[WEFT_HOSTID_BYTES - 1], 0);
}

static void local_ranks_from_identities(void **st) {
  (void)st;
  char hosts[5][WEFT_HOSTID_BYTES] = {"id:a", "id:b", "id:a", "id:c", "id:b"};
  int local[5], host_of[5];
  assert_int_equal(
      weft_topo_local_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, 5, 4, local, host_of), 2);
  const int want_local[5] = {-1, 0, -1, -1, 1}, want_host[5] = {0, 1, 0, 3, 1};
  assert_memory_equal(local, want_local, sizeof local);
  assert_memory_equal(host_of, want_host, sizeof host_of);
  assert_int_equal(
      weft_topo_local_ranks((const char(*)[WEFT_HOSTID_BYTES])hosts, 5, 3, local, host_of), 1);
  assert_int_equal(local[3], 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(forced_identity),
      cmocka_unit_test(host_name_and_boot_id),
      cmocka_unit_test(local_ranks_from_identities),
      cmocka_unit_test(machine_ranks_see_through_fake_hosts),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
