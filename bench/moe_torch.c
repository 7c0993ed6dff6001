/* moebench --compare torch: runs scripts/gpu/moe_torch.py (python3 for one rank, torchrun
 * for more) on moebench's shape and reads its JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "moe_torch.h"

#ifndef WEFT_SOURCE_DIR
#define WEFT_SOURCE_DIR "."
#endif

static const char *const PHASES[3] = {"layout", "dispatch", "combine"};

/* The number after `"key": ` at or after p, or -1 (the script writes plain numbers). */
static double number_after(const char *p, const char *key) {
  const char *at = p ? strstr(p, key) : NULL;
  return at ? strtod(at + strlen(key), NULL) : -1;
}

int moe_torch_run(int ranks, size_t tokens, size_t hidden, int topk, int experts, const char *dtype,
                  int iters, int warmup, moe_torch_t *out) {
  char path[] = "/tmp/moebench-torch-XXXXXX", cmd[1024], text[4096] = {0};
  int fd = mkstemp(path);
  if (fd < 0) return fprintf(stderr, "moebench: cannot make a temporary file\n"), -1;
  close(fd);
  char launcher[64] = "python3";
  if (ranks > 1)
    snprintf(launcher, sizeof launcher, "torchrun --standalone --nproc_per_node %d", ranks);
  snprintf(cmd, sizeof cmd,
           "%s %s/scripts/gpu/moe_torch.py --tokens %zu --hidden %zu --topk %d --experts %d "
           "-d %s -n %d -w %d --json %s",
           launcher, WEFT_SOURCE_DIR, tokens, hidden, topk, experts, dtype, iters, warmup, path);
  fflush(stdout);
  int rc = system(cmd);
  FILE *f = fopen(path, "r");
  size_t got = f ? fread(text, 1, sizeof text - 1, f) : 0;
  if (f) fclose(f);
  unlink(path);
  if (rc != 0 || got == 0) {
    fprintf(stderr, "moebench: the PyTorch baseline failed (%s)\n", cmd);
    return -1;
  }
  const char *v = strstr(text, "\"torch\": \"");
  snprintf(out->version, sizeof out->version, "%.*s", v ? (int)strcspn(v + 10, "\"") : 1,
           v ? v + 10 : "?");
  out->max_error = number_after(text, "\"max_error\": ");
  for (int ph = 0; ph < 3; ph++) {
    char key[48];
    snprintf(key, sizeof key, "\"phase\": \"%s\", \"time_us\": ", PHASES[ph]);
    out->us[ph] = number_after(text, key);
    if (out->us[ph] < 0)
      return fprintf(stderr, "moebench: no %s row from PyTorch\n", PHASES[ph]), -1;
  }
  return 0;
}
