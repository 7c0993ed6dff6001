/* Tensor parallel x data parallel over weft: see tp.h. Rank r is shard r % tp of model
 * replica r / tp. The shards' reductions and gathers (gpt_io_t's hooks) run on the tensor
 * group's communicator and stream and are waited for at once: the next product needs them.
 * Gradients are allreduced on the data group's, one block at a time, waited for at the end.
 * Arrays live in the model's back end (ops.h); on the GPU both groups are device
 * communicators, and a fence orders each operation after the compute that feeds it. */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "data.h"
#include "tp.h"
#include "trace.h"

typedef struct {
  const tp_opts_t *o;
  const gpt_t *m;
  const gpt_ops_t *ops; /* the back end every array below lives in */
  weft_comm_t tc, dc;   /* the tensor group (the model's shards), the data group (replicas) */
  void *ts, *ds;        /* their streams (ops.h) */
  int rank, tr, dr, dp; /* this rank, its shard, its replica, replicas */
  int failed, block;    /* block: the one the pass is in (for the trace's names) */
  double waited;        /* seconds this step waited for communication */
  trace_t *tr_;
  float *params, *grads, *summed; /* summed: a layer's gpt_tp_summed tensors, packed */
  /* the gather in flight: its chunks, how many gather_next handed out */
  float *full;
  size_t n;
  int handed;
} run_t;

/* Calls back-end operation f (ops.h). */
#define BE(f, ...) r->ops->vt->f(r->ops->ctx, __VA_ARGS__)

static void fail(run_t *r, const char *what, weft_comm_t c) {
  if (!r->failed) fprintf(stderr, "tp: rank %d: %s: %s\n", r->rank, what, weft_get_last_error(c));
  r->failed = 1;
}

static int comm_on(const run_t *r) { return r->o->mode != RUN_COMPUTE_ONLY; }

/* Waits for a stream, counting the time as the step's waiting (and the trace's). */
static void wait_for(run_t *r, void *s, weft_comm_t c, const char *what) {
  if (run_wait(r->ops, s, c, r->tr_, s == r->ds, what, &r->waited)) fail(r, what, c);
}

/* ---- the shards' hooks ---- */

static const float *params_of(void *arg, int block) {
  run_t *r = arg;
  r->block = block;
  return r->params + gpt_block_first(r->m, block);
}

static float *grads_of(void *arg, int block) {
  run_t *r = arg;
  return r->grads + (params_of(arg, block) - r->params);
}

static void reduce(void *arg, const float *partial, float *out, size_t n) {
  run_t *r = arg;
  if (!comm_on(r) || r->o->wrong_reduction) { /* each keeps its own part */
    BE(copy, out, partial + (r->o->sp ? (size_t)r->tr * n : 0), n * sizeof *out);
    return;
  }
  weft_result_t rc;
  BE(fence, r->ts);
  trace_issue(r->tr_, 0, r->o->sp ? "reduce-scatter" : "allreduce", r->block, run_now_s());
  if (r->o->sp)
    rc = weft_reduce_scatter(partial, out, n, WEFT_F32, WEFT_SUM, r->tc, r->ts);
  else
    rc = weft_allreduce(partial, out, n, WEFT_F32, WEFT_SUM, r->tc, r->ts);
  if (rc != WEFT_SUCCESS) fail(r, "reducing the shards' sums", r->tc);
  wait_for(r, r->ts, r->tc, "tensor-parallel reduction");
}

/* Ring step k (1..tp-1) of a gather: chunk tr - k + 1 on to the next rank, chunk tr - k in
 * from the previous one. */
static void ring_step(run_t *r, int k) {
  int tp = r->o->tp, next = (r->tr + 1) % tp, prev = (r->tr + tp - 1) % tp;
  float *out = r->full + (size_t)((r->tr - k + 1 + tp) % tp) * r->n;
  float *in = r->full + (size_t)((r->tr - k + tp) % tp) * r->n;
  trace_issue(r->tr_, 0, "gather", r->block, run_now_s());
  BE(fence, r->ts);
  weft_group_start();
  weft_send(out, r->n, WEFT_F32, next, r->tc, r->ts);
  weft_recv(in, r->n, WEFT_F32, prev, r->tc, r->ts);
  if (weft_group_end() != WEFT_SUCCESS) fail(r, "gathering the shards' rows", r->tc);
}

