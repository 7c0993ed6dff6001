/* The bootstrap ring's failure channel beside its collectives (src/bootstrap/bootstrap.c):
 * bytes that begin no message are a neighbour's next allgather, begun while this rank still
 * waits in an operation. The notice check must leave them for that allgather, stop polling
 * that side until it runs, and still read a notice from the other side. And the allgather's
 * log2 steps over the ring and skip connections, for every rank count up to 40. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "err.h"
#include "socket.h"

enum { MAGIC = 0x5eed5eed12345678ull };

static void split_bytes_wait_for_the_allgather(void **st) {
  (void)st;
  int prev[2], next[2]; /* [0]: this rank's end, [1]: the neighbour's */
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, prev), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, next), 0);
  weft_sock_nonblock(prev[0]);
  weft_sock_nonblock(next[0]);
  atomic_int no_abort = 0;
  weft_bootstrap_t b = {.rank = 1,
                        .nranks = 2,
                        .magic = MAGIC,
                        .timeout_ms = 5000,
                        .abort_flag = &no_abort,
                        .prev_fd = prev[0],
                        .next_fd = next[0],
                        .send_mu = PTHREAD_MUTEX_INITIALIZER};
  /* the previous rank's block of the next allgather, 16 bytes without the magic */
  const char block[16] = "rank 0's id ....";
  assert_int_equal(send(prev[1], block, sizeof block, 0), (ssize_t)sizeof block);
  weft_notice_t n = {0};
  int fds[2];
  assert_int_equal(weft_bootstrap_check(&b, &n), WEFT_SUCCESS);
  assert_int_equal(weft_bootstrap_check(&b, &n), WEFT_SUCCESS);
  int left = 0;
  assert_int_equal(ioctl(prev[0], FIONREAD, &left), 0);
  assert_int_equal(left, sizeof block); /* not a byte read */
  assert_int_equal(weft_bootstrap_watch_fds(&b, fds), 1);
  assert_int_equal(fds[0], next[0]); /* the held side is not polled */
  assert_int_equal(weft_bootstrap_fds(&b, fds), 2);
  /* a notice from the other neighbour still arrives */
  weft_bootstrap_t peer = {
      .magic = MAGIC, .prev_fd = next[1], .next_fd = -1, .send_mu = PTHREAD_MUTEX_INITIALIZER};
  weft_notice_t sent = {.origin = 0, .code = WEFT_ERR_TIMEOUT, .seq = 7};
  strcpy(sent.text, "rank 0 timed out");
  weft_bootstrap_notify(&peer, &sent);
  assert_int_equal(weft_bootstrap_check(&b, &n), WEFT_ERR_TIMEOUT);
  assert_int_equal(n.origin, 0);
  assert_int_equal(n.seq, 7);
  assert_string_equal(n.text, "rank 0 timed out");
  /* the allgather reads the held block as its own, and polling resumes */
  char all[2][16] = {{0}, "rank 1's id ...."};
  assert_int_equal(weft_bootstrap_allgather(&b, all, 16), WEFT_SUCCESS);
  assert_memory_equal(all[0], block, sizeof block);
  assert_int_equal(weft_bootstrap_watch_fds(&b, fds), 2);
  char got[16];
  assert_int_equal(recv(next[1], got, sizeof got, 0), (ssize_t)sizeof got);
  assert_memory_equal(got, all[1], sizeof got); /* our block went on to the next rank */
  for (int i = 0; i < 2; i++) {
    close(prev[i]);
    close(next[i]);
  }
}

/* A notice that begins with a part of the magic is not taken for data while the rest is on
 * its way, and is read whole once it has come. */
static void a_notice_in_pieces_is_not_held(void **st) {
  (void)st;
  int prev[2], pipe_fds[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, prev), 0);
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, pipe_fds), 0);
  weft_sock_nonblock(prev[0]);
  weft_bootstrap_t b = {.rank = 1, .nranks = 4, .magic = MAGIC, .prev_fd = prev[0], .next_fd = -1};
  /* the neighbour's notice, captured whole from a second pair, then fed 3 bytes first */
  weft_bootstrap_t peer = {
      .magic = MAGIC, .prev_fd = pipe_fds[1], .next_fd = -1, .send_mu = PTHREAD_MUTEX_INITIALIZER};
  weft_notice_t sent = {.origin = 2, .code = WEFT_ERR_PEER_LOST, .seq = 3};
  weft_bootstrap_notify(&peer, &sent);
  unsigned char msg[WEFT_NOTICE_BYTES];
  assert_int_equal(recv(pipe_fds[0], msg, sizeof msg, MSG_WAITALL), (ssize_t)sizeof msg);
  assert_int_equal(send(prev[1], msg, 3, 0), 3);
  weft_notice_t n = {0};
  int fds[2];
  assert_int_equal(weft_bootstrap_check(&b, &n), WEFT_SUCCESS);
  assert_int_equal(weft_bootstrap_watch_fds(&b, fds), 1); /* still polled */
  assert_int_equal(send(prev[1], msg + 3, sizeof msg - 3, 0), (ssize_t)(sizeof msg - 3));
  assert_int_equal(weft_bootstrap_check(&b, &n), WEFT_ERR_PEER_LOST);
  assert_int_equal(n.origin, 2);
  for (int i = 0; i < 2; i++) {
    close(prev[i]);
    close(pipe_fds[i]);
  }
}

