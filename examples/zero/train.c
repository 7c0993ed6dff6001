/* ZeRO stages 0 and 1 over weft: see zero.h. Buckets are the model's layers (last first, as
 * the backward finishes them), then the final norm and the embeddings; ZeRO-1 gives every
 * rank an equal shard of each bucket (the last padded). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data.h"
#include "zero.h"

typedef struct {
  size_t first, size, shard; /* shard: elements per rank, size rounded up over the ranks */
  float *stage;              /* ZeRO-1: [nranks * shard] reduce-scatter input, gather output */
  float *gshard;             /* ZeRO-1: [shard] this rank's reduced gradients */
} bucket_t;

typedef struct {
  const zero_opts_t *o;
  weft_comm_t comm;
  weft_stream_t stream;
  int rank, nranks, nb, failed;
  bucket_t *b;
  float *grads;
} run_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Queues bucket i's reduction on the run's stream (same order on every rank). */
static void reduce_bucket(run_t *r, int i) {
  bucket_t *b = &r->b[i];
  float *g = r->grads + b->first;
  weft_result_t rc = WEFT_SUCCESS;
  if (r->o->wrong_reduction) { /* each rank keeps its own: update_sharded copies them */
  } else if (r->o->stage == 0) {
    rc = weft_allreduce(g, g, b->size, WEFT_F32, WEFT_SUM, r->comm, r->stream);
  } else {
    memcpy(b->stage, g, b->size * sizeof *g);
    memset(b->stage + b->size, 0, (b->shard * (size_t)r->nranks - b->size) * sizeof *g);
    rc = weft_reduce_scatter(b->stage, b->gshard, b->shard, WEFT_F32, WEFT_SUM, r->comm, r->stream);
  }
  if (rc != WEFT_SUCCESS) {
    fprintf(stderr, "zero: rank %d: reducing bucket %d: %s\n", r->rank, i,
            weft_get_last_error(r->comm));
    r->failed = 1;
  }
}

/* The backward's hook: layer l's gradients are final (-1: the embeddings and final norm). */
static void layer_done(int l, void *arg) {
  run_t *r = arg;
  if (!r->o->overlap) return;
  if (l >= 0)
    reduce_bucket(r, r->nb - 3 - l); /* layers are buckets 0.. from the last */
  else
    reduce_bucket(r, r->nb - 2), reduce_bucket(r, r->nb - 1);
}

/* ZeRO-1's update of this rank's shard of every bucket, then every shard gathered. */
static int update_sharded(run_t *r, float *params, float *m, float *v, int step) {
  size_t at = 0;
  for (int i = 0; i < r->nb; i++) {
    bucket_t *b = &r->b[i];
    size_t lo = (size_t)r->rank * b->shard, n = lo < b->size ? b->size - lo : 0;
    n = n < b->shard ? n : b->shard;
    if (r->o->wrong_reduction) memcpy(b->gshard, r->grads + b->first + lo, n * sizeof *m);
    adamw_step(&r->o->opt, step, params + b->first + lo, b->gshard, m + at, v + at, n);
    at += b->shard;
    /* the gather's input is this rank's padded shard, kept in the bucket's own slot */
    float *mine = b->stage + lo;
    memcpy(mine, params + b->first + lo, n * sizeof *m);
    memset(mine + n, 0, (b->shard - n) * sizeof *m);
    if (weft_allgather(mine, b->stage, b->shard, WEFT_F32, r->comm, r->stream) != WEFT_SUCCESS) {
      fprintf(stderr, "zero: rank %d: gathering: %s\n", r->rank, weft_get_last_error(r->comm));
      return -1;
    }
  }
  if (weft_stream_synchronize(r->stream) != WEFT_SUCCESS) return -1;
  for (int i = 0; i < r->nb; i++)
    memcpy(params + r->b[i].first, r->b[i].stage, r->b[i].size * sizeof *params);
  return 0;
}

