/* Root rendezvous: every rank connects to the root with a hello {id magic, version, type,
 * rank, nranks, its listening address}; the root answers each with a fresh random magic for
 * the communicator's own traffic and the addresses of ranks + 2^k alone, log2(nranks) of them.
 * Each rank connects to the next one, making a ring (the failure channel, and an allgather's
 * first step), and to rank + 2^k for the allgather's later steps; the first allgather then
 * gives every rank the whole table, so the root sends N log N addresses, not N^2. */
#include "bootstrap.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "err.h"
#include "socket.h"
#include "waitlog.h"

typedef struct {
  uint64_t magic;
  uint32_t version, type;
  int32_t rank, nranks;
  weft_sockaddr_t addr;
} root_hello_t;

/* status 0: the addresses follow; else the root gave up (a weft_result_t) and ROOT_WHY bytes
 * of text say why. */
typedef struct {
  uint64_t magic;
  uint32_t version, type;
  int32_t status, nranks;
  uint64_t comm_magic;
} root_reply_t;
/* A root that gives up tells the ranks that joined within ROOT_TELL_MS; they wait for its word
 * ROOT_GRACE_MS past their own timeout, which started after the root's. */
enum { ROOT_WHY = 256, ROOT_TELL_MS = 200, ROOT_GRACE_MS = 1000 };

/* Ring and skip connections: step is 0 on the ring, k on the skip connection of step k. */
typedef struct {
  uint64_t magic;
  uint32_t version, type;
  int32_t rank, step;
} ring_hello_t;

uint64_t weft_random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != (ssize_t)sizeof v) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = ((uint64_t)ts.tv_nsec << 32) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 16);
  }
  return v ? v : 1;
}

/* The allgather's steps for n ranks: ceil(log2 n). */
static int steps_for(int n) {
  int k = 0;
  while (k < WEFT_BOOT_MAX_STEPS && (1 << k) < n)
    k++;
  return k;
}

typedef struct {
  int listen_fd;
  uint64_t magic;
  int64_t timeout_ms;
  int want; /* 1 until the first hello says how many ranks there are */
  int nranks;
  int *fd_of_rank;
  weft_sockaddr_t *addrs;
} root_t;

static int root_accept(void *ctx, const void *hello, int fd) {
  root_t *R = ctx;
  root_hello_t h;
  memcpy(&h, hello, sizeof h);
  if (h.version != WEFT_WIRE_VERSION || h.type != WEFT_MSG_ROOT_HELLO || h.nranks <= 0 ||
      h.nranks > WEFT_BOOT_MAX_RANKS || h.rank < 0 || h.rank >= h.nranks ||
      !weft_sockaddr_valid(&h.addr))
    return -1;
  if (R->nranks == 0) {
    R->fd_of_rank = malloc((size_t)h.nranks * sizeof *R->fd_of_rank);
    R->addrs = calloc((size_t)h.nranks, sizeof *R->addrs);
    if (!R->fd_of_rank || !R->addrs) return -1;
    for (int i = 0; i < h.nranks; i++)
      R->fd_of_rank[i] = -1;
    R->nranks = R->want = h.nranks;
  }
  if (h.nranks != R->nranks) {
    WEFT_WARN(WEFT_SUB_BOOT, "root: rank %d says nranks=%d, others said %d", h.rank, h.nranks,
              R->nranks);
    return -1;
  }
  if (R->fd_of_rank[h.rank] >= 0) {
    WEFT_WARN(WEFT_SUB_BOOT, "root: rank %d joined twice", h.rank);
    return -1;
  }
  R->fd_of_rank[h.rank] = fd;
  R->addrs[h.rank] = h.addr;
  return 0;
}

static int root_missing(const void *ctx, int r) { return ((const root_t *)ctx)->fd_of_rank[r] < 0; }

