/* Runs a fuzz target over the committed corpus without libFuzzer, so every build checks it:
 * each file's outcome must be the one its line in the expectations file names, and every
 * corpus file must have such a line (and every line a file). A folder stands for the files
 * in it. --print writes the lines the target gives today, for adding an input.
 * usage: replay EXPECTATIONS FILE|DIR... | replay --print FILE|DIR... */
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "outcome.h"
#include "replay_dir.h"

enum { MAXE = 256, LINE = 1024 };

typedef struct {
  char name[128];
  char want[LINE];
  int seen;
} expect_t;

static expect_t ex[MAXE];
static int nex;

/* Lines "NAME OUTCOME...", '#' starts a comment line. */
static int load(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "replay: cannot open expectations %s\n", path);
    return -1;
  }
  char line[LINE + 160];
  for (int ln = 1; fgets(line, sizeof line, f); ln++) {
    line[strcspn(line, "\n")] = 0;
    if (!line[0] || line[0] == '#') continue;
    expect_t *e = &ex[nex];
    int at = 0;
    if (nex == MAXE || sscanf(line, "%127s %n", e->name, &at) != 1 || !line[at]) {
      fprintf(stderr, "replay: %s:%d: want \"NAME OUTCOME\"\n", path, ln);
      fclose(f);
      return -1;
    }
    snprintf(e->want, sizeof e->want, "%s", line + at);
    nex++;
  }
  fclose(f);
  return 0;
}

static expect_t *find(const char *name) {
  for (int i = 0; i < nex; i++)
    if (strcmp(ex[i].name, name) == 0) return &ex[i];
  return NULL;
}

static int n, bad, print;
static const char *expectations;
static const char *current; /* the input being run, named if the target aborts on it */

static void on_crash(int sig) {
  static const char pre[] = "replay: the target crashed on ";
  ssize_t r = write(2, pre, sizeof pre - 1);
  r = write(2, current, strlen(current));
  r = write(2, "\n", 1);
  (void)r;
  signal(sig, SIG_DFL);
  raise(sig);
}

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  static uint8_t buf[1 << 20];
  size_t len = fread(buf, 1, sizeof buf, f);
  fclose(f);
  const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
  char got[LINE];
  current = path;
  fuzz_outcome(buf, len, got, sizeof got);
  n++;
  if (print) {
    printf("%-20s %s\n", base, got);
    return 0;
  }
  expect_t *e = find(base);
  if (!e) {
    fprintf(stderr, "replay: %s: no expectation in %s (its outcome: %s)\n", path, expectations,
            got);
    bad++;
  } else if (strcmp(e->want, got) != 0) {
    fprintf(stderr, "replay: %s: expected \"%s\", got \"%s\"\n", path, e->want, got);
    bad++;
  } else {
    printf("%-20s %s\n", base, got);
  }
  if (e) e->seen = 1;
  return 0;
}

int main(int argc, char **argv) {
  print = argc > 1 && strcmp(argv[1], "--print") == 0;
  expectations = argv[1];
  if (argc < 3 || (!print && load(argv[1]) != 0)) {
    fprintf(stderr, "usage: replay EXPECTATIONS FILE|DIR... | replay --print FILE|DIR...\n");
    return 1;
  }
  int sigs[] = {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
    signal(sigs[i], on_crash);
  for (int i = 2; i < argc; i++)
    if (replay_path(argv[i], replay_file) != 0) return 1;
  for (int i = 0; !print && i < nex; i++)
    if (!ex[i].seen) {
      fprintf(stderr, "replay: %s names %s, which is not in the corpus\n", expectations,
              ex[i].name);
      bad++;
    }
  if (!print) printf("replay: %d inputs, %d not as expected\n", n, bad);
  return bad || !n ? 1 : 0;
}
