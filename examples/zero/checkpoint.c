/* Checkpoint files: a header (magic, version, the model, rank count, step, block count), the
 * blocks' sizes, then this rank's shards of the parameters, the first and the second
 * moments, each as one array of every block's shard in order. */
#include "checkpoint.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define MAGIC "WEFTCKP1"

typedef struct {
  char magic[8];
  int32_t nranks, rank, step, nb;
  gpt_config_t c;
} header_t;

static size_t shard_of(size_t size, int nranks) {
  return (size + (size_t)nranks - 1) / (size_t)nranks;
}

static void name(char *buf, size_t len, const char *prefix, int rank, int nranks) {
  snprintf(buf, len, "%s.rank%d-of-%d", prefix, rank, nranks);
}

int ckpt_save(const char *prefix, int rank, int nranks, int step, const gpt_config_t *c, int nb,
              const ckpt_block_t *b, const float *p, const float *m, const float *v) {
  char path[4096];
  name(path, sizeof path, prefix, rank, nranks);
  FILE *f = fopen(path, "wb");
  header_t h = {MAGIC, nranks, rank, step, nb, *c};
  size_t total = 0;
  int ok = f && fwrite(&h, sizeof h, 1, f) == 1;
  for (int i = 0; i < nb && ok; i++) {
    uint64_t size = b[i].size;
    ok = fwrite(&size, sizeof size, 1, f) == 1;
    total += shard_of(b[i].size, nranks);
  }
  const float *arr[3] = {p, m, v};
  for (int a = 0; a < 3 && ok; a++)
    ok = total == 0 || fwrite(arr[a], sizeof(float), total, f) == total;
  if (f && fclose(f) != 0) ok = 0;
  if (!ok) fprintf(stderr, "zero: rank %d: cannot write %s\n", rank, path);
  return ok ? 0 : -1;
}

/* One rank file: its shards placed into the full arrays. */
static int load_one(const char *path, const gpt_config_t *c, int nb, const ckpt_block_t *b,
                    int rank, int *nranks, int *step, float *const full[3]) {
  FILE *f = fopen(path, "rb");
  header_t h;
  int ok = f && fread(&h, sizeof h, 1, f) == 1 && !memcmp(h.magic, MAGIC, 8) && h.rank == rank &&
           (*nranks == 0 || h.nranks == *nranks) && h.nb == nb && !memcmp(&h.c, c, sizeof *c);
  for (int i = 0; i < nb && ok; i++) {
    uint64_t size;
    ok = fread(&size, sizeof size, 1, f) == 1 && size == b[i].size;
  }
  for (int a = 0; a < 3 && ok; a++)
    for (int i = 0; i < nb && ok; i++) {
      size_t sh = shard_of(b[i].size, h.nranks), lo = (size_t)rank * sh;
      size_t n = lo < b[i].size ? b[i].size - lo : 0;
      n = n < sh ? n : sh;
      float pad[64];
      ok = fread(full[a] + b[i].first + lo, sizeof(float), n, f) == n;
      for (size_t left = sh - n; ok && left;) { /* the shard's padding */
        size_t k = left < 64 ? left : 64;
        ok = fread(pad, sizeof(float), k, f) == k, left -= k;
      }
    }
  if (ok) *nranks = h.nranks, *step = h.step;
  if (f) fclose(f);
  return ok ? 0 : -1;
}

int ckpt_load(const char *prefix, const gpt_config_t *c, int nb, const ckpt_block_t *b, float *p,
              float *m, float *v, int *step) {
  float *const full[3] = {p, m, v};
  char path[4096];
  int nranks = 0, found = 0;
  for (int n = 1; n <= 4096; n++) { /* the rank count is in the file names */
    name(path, sizeof path, prefix, 0, n);
    FILE *f = fopen(path, "rb");
    if (f) fclose(f), nranks = n, found++;
  }
  if (!nranks) return fprintf(stderr, "zero: no checkpoint %s.rank0-of-N\n", prefix), -1;
  if (found > 1) /* an older run's files under the same prefix: which one is meant? */
    return fprintf(stderr, "zero: %s holds checkpoints of %d rank counts; remove the stale ones\n",
                   prefix, found),
           -1;
  for (int r = 0; r < nranks; r++) {
    name(path, sizeof path, prefix, r, nranks);
    if (load_one(path, c, nb, b, r, &nranks, step, full))
      return fprintf(stderr, "zero: %s is missing, short, or of another model\n", path), -1;
  }
  return 0;
}