static void root_waits_for(const void *ctx, char *buf, size_t len) {
  const root_t *R = ctx;
  char where[80] = "?", missing[200];
  struct sockaddr_storage a;
  socklen_t alen = sizeof a;
  if (getsockname(R->listen_fd, (struct sockaddr *)&a, &alen) == 0)
    getnameinfo((struct sockaddr *)&a, alen, NULL, 0, where, sizeof where, NI_NUMERICSERV);
  if (R->nranks == 0) {
    snprintf(buf, len, "rendezvous root (port %s): no rank has joined yet", where);
    return;
  }
  int n = weft_waitlog_ranks(missing, sizeof missing, R->nranks, root_missing, R);
  snprintf(buf, len, "rendezvous root (port %s): %d of %d ranks joined, waiting for rank%s %s",
           where, R->nranks - n, R->nranks, n == 1 ? "" : "s", missing);
}

static void *root_main(void *arg) {
  root_t *R = arg;
  int64_t deadline = weft_deadline(R->timeout_ms);
  R->want = 1;
  weft_waitlog_t wl;
  weft_waitlog_init(&wl, WEFT_SUB_BOOT, deadline, NULL, root_waits_for, R);
  weft_waitlog_enter(&wl);
  weft_result_t rc = weft_sock_accept_hellos(R->listen_fd, &R->want, sizeof(root_hello_t), R->magic,
                                             root_accept, R, NULL, deadline, NULL);
  weft_waitlog_leave(&wl);
  if (rc == WEFT_SUCCESS) {
    root_reply_t rep = {.magic = R->magic,
                        .version = WEFT_WIRE_VERSION,
                        .type = WEFT_MSG_ROOT_TABLE,
                        .nranks = R->nranks,
                        .comm_magic = weft_random_u64()};
    int n = R->nranks, steps = steps_for(n);
    weft_sockaddr_t to[WEFT_BOOT_MAX_STEPS];
    for (int i = 0; i < n; i++) {
      for (int k = 0; k < steps; k++)
        to[k] = R->addrs[((int64_t)i + ((int64_t)1 << k)) % n];
      int fd = R->fd_of_rank[i];
      if (weft_sock_send_all(fd, &rep, sizeof rep, deadline, NULL) != WEFT_SUCCESS ||
          weft_sock_send_all(fd, to, sizeof *to * (size_t)steps, deadline, NULL) != WEFT_SUCCESS)
        WEFT_WARN(WEFT_SUB_BOOT, "root: could not send rank %d its peers' addresses", i);
    }
  } else {
    WEFT_WARN(WEFT_SUB_BOOT, "root: rendezvous failed: %s", weft_thread_error());
    /* the ranks that joined hear why, in the same words, rather than a closed connection */
    root_reply_t rep = {.magic = R->magic,
                        .version = WEFT_WIRE_VERSION,
                        .type = WEFT_MSG_ROOT_TABLE,
                        .status = (int32_t)rc,
                        .nranks = R->nranks};
    char why[ROOT_WHY] = {0}, missing[200];
    int n = weft_waitlog_ranks(missing, sizeof missing, R->nranks, root_missing, R);
    if (rc == WEFT_ERR_TIMEOUT)
      snprintf(why, sizeof why, "%d of %d ranks joined within %lld ms, missing rank%s %s",
               R->nranks - n, R->nranks, (long long)R->timeout_ms, n == 1 ? "" : "s", missing);
    else /* its own failure (poll, accept) */
      snprintf(why, sizeof why, "%s", weft_thread_error());
    /* rank 0 last: it usually shares this process (weft_comm_init_env's root, or rank 0's
     * weft_get_unique_id), which may exit as soon as it has the answer; what was sent before
     * still reaches the others */
    int64_t tell = weft_deadline(ROOT_TELL_MS);
    for (int k = 1; k <= R->nranks && weft_now_ms() < tell; k++) { /* a dead rank skipped */
      int fd = R->fd_of_rank[k % R->nranks];
      if (fd >= 0 && weft_sock_send_all(fd, &rep, sizeof rep, tell, NULL) == WEFT_SUCCESS)
        weft_sock_send_all(fd, why, sizeof why, tell, NULL);
    }
  }
  for (int i = 0; i < R->nranks; i++)
    if (R->fd_of_rank[i] >= 0) close(R->fd_of_rank[i]);
  close(R->listen_fd);
  free(R->fd_of_rank);
  free(R->addrs);
  free(R);
  return NULL;
}

