/* ZeRO stages 0-3 over weft: see zero.h. A block (a layer, the final norm, the embeddings)
 * is the unit of every reduction and gather; each rank owns an equal shard of each block (the
 * last padded). Gradients are reduced on one stream as the backward finishes each block;
 * stage 3 gathers parameters on a second communicator and stream, one layer ahead. Every
 * array lives in the model's back end (ops.h): on the GPU the gradient and parameter
 * communicators are device communicators split from the caller's. */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "data.h"
#include "trace.h"
#include "zero.h"

typedef struct {
  size_t first, size, shard; /* flat offset, floats, floats per rank (size rounded up) */
  size_t at;                 /* its shard's offset in the sharded arrays */
  float *stage;              /* stage 1: [nranks * shard] the reduce-scatter's input */
} block_t;

typedef struct {
  const zero_opts_t *o;
  const gpt_t *m;
  const gpt_ops_t *ops;    /* the back end every array below lives in */
  weft_comm_t comm, gcomm; /* the caller's (host buffers); the gradients' */
  weft_comm_t pcomm;       /* stage 3's parameter gathers */
  void *gs, *ps;           /* the gradients' and the gathers' streams (ops.h) */
  int rank, nranks, nb, failed, backward;
  double waited; /* seconds this step waited for parameter gathers and gradient slots */
  trace_t *tr;   /* o->trace: this rank's spans */
  block_t *b;
  float *params, *grads;  /* stages 0-2: full parameters; 0-1: full gradients */
  float *pshard, *gshard; /* stage 3: parameter shards; stages 1-3: reduced gradient shards */
  /* stages 2-3: gradient working blocks ([nranks * shard] each): two layer slots, the
   * embeddings, the final norm; busy: a reduce-scatter may still read the slot */
  float *work[4];
  int busy[2];
  /* stage 3: gathered blocks, same shapes; held[s]: the layer in slot s (-1: none) */
  float *full[4];
  int held[2];
} run_t;

/* Calls back-end operation f (ops.h). */
#define BE(f, ...) r->ops->vt->f(r->ops->ctx, __VA_ARGS__)

static int finish(run_t *r) { return r->ops->vt->finish(r->ops->ctx); }

static int index_of(const run_t *r, int block) {
  return block == GPT_FINAL ? r->nb - 2 : block == GPT_EMBED ? r->nb - 1 : block;
}

/* Block i's shard here: its first element in the block, and how many are real (the last
 * rank's shard may be padding, in part or whole). */
static size_t shard_lo(const run_t *r, int i) { return (size_t)r->rank * r->b[i].shard; }
static size_t shard_n(const run_t *r, int i) {
  size_t lo = shard_lo(r, i), n = lo < r->b[i].size ? r->b[i].size - lo : 0;
  return n < r->b[i].shard ? n : r->b[i].shard;
}

static void fail(run_t *r, const char *what, weft_comm_t c) {
  if (!r->failed) fprintf(stderr, "zero: rank %d: %s: %s\n", r->rank, what, weft_get_last_error(c));
  r->failed = 1;
}

/* A block's working slot (stages 2-3): layers alternate between two, the others have one. */
static int slot_of(int block) {
  return block == GPT_EMBED ? 2 : block == GPT_FINAL ? 3 : block % 2;
}

/* ---- parameters (stage 3: gathered on demand, the next layer prefetched) ---- */

static void gather(run_t *r, int block) {
  block_t *b = &r->b[index_of(r, block)];
  int s = slot_of(block);
  if (s < 2) r->held[s] = block;
  if (r->o->mode == RUN_COMPUTE_ONLY) return;
  trace_issue(r->tr, 1, "gather", block, run_now_s());
  BE(fence, r->ps); /* the slot's last reader is done */
  if (weft_allgather(r->pshard + b->at, r->full[s], b->shard, WEFT_F32, r->pcomm, r->ps) !=
      WEFT_SUCCESS)
    fail(r, "gathering parameters", r->pcomm);
}

