/* transports/shm/shm.c through its vtable, on a real two-rank communicator of this process
 * (no collectives run meanwhile: the executor would take the bytes): bytes cross intact and in
 * order, around the ring's end and when it is full; a rank reaches itself; the doorbell wakes a
 * waiter (send, consume, wake) and times out otherwise; notices cross; /dev/shm is left clean. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "comm.h"
#include "shmseg.h"

enum { RING = 4096 }; /* WEFT_SHM_RING_BYTES while the comms are made: wraps come soon */

static weft_comm_t comm[2];
static const weft_transport_t *tr;
static void *st[2];
/* Bytes through each ring [from][to] since the comms were made (head and tail start at 0), so
 * the next byte's ring position is got % RING and every byte's value is known. */
static uint64_t sent[2][2], got[2][2];
static const uint8_t *base[2][2]; /* each ring's start, as the first peek shows it */
static int cut;                   /* peeks whose contig stopped at the ring's end */
static char *before;              /* "\nname\n..." of /dev/shm before the comms */

static uint8_t pat(int from, int to, uint64_t i) {
  /* not periodic in RING, and distinct per ring: a byte from a wrong offset or ring shows */
  return (uint8_t)(((i + (uint64_t)(from * 2 + to) * 1000003u) * 2654435761u) >> 13);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* Offers n pattern bytes from `from` to `to`; returns how many the ring took. */
static size_t push(int from, int to, size_t n) {
  static uint8_t buf[2 * RING];
  assert_true(n <= sizeof buf);
  for (size_t i = 0; i < n; i++)
    buf[i] = pat(from, to, sent[from][to] + i);
  size_t acc = (size_t)-1;
  assert_int_equal(tr->send(st[from], to, buf, n, &acc), WEFT_SUCCESS);
  assert_true(acc <= n);
  sent[from][to] += acc;
  return acc;
}

/* Checks `to`'s view of the ring from `from` and the first n bytes there, then consumes them
 * (at most contig). */
static size_t pull(int from, int to, size_t n) {
  const void *p = NULL;
  size_t contig = 0, total = 0;
  assert_int_equal(tr->peek(st[to], from, &p, &contig, &total), WEFT_SUCCESS);
  uint64_t pos = got[from][to] % RING, room = RING - pos;
  assert_int_equal(total, sent[from][to] - got[from][to]);
  assert_int_equal(contig, total < room ? total : room); /* never past the end */
  if (!base[from][to]) base[from][to] = (const uint8_t *)p - pos;
  assert_ptr_equal(p, base[from][to] + pos); /* after the end comes the start again */
  cut += contig < total;
  if (n > contig) n = contig;
  for (size_t i = 0; i < n; i++)
    if (((const uint8_t *)p)[i] != pat(from, to, got[from][to] + i))
      fail_msg("byte %llu from rank %d to %d is %d, not %d",
               (unsigned long long)(got[from][to] + i), from, to, ((const uint8_t *)p)[i],
               pat(from, to, got[from][to] + i));
  tr->consume(st[to], from, n);
  got[from][to] += n;
  return n;
}

static void drain(int from, int to) {
  while (got[from][to] < sent[from][to])
    pull(from, to, RING);
}

/* Every ring empty before a test, so that one failure does not spill into the next. */
static int empty_rings(void **unused) {
  (void)unused;
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++) {
      const void *p;
      size_t contig, total;
      tr->peek(st[b], a, &p, &contig, &total);
      tr->consume(st[b], a, total);
      got[a][b] = sent[a][b];
    }
  return 0;
}

static void in_order_across_the_wrap(void **unused) {
  (void)unused;
  static const size_t piece[] = {1, 7, 333, 1021, 2047, 4093, 13, 611};
  uint64_t start = sent[0][1];
  cut = 0;
  for (int k = 0; sent[0][1] - start < 6 * RING + 123; k++) {
    size_t want = piece[k % 8], done = 0;
    while ((done += push(0, 1, want - done)) < want)
      pull(0, 1, piece[(k + 3) % 8]); /* full: the receiver makes room */
    pull(0, 1, piece[(k + 5) % 8]);   /* odd amounts, leaving some behind */
  }
  drain(0, 1);
  assert_true(sent[0][1] - start > 6 * RING);
  assert_true(cut > 0); /* some peeks really had bytes on both sides of the end */
}