weft_result_t weft_bootstrap_root_start(int listen_fd, uint64_t id_magic, int64_t timeout_ms) {
  root_t *R = calloc(1, sizeof *R);
  if (!R) {
    close(listen_fd);
    return weft_set_error(WEFT_ERR_NO_MEMORY, "bootstrap root: out of memory");
  }
  /* The root thread must not read the environment (a caller's setenv in parallel would
   * crash it): settle the timeout and the log settings here, on the caller's thread. */
  if (timeout_ms <= 0) timeout_ms = weft_default_timeout_ms();
  weft_log_enabled(WEFT_LOG_WARN, WEFT_SUB_BOOT);
  *R = (root_t){.listen_fd = listen_fd, .magic = id_magic, .timeout_ms = timeout_ms};
  pthread_t t;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int e = pthread_create(&t, &attr, root_main, R);
  pthread_attr_destroy(&attr);
  if (e != 0) {
    close(listen_fd);
    free(R);
    return weft_set_error(WEFT_ERR_SYSTEM, "bootstrap root thread: %s", strerror(e));
  }
  return WEFT_SUCCESS;
}

static weft_result_t allgather_until(weft_bootstrap_t *b, void *data, size_t size,
                                     int64_t deadline);

typedef struct {
  weft_bootstrap_t *b;
  int want; /* connections still to come: the ring's and the skips' */
} ring_ctx_t;

/* Keeps a connection from rank - 1 (the ring) or from rank - 2^k (step k's), once each. */
static int ring_accept(void *ctx, const void *hello, int fd) {
  ring_ctx_t *c = ctx;
  weft_bootstrap_t *b = c->b;
  ring_hello_t h;
  memcpy(&h, hello, sizeof h);
  int n = b->nranks;
  if (h.version != WEFT_WIRE_VERSION || h.step < 0 || h.step >= steps_for(n) ||
      h.type != (h.step ? WEFT_MSG_SKIP_HELLO : WEFT_MSG_RING_HELLO) ||
      h.rank != (int32_t)(((int64_t)b->rank - ((int64_t)1 << h.step) % n + n) % n))
    return -1;
  int *slot = h.step ? &b->skip_in[h.step] : &b->prev_fd;
  if (*slot >= 0) return -1;
  *slot = fd;
  return 0;
}

/* Connects to rank + 2^step at addr and says who it is (step 0: the ring's next); what is wl's
 * text, WHAT_BYTES long. */
enum { WHAT_BYTES = 256 };
static weft_result_t connect_step(weft_bootstrap_t *b, const weft_sockaddr_t *addr, int step,
                                  int64_t deadline, weft_waitlog_t *wl, char *what, int *fd) {
  int n = b->nranks, to = (int)(((int64_t)b->rank + ((int64_t)1 << step)) % n);
  char name[64];
  snprintf(what, WHAT_BYTES, "rank %d of %d: connecting to rank %d at %s (init, bootstrap %s)",
           b->rank, n, to, weft_sockaddr_str(addr, 1, name, sizeof name),
           step ? "allgather's skip connections" : "ring");
  weft_waitlog_enter(wl);
  weft_result_t rc = weft_sock_connect(addr, deadline, b->abort_flag, fd);
  weft_waitlog_leave(wl);
  if (rc != WEFT_SUCCESS)
    return weft_set_error(rc, "rank %d: cannot reach rank %d for the bootstrap %s: %s", b->rank, to,
                          step ? "allgather" : "ring", weft_thread_error());
  ring_hello_t rh = {.magic = b->magic,
                     .version = WEFT_WIRE_VERSION,
                     .type = step ? WEFT_MSG_SKIP_HELLO : WEFT_MSG_RING_HELLO,
                     .rank = b->rank,
                     .step = step};
  return weft_sock_send_all(*fd, &rh, sizeof rh, deadline, b->abort_flag);
}