/* Waits for a stream, counting the time as the step's waiting (and the trace's). */
static void wait_for(run_t *r, void *s, weft_comm_t c, const char *what) {
  if (run_wait(r->ops, s, c, r->tr, s == r->ps, what, &r->waited)) fail(r, what, c);
}

static const float *params_of(void *arg, int block) {
  run_t *r = arg;
  if (r->o->stage < 3) return r->params + r->b[index_of(r, block)].first;
  int s = slot_of(block), next = r->backward ? block - 1 : block + 1;
  if (block >= 0) {
    if (r->held[s] != block) gather(r, block);
    wait_for(r, r->ps, r->pcomm, "gathering parameters");
    if (next >= 0 && next < r->m->c.layers && r->held[slot_of(next)] != next) gather(r, next);
  } else if (block == GPT_EMBED && !r->backward) { /* a step's first block: both small ones */
    gather(r, GPT_EMBED), gather(r, GPT_FINAL);
    wait_for(r, r->ps, r->pcomm, "gathering parameters");
    gather(r, 0);
  }
  return r->full[s];
}

/* ---- gradients ---- */

static float *grads_of(void *arg, int block) {
  run_t *r = arg;
  block_t *b = &r->b[index_of(r, block)];
  if (r->o->stage < 2) return r->grads + b->first;
  int s = slot_of(block);
  if (s < 2 && r->busy[s]) { /* the slot's last reduce-scatter must be done with it */
    wait_for(r, r->gs, r->gcomm, "reducing gradients");
    r->busy[0] = r->busy[1] = 0;
  }
  BE(zero, r->work[s], b->shard * (size_t)r->nranks * sizeof(float));
  return r->work[s];
}

/* The block's gradients are final: reduce them (stage 0: allreduce in place; 1-3: a
 * reduce-scatter into this rank's shard). */
static void reduce(run_t *r, int block) {
  block_t *b = &r->b[index_of(r, block)];
  size_t lo = shard_lo(r, index_of(r, block)), pad = b->shard * (size_t)r->nranks - b->size;
  float *g = r->o->stage < 2 ? r->grads + b->first : r->work[slot_of(block)];
  weft_result_t rc = WEFT_SUCCESS;
  if (r->o->stage == 1) { /* the flat gradients have no padding: a padded copy */
    BE(copy, b->stage, g, b->size * sizeof *g);
    BE(zero, b->stage + b->size, pad * sizeof *g);
    g = b->stage;
  }
  BE(fence, r->gs);                                              /* the block's backward is done */
  if (r->o->wrong_reduction || r->o->mode == RUN_COMPUTE_ONLY) { /* each keeps its own */
    if (r->o->stage > 0) BE(copy, r->gshard + b->at, g + lo, b->shard * sizeof *g);
  } else if (r->o->stage == 0) {
    trace_issue(r->tr, 0, "allreduce", block, run_now_s());
    rc = weft_allreduce(g, g, b->size, WEFT_F32, WEFT_SUM, r->gcomm, r->gs);
  } else {
    trace_issue(r->tr, 0, "reduce-scatter", block, run_now_s());
    rc = weft_reduce_scatter(g, r->gshard + b->at, b->shard, WEFT_F32, WEFT_SUM, r->gcomm, r->gs);
  }
  if (rc != WEFT_SUCCESS) fail(r, "reducing gradients", r->gcomm);
  if (r->o->stage >= 2 && slot_of(block) < 2) r->busy[slot_of(block)] = 1;
  if (r->o->stage >= 2 && !r->o->overlap) wait_for(r, r->gs, r->gcomm, "reducing gradients");
}

static void block_done(void *arg, int block) {
  run_t *r = arg;
  /* stages 0-1 keep every gradient until the end, so they can wait; 2-3 reuse the slots */
  if (r->o->overlap || r->o->stage >= 2) reduce(r, block);
}

