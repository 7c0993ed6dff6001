/* weft_comm_peer_path (src/core/path.c): 4 ranks as 2 fake hosts (rank r on host r % 2), host
 * buffers: each rank reaches itself as "self", the rank on its own host over "shm" and the
 * others over "tcp", with no device path; a peer out of range, a NULL argument or a buffer one
 * byte short are refused with a message and leave "". weft-info --ranks prints these.
 * usage: test_path */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "launch.h"
#include "weft.h"

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  weft_comm_t c;
  if (weft_comm_init(&c, n, id, rank, NULL) != WEFT_SUCCESS)
    return printf("test_path: rank %d: init: %s\n", rank, weft_get_last_error(NULL)), 1;
  int bad = 0;
  char buf[32];
  for (int p = 0; p < n; p++) {
    const char *want = p == rank ? "self" : p % 2 == rank % 2 ? "shm" : "tcp";
    if (weft_comm_peer_path(c, p, buf, sizeof buf) != WEFT_SUCCESS || strcmp(buf, want))
      bad = printf("test_path: rank %d: path to %d is \"%s\", want \"%s\"\n", rank, p, buf, want);
  }
  /* refusals: "" left behind, a message naming the problem */
  strcpy(buf, "x");
  if (weft_comm_peer_path(c, n, buf, sizeof buf) != WEFT_ERR_INVALID_ARG || buf[0] ||
      !strstr(weft_get_last_error(NULL), "ranks 0-3"))
    bad = printf("test_path: rank %d: peer %d not refused (%s)\n", rank, n, buf);
  if (weft_comm_peer_path(c, -1, buf, sizeof buf) != WEFT_ERR_INVALID_ARG)
    bad = printf("test_path: rank %d: peer -1 not refused\n", rank);
  int other = (rank + 1) % n; /* tcp: needs 4 bytes with the NUL */
  strcpy(buf, "x");
  if (weft_comm_peer_path(c, other, buf, 3) != WEFT_ERR_INVALID_ARG || buf[0] ||
      !strstr(weft_get_last_error(NULL), "needs 4 bytes, 3 given"))
    bad = printf("test_path: rank %d: a 3-byte buffer not refused (%s)\n", rank,
                 weft_get_last_error(NULL));
  if (weft_comm_peer_path(c, other, buf, 4) != WEFT_SUCCESS || strcmp(buf, "tcp"))
    bad = printf("test_path: rank %d: a 4-byte buffer refused\n", rank);
  if (weft_comm_peer_path(NULL, 0, buf, sizeof buf) != WEFT_ERR_INVALID_ARG ||
      weft_comm_peer_path(c, 0, NULL, 8) != WEFT_ERR_INVALID_ARG)
    bad = printf("test_path: rank %d: NULL arguments not refused\n", rank);
  weft_comm_destroy(c);
  return bad != 0;
}

int main(void) {
  setenv("WEFT_TEST_HOSTS", "2", 1);
  int rc = launch_local(4, rank_main, NULL, (int)(60 * launch_time_scale()));
  printf("test_path: 4 ranks on 2 fake hosts: %s\n", rc ? "FAILED" : "ok");
  return rc != 0;
}