weft_result_t weft_bootstrap_init(const weft_id_body_t *id, int rank, int nranks,
                                  int64_t timeout_ms, const atomic_int *abort_flag,
                                  weft_bootstrap_t **out) {
  weft_result_t rc = WEFT_SUCCESS;
  int listen_fd = -1, root_fd = -1;
  weft_sockaddr_t *table = NULL;
  int64_t deadline = weft_deadline(timeout_ms);
  if (nranks < 1 || nranks > WEFT_BOOT_MAX_RANKS || rank < 0 || rank >= nranks)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "bootstrap: rank %d of %d ranks", rank, nranks);
  weft_bootstrap_t *b = calloc(1, sizeof *b);
  if (!b) return weft_set_error(WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
  *b = (weft_bootstrap_t){.rank = rank,
                          .nranks = nranks,
                          .timeout_ms = timeout_ms,
                          .abort_flag = abort_flag,
                          .next_fd = -1,
                          .prev_fd = -1,
                          .listen_fd = -1};
  for (int k = 0; k < WEFT_BOOT_MAX_STEPS; k++)
    b->skip_out[k] = b->skip_in[k] = -1;
  if (id->version != WEFT_WIRE_VERSION)
    ERR_GOTO(rc, fail, WEFT_ERR_INVALID_ARG,
             "unique id has version %u, this weft speaks %u (mixed weft versions?)", id->version,
             WEFT_WIRE_VERSION);
  if (!weft_sockaddr_valid(&id->root))
    ERR_GOTO(rc, fail, WEFT_ERR_INVALID_ARG, "unique id: the root address is not IPv4 or IPv6");
  weft_sockaddr_t mine;
  char root_name[80], what[WHAT_BYTES];
  weft_sockaddr_str(&id->root, 1, root_name, sizeof root_name);
  snprintf(what, sizeof what,
           "rank %d of %d: connecting to the rendezvous root at %s (init; not listening yet: "
           "is the process that hosts it started?)",
           rank, nranks, root_name);
  weft_waitlog_t wl;
  weft_waitlog_init(&wl, WEFT_SUB_BOOT, deadline, what, NULL, NULL);
  weft_waitlog_enter(&wl);
  rc = weft_sock_connect(&id->root, deadline, abort_flag, &root_fd);
  weft_waitlog_leave(&wl);
  if (rc != WEFT_SUCCESS) goto fail;
  CHECK_GOTO(weft_sock_listen_near(root_fd, &listen_fd, &mine), rc, fail);
  b->my_addr = mine;
  weft_sockaddr_set_port(&b->my_addr, 0);
  root_hello_t h = {.magic = id->magic,
                    .version = WEFT_WIRE_VERSION,
                    .type = WEFT_MSG_ROOT_HELLO,
                    .rank = rank,
                    .nranks = nranks,
                    .addr = mine};
  CHECK_GOTO(weft_sock_send_all(root_fd, &h, sizeof h, deadline, abort_flag), rc, fail);
  root_reply_t rep;
  /* the same wait: its clock runs on, and the root answers once every rank joined */
  snprintf(what, sizeof what,
           "rank %d of %d: waiting at the rendezvous root %s for all %d ranks to join (init)", rank,
           nranks, root_name, nranks);
  weft_waitlog_enter(&wl);
  rc = weft_sock_recv_all(root_fd, &rep, sizeof rep, deadline + ROOT_GRACE_MS, abort_flag);
  weft_waitlog_leave(&wl);
  if (rc == WEFT_SUCCESS && rep.magic == id->magic && rep.version == WEFT_WIRE_VERSION &&
      rep.type == WEFT_MSG_ROOT_TABLE && rep.status != 0) {
    char why[ROOT_WHY] = {0};
    weft_sock_recv_all(root_fd, why, sizeof why, weft_deadline(ROOT_TELL_MS), abort_flag);
    weft_net_text(why, sizeof why);
    ERR_GOTO(rc, fail, weft_net_code(rep.status),
             "rank %d: the rendezvous root gave up: %s (is every rank started, with the same id "
             "and nranks?)",
             rank, why[0] ? why : "no reason given");
  }
  if (rc == WEFT_ERR_TIMEOUT)
    ERR_GOTO(rc, fail, WEFT_ERR_TIMEOUT,
             "rank %d: the rendezvous root did not answer within %lld ms (and 1 s for its "
             "word): not all %d ranks joined (is every rank started, with the same id and "
             "nranks?)",
             rank, (long long)(timeout_ms > 0 ? timeout_ms : weft_default_timeout_ms()), nranks);
  if (rc == WEFT_ERR_PEER_LOST)
    ERR_GOTO(rc, fail, WEFT_ERR_PEER_LOST,
             "rank %d: the rendezvous root closed the connection (another rank used a different "
             "nranks or the same rank, or not all %d ranks joined before the root's timeout, or "
             "what listens there is not weft's root)",
             rank, nranks);
  if (rc != WEFT_SUCCESS) goto fail;
  if (rep.magic != id->magic || rep.version != WEFT_WIRE_VERSION ||
      rep.type != WEFT_MSG_ROOT_TABLE || rep.nranks != nranks || rep.status != 0)
    ERR_GOTO(rc, fail, WEFT_ERR_PROTOCOL, "rank %d: invalid reply from the rendezvous root", rank);
  int steps = steps_for(nranks);
  weft_sockaddr_t to[WEFT_BOOT_MAX_STEPS];
  rc = weft_sock_recv_all(root_fd, to, sizeof *to * (size_t)steps, deadline + ROOT_GRACE_MS,
                          abort_flag);
  if (rc != WEFT_SUCCESS)
    ERR_GOTO(rc, fail, rc,
             "rank %d: the rendezvous root's reply ended before its %d peers' addresses: %s", rank,
             steps, weft_thread_error());
  for (int k = 0; k < steps; k++)
    if (!weft_sockaddr_valid(&to[k]))
      ERR_GOTO(rc, fail, WEFT_ERR_PROTOCOL,
               "rank %d: the rendezvous root sent rank %lld's address, not IPv4 or IPv6", rank,
               (long long)(((int64_t)rank + ((int64_t)1 << k)) % nranks));
  close(root_fd);
  root_fd = -1;
  b->magic = rep.comm_magic;
  table = calloc((size_t)nranks, sizeof *table);
  if (!table) ERR_GOTO(rc, fail, WEFT_ERR_NO_MEMORY, "bootstrap: out of memory");
  table[rank] = mine;
  if (nranks > 1) {
    /* every connection first, then every accept: a peer's come into the backlog meanwhile */
    CHECK_GOTO(connect_step(b, &to[0], 0, deadline, &wl, what, &b->next_fd), rc, fail);
    for (int k = 1; k < steps; k++)
      CHECK_GOTO(connect_step(b, &to[k], k, deadline, &wl, what, &b->skip_out[k]), rc, fail);
    ring_ctx_t ctx = {.b = b, .want = steps};
    char more[48] = "";
    if (steps > 1) snprintf(more, sizeof more, " and %d more for the allgather", steps - 1);
    snprintf(what, sizeof what, "rank %d of %d: waiting for rank %d%s to connect (init, bootstrap)",
             rank, nranks, (rank + nranks - 1) % nranks, more);
    weft_waitlog_enter(&wl);
    rc = weft_sock_accept_hellos(listen_fd, &ctx.want, sizeof(ring_hello_t), b->magic, ring_accept,
                                 &ctx, NULL, deadline, abort_flag);
    weft_waitlog_leave(&wl);
    if (rc != WEFT_SUCCESS) goto fail;
    /* every rank's address, for exchanges among a subset (weft_bootstrap_subset_bcast) */
    CHECK_GOTO(allgather_until(b, table, sizeof *table, deadline), rc, fail);
    for (int i = 0; i < nranks; i++)
      if (!weft_sockaddr_valid(&table[i]))
        ERR_GOTO(rc, fail, WEFT_ERR_PROTOCOL,
                 "rank %d: rank %d's address in the bootstrap's table is not IPv4 or IPv6", rank,
                 i);
  }
  b->listen_fd = listen_fd; /* both stay for subset exchanges (weft_bootstrap_subset_bcast) */
  b->table = table;
  *out = b;
  return WEFT_SUCCESS;
fail:
  if (listen_fd >= 0) close(listen_fd);
  if (root_fd >= 0) close(root_fd);
  free(table);
  weft_bootstrap_free(b);
  return rc;
}