/* ---- the update ---- */

/* AdamW on this rank's shard of every block; stages 1-2 then gather the shards back into
 * every rank's full parameters (one block at a time, through scratch). */
static int update(run_t *r, float *am, float *av, int step, float *scratch) {
  for (int i = 0; i < r->nb; i++) {
    block_t *b = &r->b[i];
    size_t lo = shard_lo(r, i), n = shard_n(r, i);
    float *p = r->o->stage == 3 ? r->pshard + b->at : r->params + b->first + lo;
    if (r->o->mode != RUN_COMM_ONLY)
      BE(adamw, &r->o->opt, step, p, r->gshard + b->at, am + b->at, av + b->at, n);
    if (r->o->stage == 3 || r->o->mode == RUN_COMPUTE_ONLY) continue;
    float *mine = scratch + lo; /* the gather's own block, padded */
    BE(copy, mine, p, n * sizeof *p);
    BE(zero, mine + n, (b->shard - n) * sizeof *p);
    int id = gpt_block_at(r->m, i);
    trace_issue(r->tr, 0, "gather", id, run_now_s());
    BE(fence, r->gs);
    if (weft_allgather(mine, scratch, b->shard, WEFT_F32, r->gcomm, r->gs) != WEFT_SUCCESS)
      return fail(r, "gathering parameters", r->gcomm), -1;
    wait_for(r, r->gs, r->gcomm, "gathering parameters");
    if (r->failed) return -1;
    BE(copy, r->params + b->first, scratch, b->size * sizeof *p);
  }
  return 0;
}

/* The first step's reduced gradients into o->first_grads (zero.h); nonzero on a failed copy. */
static int copy_first_grads(run_t *r) {
  float *out = r->o->first_grads;
  if (r->o->stage == 0) return BE(get, out, r->grads, r->m->nparams * sizeof *out);
  int bad = 0;
  for (int i = 0; i < r->nb; i++)
    bad |= BE(get, out + r->b[i].first + shard_lo(r, i), r->gshard + r->b[i].at,
              shard_n(r, i) * sizeof *out);
  return bad;
}

/* ---- checkpoints ---- */

static int save(run_t *r, const float *am, const float *av, int step) {
  size_t S = r->b[r->nb - 1].at + r->b[r->nb - 1].shard;
  float *sp = calloc(S ? S : 1, 4), *sm = calloc(S ? S : 1, 4), *sv = calloc(S ? S : 1, 4);
  ckpt_block_t *cb = r->nb > 0 ? calloc((unsigned)r->nb, sizeof *cb) : NULL;
  int rc = -1, bad = 0;
  if (sp && sm && sv && cb) {
    for (int i = 0; i < r->nb; i++) {
      const block_t *b = &r->b[i];
      size_t lo = shard_lo(r, i), n = shard_n(r, i), o = r->o->stage == 0 ? b->first + lo : b->at;
      cb[i] = (ckpt_block_t){b->first, b->size};
      bad |= BE(get, sp + b->at, r->o->stage == 3 ? r->pshard + b->at : r->params + b->first + lo,
                n * 4);
      bad |= BE(get, sm + b->at, am + o, n * 4) | BE(get, sv + b->at, av + o, n * 4);
    }
    if (!bad) rc = ckpt_save(r->o->save, r->rank, r->nranks, step, &r->m->c, r->nb, cb, sp, sm, sv);
  }
  free(sp), free(sm), free(sv), free(cb);
  return rc;
}