static void gather(void *arg, const float *shard, float *full, size_t n) {
  run_t *r = arg;
  r->full = full, r->n = n, r->handed = 0;
  BE(copy, full + (size_t)r->tr * n, shard, n * sizeof *full);
  if (!comm_on(r)) return;
  if (r->o->overlap) return ring_step(r, 1);
  trace_issue(r->tr_, 0, "allgather", r->block, run_now_s());
  BE(fence, r->ts);
  if (weft_allgather(shard, full, n, WEFT_F32, r->tc, r->ts) != WEFT_SUCCESS)
    fail(r, "gathering the shards' rows", r->tc);
  wait_for(r, r->ts, r->tc, "tensor-parallel gather");
}

/* This rank's chunk first, then (ring) each as it arrives, the next one's step started
 * before returning, or (allgather, already complete) the others in order. */
static int gather_next(void *arg) {
  run_t *r = arg;
  int k = r->handed++, tp = r->o->tp;
  if (k > 0 && comm_on(r) && r->o->overlap) {
    wait_for(r, r->ts, r->tc, "tensor-parallel gather");
    if (k + 1 < tp) ring_step(r, k + 1);
  }
  return (r->tr - k + tp) % tp;
}

/* Copies a layer's gpt_tp_summed tensors from its gradients g into buf (back: the other
 * way); returns their floats. */
static size_t pack_summed(run_t *r, float *g, float *buf, int back) {
  const gpt_t *m = r->m;
  size_t at = 0, base = gpt_param(m, 0, 0);
  for (int p = 0; p < P_NLAYER; p++) {
    size_t o = gpt_param(m, 0, p) - base, k = gpt_param(m, 0, p + 1) - base - o;
    if (!gpt_tp_summed(p)) continue;
    BE(copy, back ? g + o : buf + at, back ? buf + at : g + o, k * sizeof *g);
    at += k;
  }
  return at;
}

/* A block's gradients are final: with sp, the group sums the tensors each shard saw only its
 * rows of; then the data group's allreduce starts. */
static void reduce_block(run_t *r, int block) {
  const gpt_t *m = r->m;
  float *g = grads_of(r, block);
  size_t n = gpt_block_size(m, block);
  if (r->o->sp && block >= 0 && comm_on(r)) {
    size_t k = pack_summed(r, g, r->summed, 0);
    trace_issue(r->tr_, 0, "allreduce", block, run_now_s());
    BE(fence, r->ts);
    if (weft_allreduce(r->summed, r->summed, k, WEFT_F32, WEFT_SUM, r->tc, r->ts) != WEFT_SUCCESS)
      fail(r, "summing the norms' gradients", r->tc);
    wait_for(r, r->ts, r->tc, "tensor-parallel reduction");
    pack_summed(r, g, r->summed, 1);
  }
  if (r->dp == 1 || !comm_on(r)) return;
  trace_issue(r->tr_, 1, "allreduce", block, run_now_s());
  BE(fence, r->ds);
  if (weft_allreduce(g, g, n, WEFT_F32, WEFT_SUM, r->dc, r->ds) != WEFT_SUCCESS)
    fail(r, "reducing gradients", r->dc);
}

static void block_done(void *arg, int block) {
  run_t *r = arg;
  if (r->o->overlap) reduce_block(r, block);
}

/* ---- setup and the loop ---- */

static void teardown(run_t *r) {
  r->ops->vt->finish(r->ops->ctx); /* nothing queued may still use what is freed below */
  if (r->ts) BE(stream_wait, r->ts);
  if (r->ds && r->ds != r->ts) BE(stream_wait, r->ds);
  if (r->tc) weft_comm_destroy(r->tc);
  if (r->dc) weft_comm_destroy(r->dc);
  if (r->ts) BE(stream_close, r->ts);
  if (r->ds && r->ds != r->ts) BE(stream_close, r->ds);
  BE(release, r->params), BE(release, r->grads), BE(release, r->summed);
}

/* n floats of the back end's, zeroed; *bad set when out of memory. */
static float *alloc_f(run_t *r, size_t n, int *bad) {
  float *p = BE(alloc, (n ? n : 1) * sizeof(float));
  if (!p) *bad = 1;
  return p;
}

/* The whole model's checkpoint from one replica's shards (state: parameters and moments).
 * On the GPU they are copied to the host arrays hs first, and summed over a host
 * communicator of the replica's ranks split from comm for the purpose. */