typedef struct {
  const weft_bootstrap_t *b;
  int step, steps;
  size_t size;
} allgather_wait_t;

static void allgather_waits_for(const void *ctx, char *buf, size_t len) {
  const allgather_wait_t *w = ctx;
  int n = w->b->nranks, r = w->b->rank, d = 1 << w->step;
  int from = (r - d % n + n) % n, to = (r + d) % n;
  char also[32] = "";
  if (to != from) snprintf(also, sizeof also, " (and rank %d to read)", to);
  snprintf(buf, len,
           "rank %d of %d: waiting for rank %d%s in a bootstrap allgather of %zu bytes a rank, "
           "step %d of %d (communicator setup, split or teardown)",
           r, n, from, also, w->size, w->step + 1, w->steps);
}

/* Swaps the size-byte blocks at a and b. */
static void swap_blocks(char *a, char *b, size_t size) {
  char t[256];
  for (size_t at = 0; at < size; at += sizeof t) {
    size_t k = size - at < sizeof t ? size - at : sizeof t;
    memcpy(t, a + at, k);
    memcpy(a + at, b + at, k);
    memcpy(b + at, t, k);
  }
}

/* Bruck's allgather, in place: block j of data holds rank (r - j)'s while it runs, so that a
 * step sends the blocks gathered so far in one piece and appends as many from rank - 2^k;
 * putting every block at its rank at the end is an involution (j <-> r - j), done by swaps. */
