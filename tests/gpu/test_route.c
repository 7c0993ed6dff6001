/* The MoE route kernels (src/moe/route.cu) against a host model, one process on one GPU:
 * every array of the send side, the counts and the lowest bad choice, copied to host memory
 * by the kernels (as a device layout asks) or not (as low-latency mode's does), over shapes
 * that take each of their paths: no tokens, one tile, many (test_moe's batches fit in one),
 * bins past what shared memory holds, top-32, int32 and int64 ids, dropped choices, a bad
 * and a repeated id, and every token on one expert (a low-latency block exactly full: a rank
 * sends its max_tokens tokens to one expert, whose count and rank's must be all of them).
 * usage: test_route */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "moe_kernels.h"

#define FAIL(...)                                                                                  \
  do {                                                                                             \
    fprintf(stderr, "test_route: " __VA_ARGS__);                                                   \
    fprintf(stderr, "\n");                                                                         \
    return 1;                                                                                      \
  } while (0)

typedef struct {
  uint64_t tokens;
  int k, experts, nranks, id_bytes;
  uint64_t bad_at; /* a choice made out of range (UINT64_MAX: none) */
  uint64_t dup_at; /* a choice made equal to the one before it in its token (or none) */
  int full;        /* 1 + the expert every token's first choice is (0: none) */
} shape_t;

typedef struct { /* what the kernels give, read back */
  int64_t *counts, *host;
  uint64_t bad, *send_off, *send_list, *entries;
  int32_t *pos, *meta;
} route_t;

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t z = a * 0x9e3779b97f4a7c15ULL + b + 0x632be59bd9b4e019ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* k distinct experts a token, about one in seven dropped (-1), expert 0 chosen more often;
 * with full, the first choice is that expert */
static void make_ids(const shape_t *s, int64_t *ids) {
  for (uint64_t t = 0; t < s->tokens; t++)
    for (int j = 0; j < s->k; j++) {
      int64_t v;
      for (uint64_t tries = 0;; tries++) {
        uint64_t r = mix(t * 64 + (uint64_t)j, tries);
        v = r % 7 == 0 ? -1 : r % 5 == 0 ? 0 : (int64_t)(r / 7 % (uint64_t)s->experts);
        if (s->full && j == 0) v = s->full - 1;
        int seen = 0;
        for (int i = 0; i < j && v >= 0; i++)
          seen |= ids[t * s->k + i] == v;
        if (!seen) break;
      }
      ids[t * s->k + j] = v;
    }
  if (s->bad_at != UINT64_MAX) ids[s->bad_at] = s->experts + 3;
  if (s->dup_at != UINT64_MAX) ids[s->dup_at] = ids[s->dup_at - 1] >= 0 ? ids[s->dup_at - 1] : 1;
}

