/* Exchanges among a subset of a communicator's ranks, for weft_comm_shrink: the ring passes
 * through every rank, so a dead rank outside the subset would stall it. Instead each member
 * connects to the lowest member's listening socket (kept from init, its address in the root's
 * table), says which exchange it is in, and reads the lowest member's bytes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap.h"
#include "err.h"
#include "socket.h"
#include "waitlog.h"

typedef struct {
  uint64_t magic;
  uint32_t version, type;
  int32_t rank, reserved;
  uint64_t tag;
  uint64_t size;
} subset_hello_t;

typedef struct {
  uint64_t magic;
  uint32_t version, type;
  int32_t status, reserved; /* 0, or the rank whose exchange differed (+1) */
} subset_reply_t;

typedef struct {
  const int *members;
  int n;
  uint64_t tag, size;
  int *fd_of;  /* per member index; -1 until it connects */
  int differs; /* first member (+1) whose tag or size differed */
} subset_ctx_t;

static int member_index(const int *members, int n, int rank) {
  for (int i = 0; i < n; i++)
    if (members[i] == rank) return i;
  return -1;
}

static int subset_accept(void *ctx, const void *hello, int fd) {
  subset_ctx_t *x = ctx;
  subset_hello_t h;
  memcpy(&h, hello, sizeof h);
  int i = member_index(x->members, x->n, h.rank);
  if (h.version != WEFT_WIRE_VERSION || h.type != WEFT_MSG_SUBSET_HELLO || i <= 0 ||
      x->fd_of[i] >= 0)
    return -1;
  /* A member that disagrees is kept and answered, so that it fails now, not at its timeout. */
  if ((h.tag != x->tag || h.size != x->size) && !x->differs) x->differs = h.rank + 1;
  x->fd_of[i] = fd;
  return 0;
}

static weft_result_t lead(weft_bootstrap_t *b, const int *members, int n, uint64_t tag,
                          const void *data, size_t size, int64_t deadline,
                          const atomic_int *abort_flag) {
  weft_result_t rc = WEFT_SUCCESS;
  subset_ctx_t x = {.members = members, .n = n, .tag = tag, .size = size};
  x.fd_of = malloc(sizeof *x.fd_of * (size_t)n);
  if (!x.fd_of) return weft_set_error(WEFT_ERR_NO_MEMORY, "subset exchange: out of memory");
  for (int i = 0; i < n; i++)
    x.fd_of[i] = -1;
  int want = n - 1;
  char what[160];
  snprintf(what, sizeof what,
           "rank %d: waiting for the other %d remaining ranks to reach it (shrink)", b->rank,
           n - 1);
  weft_waitlog_t wl;
  weft_waitlog_init(&wl, WEFT_SUB_BOOT, deadline, what, NULL, NULL);
  weft_waitlog_enter(&wl);
  rc = weft_sock_accept_hellos(b->listen_fd, &want, sizeof(subset_hello_t), b->magic, subset_accept,
                               &x, NULL, deadline, abort_flag);
  weft_waitlog_leave(&wl);
  if (rc != WEFT_SUCCESS) {
    int missing = -1;
    for (int i = 1; i < n && missing < 0; i++)
      if (x.fd_of[i] < 0) missing = members[i];
    rc = weft_set_error(rc, "rank %d leads a shrink: rank %d did not reach it: %s", b->rank,
                        missing, weft_thread_error());
    goto out;
  }
  subset_reply_t rep = {.magic = b->magic,
                        .version = WEFT_WIRE_VERSION,
                        .type = WEFT_MSG_SUBSET_DATA,
                        .status = x.differs};
  for (int i = 1; i < n && rc == WEFT_SUCCESS; i++) {
    rc = weft_sock_send_all(x.fd_of[i], &rep, sizeof rep, deadline, abort_flag);
    if (rc == WEFT_SUCCESS && !x.differs)
      rc = weft_sock_send_all(x.fd_of[i], data, size, deadline, abort_flag);
    if (rc != WEFT_SUCCESS)
      rc = weft_set_error(rc, "rank %d leads a shrink: cannot answer rank %d: %s", b->rank,
                          members[i], weft_thread_error());
  }
  if (rc == WEFT_SUCCESS && x.differs)
    rc = weft_set_error(WEFT_ERR_MISMATCH,
                        "shrink: rank %d called it with another exclude list or config than rank "
                        "%d",
                        x.differs - 1, b->rank);
out:
  for (int i = 1; i < n; i++)
    if (x.fd_of[i] >= 0) close(x.fd_of[i]);
  free(x.fd_of);
  return rc;
}