static weft_result_t allgather_until(weft_bootstrap_t *b, void *data, size_t size,
                                     int64_t deadline) {
  int n = b->nranks, r = b->rank;
  atomic_store(&b->held[0], 0); /* what was left for a collective is read now */
  atomic_store(&b->held[1], 0);
  if (n == 1 || size == 0) return WEFT_SUCCESS;
  char *d = data;
  if (r) memcpy(d, d + (size_t)r * size, size);
  allgather_wait_t aw = {.b = b, .steps = steps_for(n), .size = size};
  weft_waitlog_t wl;
  weft_waitlog_init(&wl, WEFT_SUB_BOOT, deadline, NULL, allgather_waits_for, &aw);
  for (int k = 0; k < aw.steps; k++) {
    size_t have = (size_t)1 << k, m = have < (size_t)n - have ? have : (size_t)n - have;
    aw.step = k;
    int out = k ? b->skip_out[k] : b->next_fd, in = k ? b->skip_in[k] : b->prev_fd;
    char *at = d + have * size; /* after every block held */
    weft_waitlog_enter(&wl);
    weft_result_t rc =
        weft_sock_sendrecv(out, d, m * size, in, at, m * size, deadline, b->abort_flag);
    weft_waitlog_leave(&wl);
    if (rc != WEFT_SUCCESS)
      return weft_set_error(rc, "bootstrap allgather (rank %d, step %d of %d, from rank %d): %s", r,
                            k + 1, aw.steps, (int)((r - (int64_t)have % n + n) % n),
                            weft_thread_error());
  }
  for (int j = 0; j < n; j++) {
    int at = (r - j + n) % n;
    if (j < at) swap_blocks(d + (size_t)j * size, d + (size_t)at * size, size);
  }
  return WEFT_SUCCESS;
}