/* The model's send side, compared with r; 0 when every value matches. */
static int check(const shape_t *s, const int64_t *ids, const route_t *r, const char *how) {
  const int k = s->k, E = s->experts, n = s->nranks, local = E / n, w = k < n ? k : n;
  const uint64_t T = s->tokens;
  int64_t *cnt = calloc((size_t)(E + n), sizeof *cnt);
  uint64_t *off = calloc((size_t)n + 1, sizeof *off), bad = UINT64_MAX;
  int rc = 1;
  if (!cnt || !off) goto out;
  for (uint64_t t = 0; t < T; t++)
    for (int j = 0; j < k; j++) {
      int64_t e = ids[t * k + j];
      int wrong = e < -1 || e >= E;
      for (int i = 0; i < j && !wrong && e >= 0; i++)
        wrong = ids[t * k + i] == e;
      if (wrong && bad == UINT64_MAX) bad = t * (uint64_t)k + (uint64_t)j;
    }
  if (r->bad != bad || (uint64_t)r->host[E + n] != bad) {
    fprintf(stderr, "test_route: %s: bad choice %llu (host %llu), expected %llu\n", how,
            (unsigned long long)r->bad, (unsigned long long)r->host[E + n],
            (unsigned long long)bad);
    goto out;
  }
  if (bad != UINT64_MAX) { /* refused: only the verdict counts */
    rc = 0;
    goto out;
  }
  for (uint64_t t = 0; t < T; t++) {
    int to[64] = {0};
    for (int j = 0; j < k; j++)
      if (ids[t * k + j] >= 0) cnt[ids[t * k + j]]++, to[ids[t * k + j] / local] = 1;
    for (int q = 0; q < n; q++)
      cnt[E + q] += to[q];
  }
  for (int b = 0; b < E + n; b++)
    if (r->counts[b] != cnt[b] || r->host[b] != cnt[b]) {
      fprintf(stderr, "test_route: %s: bin %d counts %lld (host %lld), expected %lld\n", how, b,
              (long long)r->counts[b], (long long)r->host[b], (long long)cnt[b]);
      goto out;
    }
  for (int q = 0; q < n; q++)
    off[q + 1] = off[q] + (uint64_t)cnt[E + q];
  for (int q = 0; q <= n; q++)
    if (r->send_off[q] != off[q]) {
      fprintf(stderr, "test_route: %s: send_off[%d] %llu, expected %llu\n", how, q,
              (unsigned long long)r->send_off[q], (unsigned long long)off[q]);
      goto out;
    }
  /* walk the tokens in order: a token's index in each rank's list and each choice's in its
   * expert's are what came before */
  memset(cnt, 0, (size_t)(E + n) * sizeof *cnt);
  for (uint64_t t = 0; t < T; t++) {
    int q = 0;
    for (int d = 0; d < n; d++) {
      int goes = 0;
      for (int j = 0; j < k; j++)
        goes |= ids[t * k + j] >= 0 && ids[t * k + j] / local == d;
      int32_t want = goes ? (int32_t)cnt[E + d] : -1;
      if (r->pos[t * n + d] != want) {
        fprintf(stderr, "test_route: %s: pos[%llu][%d] %d, expected %d\n", how,
                (unsigned long long)t, d, r->pos[t * n + d], want);
        goto out;
      }
      if (!goes) continue;
      uint64_t e = off[d] + (uint64_t)cnt[E + d]++;
      if (r->entries[t * w + q] != e || r->send_list[e] != t) {
        fprintf(stderr, "test_route: %s: token %llu's entry %d: %llu (list %llu), expected %llu\n",
                how, (unsigned long long)t, q, (unsigned long long)r->entries[t * w + q],
                (unsigned long long)r->send_list[e], (unsigned long long)e);
        goto out;
      }
      const int32_t *m = r->meta + e * (uint64_t)(k + 1) * 2;
      for (int j = 0; j < k; j++) {
        int64_t x = ids[t * k + j];
        int mine = x >= 0 && x / local == d;
        int32_t l = mine ? (int32_t)(x - d * local) : -1, at = mine ? (int32_t)cnt[x] : 0;
        if (m[2 * j] != l || m[2 * j + 1] != at) {
          fprintf(stderr, "test_route: %s: entry %llu choice %d: (%d, %d), expected (%d, %d)\n",
                  how, (unsigned long long)e, j, m[2 * j], m[2 * j + 1], l, at);
          goto out;
        }
      }
      if (m[2 * k] != (int32_t)t) {
        fprintf(stderr, "test_route: %s: entry %llu names token %d, expected %llu\n", how,
                (unsigned long long)e, m[2 * k], (unsigned long long)t);
        goto out;
      }
      q++;
    }
    for (; q < w; q++)
      if (r->entries[t * w + q] != WEFT_MOE_K_NO_ROW) {
        fprintf(stderr, "test_route: %s: token %llu's entry %d is set\n", how,
                (unsigned long long)t, q);
        goto out;
      }
    for (int j = 0; j < k; j++)
      if (ids[t * k + j] >= 0) cnt[ids[t * k + j]]++;
  }
  rc = 0;
out:
  free(cnt), free(off);
  return rc;
}

