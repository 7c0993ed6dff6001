/* What the proxy test (test_rproxy.c) builds on: a rank's communicator over tcp (the
 * launcher puts every rank on a fake host of its own: WEFT_TEST_HOSTS), and the link a proxy
 * gets from it. */
#ifndef WEFT_PROXY_TEST_H
#define WEFT_PROXY_TEST_H

#include <stdio.h>
#include <string.h>

#include "comm.h"
#include "launch.h"
#include "pump.h"

/* Inits *comm and finds its tcp transport (*tcp); prints why and returns 1 where it cannot. */
static inline int proxy_test_comm(const char *name, int rank, int n, weft_unique_id_t id,
                                  weft_comm_t *comm, int *tcp) {
  if (weft_comm_init(comm, n, id, rank, NULL) != WEFT_SUCCESS)
    return printf("%s: rank %d: init: %s\n", name, rank, weft_get_last_error(NULL)), 1;
  *tcp = weft_comm_transport_index(*comm, "tcp");
  if (*tcp < 0) return printf("%s: rank %d: no tcp transport\n", name, rank), 1;
  return 0;
}

/* The link over comm's tcp transport: its abort word, kabort for the kernels' stand-in, a
 * 20 s stall timeout (scaled); the callbacks are the test's. */
static inline weft_proxy_link_t proxy_test_link(weft_comm_t comm, int tcp, int32_t *kabort) {
  return (weft_proxy_link_t){.rank = comm->rank,
                             .nranks = comm->nranks,
                             .tr = comm->tr[tcp],
                             .tr_state = comm->tr_state[tcp],
                             .abort_flag = &comm->aborted,
                             .kernel_abort = kabort,
                             .timeout_ms = (int64_t)(20000 * launch_time_scale()),
                             .ctx = comm};
}

/* Before launching: every rank a host of its own (bench/launch.c). */
static inline void proxy_test_hosts(int n) {
  char k[16];
  snprintf(k, sizeof k, "%d", n);
  setenv("WEFT_TEST_HOSTS", k, 0);
}

#endif
