/* Replays the API fuzzer's corpus on device communicators (fuzz_api.c built with
 * -DWEFT_FUZZ_DEVICE; no libFuzzer): every input's calls on GPU 0, 1 rank and 2 ranks sharing
 * it, each checked against the same contract as on host buffers. The outcomes differ from
 * tests/fuzz/expected/api by design (no TCP communicator, WEFT_ERR_UNSUPPORTED refusals), so
 * each input's outcome is printed and a summary counts calls accepted, refused (invalid,
 * unsupported) and violations; any violation fails the run. Meant to run under
 * compute-sanitizer memcheck too (docs/testing.md).
 * usage: replay_api_device [--fork] [--max N] FILE|DIR...
 *   --fork   rank 1 of the 2-rank communicator in a forked process instead of a thread
 *   --max N  replay at most N inputs (in the order given, folders sorted by name) */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_device.h"
#include "outcome.h"
#include "replay_dir.h"

static const char *current = "(setup)"; /* the input being run, named if it crashes */
static long max_inputs = -1, done_inputs;

static void on_crash(int sig) {
  static const char pre[] = "replay_api_device: crashed on ";
  ssize_t r = write(2, pre, sizeof pre - 1);
  r = write(2, current, strlen(current));
  r = write(2, "\n", 1);
  (void)r;
  signal(sig, SIG_DFL);
  raise(sig);
}

static int replay_file(const char *path) {
  static uint8_t buf[1 << 20];
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay_api_device: cannot open %s\n", path);
    return -1;
  }
  size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  char got[1024];
  current = path;
  fuzz_outcome(buf, len, got, sizeof got);
  printf("%-20s %s\n", base, got);
  fflush(stdout);
  done_inputs++;
  return 0;
}

/* --max N: the first N inputs only */
static int replay_capped(const char *file) {
  return max_inputs >= 0 && done_inputs >= max_inputs ? 0 : replay_file(file);
}

int main(int argc, char **argv) {
  int fork_rank1 = 0, first = 1;
  for (; first < argc && argv[first][0] == '-' && argv[first][1] == '-'; first++)
    if (strcmp(argv[first], "--fork") == 0)
      fork_rank1 = 1;
    else if (strcmp(argv[first], "--max") == 0 && first + 1 < argc)
      max_inputs = strtol(argv[++first], NULL, 10);
    else
      break;
  if (first >= argc || argv[first][0] == '-' || max_inputs == 0) {
    fprintf(stderr, "usage: replay_api_device [--fork] [--max N] FILE|DIR...\n");
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (fuzz_device_start(fork_rank1) != 0) return 1;
  int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    signal(sigs[i], on_crash);
  int rc = 0;
  for (int i = first; i < argc && rc == 0 && (max_inputs < 0 || done_inputs < max_inputs); i++)
    rc = replay_path(argv[i], replay_capped);
  fuzz_device_stop();
  fuzz_device_stats_t s;
  fuzz_device_stats(&s);
  printf("replay_api_device: %ld inputs (%ld steps; 2 ranks on GPU 0 as %s): %ld calls accepted, "
         "%ld refused invalid, %ld refused unsupported, %ld skipped (outside the arena), "
         "%ld violations\n",
         s.inputs, s.steps, fork_rank1 ? "two processes" : "two threads", s.accepted,
         s.refused_invalid, s.refused_unsupported, s.skipped, s.violations);
  return rc || s.violations || !s.inputs ? 1 : 0;
}