weft_result_t weft_bootstrap_allgather(weft_bootstrap_t *b, void *data, size_t size) {
  return allgather_until(b, data, size, weft_deadline(b->timeout_ms));
}

weft_result_t weft_bootstrap_barrier(weft_bootstrap_t *b) {
  char *tmp = calloc((size_t)b->nranks, 1);
  if (!tmp) return weft_set_error(WEFT_ERR_NO_MEMORY, "barrier: out of memory");
  weft_result_t rc = weft_bootstrap_allgather(b, tmp, 1);
  free(tmp);
  return rc;
}

void weft_bootstrap_free(weft_bootstrap_t *b) {
  if (!b) return;
  if (b->next_fd >= 0) close(b->next_fd);
  if (b->prev_fd >= 0) close(b->prev_fd);
  if (b->listen_fd >= 0) close(b->listen_fd);
  for (int k = 0; k < WEFT_BOOT_MAX_STEPS; k++) {
    if (b->skip_out[k] >= 0) close(b->skip_out[k]);
    if (b->skip_in[k] >= 0) close(b->skip_in[k]);
  }
  free(b->table);
  pthread_mutex_destroy(&b->send_mu);
  free(b);
}

typedef struct {
  uint64_t magic;
  uint32_t version, type;
  int32_t origin, code;
  uint64_t seq;
  char text[WEFT_NOTICE_TEXT]; /* NUL-terminated on the wire; not trusted to be */
} notice_msg_t;

_Static_assert(sizeof(notice_msg_t) == WEFT_NOTICE_BYTES, "notices have one size on the wire");
_Static_assert(sizeof(((notice_msg_t *)0)->text) == sizeof(((weft_notice_t *)0)->text),
               "a notice's text is copied whole");

static void send_both(weft_bootstrap_t *b, const notice_msg_t *m) {
  pthread_mutex_lock(&b->send_mu);
  int fds[2];
  int n = weft_bootstrap_fds(b, fds);
  for (int i = 0; i < n; i++) {
    ssize_t r = send(fds[i], m, sizeof *m, MSG_DONTWAIT | MSG_NOSIGNAL);
    (void)r; /* best effort: a neighbour that is gone cannot be told */
  }
  pthread_mutex_unlock(&b->send_mu);
}

void weft_bootstrap_notify(weft_bootstrap_t *b, const weft_notice_t *n) {
  if (!b) return;
  notice_msg_t m = {.magic = b->magic,
                    .version = WEFT_WIRE_VERSION,
                    .type = WEFT_MSG_NOTICE,
                    .origin = n->origin,
                    .code = (int32_t)n->code,
                    .seq = n->seq};
  snprintf(m.text, sizeof m.text, "%s", n->text);
  send_both(b, &m);
}

void weft_bootstrap_bye(weft_bootstrap_t *b) {
  if (!b) return;
  notice_msg_t m = {
      .magic = b->magic, .version = WEFT_WIRE_VERSION, .type = WEFT_MSG_BYE, .origin = b->rank};
  send_both(b, &m);
}

int weft_bootstrap_fds(const weft_bootstrap_t *b, int fds[2]) {
  int n = 0;
  if (b->prev_fd >= 0) fds[n++] = b->prev_fd;
  if (b->next_fd >= 0) fds[n++] = b->next_fd;
  return n;
}