static weft_result_t follow(weft_bootstrap_t *b, int leader, uint64_t tag, void *data, size_t size,
                            int64_t deadline, const atomic_int *abort_flag) {
  int fd = -1;
  char name[64], what[200];
  weft_sockaddr_str(&b->table[leader], 1, name, sizeof name);
  snprintf(what, sizeof what,
           "rank %d: waiting for rank %d at %s, the lowest remaining rank (shrink)", b->rank,
           leader, name);
  weft_waitlog_t wl;
  weft_waitlog_init(&wl, WEFT_SUB_BOOT, deadline, what, NULL, NULL);
  weft_waitlog_enter(&wl);
  weft_result_t rc = weft_sock_connect(&b->table[leader], deadline, abort_flag, &fd);
  subset_hello_t h = {.magic = b->magic,
                      .version = WEFT_WIRE_VERSION,
                      .type = WEFT_MSG_SUBSET_HELLO,
                      .rank = b->rank,
                      .tag = tag,
                      .size = size};
  subset_reply_t rep = {0};
  if (rc == WEFT_SUCCESS) rc = weft_sock_send_all(fd, &h, sizeof h, deadline, abort_flag);
  if (rc == WEFT_SUCCESS) rc = weft_sock_recv_all(fd, &rep, sizeof rep, deadline, abort_flag);
  weft_waitlog_leave(&wl);
  if (rc == WEFT_SUCCESS && (rep.magic != b->magic || rep.version != WEFT_WIRE_VERSION ||
                             rep.type != WEFT_MSG_SUBSET_DATA))
    rc =
        weft_set_error(WEFT_ERR_PROTOCOL, "shrink: rank %d answered with an invalid reply", leader);
  else if (rc == WEFT_SUCCESS && rep.status)
    rc = weft_set_error(WEFT_ERR_MISMATCH,
                        "shrink: rank %d called it with another exclude list or config than rank "
                        "%d",
                        rep.status - 1, leader);
  else if (rc == WEFT_SUCCESS)
    rc = weft_sock_recv_all(fd, data, size, deadline, abort_flag);
  else
    rc =
        weft_set_error(rc, "rank %d: shrink: no answer from rank %d, the lowest remaining rank: %s",
                       b->rank, leader, weft_thread_error());
  if (fd >= 0) close(fd);
  return rc;
}

weft_result_t weft_bootstrap_subset_bcast(weft_bootstrap_t *b, const int *members, int n,
                                          uint64_t tag, void *data, size_t size, int64_t deadline,
                                          const atomic_int *abort_flag) {
  int me = member_index(members, n, b->rank);
  if (n < 1 || me < 0)
    return weft_set_error(WEFT_ERR_INTERNAL, "subset exchange: rank %d is not among its %d members",
                          b->rank, n);
  /* the n-th exchange of this comm: a member still in an earlier one is told apart */
  tag ^= (uint64_t)++b->subset_seq * 0x9e3779b97f4a7c15ull;
  if (n == 1) return WEFT_SUCCESS;
  if (b->listen_fd < 0 || !b->table)
    return weft_set_error(WEFT_ERR_INTERNAL, "subset exchange: the bootstrap kept no listener");
  if (me == 0) return lead(b, members, n, tag, data, size, deadline, abort_flag);
  return follow(b, members[0], tag, data, size, deadline, abort_flag);
}