/* The checkpoint's full arrays into this stage's parameters and moments; *step from it. */
static int load(run_t *r, float *am, float *av, int *step) {
  size_t P = r->m->nparams;
  float *p = calloc(P, 4), *m = calloc(P, 4), *v = calloc(P, 4);
  ckpt_block_t *cb = r->nb > 0 ? calloc((unsigned)r->nb, sizeof *cb) : NULL;
  int rc = -1;
  for (int i = 0; cb && i < r->nb; i++)
    cb[i] = (ckpt_block_t){r->b[i].first, r->b[i].size};
  if (p && m && v && cb && !ckpt_load(r->o->load, &r->m->c, r->nb, cb, p, m, v, step)) {
    if (r->params) BE(put, r->params, p, P * 4);
    for (int i = 0; i < r->nb; i++) {
      const block_t *b = &r->b[i];
      size_t lo = shard_lo(r, i), n = r->o->stage == 0 ? b->size : shard_n(r, i);
      size_t from = b->first + (r->o->stage == 0 ? 0 : lo), to = r->o->stage == 0 ? from : b->at;
      BE(put, am + to, m + from, n * 4), BE(put, av + to, v + from, n * 4);
      if (r->o->stage == 3) BE(put, r->pshard + b->at, p + b->first + lo, n * 4);
    }
    rc = 0;
  }
  free(p), free(m), free(v), free(cb);
  return rc;
}

/* ---- setup and the loop ---- */

/* n floats of the back end's, zeroed; *bad set when out of memory. */
static float *alloc_f(run_t *r, size_t n, int *bad) {
  float *p = BE(alloc, (n ? n : 1) * sizeof(float));
  if (!p) *bad = 1;
  return p;
}

/* Blocks and every array of the stage; -1 when out of memory. */
static int setup(run_t *r, size_t *opt_n, size_t *state) {
  const gpt_t *m = r->m;
  int L = m->c.layers, bad = 0, st = r->o->stage;
  size_t P = m->nparams, S = 0, n = (size_t)r->nranks;
  r->nb = L + 2;
  r->b = calloc((size_t)r->nb, sizeof *r->b);
  if (!r->b) return -1;
  for (int i = 0; i < r->nb; i++) {
    block_t *b = &r->b[i];
    b->first = gpt_block_first(m, gpt_block_at(m, i)),
    b->size = gpt_block_size(m, gpt_block_at(m, i));
    b->shard = (b->size + n - 1) / n, b->at = S, S += b->shard;
    if (st == 1) b->stage = alloc_f(r, b->shard * n, &bad);
  }
  *opt_n = st == 0 ? P : S;
  if (st < 3) r->params = alloc_f(r, P, &bad);
  if (st < 2) r->grads = alloc_f(r, P, &bad);
  if (st > 0) r->gshard = alloc_f(r, S, &bad);
  if (st == 3) r->pshard = alloc_f(r, S, &bad);
  for (int s = 0; s < 4 && st >= 2; s++) {
    size_t f = r->b[s < 2 ? 0 : s == 2 ? r->nb - 1 : r->nb - 2].shard * n;
    r->work[s] = alloc_f(r, f, &bad);
    if (st == 3) r->full[s] = alloc_f(r, f, &bad);
  }
  r->held[0] = r->held[1] = -1;
  /* what persists between steps: parameters, gradients, AdamW's two moments */
  size_t pf = st < 3 ? P : S, gf = st < 2 ? P : S;
  *state = (pf + gf + 2 * *opt_n) * sizeof(float);
  return bad ? -1 : 0;
}

/* The communicators and streams first (their queued work may use the arrays), then the
 * arrays. */
static void teardown(run_t *r) {
  if (!r->ops) return;
  finish(r);
  if (r->gs) BE(stream_wait, r->gs);
  if (r->ps && r->ps != r->gs) BE(stream_wait, r->ps);
  if (r->pcomm) weft_comm_destroy(r->pcomm);
  if (r->gcomm && r->gcomm != r->comm) weft_comm_destroy(r->gcomm);
  if (r->ps && r->ps != r->gs) BE(stream_close, r->ps);
  if (r->gs) BE(stream_close, r->gs);
  for (int i = 0; r->b && i < r->nb; i++)
    BE(release, r->b[i].stage);
  for (int s = 0; s < 4; s++)
    BE(release, r->work[s]), BE(release, r->full[s]);
  BE(release, r->params), BE(release, r->grads), BE(release, r->pshard), BE(release, r->gshard);
  free(r->b);
}