static void full_ring_takes_nothing_until_consumed(void **unused) {
  (void)unused;
  /* start mid-ring, so the full ring's bytes straddle its end */
  size_t shift = (RING + 1001 - got[0][1] % RING) % RING;
  while (shift) {
    shift -= push(0, 1, shift);
    drain(0, 1);
  }
  assert_int_equal(push(0, 1, RING + 500), RING);
  assert_int_equal(push(0, 1, 1), 0); /* *accepted == 0, set by send */
  assert_int_equal(push(0, 1, 1000), 0);
  cut = 0;
  assert_int_equal(pull(0, 1, 0), 0); /* total RING, contig up to the end only */
  assert_int_equal(cut, 1);
  assert_int_equal(push(1, 0, 100), 100); /* the other direction is not held up */
  assert_int_equal(pull(0, 1, 100), 100);
  assert_int_equal(push(0, 1, 300), 100); /* room for exactly what was consumed */
  assert_int_equal(push(0, 1, 1), 0);
  drain(0, 1);
  drain(1, 0);
  assert_int_equal(push(0, 1, RING), RING); /* whole again once empty */
  drain(0, 1);
}

static void a_rank_reaches_itself(void **unused) {
  (void)unused;
  for (int r = 0; r < 2; r++) /* the own pair takes the first transport reaching the host */
    assert_ptr_equal(weft_transports[comm[r]->peer_tr[r]], tr);
  /* rank 0's own ring and rank 1's ring into rank 0 share a segment: each fills and wraps alone */
  assert_int_equal(push(0, 0, RING + 7), RING);
  assert_int_equal(push(1, 0, 999), 999);
  assert_int_equal(push(1, 1, 2 * RING), RING);
  for (int i = 0; i < 3; i++) {
    pull(0, 0, 1500);
    pull(1, 0, 400);
    pull(1, 1, 2500);
    push(0, 0, 1777);
    push(1, 1, 2777);
  }
  drain(0, 0);
  drain(1, 0);
  drain(1, 1);
  assert_true(base[0][0] != base[1][0]);
}

static void idle_wait_times_out(void **unused) {
  (void)unused;
  uint64_t tok = tr->arm(st[1]);
  double t0 = now_ms();
  assert_int_equal(tr->wait(st[1], tok, 20), WEFT_SUCCESS);
  double dt = now_ms() - t0;
  if (dt < 10 || dt > 1000) fail_msg("an idle 20 ms wait took %.1f ms", dt);
}

/* What a second thread does 50 ms after it starts (no cmocka asserts there: they would jump
 * into the main thread's stack). */
enum { SEND, CONSUME, WAKE };
typedef struct {
  int what;
  uint8_t bytes[64];
  size_t n, acc;
  weft_result_t rc;
} later_t;

static void *later_main(void *arg) {
  later_t *l = arg;
  sleep_ms(50);
  if (l->what == SEND) l->rc = tr->send(st[0], 1, l->bytes, l->n, &l->acc);
  if (l->what == CONSUME) tr->consume(st[1], 0, l->n);
  if (l->what == WAKE) tr->wake(st[1]);
  return NULL;
}

/* Rank `waiter` arms, `what` happens 50 ms later on another thread: its wait must sleep until
 * then and no longer (the 5 s timeout is far away). */
static void wakes_when(int waiter, later_t *l) {
  pthread_t th;
  uint64_t tok = tr->arm(st[waiter]);
  double t0 = now_ms();
  assert_int_equal(pthread_create(&th, NULL, later_main, l), 0);
  assert_int_equal(tr->wait(st[waiter], tok, 5000), WEFT_SUCCESS);
  double dt = now_ms() - t0;
  pthread_join(th, NULL);
  if (dt < 40 || dt > 2500) fail_msg("woken after %.1f ms (expected ~50)", dt);
}