/* What the bytes waiting on fd begin: 1 a message (or the socket's end or an error, which the
 * read that follows sees), 0 not known yet (nothing, or a part of the magic), -1 a bootstrap
 * collective's data. Messages start with the comm's magic; other bytes are a neighbour's that
 * finished the last operation first and is already in the next allgather (weft_comm_split's, say)
 * while this rank still waits in its operation: they stay in the socket for that allgather. Until
 * it runs, a notice or the socket's end behind them is seen only there, or by the operation's own
 * timeout and data connections. */
static int message_next(const weft_bootstrap_t *b, int fd) {
  unsigned char head[sizeof b->magic];
  ssize_t r = recv(fd, head, sizeof head, MSG_DONTWAIT | MSG_PEEK);
  /* Nothing yet is not a message: the read that followed took whatever arrived between the
   * two calls, a collective's data included, as the start of a notice (the collective then
   * waited for bytes that were gone). */
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return 0;
  if (r <= 0) return 1;
  if (memcmp(head, &b->magic, (size_t)r) != 0) return -1;
  return (size_t)r == sizeof head;
}

int weft_bootstrap_watch_fds(const weft_bootstrap_t *b, int fds[2]) {
  int n = 0;
  if (b->prev_fd >= 0 && !atomic_load(&b->held[0])) fds[n++] = b->prev_fd;
  if (b->next_fd >= 0 && !atomic_load(&b->held[1])) fds[n++] = b->next_fd;
  return n;
}

weft_result_t weft_bootstrap_check(weft_bootstrap_t *b, weft_notice_t *n) {
  int fd[2] = {b->prev_fd, b->next_fd};
  int who[2] = {(b->rank + b->nranks - 1) % b->nranks, (b->rank + 1) % b->nranks};
  for (int side = 0; side < 2; side++) {
    if (fd[side] < 0 || atomic_load(&b->held[side])) continue;
    for (;;) {
      int next = b->rgot[side] ? 1 : message_next(b, fd[side]);
      if (next < 0) atomic_store(&b->held[side], 1);
      if (next <= 0) break;
      ssize_t r = recv(fd[side], b->rbuf[side] + b->rgot[side], WEFT_NOTICE_BYTES - b->rgot[side],
                       MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        if (b->bye[side]) break; /* it left on purpose */
        *n = (weft_notice_t){.origin = who[side], .code = WEFT_ERR_PEER_LOST};
        return WEFT_ERR_PEER_LOST;
      }
      if (r < 0) break;
      b->rgot[side] += (size_t)r;
      if (b->rgot[side] < WEFT_NOTICE_BYTES) continue;
      b->rgot[side] = 0;
      notice_msg_t m;
      memcpy(&m, b->rbuf[side], sizeof m);
      if (m.magic != b->magic || m.version != WEFT_WIRE_VERSION ||
          (m.type != WEFT_MSG_NOTICE && m.type != WEFT_MSG_BYE)) {
        *n = (weft_notice_t){.origin = who[side], .code = WEFT_ERR_PROTOCOL};
        return WEFT_ERR_PROTOCOL;
      }
      if (m.type == WEFT_MSG_BYE) {
        b->bye[side] = 1;
        continue;
      }
      int bad = m.origin < 0 || m.origin >= b->nranks || (int32_t)weft_net_code(m.code) != m.code;
      *n = (weft_notice_t){.origin = bad ? who[side] : m.origin,
                           .code = bad ? WEFT_ERR_PROTOCOL : (weft_result_t)m.code,
                           .seq = m.seq};
      if (!bad) { /* both WEFT_NOTICE_TEXT bytes */
        memcpy(n->text, m.text, sizeof n->text);
        weft_net_text(n->text, sizeof n->text);
      }
      return n->code;
    }
  }
  return WEFT_SUCCESS;
}
