/* weft_comm_shrink across processes, host buffers: the remaining ranks alone make the new
 * communicator (the excluded ones never call it, one of them destroys its comm, the lowest
 * rank among them too), ranks renumbered in order, bad exclude lists refused, different lists
 * a mismatch on every caller; and after a rank is SIGKILLed, a shrink with WEFT_SHRINK_ABORT
 * ends within seconds, far inside the timeout, and the new comm works.
 * usage: test_shrink RANKS (at least 3) */
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launch.h"
#include "rank_check.h"
#include "weft.h"

enum { TIMEOUT_MS = 60000, BOUND_MS = 15000 };

static int is_in(const int *list, int n, int r) {
  for (int i = 0; i < n; i++)
    if (list[i] == r) return 1;
  return 0;
}

/* Every remaining rank: its new rank is its place among them, and an allreduce of
 * (new rank + 1) gives the triangle number. */
static int check_new(weft_comm_t nc, int rank, int n, const int *ex, int nex) {
  int want = 0, count = -1, nr = -1;
  for (int r = 0; r < rank; r++)
    want += !is_in(ex, nex, r);
  weft_comm_rank(nc, &nr);
  weft_comm_count(nc, &count);
  if (nr != want || count != n - nex)
    FAIL("new comm: rank %d of %d, want %d of %d", nr, count, want, n - nex);
  int v = nr + 1, out = 0;
  if (weft_allreduce(&v, &out, 1, WEFT_I32, WEFT_SUM, nc, NULL) != WEFT_SUCCESS)
    FAIL("allreduce on the shrunk comm");
  if (out != count * (count + 1) / 2) FAIL("sum %d, want %d", out, count * (count + 1) / 2);
  return 0;
}

static int bad_lists(weft_comm_t c, int rank, int n) {
  weft_comm_t nc = (weft_comm_t)1;
  int out_of_range[] = {n}, twice[] = {(rank + 1) % n, (rank + 1) % n}, self[] = {rank},
      negative[] = {-1};
  struct {
    const int *list;
    int count;
    const char *word;
  } cases[] = {{out_of_range, 1, "is not a rank"},
               {negative, 1, "is not a rank"},
               {twice, 2, "listed twice"},
               {self, 1, "excludes itself"},
               {NULL, 1, "ranks to exclude"}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    weft_result_t r = weft_comm_shrink(c, cases[k].list, cases[k].count, 0, &nc, NULL);
    if (r != WEFT_ERR_INVALID_ARG || nc != NULL ||
        !strstr(weft_get_last_error(NULL), cases[k].word))
      FAIL("bad list %zu: %s (%s)", k, weft_result_string(r), weft_get_last_error(NULL));
  }
  if (weft_comm_shrink(c, NULL, 0, 2, &nc, NULL) != WEFT_ERR_INVALID_ARG) FAIL("flags 2");
  return 0;
}

/* Ranks 0 and n-1 leave: rank 1 leads. The excluded: rank 0 destroys its comm at once, rank
 * n-1 sleeps and then destroys it. Then the new comm's last rank is left out of a second
 * shrink, but its rank 1 lists no one: a mismatch, said to every caller. */
static int default_main(int rank, int n, weft_unique_id_t id, void *arg) {
  (void)arg;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = TIMEOUT_MS;
  weft_comm_t c, nc = NULL;
  if (weft_comm_init(&c, n, id, rank, &cfg) != WEFT_SUCCESS) FAIL("init");
  if (bad_lists(c, rank, n)) return 1;
  int ex[] = {n - 1, 0};
  if (rank == 0 || rank == n - 1) {
    if (rank == n - 1) usleep(300000);
  } else {
    if (weft_comm_shrink(c, ex, 2, 0, &nc, NULL) != WEFT_SUCCESS) FAIL("shrink");
    if (check_new(nc, rank, n, ex, 2)) return 1;
    int m = n - 2, nr = -1;
    weft_comm_rank(nc, &nr);
    if (m >= 3 && nr < m - 1) { /* nc's last rank is left out; its rank 1 says no one is */
      int last[] = {m - 1};
      weft_comm_t mm = NULL;
      weft_result_t r = weft_comm_shrink(nc, last, nr == 1 ? 0 : 1, 0, &mm, NULL);
      if (r != WEFT_ERR_MISMATCH || mm || !strstr(weft_get_last_error(NULL), "rank 1 called it"))
        FAIL("different lists: %s (%s)", weft_result_string(r), weft_get_last_error(NULL));
    }
    weft_comm_destroy(nc);
  }
  weft_comm_destroy(c);
  return 0;
}