/* A neighbour's allgather block that lands while a check looks at an empty socket is left
 * for the allgather: none of it is read as the start of a notice. The sender fires as the
 * checks spin, many times over, so that blocks arrive between a check's look and its read
 * (the window in which a check once took them). */
enum { ROUNDS = 5000 };

typedef struct {
  int fd;
  atomic_int round; /* the round whose block the sender may send */
} sender_t;

static void *send_rounds(void *arg) {
  sender_t *s = arg;
  const char block[16] = "rank 0's id ....";
  for (int i = 0; i < ROUNDS; i++) {
    while (atomic_load(&s->round) < i)
      sched_yield();
    if (send(s->fd, block, sizeof block, MSG_NOSIGNAL) != (ssize_t)sizeof block) break;
  }
  return NULL;
}

static void data_arriving_during_a_check_is_left(void **st) {
  (void)st;
  int prev[2];
  assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, prev), 0);
  weft_sock_nonblock(prev[0]);
  weft_bootstrap_t b = {.rank = 1, .nranks = 2, .magic = MAGIC, .prev_fd = prev[0], .next_fd = -1};
  sender_t s = {.fd = prev[1]};
  pthread_t th;
  assert_int_equal(pthread_create(&th, NULL, send_rounds, &s), 0);
  weft_notice_t n = {0};
  int taken = 0;
  for (int i = 0; i < ROUNDS; i++) {
    atomic_store(&s.round, i);
    while (!atomic_load(&b.held[0]) && b.rgot[0] == 0)
      assert_int_equal(weft_bootstrap_check(&b, &n), WEFT_SUCCESS);
    if (b.rgot[0]) { /* a check took the block's bytes */
      taken++;
      break;
    }
    char got[16];
    assert_int_equal(recv(prev[0], got, sizeof got, MSG_WAITALL), (ssize_t)sizeof got);
    atomic_store(&b.held[0], 0); /* as the allgather that read it does */
  }
  /* a failed round leaves the sender ahead: its sends must end (the reading end shut) */
  atomic_store(&s.round, ROUNDS);
  shutdown(prev[0], SHUT_RDWR);
  pthread_join(th, NULL);
  close(prev[0]);
  close(prev[1]);
  assert_int_equal(taken, 0);
}

/* Ranks as threads, wired as init wires them: rank r's step k sends on a socket whose other
 * end is rank r + 2^k's step-k input (step 0: the ring). */
typedef struct {
  weft_bootstrap_t b;
  char *data;
  size_t size;
  weft_result_t rc;
} ag_rank_t;

static void *ag_main(void *arg) {
  ag_rank_t *a = arg;
  a->rc = weft_bootstrap_allgather(&a->b, a->data, a->size);
  return NULL;
}

static unsigned char ag_byte(int rank, size_t i) { return (unsigned char)(rank * 131 + i * 7 + 1); }