#define CUDA(call)                                                                                 \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) FAIL("%s: %s (line %d)", #call, cudaGetErrorString(e_), __LINE__);      \
  } while (0)

/* One shape on st; the counts copied to host too unless host is NULL. */
static int run(const shape_t *s, int64_t *host, cudaStream_t st) {
  const int k = s->k, E = s->experts, n = s->nranks, w = k < n ? k : n;
  const uint64_t T = s->tokens;
  size_t mask_b, before_b, cells = (size_t)(E + n + 1);
  char how[160];
  snprintf(how, sizeof how, "%llu tokens, top-%d of %d experts, %d ranks, int%d ids, %s",
           (unsigned long long)T, k, E, n, s->id_bytes * 8,
           host ? "host counts" : "no host counts");
  if (!weft_moe_k_route_scratch(T, E, n, &mask_b, &before_b)) FAIL("%s: scratch", how);
  int64_t *ids = malloc((T ? T : 1) * (size_t)k * 8);
  void *ids_in = malloc((T ? T : 1) * (size_t)k * 8);
  route_t r = {.counts = malloc(cells * 8),
               .host = host,
               .send_off = malloc(((size_t)n + 1) * 8),
               .send_list = malloc((T ? T : 1) * (size_t)w * 8),
               .entries = malloc((T ? T : 1) * (size_t)w * 8),
               .pos = malloc((T ? T : 1) * (size_t)n * 4),
               .meta = malloc((T ? T : 1) * (size_t)w * (size_t)(k + 1) * 8)};
  if (!ids || !ids_in || !r.counts || !r.send_off || !r.send_list || !r.entries || !r.pos ||
      !r.meta)
    FAIL("%s: out of memory", how);
  make_ids(s, ids);
  for (uint64_t i = 0; i < T * (uint64_t)k; i++)
    if (s->id_bytes == 4)
      ((int32_t *)ids_in)[i] = (int32_t)ids[i];
    else
      ((int64_t *)ids_in)[i] = ids[i];
  size_t sz[9] = {T * (size_t)k * (size_t)s->id_bytes,
                  cells * 8,
                  ((size_t)n + 1) * 8,
                  T * (size_t)n * 4,
                  T * (size_t)w * 8,
                  T * (size_t)w * 8,
                  T * (size_t)w * (size_t)(k + 1) * 8,
                  mask_b,
                  before_b};
  void *d[9] = {NULL};
  for (int i = 0; i < 9; i++)
    CUDA(cudaMalloc(&d[i], sz[i] ? sz[i] : 8));
  CUDA(cudaMemcpy(d[0], ids_in, sz[0], cudaMemcpyHostToDevice));
  CUDA(cudaDeviceSynchronize());
  if (host) memset(host, 0xab, cells * 8);
  weft_moe_k_route_t a = {.ids = d[0],
                          .id_bytes = s->id_bytes,
                          .k = k,
                          .experts = E,
                          .nranks = n,
                          .local = E / n,
                          .width = w,
                          .tokens = T,
                          .counts = d[1],
                          .bad = (unsigned long long *)((int64_t *)d[1] + E + n),
                          .send_off = d[2],
                          .pos = d[3],
                          .send_list = d[4],
                          .entries = d[5],
                          .meta = d[6],
                          .mask = d[7],
                          .before = d[8],
                          .host_counts = host};
  int e = weft_moe_k_route_counts(&a, st);
  if (e == 0) e = weft_moe_k_route_place(&a, st);
  if (e) FAIL("%s: launch: %s", how, cudaGetErrorString((cudaError_t)e));
  CUDA(cudaStreamSynchronize(st));
  CUDA(cudaMemcpy(r.counts, d[1], cells * 8, cudaMemcpyDeviceToHost));
  r.bad = (uint64_t)r.counts[E + n];
  if (!host) r.host = r.counts; /* nothing of the host's to compare */
  CUDA(cudaMemcpy(r.send_off, d[2], sz[2], cudaMemcpyDeviceToHost));
  CUDA(cudaMemcpy(r.pos, d[3], sz[3], cudaMemcpyDeviceToHost));
  CUDA(cudaMemcpy(r.send_list, d[4], sz[4], cudaMemcpyDeviceToHost));
  CUDA(cudaMemcpy(r.entries, d[5], sz[5], cudaMemcpyDeviceToHost));
  CUDA(cudaMemcpy(r.meta, d[6], sz[6], cudaMemcpyDeviceToHost));
  int rc = check(s, ids, &r, how);
  /* the full block, said outright: every token counted on the expert and on its rank */
  const int one = s->full - 1, at = E + one / (E / n);
  if (!rc && s->full && (r.counts[one] != (int64_t)T || r.counts[at] != (int64_t)T)) {
    fprintf(stderr, "test_route: %s: expert %d counts %lld, its rank %lld, expected %llu\n", how,
            one, (long long)r.counts[one], (long long)r.counts[at], (unsigned long long)T);
    rc = 1;
  }
  for (int i = 0; i < 9; i++)
    cudaFree(d[i]);
  free(ids), free(ids_in), free(r.counts), free(r.send_off), free(r.send_list), free(r.entries),
      free(r.pos), free(r.meta);
  return rc;
}