typedef struct {
  atomic_int state;
  weft_unique_id_t id;
} slot_t;

/* Runs n ranks; the victim is expected to die by SIGKILL, every other to exit 0. */
static int run_kill(int n, int victim, int (*fn)(int, int, weft_unique_id_t, int)) {
  slot_t *slot =
      mmap(NULL, sizeof *slot, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (slot == MAP_FAILED) return 1;
  atomic_init(&slot->state, 0);
  pid_t pids[16];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      if (r == 0) {
        int ok = weft_get_unique_id(&slot->id) == WEFT_SUCCESS;
        atomic_store(&slot->state, ok ? 1 : -1);
      }
      while (atomic_load(&slot->state) == 0)
        usleep(1000);
      int rc = atomic_load(&slot->state) == 1 ? fn(r, n, slot->id, victim) : 1;
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
  }
  int bad = 0;
  int64_t end = launch_now_ms() + 120000;
  for (int left = n; left > 0;) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p == 0) {
      if (launch_now_ms() > end) {
        fprintf(stderr, "test_shrink: ranks hang; killing them\n");
        for (int r = 0; r < n; r++)
          kill(pids[r], SIGKILL);
        bad = 1;
      }
      usleep(10000);
      continue;
    }
    if (p < 0) break;
    left--;
    int r = 0;
    while (r < n && pids[r] != p)
      r++;
    int ok = r == victim ? WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL
                         : WIFEXITED(st) && WEXITSTATUS(st) == 0;
    if (!ok) {
      fprintf(stderr, "test_shrink: rank %d ended badly (status %#x)\n", r, st);
      bad = 1;
    }
  }
  munmap(slot, sizeof *slot);
  return bad;
}

/* The victim dies between operations; the others see it in an allreduce (or not yet), then
 * shrink with WEFT_SHRINK_ABORT, which must not wait for it. */
static int kill_main(int rank, int n, weft_unique_id_t id, int victim) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = TIMEOUT_MS;
  weft_comm_t c, nc = NULL;
  if (weft_comm_init(&c, n, id, rank, &cfg) != WEFT_SUCCESS) FAIL("init");
  int v = 1, out = 0;
  if (weft_allreduce(&v, &out, 1, WEFT_I32, WEFT_SUM, c, NULL) != WEFT_SUCCESS || out != n)
    FAIL("first allreduce");
  if (rank == victim) raise(SIGKILL);
  int64_t t0 = launch_now_ms();
  weft_result_t r = weft_allreduce(&v, &out, 1, WEFT_I32, WEFT_SUM, c, NULL);
  if (r == WEFT_SUCCESS) FAIL("allreduce with a dead rank succeeded");
  int ex[] = {victim};
  int64_t t1 = launch_now_ms();
  if (weft_comm_shrink(c, ex, 1, WEFT_SHRINK_ABORT, &nc, &cfg) != WEFT_SUCCESS)
    FAIL("shrink after the kill");
  int64_t t2 = launch_now_ms();
  if (check_new(nc, rank, n, ex, 1)) return 1;
  if (t2 - t1 > BOUND_MS * launch_time_scale())
    FAIL("shrink took %lld ms (timeout %d): it waited for the dead rank", (long long)(t2 - t1),
         TIMEOUT_MS);
  if (rank == (victim == 0 ? 1 : 0))
    printf("test_shrink: rank %d died; the allreduce failed after %lld ms, the shrink took %lld "
           "ms\n",
           victim, (long long)(t1 - t0), (long long)(t2 - t1));
  weft_comm_destroy(nc);
  weft_comm_destroy(c);
  return 0;
}

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 4;
  if (n < 3 || n > 16) {
    fprintf(stderr, "usage: test_shrink RANKS (3 to 16)\n");
    return 2;
  }
  if (launch_local(n, default_main, NULL, 120)) return 1;
  if (run_kill(n, 1, kill_main)) return 1;
  if (run_kill(n, 0, kill_main)) return 1; /* the lowest rank dies: rank 1 leads */
  printf("test_shrink: %d ranks ok\n", n);
  return 0;
}
