/* The tcp transport's connections on first use (transports/tcp/connect.c), every rank a fake
 * host of its own: after init no pair has a socket; a send from rank 0 to rank 1 connects that
 * pair alone (2 sockets between hosts, on both ends and nowhere else); a send from the highest
 * rank to rank 0 connects from the higher end at once; an alltoall then connects every pair;
 * every byte arrives. The fds are counted in each process (launch_open_fds). A rank waiting on
 * a connected pair takes a connection that comes meanwhile. Then, on a second
 * tcp instance, a first use towards a rank that has torn its own down fails after
 * WEFT_TCP_DEAD_MS, naming it. usage: test_tcp_connect NRANKS (3-16) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "launch.h"
#include "proxy_test.h"

enum { COUNT = 1 << 18, SOCKS = 2 }; /* 1 MiB of floats: more than a socket buffer */

static float val(int from, int to, size_t i) { return (float)(from * 1000 + to * 10) + (float)i; }

/* Sends COUNT floats from `from` to `to` (the others do nothing); 0 when they arrived whole. */
static int one_pair(weft_comm_t c, int rank, int from, int to, float *buf) {
  weft_result_t rc = WEFT_SUCCESS;
  if (rank == from) {
    for (size_t i = 0; i < COUNT; i++)
      buf[i] = val(from, to, i);
    rc = weft_send(buf, COUNT, WEFT_F32, to, c, NULL);
  } else if (rank == to) {
    memset(buf, 0, COUNT * sizeof *buf);
    rc = weft_recv(buf, COUNT, WEFT_F32, from, c, NULL);
    for (size_t i = 0; rc == WEFT_SUCCESS && i < COUNT; i++)
      if (buf[i] != val(from, to, i))
        return printf("test_tcp_connect: rank %d: element %zu from rank %d is %g\n", rank, i, from,
                      (double)buf[i]) > 0;
  }
  if (rc != WEFT_SUCCESS)
    return printf("test_tcp_connect: rank %d: %d -> %d: %s\n", rank, from, to,
                  weft_get_last_error(c)) > 0;
  /* the bootstrap's barrier: no tcp pair is touched by it */
  return weft_bootstrap_barrier(c->boot) != WEFT_SUCCESS;
}

static int expect_fds(int rank, const char *when, int base, int pairs) {
  int now = launch_open_fds(), want = base + SOCKS * pairs;
  if (now == want) return 0;
  return printf("test_tcp_connect: rank %d: %s: %d fds, expected %d (%d at init + %d pairs of %d "
                "sockets)\n",
                rank, when, now, want, base, pairs, SOCKS) > 0;
}

/* A tcp instance as the communicator's (pairs connected on first use); rank 0 tears its own
 * down, then the last rank's first send to it, driven as the executor does (send, wait, send),
 * must fail once it was refused for WEFT_TCP_DEAD_MS (1 s here), naming rank 0. */
static int gone_peer(weft_comm_t c, int tcp, int rank, int n) {
  uint8_t *use = calloc((size_t)n, 1);
  for (int p = 0; use && p < n; p++)
    use[p] = p != rank;
  weft_transport_init_t in = {.boot = c->boot,
                              .rank = rank,
                              .nranks = n,
                              .use = use,
                              .local_rank = c->local_rank,
                              .nlocal = c->nlocal,
                              .host_labels = c->host_labels,
                              .magic = c->magic ^ 0x5a5a,
                              .abort_flag = &c->aborted,
                              .wake_fd = -1};
  void *st = NULL;
  const weft_transport_t *tr = c->tr[tcp];
  if (!use || tr->setup(&in, &st) != WEFT_SUCCESS)
    return printf("test_tcp_connect: rank %d: second tcp setup: %s\n", rank,
                  weft_get_last_error(NULL)) > 0;
  int bad = 0;
  if (rank == 0) tr->teardown(st), st = NULL;
  if (weft_bootstrap_barrier(c->boot) != WEFT_SUCCESS) bad = 1;
  if (rank == n - 1) {
    char byte = 7;
    size_t took = 0;
    int64_t t0 = launch_now_ms(), dt = 0;
    weft_result_t rc = WEFT_SUCCESS;
    /* as the executor drives it: a send that takes nothing, then a wait, again */
    while (rc == WEFT_SUCCESS && !took && dt <= (int64_t)(4000 * launch_time_scale())) {
      rc = tr->send(st, 0, &byte, 1, &took);
      if (rc == WEFT_SUCCESS && !took) rc = tr->wait(st, tr->arm(st), 100);
      dt = launch_now_ms() - t0;
    }
    const char *msg = weft_get_last_error(NULL);
    if (rc == WEFT_SUCCESS || !strstr(msg, "could not connect to rank 0") ||
        dt > (int64_t)(4000 * launch_time_scale()))
      bad = printf("test_tcp_connect: rank %d: a send to a rank gone took %lld ms: %d: %s\n", rank,
                   (long long)dt, (int)rc, rc ? msg : "no error") > 0;
    else
      printf("test_tcp_connect: rank %d, after %lld ms: %s\n", rank, (long long)dt, msg);
  }
  if (st) tr->teardown(st);
  free(use);
  return bad | (weft_bootstrap_barrier(c->boot) != WEFT_SUCCESS);
}

