/* Checkpoint files: a header (magic, version, the model, rank count, step, block count), the
 * blocks' sizes, then this rank's shards of the parameters, the first and the second
 * moments, each as one array of every block's shard in order. A whole model is the same
 * thing written by one rank. */
#include "checkpoint.h"

#include "run.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAGIC "WEFTCKP2" /* 2: the model gained its mixture-of-experts fields */

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
  if (!ok) fprintf(stderr, "checkpoint: rank %d: cannot write %s\n", rank, path);
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
  if (!nranks) return fprintf(stderr, "checkpoint: no %s.rank0-of-N\n", prefix), -1;
  if (found > 1) /* an older run's files under the same prefix: which one is meant? */
    return fprintf(stderr,
                   "checkpoint: %s holds checkpoints of %d rank counts; remove the stale ones\n",
                   prefix, found),
           -1;
  for (int r = 0; r < nranks; r++) {
    name(path, sizeof path, prefix, r, nranks);
    if (load_one(path, c, nb, b, r, &nranks, step, full))
      return fprintf(stderr, "checkpoint: %s is missing, short, or of another model\n", path), -1;
  }
  return 0;
}

int ckpt_blocks(const gpt_t *m, ckpt_block_t *b) {
  for (int i = 0; i < m->c.layers + 2; i++)
    b[i] = (ckpt_block_t){gpt_block_first(m, gpt_block_at(m, i)),
                          gpt_block_size(m, gpt_block_at(m, i))};
  return m->c.layers + 2;
}

/* The blocks' order (every layer, the final norm, the embeddings) as one flat array: from
 * the model's order (to = 1) or back. */
static void reorder(const ckpt_block_t *b, int nb, float *flat, float *blocks, int to) {
  for (int i = 0, at = 0; i < nb; at += (int)b[i].size, i++)
    memcpy(to ? blocks + at : flat + b[i].first, to ? flat + b[i].first : blocks + at,
           b[i].size * sizeof *flat);
}

int ckpt_save_whole(const char *prefix, int step, const gpt_t *m, float *const arr[3]) {
  ckpt_block_t *b = calloc((size_t)m->c.layers + 2, sizeof *b);
  float *o[3] = {0};
  int rc = -1, nb = b ? ckpt_blocks(m, b) : 0;
  for (int a = 0; a < 3 && b; a++)
    if ((o[a] = malloc(m->nparams * sizeof *o[a]))) reorder(b, nb, arr[a], o[a], 1);
  if (b && o[0] && o[1] && o[2]) rc = ckpt_save(prefix, 0, 1, step, &m->c, nb, b, o[0], o[1], o[2]);
  free(o[0]), free(o[1]), free(o[2]), free(b);
  return rc;
}

int ckpt_load_whole(const char *prefix, const gpt_t *m, float *const arr[3], int *step) {
  ckpt_block_t *b = calloc((size_t)m->c.layers + 2, sizeof *b);
  int rc = -1;
  if (b) rc = ckpt_load(prefix, &m->c, ckpt_blocks(m, b), b, arr[0], arr[1], arr[2], step);
  free(b);
  return rc;
}

int ckpt_save_split(const char *prefix, int step, const gpt_t *part, float *const arr[3],
                    weft_comm_t group, int whole, int writer) {
  gpt_t full;
  float *f[3] = {0};
  int bad = gpt_init(&full, &part->c, 1) != 0;
  for (int a = 0; a < 3 && !bad; a++)
    bad = !(f[a] = calloc(full.nparams, sizeof *f[a]));
  if (!run_any_rank(group, bad)) {
    for (int a = 0; a < 3 && !bad; a++) {
      gpt_unshard(&full, part, arr[a], f[a], whole);
      if (weft_allreduce(f[a], f[a], full.nparams, WEFT_F32, WEFT_SUM, group, NULL) != WEFT_SUCCESS)
        bad = 1,
        fprintf(stderr, "checkpoint: gathering the shards: %s\n", weft_get_last_error(group));
    }
    if (!bad && writer) bad = ckpt_save_whole(prefix, step, &full, f) != 0;
  } else {
    bad = 1;
  }
  for (int a = 0; a < 3; a++)
    free(f[a]);
  gpt_free(&full);
  return bad ? -1 : 0;
}

int ckpt_load_split(const char *prefix, const gpt_t *part, float *const arr[3], int *step) {
  gpt_t full;
  float *f[3] = {0};
  int rc = gpt_init(&full, &part->c, 1) ? -1 : 0;
  for (int a = 0; a < 3 && !rc; a++)
    rc = (f[a] = malloc(full.nparams * sizeof *f[a])) ? 0 : -1;
  if (!rc) rc = ckpt_load_whole(prefix, &full, f, step);
  for (int a = 0; a < 3 && !rc; a++)
    gpt_shard(&full, part, f[a], arr[a]);
  for (int a = 0; a < 3; a++)
    free(f[a]);
  gpt_free(&full);
  return rc;
}