int zero_train(weft_comm_t comm, const zero_opts_t *o, float *losses, zero_stats_t *stats) {
  run_t r = {.o = o, .comm = comm};
  gpt_t m = {0};
  data_t data = {0};
  weft_comm_rank(comm, &r.rank);
  weft_comm_count(comm, &r.nranks);
  int T = o->model.seq, B = o->batch, rc = -1;
  float *params = NULL, *am = NULL, *av = NULL;
  int *tok = malloc(sizeof(int) * (size_t)B * T), *tgt = malloc(sizeof(int) * (size_t)B * T);
  if (o->stage < 0 || o->stage > 1 || o->model.vocab < DATA_VOCAB || !tok || !tgt ||
      gpt_init(&m, &o->model, B) || data_init(&data, 1u << 16, o->seed) ||
      weft_stream_create(&r.stream) != WEFT_SUCCESS) {
    fprintf(stderr, "zero: rank %d: bad options or out of memory\n", r.rank);
    goto out;
  }
  size_t P = m.nparams, opt_n = P;
  r.nb = o->model.layers + 2;
  r.b = calloc((size_t)r.nb, sizeof *r.b);
  params = malloc(P * sizeof *params), r.grads = malloc(P * sizeof *params);
  if (!r.b || !params || !r.grads) goto oom;
  for (int i = 0; i < r.nb; i++) { /* layers from the last, then the final norm, embeddings */
    bucket_t *b = &r.b[i];
    int l = o->model.layers - 1 - i;
    b->first = i < o->model.layers ? gpt_param(&m, l, 0) : i == r.nb - 2 ? m.lnf : 0;
    b->size = i < o->model.layers ? m.layer_size : i == r.nb - 2 ? P - m.lnf : m.layer_first;
    b->shard = (b->size + (size_t)r.nranks - 1) / (size_t)r.nranks;
    if (o->stage == 1) {
      b->stage = malloc(b->shard * (size_t)r.nranks * sizeof *params);
      b->gshard = malloc(b->shard * sizeof *params);
      if (!b->stage || !b->gshard) goto oom;
    }
  }
  if (o->stage == 1)
    for (int i = opt_n = 0; i < r.nb; i++)
      opt_n += r.b[i].shard;
  am = calloc(opt_n, sizeof *am), av = calloc(opt_n, sizeof *av);
  if (!am || !av) goto oom;
  gpt_init_params(&m, params, o->seed);
  double t_all = 0, t_wait = 0;
  for (int s = 0; s < o->steps; s++) {
    double t0 = now_s();
    for (int i = 0; i < B; i++) /* this rank's part of the global batch */
      data_sample(&data, (size_t)s * B * r.nranks + (size_t)r.rank * B + i, T, tok + i * T,
                  tgt + i * T);
    float loss = gpt_forward(&m, params, tok, tgt, B), total = 0;
    memset(r.grads, 0, P * sizeof *params);
    gpt_backward(&m, params, r.grads, tok, tgt, B, 1.0f / (float)r.nranks, layer_done, &r);
    for (int i = 0; i < r.nb && !o->overlap; i++)
      reduce_bucket(&r, i);
    double tw = now_s(), wait;
    if (r.failed || weft_stream_synchronize(r.stream) != WEFT_SUCCESS) goto fail;
    wait = now_s() - tw;
    if (o->stage == 0) {
      adamw_step(&o->opt, s + 1, params, r.grads, am, av, P);
    } else {
      tw = now_s();
      if (update_sharded(&r, params, am, av, s + 1)) goto fail;
      wait += now_s() - tw; /* the gather, and the shard's update (a small part) */
    }
    t_wait += wait;
    if (weft_allreduce(&loss, &total, 1, WEFT_F32, WEFT_SUM, comm, NULL) != WEFT_SUCCESS) goto fail;
    losses[s] = total / (float)r.nranks;
    double dt = now_s() - t0;
    t_all += dt;
    if (o->log && r.rank == 0)
      fprintf(o->log, "step %d loss %.6f tokens/s %.0f comm_wait %.1f%%\n", s + 1, losses[s],
              (double)B * T * r.nranks / dt, 100.0 * wait / dt);
  }
  if (stats) {
    stats->step_s = o->steps ? t_all / o->steps : 0;
    stats->comm_wait_s = o->steps ? t_wait / o->steps : 0;
    stats->state_bytes = (2 * P + 2 * opt_n) * sizeof(float);
  }
  rc = 0;
  goto out;
oom:
  fprintf(stderr, "zero: rank %d: out of memory\n", r.rank);
  goto out;
fail:
  fprintf(stderr, "zero: rank %d: communication failed: %s\n", r.rank, weft_get_last_error(comm));
out:
  for (int i = 0; r.b && i < r.nb; i++)
    free(r.b[i].stage), free(r.b[i].gshard);
  if (r.stream) weft_stream_destroy(r.stream);
  free(r.b), free(params), free(r.grads), free(am), free(av), free(tok), free(tgt);
  gpt_free(&m);
  data_free(&data);
  return rc;
}