static int save(run_t *r, weft_comm_t comm, int step, float *const state[3], float *hs[3]) {
  weft_config_t host = WEFT_CONFIG_INIT;
  weft_comm_t group = r->tc;
  int bad = 0;
  if (r->o->gpu) {
    for (int i = 0; i < 3; i++)
      bad |= BE(get, hs[i], state[i], r->m->nparams * sizeof *hs[i]);
    if (weft_comm_split(comm, r->dr, r->tr, &group, &host) != WEFT_SUCCESS)
      return fail(r, "the checkpoint's group", comm), -1;
    if (run_any_rank(group, bad)) bad = 1;
  }
  if (!bad)
    bad = ckpt_save_split(r->o->save, step, r->m, r->o->gpu ? hs : state, group, r->tr == 0,
                          r->rank == 0);
  if (group != r->tc) weft_comm_destroy(group);
  return bad ? -1 : 0;
}

/* What is wrong with the run's shape, or NULL. */
static const char *shape_error(const tp_opts_t *o, int nranks) {
  const gpt_config_t *c = &o->model;
  if (o->tp < 1 || nranks % o->tp) return "the ranks per model (--tp) must divide the ranks";
  if (c->heads < 1 || c->heads % o->tp) return "the ranks per model (--tp) must divide the heads";
  if (c->vocab < DATA_VOCAB || c->seq < 1 || c->seq > 4096 || o->batch < 1)
    return "the model or batch does not fit the data";
  if (o->sp && (size_t)o->batch * c->seq % (size_t)o->tp)
    return "sequence parallel needs batch x seq to be a multiple of the ranks per model";
  return NULL;
}