static void bell_wakes_the_waiter(void **unused) {
  (void)unused;
  /* a send between arm and wait: no wake-up lost, wait returns at once */
  uint64_t tok = tr->arm(st[1]);
  assert_int_equal(push(0, 1, 10), 10);
  double t0 = now_ms();
  assert_int_equal(tr->wait(st[1], tok, 5000), WEFT_SUCCESS);
  assert_true(now_ms() - t0 < 1000);
  drain(0, 1);

  later_t l = {.what = SEND, .n = 64};
  for (size_t i = 0; i < l.n; i++)
    l.bytes[i] = pat(0, 1, sent[0][1] + i);
  wakes_when(1, &l); /* the receiver sleeps until bytes come */
  assert_int_equal(l.rc, WEFT_SUCCESS);
  assert_int_equal(l.acc, 64);
  sent[0][1] += l.acc;
  drain(0, 1);

  assert_int_equal(push(0, 1, 10), 10);
  later_t c = {.what = CONSUME, .n = 10};
  wakes_when(0, &c); /* the sender sleeps until there is room */
  got[0][1] += 10;
}

static void wake_interrupts_a_wait(void **unused) {
  (void)unused;
  later_t l = {.what = WAKE};
  wakes_when(1, &l);
  uint64_t tok = tr->arm(st[1]);
  tr->wake(st[1]); /* before the wait: it returns at once */
  double t0 = now_ms();
  assert_int_equal(tr->wait(st[1], tok, 5000), WEFT_SUCCESS);
  assert_true(now_ms() - t0 < 1000);
}

/* Last but one: a notice stays in the segment (check does not consume it). */
static void notices_cross(void **unused) {
  (void)unused;
  weft_notice_t n = {.origin = -7};
  assert_int_equal(tr->check(st[0], &n), WEFT_SUCCESS);
  assert_int_equal(tr->check(st[1], &n), WEFT_SUCCESS);
  assert_int_equal(n.origin, -7); /* nothing written when there is nothing */

  weft_notice_t a = {.origin = 0, .code = WEFT_ERR_MISMATCH, .seq = 42};
  snprintf(a.text, sizeof a.text, "rank 0 saw allreduce against broadcast");
  uint64_t tok = tr->arm(st[1]);
  tr->notify(st[0], &a);
  double t0 = now_ms();
  assert_int_equal(tr->wait(st[1], tok, 5000), WEFT_SUCCESS); /* the notice rang the bell */
  assert_true(now_ms() - t0 < 1000);
  assert_int_equal(tr->check(st[1], &n), WEFT_ERR_MISMATCH);
  assert_int_equal(n.origin, 0);
  assert_int_equal(n.seq, 42);
  assert_string_equal(n.text, a.text);
  assert_int_equal(tr->check(st[0], &n), WEFT_SUCCESS); /* the teller is not told */

  weft_notice_t b = {.origin = 1, .code = WEFT_ERR_TIMEOUT, .seq = 9};
  snprintf(b.text, sizeof b.text, "rank 1 timed out");
  tr->notify(st[1], &b);
  assert_int_equal(tr->check(st[0], &n), WEFT_ERR_TIMEOUT);
  assert_int_equal(n.origin, 1);
  assert_string_equal(n.text, b.text);
  assert_int_equal(tr->check(st[1], &n), WEFT_ERR_MISMATCH); /* the first notice stays */
  assert_int_equal(n.origin, 0);
}

static char *list_shm(void) {
  char *s = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&s, &len);
  DIR *d = opendir("/dev/shm");
  if (f) fputc('\n', f);
  for (struct dirent *e; f && d && (e = readdir(d)) != NULL;)
    fprintf(f, "%s\n", e->d_name);
  if (d) closedir(d);
  if (f) fclose(f);
  if (!d) free(s);
  return d ? s : NULL;
}

/* Last: the names go once every rank has mapped them (a crash later leaves nothing), and
 * destroying leaves nothing either. Only our magic's names count: other tests may be making
 * and removing segments of their own meanwhile. */
