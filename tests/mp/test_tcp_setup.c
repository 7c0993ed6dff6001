/* The tcp transport's setup failing on one rank (transports/tcp/tcp.c), as when a rank runs
 * out of file descriptors while the device engine opens its proxy's extra connections
 * (weft_comm_transport_again): the failing rank still takes part in the exchange of
 * addresses, so every rank fails at once (not after its timeout), the others naming it, and
 * the agreement that follows (weft_comm_agree) carries its reason. Then the communicator
 * still works. usage: test_tcp_setup NRANKS (fake hosts: one each) */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "comm.h"
#include "launch.h"
#include "proxy_test.h"

enum { BOUND_MS = 5000 }; /* (scaled) far below the communicator's timeout, set to 60 s */

/* The lowest free descriptor: with the soft limit there, the next socket() fails (EMFILE). */
static int lowest_free_fd(void) {
  int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) close(fd);
  return fd;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  weft_comm_t comm;
  int tcp, bad = 0;
  if (proxy_test_comm("test_tcp_setup", rank, n, id, &comm, &tcp)) return 1;
  const int victim = n - 1;
  uint8_t *others = calloc((size_t)n, 1);
  for (int p = 0; p < n; p++)
    others[p] = p != rank;
  struct rlimit was;
  getrlimit(RLIMIT_NOFILE, &was);
  if (rank == victim) {
    struct rlimit lim = was;
    int fd = lowest_free_fd();
    lim.rlim_cur = (rlim_t)(fd > 0 ? fd : 0);
    if (fd <= 0 || setrlimit(RLIMIT_NOFILE, &lim) != 0)
      bad = printf("test_tcp_setup: rank %d: no descriptor limit to set\n", rank) > 0;
  }
  void *st = NULL;
  int64_t t0 = launch_now_ms();
  weft_result_t rc = weft_comm_transport_again(comm, tcp, others, -1, &st);
  int64_t dt = launch_now_ms() - t0;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", weft_get_last_error(NULL));
  if (rank == victim) setrlimit(RLIMIT_NOFILE, &was);
  char want[64];
  snprintf(want, sizeof want, "rank %d (host ", victim);
  int named = rank == victim ? strstr(msg, "pen files") != NULL : strstr(msg, want) != NULL;
  if (rc == WEFT_SUCCESS || dt > (int64_t)(BOUND_MS * launch_time_scale()) || !named)
    bad = printf("test_tcp_setup: rank %d: setup returned %d after %lld ms: %s\n", rank, (int)rc,
                 (long long)dt, rc ? msg : "no error") > 0;
  /* as the device engine does next: every rank's outcome carries the victim's reason */
  weft_result_t arc = weft_comm_agree(comm, rc, "could not start its proxy");
  snprintf(msg, sizeof msg, "%s", weft_get_last_error(NULL));
  if (arc == WEFT_SUCCESS || !strstr(msg, "pen files"))
    bad = printf("test_tcp_setup: rank %d: the agreement says %d: %s\n", rank, (int)arc, msg) > 0;
  if (rank == 0 && !bad) printf("test_tcp_setup: rank 0, after %lld ms: %s\n", (long long)dt, msg);
  if (st) comm->tr[tcp]->teardown(st);
  /* nothing of the failed setup is left in the way */
  if (weft_barrier(comm, NULL) != WEFT_SUCCESS)
    bad =
        printf("test_tcp_setup: rank %d: barrier after: %s\n", rank, weft_get_last_error(comm)) > 0;
  weft_comm_destroy(comm);
  free(others);
  return bad;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 2 || n > 16) return printf("usage: test_tcp_setup NRANKS(2-16)\n"), 2;
  setenv("WEFT_TIMEOUT_MS", "60000", 0); /* waiting for the victim would show */
  proxy_test_hosts(n);
  int rc = launch_local(n, rank_main, NULL, 120);
  printf("test_tcp_setup: %d ranks, the last out of file descriptors: %s\n", n,
         rc ? "FAILED" : "every rank failed at once and agreed on why");
  return rc != 0;
}