int zero_train(weft_comm_t comm, const zero_opts_t *o, float *losses, run_stats_t *stats) {
  run_t run = {.o = o, .comm = comm}, *r = &run;
  gpt_t m = {0};
  gpt_ops_t ops = gpt_ops_cpu;
  data_t data = {0};
  weft_comm_rank(comm, &r->rank);
  weft_comm_count(comm, &r->nranks);
  int T = o->model.seq, B = o->batch, rc = -1;
  size_t opt_n = 0, state = 0, maxblock = 0;
  float *am = NULL, *av = NULL, *init = NULL, *scratch = NULL;
  int *tok = malloc(sizeof(int) * (size_t)B * T), *tgt = malloc(sizeof(int) * (size_t)B * T);
  weft_config_t host = WEFT_CONFIG_INIT, dev = WEFT_CONFIG_INIT;
  r->m = &m, r->ops = &ops;
  int bad = run_backend("zero", r->rank, o->gpu, o->bf16, &ops, &dev);
  bad = bad || o->stage < 0 || o->stage > 3 || o->model.vocab < DATA_VOCAB || T < 1 || T > 4096 ||
        !tok || !tgt || gpt_init_on(&m, &ops, &o->model, B, 1, 0, 0) ||
        data_init(&data, 1u << 16, o->seed) || setup(r, &opt_n, &state) || BE(stream_open, &r->gs);
  if (bad) fprintf(stderr, "zero: rank %d: bad options, no device or out of memory\n", r->rank);
  if (run_any_rank(comm, bad)) goto out;
  /* the GPU's gradients and gathers: device communicators, issued on one stream, since two
   * device communicators whose kernels do not fit on the GPU together (ranks sharing it)
   * must not run at once (docs/gpu.md, Ordering) */
  r->gcomm = comm;
  if (o->gpu && weft_comm_split(comm, 0, r->rank, &r->gcomm, &dev) != WEFT_SUCCESS)
    r->gcomm = NULL, bad = 1;
  if (!bad && o->stage == 3 &&
      weft_comm_split(comm, 0, r->rank, &r->pcomm, o->gpu ? &dev : &host) != WEFT_SUCCESS)
    bad = 1;
  if (!bad && o->stage == 3) bad = o->gpu ? (r->ps = r->gs, 0) : BE(stream_open, &r->ps);
  if (bad)
    fprintf(stderr, "zero: rank %d: the communicators: %s\n", r->rank, weft_get_last_error(comm));
  if (run_any_rank(comm, bad)) goto out;
  for (int i = 0; i < r->nb; i++)
    maxblock =
        r->b[i].shard * (size_t)r->nranks > maxblock ? r->b[i].shard * (size_t)r->nranks : maxblock;
  am = alloc_f(r, opt_n, &bad), av = alloc_f(r, opt_n, &bad);
  scratch = alloc_f(r, maxblock, &bad);
  init = run_alloc(m.nparams, &bad); /* every rank draws the same weights, then keeps its part */
  if (!bad) {
    gpt_init_params(&m, init, o->seed);
    if (o->stage < 3) BE(put, r->params, init, m.nparams * sizeof *init);
    for (int i = 0; i < r->nb && o->stage == 3; i++) {
      block_t *b = &r->b[i];
      BE(put, r->pshard + b->at, init + b->first + shard_lo(r, i), shard_n(r, i) * sizeof *init);
    }
  }
  free(init), init = NULL;
  int first = 0; /* optimizer steps taken before this run (a loaded checkpoint's) */
  if (!bad && o->load) bad = load(r, am, av, &first);
  if (!bad && o->trace) bad = !(r->tr = trace_new(run_now_s()));
  if (run_any_rank(comm, bad)) goto out;
  gpt_io_t io = {.params = params_of, .grads = grads_of, .done = block_done, .arg = r};
  run_clock_t clock = {0};
  for (int s = 0; s < o->steps && !r->failed; s++) {
    double t0 = run_now_s();
    for (int i = 0; i < B; i++) /* this rank's part of the global batch */
      data_sample(&data, (size_t)(first + s) * B * r->nranks + (size_t)r->rank * B + i, T,
                  tok + i * T, tgt + i * T);
    r->backward = 0, r->waited = 0;
    int math = o->mode != RUN_COMM_ONLY;
    double tf = run_now_s();
    float loss = math ? gpt_forward(&m, &io, tok, tgt, B) : (gpt_io_replay(&m, &io, B, 0), 0.0f);
    trace_span(r->tr, TRACE_COMPUTE, "forward", tf, run_now_s());
    float total = loss;
    if (r->grads && math) BE(zero, r->grads, m.nparams * sizeof *r->grads);
    r->backward = 1, tf = run_now_s();
    if (math)
      gpt_backward(&m, &io, B, 1.0f / (float)r->nranks);
    else
      gpt_io_replay(&m, &io, B, 1);
    if (finish(r)) fail(r, "the backward", comm); /* the GPU's queue: the backward's end */
    trace_span(r->tr, TRACE_COMPUTE, "backward", tf, run_now_s());
    for (int i = 0; i < r->nb && !o->overlap && o->stage < 2; i++)
      reduce(r, gpt_block_at(&m, i < m.c.layers ? m.c.layers - 1 - i : i)); /* last layer first */
    wait_for(r, r->gs, r->gcomm, "reducing gradients");
    if (s == 0 && o->first_grads && math && copy_first_grads(r))
      fail(r, "copying the gradients out", comm);
    r->busy[0] = r->busy[1] = 0, r->held[0] = r->held[1] = -1; /* parameters change below */
    double tw = run_now_s(), wait = r->waited;
    if (run_any_rank(comm, r->failed)) break; /* a rank that failed alone stops them all */
    if (o->stage == 0 && math)
      BE(adamw, &o->opt, first + s + 1, r->params, r->grads, am, av, m.nparams);
    else if (o->stage > 0 && update(r, am, av, first + s + 1, scratch))
      break;
    trace_span(r->tr, TRACE_COMPUTE, "update", tw, run_now_s());
    if (o->stage == 1 || o->stage == 2) wait += run_now_s() - tw; /* mostly the gathers */
    if (o->mode == RUN_COMPUTE_ONLY)
      total *= (float)r->nranks; /* this rank's loss stands for the mean */
    else if (weft_allreduce(&loss, &total, 1, WEFT_F32, WEFT_SUM, comm, NULL) != WEFT_SUCCESS) {
      fail(r, "averaging the loss", comm);
      break;
    }
    losses[s] = total / (float)r->nranks;
    double dt = run_now_s() - t0;
    run_clock_add(&clock, dt, wait);
    if (o->log && r->rank == 0)
      fprintf(o->log, "step %d loss %.6f tokens/s %.0f comm_wait %.1f%%\n", first + s + 1,
              losses[s], (double)B * T * r->nranks / dt, 100.0 * wait / dt);
  }
  run_stats_fill(stats, &clock, state / sizeof(float));
  rc = r->failed ? -1 : 0;
  /* every rank's file is complete before any rank returns (and a reader starts) */
  if (!rc && o->save && run_any_rank(comm, save(r, am, av, first + o->steps) != 0)) rc = -1;
  if (!rc && r->tr && trace_write(r->tr, o->trace, comm, r->rank, r->nranks)) rc = -1;
out:
  trace_free(r->tr);
  teardown(r);
  BE(release, am), BE(release, av), BE(release, scratch);
  free(init), free(tok), free(tgt);
  gpt_free(&m);
  gpt_ops_close(&ops);
  data_free(&data);
  return rc;
}