static void nothing_left_in_dev_shm(void **unused) {
  (void)unused;
  char names[2][64], mine[32], left[256] = "";
  int named = 0;
  uint64_t magic = comm[0]->magic;
  snprintf(mine, sizeof mine, "\nweft-%016llx-", (unsigned long long)magic);
  for (int r = 0; r < 2; r++) {
    weft_shm_name(names[r], sizeof names[r], magic, r, "");
    int fd = shm_open(names[r], O_RDONLY, 0);
    if (fd >= 0) named++, close(fd);
  }
  for (int r = 0; r < 2; r++) {
    assert_int_equal(weft_comm_destroy(comm[r]), WEFT_SUCCESS);
    comm[r] = NULL;
  }
  char *after = list_shm();
  assert_non_null(before);
  assert_non_null(after);
  for (const char *p = after; (p = strstr(p, mine)) != NULL; p++) { /* new, and ours */
    char entry[128];
    snprintf(entry, sizeof entry, "%.*s", (int)(strchr(p + 1, '\n') - p + 1), p);
    if (!strstr(before, entry))
      snprintf(left + strlen(left), sizeof left - strlen(left), " %.*s", (int)strlen(entry) - 2,
               entry + 1);
  }
  free(after);
  for (int r = 0; r < 2; r++) /* a failing run leaves no litter either */
    shm_unlink(names[r]);
  if (left[0]) fail_msg("left in /dev/shm after destroy:%s", left);
  if (named) fail_msg("%d segment name(s) still in /dev/shm after setup", named);
}

static void *init_rank1(void *id) {
  static weft_result_t rc;
  rc = weft_comm_init(&comm[1], 2, *(weft_unique_id_t *)id, 1, NULL);
  return &rc;
}

/* Sets name to value; returns what to restore (NULL: it was unset). */
static char *swap_env(const char *name, const char *value) {
  const char *old = getenv(name);
  char *saved = old ? strdup(old) : NULL;
  setenv(name, value, 1);
  return saved;
}
static void restore_env(const char *name, char *saved) {
  if (saved)
    setenv(name, saved, 1);
  else
    unsetenv(name);
  free(saved);
}

static int make_comms(void **unused) {
  (void)unused;
  weft_unique_id_t id;
  void *rc1 = NULL;
  pthread_t th;
  before = list_shm();
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) return -1;
  /* small rings; and shm between the two even where the caller forces tcp for other tests */
  char *ring = swap_env("WEFT_SHM_RING_BYTES", "4096"), *force = swap_env("WEFT_TRANSPORT", "auto");
  if (pthread_create(&th, NULL, init_rank1, &id) != 0) return -1;
  weft_result_t rc0 = weft_comm_init(&comm[0], 2, id, 0, NULL);
  pthread_join(th, &rc1);
  restore_env("WEFT_SHM_RING_BYTES", ring);
  restore_env("WEFT_TRANSPORT", force);
  if (rc0 != WEFT_SUCCESS || *(weft_result_t *)rc1 != WEFT_SUCCESS) {
    fprintf(stderr, "weft_comm_init: %s\n", weft_get_last_error(NULL));
    return -1;
  }
  for (int t = 0; t < weft_ntransports; t++)
    if (strcmp(weft_transports[t]->name, "shm") == 0) {
      tr = comm[0]->tr[t];
      st[0] = comm[0]->tr_state[t], st[1] = comm[1]->tr_state[t];
      /* one host, so shm serves the pair (the rings below exist only then) */
      if (comm[0]->peer_tr[1] != t || comm[1]->peer_tr[0] != t) tr = NULL;
    }
  if (tr && st[0] && st[1]) return 0;
  fprintf(stderr, "no shm transport between the two ranks\n");
  return -1;
}

static int destroy_comms(void **unused) {
  (void)unused;
  for (int r = 0; r < 2; r++)
    if (comm[r]) weft_comm_destroy(comm[r]);
  free(before);
  return 0;
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(in_order_across_the_wrap, empty_rings),
      cmocka_unit_test_setup(full_ring_takes_nothing_until_consumed, empty_rings),
      cmocka_unit_test_setup(a_rank_reaches_itself, empty_rings),
      cmocka_unit_test_setup(idle_wait_times_out, empty_rings),
      cmocka_unit_test_setup(bell_wakes_the_waiter, empty_rings),
      cmocka_unit_test_setup(wake_interrupts_a_wait, empty_rings),
      cmocka_unit_test_setup(notices_cross, empty_rings),
      cmocka_unit_test(nothing_left_in_dev_shm),
  };
  return cmocka_run_group_tests(tests, make_comms, destroy_comms);
}
