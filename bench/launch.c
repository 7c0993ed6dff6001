/* fork-based local launcher. Rank 0 makes the unique id (its process then hosts the
 * rendezvous root, as in a real job) and hands it to the others through shared memory:
 * the parent starts no thread, so forking it is safe under any allocator. */
#include "launch.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* How long the other ranks may run on after one failed (WEFT_TEST_TIME_SCALE stretches it,
 * as it does the tests' own bounds): weft sees a dead peer at once (its bootstrap socket
 * closes), so this is slack for a loaded machine, not a detection time. */
enum { LAUNCH_GRACE_S = 10 };

int launch_open_fds(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  for (struct dirent *e; d && (e = readdir(d));)
    n += e->d_name[0] != '.';
  if (d) closedir(d);
  return n;
}

double launch_time_scale(void) {
  const char *ts = getenv("WEFT_TEST_TIME_SCALE");
  double scale = ts ? atof(ts) : 0;
  return scale > 0 ? scale : 1;
}

int launch_in_child(int (*fn)(void)) {
  pid_t pid = fork();
  if (pid == 0) _exit(fn() & 255);
  int st = 0;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st)) return 0;
  return WEXITSTATUS(st);
}

int64_t launch_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int launch_cut_link(int rank) {
  const char *links = getenv("WEFT_TEST_NETNS_LINKS");
  char names[2][32], cmd[128];
  if (!links || sscanf(links, "%31[^,],%31s", names[0], names[1]) != 2)
    return printf("launch: cutting a link needs tests/fault/netns.sh (WEFT_TEST_NETNS_LINKS)\n"),
           -1;
  snprintf(cmd, sizeof cmd, "ip link set dev %s down", names[rank % 2]);
  if (system(cmd) != 0) return printf("launch: '%s' failed\n", cmd), -1;
  return 0;
}

int launch_join_netns(int rank) {
  const char *list = getenv("WEFT_TEST_NETNS");
  if (!list || !list[0]) return 0;
  char names[2][64] = {"", ""};
  if (sscanf(list, "%63[^,],%63s", names[0], names[1]) != 2) return -1;
  char path[128];
  snprintf(path, sizeof path, "/var/run/netns/%s", names[rank % 2]);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
    perror("launch: entering the test network namespace");
    if (fd >= 0) close(fd);
    return -1;
  }
  close(fd);
  setenv("WEFT_HOSTID", names[rank % 2], 1);
  return 0;
}

int launch_fake_hosts(int rank) {
  const char *k = getenv("WEFT_TEST_HOSTS");
  int hosts = k ? atoi(k) : 0;
  if (hosts <= 0) return 0;
  char host[32];
  snprintf(host, sizeof host, "test-host-%d", rank % hosts);
  setenv("WEFT_HOSTID", host, 1);
  setenv("NCCL_HOSTID", host, 1);
  return 0;
}

typedef struct {
  atomic_int state; /* 0: not yet, 1: id ready, -1: rank 0 could not make one */
  weft_unique_id_t id;
} id_slot_t;

/* Rank 0 publishes the id; the others wait for it (bounded). */
static int share_id(id_slot_t *slot, int rank, weft_unique_id_t *id, int timeout_s) {
  if (rank == 0) {
    int ok = weft_get_unique_id(&slot->id) == WEFT_SUCCESS;
    if (!ok) fprintf(stderr, "launch: weft_get_unique_id: %s\n", weft_get_last_error(NULL));
    atomic_store(&slot->state, ok ? 1 : -1);
  }
  time_t end = time(NULL) + timeout_s;
  while (atomic_load(&slot->state) == 0 && time(NULL) < end) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  *id = slot->id;
  return atomic_load(&slot->state) == 1 ? 0 : -1;
}

int launch_local(int nranks, launch_fn fn, void *arg, int timeout_s) {
  id_slot_t *slot =
      mmap(NULL, sizeof *slot, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (slot == MAP_FAILED) return 1;
  atomic_init(&slot->state, 0);
  pid_t *pids = calloc((size_t)nranks, sizeof *pids);
  if (!pids) return 1;
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < nranks; r++) {
    pid_t p = fork();
    if (p == 0) {
      weft_unique_id_t id;
      int rc = launch_fake_hosts(r) == 0 && launch_join_netns(r) == 0 &&
                       share_id(slot, r, &id, timeout_s) == 0
                   ? fn(r, nranks, id, arg)
                   : 1;
      fflush(stdout);
      fflush(stderr);
      _exit(rc > 255 ? 255 : rc);
    }
    if (p < 0) {
      perror("launch: fork");
      for (int k = 0; k < r; k++)
        kill(pids[k], SIGKILL);
      free(pids);
      return 1;
    }
    pids[r] = p;
  }
  /* After a failure the others get a grace period to see the lost peer and fail by
   * themselves (their messages say what they saw), then are killed, so a rank failing early
   * ends the run in seconds rather than at timeout_s. */
  int64_t grace_ms = (int64_t)(LAUNCH_GRACE_S * 1000 * launch_time_scale());
  int failed = 0, left = nranks, first = -1, killed = 0;
  int64_t end = launch_now_ms() + (int64_t)timeout_s * 1000, grace_end = INT64_MAX;
  while (left > 0) {
    int st;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < nranks; r++)
        if (pids[r] == p) {
          pids[r] = 0;
          left--;
          if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            failed = 1;
            if (WIFSIGNALED(st))
              fprintf(stderr, "launch: rank %d died with signal %d\n", r, WTERMSIG(st));
            else
              fprintf(stderr, "launch: rank %d exited with %d\n", r, WEXITSTATUS(st));
            if (first < 0 && !killed) {
              first = r;
              grace_end = launch_now_ms() + grace_ms;
            }
          }
        }
      continue;
    }
    if (p < 0 && errno == ECHILD) break;
    int64_t now = launch_now_ms();
    if (!killed && (now > end || now > grace_end)) {
      if (now > end)
        fprintf(stderr, "launch: ranks still running after %d s: killing them:", timeout_s);
      else
        fprintf(stderr,
                "launch: rank %d failed %lld ms ago: killing the ranks still running:", first,
                (long long)grace_ms);
      for (int r = 0; r < nranks; r++)
        if (pids[r] > 0) {
          fprintf(stderr, " %d", r);
          kill(pids[r], SIGKILL);
        }
      fprintf(stderr, "\n");
      failed = killed = 1;
    }
    struct timespec sl = {0, 2000000};
    nanosleep(&sl, NULL);
  }
  free(pids);
  munmap(slot, sizeof *slot);
  return failed;
}