int main(void) {
  const uint64_t NONE = UINT64_MAX;
  const shape_t shapes[] = {
      {0, 8, 256, 1, 8, NONE, NONE, 0},
      {1, 1, 4, 2, 4, NONE, NONE, 0},
      {63, 8, 256, 8, 8, NONE, NONE, 0},
      {64, 8, 256, 4, 4, NONE, NONE, 0},
      {65, 3, 16, 2, 8, NONE, NONE, 0},
      {4096, 8, 256, 1, 8, NONE, NONE, 0},
      {4096, 8, 256, 8, 8, NONE, NONE, 0},
      {8192, 8, 256, 8, 4, NONE, NONE, 0},
      {8193, 8, 256, 8, 8, NONE, NONE, 0},
      {20000, 4, 64, 4, 8, NONE, NONE, 0},
      {1000, 8, 8192, 2, 8, NONE, NONE, 0},
      {3000, 4, 4800, 3, 4, NONE, NONE, 0},
      {300, 32, 64, 4, 8, NONE, NONE, 0},
      {500, 8, 256, 4, 8, 300 * 8 + 5, 420 * 8 + 3, 0},
      {9000, 8, 256, 8, 4, NONE, 8999 * 8 + 7, 0},
      /* full blocks: one tile whose masks are all ones (top-1, expert 5), two tiles of top-8
       * on 8 ranks (expert 0), and past a tile with top-2 the last expert (the last rank's) */
      {64, 1, 16, 4, 4, NONE, NONE, 6},
      {128, 8, 256, 8, 8, NONE, NONE, 1},
      {129, 2, 8, 2, 4, NONE, NONE, 8}};
  const int nshapes = (int)(sizeof shapes / sizeof *shapes);
  int ngpu = 0, max_cells = 0;
  cudaStream_t st;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu < 1) FAIL("no GPU");
  CUDA(cudaSetDevice(0));
  CUDA(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  for (int i = 0; i < nshapes; i++)
    if (shapes[i].experts + shapes[i].nranks + 1 > max_cells)
      max_cells = shapes[i].experts + shapes[i].nranks + 1;
  int64_t *host;
  CUDA(cudaHostAlloc((void **)&host, (size_t)max_cells * 8, cudaHostAllocMapped));
  for (int i = 0; i < nshapes; i++)
    if (run(&shapes[i], host, st) || run(&shapes[i], NULL, st)) return 1;
  cudaFreeHost(host);
  printf("test_route: %d shapes, with and without host counts: passed\n", nshapes);
  return 0;
}