/* On a fresh communicator: ranks 0 and 1 connect; then rank 2 connects to rank 0 while rank 0
 * waits for rank 1 (late by 0.3 s), on a pair already connected. The wait must take rank 2's
 * connection (else its listening socket stays readable and the wait spins): rank 0 holds both
 * pairs' sockets before it ever touches rank 2's. */
static int taken_while_waiting(weft_comm_t world, int rank) {
  weft_comm_t c;
  static float buf[64];
  if (weft_comm_split(world, 0, rank, &c, NULL) != WEFT_SUCCESS)
    return printf("test_tcp_connect: rank %d: split: %s\n", rank, weft_get_last_error(world)) > 0;
  int base = launch_open_fds(), bad = 0;
  weft_result_t rc = WEFT_SUCCESS;
  if (rank <= 1) /* connect the pair (0, 1) */
    rc = rank ? weft_send(buf, 64, WEFT_F32, 0, c, NULL) : weft_recv(buf, 64, WEFT_F32, 1, c, NULL);
  if (rc == WEFT_SUCCESS && weft_bootstrap_barrier(c->boot) != WEFT_SUCCESS) rc = WEFT_ERR_INTERNAL;
  if (rc == WEFT_SUCCESS && rank == 2) rc = weft_send(buf, 64, WEFT_F32, 0, c, NULL);
  if (rc == WEFT_SUCCESS && rank == 1) {
    usleep((useconds_t)(300000 * launch_time_scale()));
    rc = weft_send(buf, 64, WEFT_F32, 0, c, NULL);
  }
  if (rc == WEFT_SUCCESS && rank == 0) {
    rc = weft_recv(buf, 64, WEFT_F32, 1, c, NULL);
    bad |= expect_fds(rank, "after waiting for rank 1 while rank 2 connected", base, 2);
    if (rc == WEFT_SUCCESS) rc = weft_recv(buf, 64, WEFT_F32, 2, c, NULL);
  }
  if (rc != WEFT_SUCCESS)
    bad = printf("test_tcp_connect: rank %d: %s\n", rank, weft_get_last_error(c)) > 0;
  weft_comm_destroy(c);
  return bad;
}

static int rank_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  weft_comm_t c;
  int tcp, bad = 0;
  if (proxy_test_comm("test_tcp_connect", rank, n, id, &c, &tcp)) return 1;
  size_t all = (size_t)n * 64;
  float *buf = malloc(COUNT * sizeof *buf), *s = malloc(all * sizeof *s), *r = calloc(all, 4);
  if (!buf || !s || !r) return printf("test_tcp_connect: rank %d: out of memory\n", rank), 1;
  int base = launch_open_fds();
  if (weft_bootstrap_barrier(c->boot) != WEFT_SUCCESS) bad = 1;
  bad |= expect_fds(rank, "after init", base, 0);
  /* the lower rank sends first: it waits for the higher one's connection */
  bad |= one_pair(c, rank, 0, 1, buf);
  bad |= expect_fds(rank, "after 0 -> 1", base, rank <= 1);
  /* the higher rank sends first: it connects at once */
  bad |= one_pair(c, rank, n - 1, 0, buf);
  bad |= expect_fds(rank, "after the last rank -> 0", base,
                    (rank <= 1) + (rank == 0 || rank == n - 1));
  for (size_t i = 0; i < all; i++)
    s[i] = val(rank, (int)(i / 64), i % 64);
  if (weft_alltoall(s, r, 64, WEFT_F32, c, NULL) != WEFT_SUCCESS)
    bad = printf("test_tcp_connect: rank %d: alltoall: %s\n", rank, weft_get_last_error(c)) > 0;
  for (size_t i = 0; !bad && i < all; i++)
    if (r[i] != val((int)(i / 64), rank, i % 64))
      bad = printf("test_tcp_connect: rank %d: alltoall element %zu is %g\n", rank, i,
                   (double)r[i]) > 0;
  bad |= expect_fds(rank, "after an alltoall", base, n - 1);
  bad |= gone_peer(c, tcp, rank, n);
  bad |= taken_while_waiting(c, rank);
  weft_comm_destroy(c);
  free(buf), free(s), free(r);
  return bad;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  if (n < 3 || n > 16) return printf("usage: test_tcp_connect NRANKS(3-16)\n"), 2;
  proxy_test_hosts(n);
  unsetenv("WEFT_TCP_SOCKETS"); /* 2 between hosts */
  setenv("WEFT_TCP_DEAD_MS", "1000", 1);
  int rc = launch_local(n, rank_main, NULL, 120);
  printf("test_tcp_connect: %d ranks on hosts of their own: %s\n", n,
         rc ? "FAILED" : "pairs connected on first use, and only those; a rank gone named");
  return rc;
}
