/* fork-based local launcher. The parent holds the rendezvous root (weft_get_unique_id
 * starts it here), so children only need the id they inherit. */
#include "launch.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

int launch_local(int nranks, launch_fn fn, void *arg, int timeout_s) {
  weft_unique_id_t id;
  if (weft_get_unique_id(&id) != WEFT_SUCCESS) {
    fprintf(stderr, "launch: weft_get_unique_id: %s\n", weft_get_last_error(NULL));
    return 1;
  }
  pid_t *pids = calloc((size_t)nranks, sizeof *pids);
  if (!pids) return 1;
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < nranks; r++) {
    pid_t p = fork();
    if (p == 0) {
      int rc = fn(r, nranks, id, arg);
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
  int failed = 0, left = nranks;
  time_t end = time(NULL) + timeout_s;
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
          }
        }
      continue;
    }
    if (p < 0 && errno == ECHILD) break;
    if (time(NULL) > end) {
      fprintf(stderr, "launch: ranks still running after %d s: killing them\n", timeout_s);
      for (int r = 0; r < nranks; r++)
        if (pids[r] > 0) kill(pids[r], SIGKILL);
      failed = 1;
      end = time(NULL) + 3600;
    }
    struct timespec ts = {0, 2000000};
    nanosleep(&ts, NULL);
  }
  free(pids);
  return failed;
}