int tp_train(weft_comm_t comm, const tp_opts_t *o, float *losses, run_stats_t *stats) {
  run_t run = {.o = o}, *r = &run;
  gpt_t m = {0};
  gpt_ops_t ops = gpt_ops_cpu;
  data_t data = {0};
  int nranks = 1, T = o->model.seq, B = o->batch, rc = -1, bad = 0;
  weft_comm_rank(comm, &r->rank);
  weft_comm_count(comm, &nranks);
  float *am = NULL, *av = NULL, *init = NULL, *hs[3] = {NULL, NULL, NULL};
  int *tok = malloc(sizeof(int) * (size_t)B * T), *tgt = malloc(sizeof(int) * (size_t)B * T);
  weft_config_t host = WEFT_CONFIG_INIT, dev = WEFT_CONFIG_INIT, *gc = o->gpu ? &dev : &host;
  r->m = &m, r->ops = &ops;
  const char *why = shape_error(o, nranks);
  if (why) { /* every rank sees the same options */
    if (r->rank == 0) fprintf(stderr, "tp: %s\n", why);
    goto out;
  }
  r->tr = r->rank % o->tp, r->dr = r->rank / o->tp, r->dp = nranks / o->tp;
  bad = run_backend("tp", r->rank, o->gpu, o->bf16, &ops, &dev) || !tok || !tgt ||
        gpt_init_on(&m, &ops, &o->model, B, o->tp, r->tr, o->sp) ||
        data_init(&data, 1u << 16, o->seed);
  if (bad) fprintf(stderr, "tp: rank %d: bad options, no device or out of memory\n", r->rank);
  if (run_any_rank(comm, bad)) goto out;
  /* on the GPU both groups' operations go on one stream: two device communicators whose
   * kernels do not fit on the GPU together (ranks sharing it) must not run at once
   * (docs/gpu.md, Ordering) */
  bad = weft_comm_split(comm, r->dr, r->tr, &r->tc, gc) != WEFT_SUCCESS ||
        weft_comm_split(comm, r->tr, r->dr, &r->dc, gc) != WEFT_SUCCESS || BE(stream_open, &r->ts);
  if (!bad) bad = o->gpu ? (r->ds = r->ts, 0) : BE(stream_open, &r->ds);
  if (bad)
    fprintf(stderr, "tp: rank %d: the tensor and data groups: %s\n", r->rank,
            weft_get_last_error(comm));
  if (run_any_rank(comm, bad)) goto out;
  r->params = alloc_f(r, m.nparams, &bad), r->grads = alloc_f(r, m.nparams, &bad);
  r->summed = alloc_f(r, m.layer_size, &bad);
  am = alloc_f(r, m.nparams, &bad), av = alloc_f(r, m.nparams, &bad);
  init = run_alloc(m.nparams, &bad);
  int first = 0; /* optimizer steps taken before this run (a loaded checkpoint's) */
  float *const state[3] = {r->params, am, av};
  if (!bad) bad = gpt_init_shard_params(&m, o->seed, init);
  if (!bad) BE(put, r->params, init, m.nparams * sizeof *init);
  for (int i = 0; i < 3 && o->gpu && (o->save || o->load); i++) /* checkpoints' host copies */
    hs[i] = run_alloc(m.nparams, &bad);
  if (!bad && o->load) bad = ckpt_load_split(o->load, &m, o->gpu ? hs : state, &first);
  for (int i = 0; i < 3 && !bad && o->load && o->gpu; i++)
    BE(put, state[i], hs[i], m.nparams * sizeof *hs[i]);
  if (!bad && o->trace) bad = !(r->tr_ = trace_new(run_now_s()));
  if (run_any_rank(comm, bad)) goto out;
  gpt_io_t io = {.params = params_of,
                 .grads = grads_of,
                 .done = block_done,
                 .reduce = reduce,
                 .gather = gather,
                 .gather_next = gather_next,
                 .arg = r};
  run_clock_t clock = {0};
  int math = o->mode != RUN_COMM_ONLY;
  /* the loss' mean: over the replicas, or on the GPU (whose groups take device buffers) over
   * every rank, each shard of a replica holding its loss */
  weft_comm_t lc = !comm_on(r) ? NULL : o->gpu ? comm : r->dc;
  int lr = o->gpu ? nranks : r->dp;
  for (int s = 0; s < o->steps && !r->failed; s++) {
    double t0 = run_now_s();
    for (int i = 0; i < B; i++) /* this replica's part of the global batch */
      data_sample(&data, (size_t)(first + s) * B * r->dp + (size_t)r->dr * B + i, T, tok + i * T,
                  tgt + i * T);
    r->waited = 0;
    double tf = run_now_s();
    float loss = math ? gpt_forward(&m, &io, tok, tgt, B) : (gpt_io_replay(&m, &io, B, 0), 0.0f);
    trace_span(r->tr_, TRACE_COMPUTE, "forward", tf, run_now_s());
    BE(zero, r->grads, m.nparams * sizeof *r->grads);
    tf = run_now_s();
    if (math)
      gpt_backward(&m, &io, B, 1.0f / (float)r->dp);
    else
      gpt_io_replay(&m, &io, B, 1);
    if (ops.vt->finish(ops.ctx)) fail(r, "the backward", comm); /* the GPU's queue */
    trace_span(r->tr_, TRACE_COMPUTE, "backward", tf, run_now_s());
    for (int i = 0; i < m.c.layers + 2 && !o->overlap; i++)
      reduce_block(r, gpt_block_at(&m, i < m.c.layers ? m.c.layers - 1 - i : i));
    wait_for(r, r->ds, r->dc, "reducing gradients");
    if (run_any_rank(comm, r->failed)) break; /* a rank that failed alone stops them all */
    tf = run_now_s();
    if (math) BE(adamw, &o->opt, first + s + 1, r->params, r->grads, am, av, m.nparams);
    trace_span(r->tr_, TRACE_COMPUTE, "update", tf, run_now_s());
    if (run_step_end(lc, lc ? lr : r->dp, loss, &losses[s], &clock, t0, r->waited,
                     r->rank == 0 ? o->log : NULL, first + s + 1, (double)B * T * r->dp)) {
      fail(r, "averaging the loss", lc);
      break;
    }
  }
  run_stats_fill(stats, &clock, 4 * m.nparams); /* parameters, gradients, 2 moments */
  rc = run_any_rank(comm, r->failed) ? -1 : 0;  /* all save, or none waits for the others */
  /* one replica's shards make the whole model; its first rank writes it */
  if (!rc && o->save && save(r, comm, first + o->steps, state, hs)) rc = -1;
  if (run_any_rank(comm, rc != 0)) rc = -1; /* every file is written before any rank returns */
  if (!rc && r->tr_ && trace_write(r->tr_, o->trace, comm, r->rank, nranks)) rc = -1;
out:
  trace_free(r->tr_);
  BE(release, am), BE(release, av);
  teardown(r);
  free(init), free(tok), free(tgt), free(hs[0]), free(hs[1]), free(hs[2]);
  gpt_free(&m);
  gpt_ops_close(&ops);
  data_free(&data);
  return rc;
}