static void allgather_any_rank_count(void **st) {
  (void)st;
  static const size_t sizes[] = {1, 3, 300, 4096}; /* 300: swaps past their 256-byte buffer */
  atomic_int no_abort = 0;
  for (int n = 1; n <= 40; n++) {
    int steps = 0;
    while ((1 << steps) < n)
      steps++;
    ag_rank_t *r = calloc((size_t)n, sizeof *r);
    pthread_t *th = calloc((size_t)n, sizeof *th);
    assert_non_null(r);
    assert_non_null(th);
    for (int i = 0; i < n; i++) {
      r[i].b = (weft_bootstrap_t){.rank = i,
                                  .nranks = n,
                                  .magic = MAGIC,
                                  .timeout_ms = 20000,
                                  .abort_flag = &no_abort,
                                  .next_fd = -1,
                                  .prev_fd = -1};
      for (int k = 0; k < WEFT_BOOT_MAX_STEPS; k++)
        r[i].b.skip_out[k] = r[i].b.skip_in[k] = -1;
    }
    for (int i = 0; i < n && n > 1; i++)
      for (int k = 0; k < steps; k++) {
        int sv[2], to = (i + (1 << k)) % n;
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
        weft_sock_nonblock(sv[0]);
        weft_sock_nonblock(sv[1]);
        *(k ? &r[i].b.skip_out[k] : &r[i].b.next_fd) = sv[0];
        *(k ? &r[to].b.skip_in[k] : &r[to].b.prev_fd) = sv[1];
      }
    for (size_t z = 0; z < sizeof sizes / sizeof *sizes; z++) {
      size_t size = sizes[z];
      for (int i = 0; i < n; i++) {
        r[i].size = size;
        r[i].data = malloc((size_t)n * size);
        assert_non_null(r[i].data);
        memset(r[i].data, 0xee, (size_t)n * size);
        for (size_t b = 0; b < size; b++)
          r[i].data[(size_t)i * size + b] = (char)ag_byte(i, b);
        assert_int_equal(pthread_create(&th[i], NULL, ag_main, &r[i]), 0);
      }
      for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
      for (int i = 0; i < n; i++) {
        assert_int_equal(r[i].rc, WEFT_SUCCESS);
        for (int q = 0; q < n; q++)
          for (size_t b = 0; b < size; b++)
            if ((unsigned char)r[i].data[(size_t)q * size + b] != ag_byte(q, b))
              fail_msg("%d ranks, %zu bytes: rank %d holds a wrong byte %zu of rank %d's block", n,
                       size, i, b, q);
        free(r[i].data);
      }
    }
    for (int i = 0; i < n; i++) {
      if (r[i].b.next_fd >= 0) close(r[i].b.next_fd);
      if (r[i].b.prev_fd >= 0) close(r[i].b.prev_fd);
      for (int k = 0; k < WEFT_BOOT_MAX_STEPS; k++) {
        if (r[i].b.skip_out[k] >= 0) close(r[i].b.skip_out[k]);
        if (r[i].b.skip_in[k] >= 0) close(r[i].b.skip_in[k]);
      }
    }
    free(r);
    free(th);
  }
}

/* A fake rendezvous root on loopback for rank 0 of 2: it reads the hello, then sends a valid
 * reply header (bootstrap.c's root_reply_t) and, as rank 1's address, `addr`. */
typedef struct {
  int listen_fd;
  uint64_t magic;
  weft_sockaddr_t addr;
} fake_root_t;

static void *fake_root(void *arg) {
  fake_root_t *r = arg;
  int fd = accept(r->listen_fd, NULL, NULL);
  if (fd < 0) return NULL;
  char hello[56];
  size_t got = 0;
  while (got < sizeof hello) {
    ssize_t k = recv(fd, hello + got, sizeof hello - got, 0);
    if (k <= 0) break;
    got += (size_t)k;
  }
  struct {
    uint64_t magic;
    uint32_t version, type;
    int32_t status, nranks;
    uint64_t comm_magic;
  } rep = {r->magic, WEFT_WIRE_VERSION, WEFT_MSG_ROOT_TABLE, 0, 2, 42};
  send(fd, &rep, sizeof rep, MSG_NOSIGNAL);
  send(fd, &r->addr, sizeof r->addr, MSG_NOSIGNAL);
  close(fd);
  return NULL;
}

/* An address from the root that is neither IPv4 nor IPv6 is refused before any connect. */
static void a_peer_address_not_ip_is_refused(void **st) {
  (void)st;
  setenv("WEFT_SOCKET_IFADDR", "127.0.0.1", 1);
  fake_root_t r = {.magic = 0x5eed};
  weft_sockaddr_t a;
  assert_int_equal(weft_sockaddr_parse("127.0.0.1", &a), 0);
  socklen_t alen = sizeof a.u;
  r.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(r.listen_fd >= 0);
  assert_int_equal(bind(r.listen_fd, &a.u.sa, a.len), 0);
  assert_int_equal(listen(r.listen_fd, 4), 0);
  assert_int_equal(getsockname(r.listen_fd, &a.u.sa, &alen), 0);
  memset(&r.addr, 0, sizeof r.addr);
  r.addr.len = 16; /* an IPv4 length, but no family */
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, fake_root, &r), 0);
  weft_id_body_t id = {.magic = r.magic, .version = WEFT_WIRE_VERSION, .root = a};
  weft_bootstrap_t *b = NULL;
  assert_int_equal(weft_bootstrap_init(&id, 0, 2, 2000, NULL, &b), WEFT_ERR_PROTOCOL);
  assert_null(b);
  assert_non_null(strstr(weft_thread_error(), "sent rank 1's address, not IPv4 or IPv6"));
  pthread_join(t, NULL);
  close(r.listen_fd);
  unsetenv("WEFT_SOCKET_IFADDR");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(allgather_any_rank_count),
      cmocka_unit_test(a_peer_address_not_ip_is_refused),
      cmocka_unit_test(split_bytes_wait_for_the_allgather),
      cmocka_unit_test(a_notice_in_pieces_is_not_held),
      cmocka_unit_test(data_arriving_during_a_check_is_left),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
