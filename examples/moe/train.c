/* Expert parallel over weft: see ep.h. The MoE layers' exchanges run on one communicator
 * (split from the caller's), each micro-batch's layout kept from its forward for its
 * backward. With overlap, each dispatch and combine is started (weft_moe_*_start) and
 * finished only when its output is needed, so that a micro-batch's experts compute while the
 * next one's tokens travel. The data-parallel gradients go on a second communicator with its
 * own stream, a block's allreduce running while the backward goes on below it. On the GPU
 * both communicators are device ones and share that stream (ranks sharing a GPU must not run
 * two communicators' kernels at once: docs/gpu.md); each exchange and reduction is fenced
 * after the compute that feeds it, and where compute needs an exchange's result the host
 * waits for the stream up to that exchange's mark, not for the exchanges queued after it. */
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "data.h"
#include "ep.h"
#include "trace.h"
#include "moe_layer.h"
#include "weft_moe.h"

typedef struct {
  const ep_opts_t *o;
  const gpt_t *m;
  const gpt_ops_t *ops; /* the back end every array below lives in */
  weft_comm_t mc, dc;   /* the experts' exchanges, the data-parallel gradients */
  void *cs;             /* the gradients' stream (ops.h), and on the GPU the exchanges' */
  weft_stream_t ms;     /* the exchanges' stream: cs on the GPU; NULL on host buffers */
  weft_moe_t moe;
  weft_moe_handle_t *h; /* each layer's layouts, a micro-batch a key */
  void **marks;         /* on the GPU, each key's last started exchange on cs (ops.h) */
  int rank, nranks, failed;
  int split;     /* exchanges in halves: started, finished when needed */
  double waited; /* seconds this step waited for communication */
  trace_t *tr;
  float *state[4]; /* parameters, gradients, AdamW's two moments (the back end's) */
} run_t;

static void fail(run_t *r, const char *what, weft_comm_t c) {
  if (!r->failed) fprintf(stderr, "moe: rank %d: %s: %s\n", r->rank, what, weft_get_last_error(c));
  r->failed = 1;
}

/* Calls back-end operation f (ops.h). */
#define BE(f, ...) r->ops->vt->f(r->ops->ctx, __VA_ARGS__)

/* On the GPU, the exchanges' stream waits for the compute queued so far (their inputs). */
static void fence(run_t *r) {
  if (r->o->gpu) BE(fence, r->cs);
}

/* On the GPU, the host waits for the exchanges' stream up to mark (NULL: all of it; their
 * outputs are needed now) and asks the communicator whether its kernels failed: 0, or -1
 * (failed). A mark leaves the exchanges started after it running. */
static int settle(run_t *r, void *mark) {
  weft_result_t e = WEFT_SUCCESS;
  if (!r->o->gpu) return 0;
  if ((mark ? BE(mark_wait, mark) : BE(stream_wait, r->cs)) ||
      weft_comm_get_async_error(r->mc, &e) != WEFT_SUCCESS || e != WEFT_SUCCESS)
    return fail(r, "an exchange", r->mc), -1;
  return 0;
}

/* An exchange ran from t0 to now: the step waited for it all. */
static void waited(run_t *r, const char *what, double t0) {
  double t1 = run_now_s();
  r->waited += t1 - t0;
  trace_span(r->tr, TRACE_COMM, what, t0, t1);
  trace_span(r->tr, TRACE_WAIT, what, t0, t1);
}

/* ---- the hooks ---- */

static const float *params_of(void *arg, int block) {
  run_t *r = arg;
  return r->state[0] + gpt_block_first(r->m, block);
}

static float *grads_of(void *arg, int block) {
  run_t *r = arg;
  return r->state[1] + gpt_block_first(r->m, block);
}

static long route(void *arg, int l, const int *ids, int N, int64_t *counts, int64_t *offsets) {
  run_t *r = arg;
  size_t rows = 0;
  if (r->failed) return -1; /* the ranks' exchanges are out of step: no more calls on mc */
  double t0 = run_now_s();
  if (r->h[l]) weft_moe_handle_destroy(r->h[l]), r->h[l] = NULL;
  fence(r);
  if (weft_moe_layout(r->moe, ids, (size_t)N, &r->h[l], r->ms) != WEFT_SUCCESS ||
      weft_moe_recv_rows(r->h[l], &rows) != WEFT_SUCCESS ||
      weft_moe_expert_counts(r->h[l], counts, offsets) != WEFT_SUCCESS) {
    fail(r, "routing the tokens", r->mc);
    return -1;
  }
  waited(r, "layout", t0);
  return (long)rows;
}

/* Waits until key's exchange is done, its outputs written (a failure is then the run's). */
static void wait_key(void *arg, int key) {
  run_t *r = arg;
  double t0 = run_now_s();
  if (r->h[key] && weft_moe_finish(r->h[key]) != WEFT_SUCCESS) fail(r, "an exchange", r->mc);
  settle(r, r->marks[key]);
  r->waited += run_now_s() - t0;
  trace_span(r->tr, TRACE_WAIT, "exchange", t0, run_now_s());
  trace_settle(r->tr, 1, run_now_s());
}

/* A dispatch (w: topk weights, rw: out) or a combine (w: row weights) on key's layout:
 * started after the key's last one is finished, or (no overlap) run whole. */
static void exchange(run_t *r, int combine, int key, const float *x, const float *w, float *out,
                     float *rw) {
  const char *what = combine ? "combine" : "dispatch";
  weft_moe_handle_t h = r->h[key];
  weft_result_t rc;
  if (r->failed || !h) return; /* the ranks' exchanges are out of step: no more calls on mc */
  fence(r);
  if (r->split) {
    double t0 = run_now_s(); /* a key's two combines in the backward: the first is done by now */
    if (weft_moe_finish(h) != WEFT_SUCCESS) return fail(r, "an exchange", r->mc);
    r->waited += run_now_s() - t0;
    trace_issue(r->tr, 1, what, key / MOE_MICRO, run_now_s());
    rc = combine ? weft_moe_combine_start(h, x, w, out, r->ms)
                 : weft_moe_dispatch_start(h, x, w, out, rw, r->ms);
    if (rc == WEFT_SUCCESS && r->o->gpu && BE(mark, r->cs, &r->marks[key]))
      return fail(r, "marking an exchange", r->mc);
  } else {
    double t0 = run_now_s();
    rc = combine ? weft_moe_combine(h, x, w, out, r->ms)
                 : weft_moe_dispatch(h, x, w, out, rw, r->ms);
    if (rc == WEFT_SUCCESS && settle(r, NULL)) return;
    waited(r, what, t0);
  }
  if (rc != WEFT_SUCCESS)
    fail(r, combine ? "combining the experts' rows" : "dispatching tokens", r->mc);
}

static void dispatch(void *arg, int key, const float *x, const float *w, float *rows, float *rw) {
  exchange(arg, 0, key, x, w, rows, rw);
}

static void combine(void *arg, int key, const float *rows, const float *rw, float *y) {
  exchange(arg, 1, key, rows, rw, y, NULL);
}

/* A block's gradients are final: the data-parallel part of it (a layer's all but its
 * experts) is allreduced while the backward goes on. */
static void reduce_block(run_t *r, int block) {
  const gpt_t *m = r->m;
  size_t n = block >= 0 ? m->shared : gpt_block_size(m, block);
  if (r->nranks == 1 || r->o->mode == RUN_COMPUTE_ONLY || r->o->wrong_reduction) return;
  if (r->failed) return; /* out of step with the peers: no more calls on dc */
  float *g = grads_of(r, block);
  trace_issue(r->tr, 0, "allreduce", block, run_now_s());
  fence(r); /* the block's backward is done */
  if (weft_allreduce(g, g, n, WEFT_F32, WEFT_SUM, r->dc, r->cs) != WEFT_SUCCESS)
    fail(r, "reducing gradients", r->dc);
}

static void block_done(void *arg, int block) {
  run_t *r = arg;
  if (r->o->overlap) reduce_block(r, block);
}

/* ---- setup and the loop ---- */

static void teardown(run_t *r) {
  for (int k = 0; r->h && k < r->m->c.layers * MOE_MICRO; k++)
    if (r->h[k]) weft_moe_handle_destroy(r->h[k]);
  for (int k = 0; r->marks && k < r->m->c.layers * MOE_MICRO; k++)
    BE(mark_close, r->marks[k]);
  if (r->moe) weft_moe_destroy(r->moe);
  if (r->cs) r->ops->vt->finish(r->ops->ctx), BE(stream_wait, r->cs), BE(stream_close, r->cs);
  if (r->mc) weft_comm_destroy(r->mc);
  if (r->dc) weft_comm_destroy(r->dc);
  free(r->h);
  free(r->marks);
  for (int i = 0; i < 4; i++)
    BE(release, r->state[i]);
}

/* What is wrong with the run's shape, or NULL. */
static const char *shape_error(const ep_opts_t *o, int nranks) {
  const gpt_config_t *c = &o->model;
  if (c->experts < 1 || c->experts % nranks) return "the experts must be a multiple of the ranks";
  if (c->topk < 1 || c->topk > c->experts || c->topk > c->channels)
    return "topk must be 1 to the experts (and at most the channels)";
  if (c->vocab < DATA_VOCAB || c->seq < 1 || c->seq > 4096 || o->batch < 1)
    return "the model or batch does not fit the data";
  return NULL;
}

/* The communicators (device ones on the GPU, dev their config), the stream and the layer. */
static int setup(run_t *r, weft_comm_t comm, gpt_t *m, weft_config_t *dev) {
  weft_config_t host = WEFT_CONFIG_INIT, *cfg = r->o->gpu ? dev : &host;
  weft_moe_config_t mc = WEFT_MOE_CONFIG_INIT;
  mc.num_experts = m->c.experts, mc.topk = m->c.topk, mc.hidden = (size_t)m->c.channels;
  mc.dtype = WEFT_F32, mc.index_type = WEFT_I32;
  if (weft_comm_split(comm, 0, r->rank, &r->mc, cfg) != WEFT_SUCCESS ||
      weft_comm_split(comm, 0, r->rank, &r->dc, cfg) != WEFT_SUCCESS)
    return fail(r, "the experts' and gradients' communicators", comm), -1;
  if (BE(stream_open, &r->cs)) return fail(r, "a stream", comm), -1;
  if (weft_moe_create(r->mc, &mc, &r->moe) != WEFT_SUCCESS)
    return fail(r, "the experts' layer", r->mc), -1;
  r->ms = r->o->gpu ? (weft_stream_t)r->cs : NULL;
  r->split = r->o->overlap && r->o->mode != RUN_COMPUTE_ONLY;
  return 0;
}

/* The parameters and moments between the back end and host arrays (a checkpoint's), either
 * way (to_host). 0, or -1 when a copy failed. */
static int state_io(run_t *r, float *const host[3], int to_host) {
  float *const dev[3] = {r->state[0], r->state[2], r->state[3]};
  size_t bytes = r->m->nparams * sizeof(float);
  for (int i = 0; i < 3; i++)
    if (to_host ? BE(get, host[i], dev[i], bytes) : (BE(put, dev[i], host[i], bytes), 0)) return -1;
  return 0;
}

int ep_train(weft_comm_t comm, const ep_opts_t *o, float *losses, run_stats_t *stats) {
  run_t r = {.o = o};
  gpt_t m = {0};
  gpt_ops_t ops = gpt_ops_cpu;
  data_t data = {0};
  weft_config_t dev = WEFT_CONFIG_INIT;
  int T = o->model.seq, B = o->batch, rc = -1, bad = 0, first = 0; /* steps before (a load's) */
  weft_comm_rank(comm, &r.rank);
  weft_comm_count(comm, &r.nranks);
  int *tok = malloc(sizeof(int) * (size_t)B * T), *tgt = malloc(sizeof(int) * (size_t)B * T);
  float *host[3] = {NULL, NULL, NULL}; /* the state on the host: initial weights, checkpoints */
  r.m = &m, r.ops = &ops;
  const char *why = shape_error(o, r.nranks);
  if (why) { /* every rank sees the same options */
    if (r.rank == 0) fprintf(stderr, "moe: %s\n", why);
    goto out;
  }
  bad = run_backend("moe", r.rank, o->gpu, o->bf16, &ops, &dev); /* says why itself */
  if (!bad && (!tok || !tgt || gpt_init_ep_on(&m, &ops, &o->model, B, r.nranks, r.rank) ||
               data_init(&data, 1u << 16, o->seed) ||
               !(r.h = calloc((size_t)o->model.layers * MOE_MICRO, sizeof *r.h)) ||
               !(r.marks = calloc((size_t)o->model.layers * MOE_MICRO, sizeof *r.marks))))
    bad = 1, fprintf(stderr, "moe: rank %d: bad options or out of memory\n", r.rank);
  if (run_any_rank(comm, bad) || run_any_rank(comm, setup(&r, comm, &m, &dev) != 0)) goto out;
  for (int i = 0; i < 4; i++)
    bad |= !(r.state[i] = ops.vt->alloc(ops.ctx, m.nparams * sizeof(float)));
  for (int i = 0; i < 3; i++)
    host[i] = run_alloc(m.nparams, &bad);
  if (!bad) bad = gpt_init_shard_params(&m, o->seed, host[0]);
  if (!bad && o->load) bad = ckpt_load_split(o->load, &m, host, &first);
  if (!bad) bad = state_io(&r, host, 0);
  if (!bad && o->trace) bad = !(r.tr = trace_new(run_now_s()));
  if (run_any_rank(comm, bad)) goto out;
  gpt_io_t io = {.params = params_of, .grads = grads_of, .done = block_done, .arg = &r};
  if (o->mode != RUN_COMPUTE_ONLY) io.route = route, io.dispatch = dispatch, io.combine = combine;
  if (r.split) io.wait = wait_key;
  run_clock_t clock = {0};
  int math = o->mode != RUN_COMM_ONLY, L = m.c.layers;
  for (int s = 0; s < o->steps && !r.failed; s++) {
    double t0 = run_now_s();
    for (int i = 0; i < B; i++) /* this rank's part of the global batch */
      data_sample(&data, (size_t)(first + s) * B * r.nranks + (size_t)r.rank * B + i, T,
                  tok + i * T, tgt + i * T);
    r.waited = 0;
    double tf = run_now_s();
    float loss = math ? gpt_forward(&m, &io, tok, tgt, B) : (gpt_io_replay(&m, &io, B, 0), 0.0f);
    trace_span(r.tr, TRACE_COMPUTE, "forward", tf, run_now_s());
    ops.vt->zero(ops.ctx, r.state[1], m.nparams * sizeof(float));
    tf = run_now_s();
    if (math)
      gpt_backward(&m, &io, B, 1.0f / (float)r.nranks);
    else
      gpt_io_replay(&m, &io, B, 1);
    trace_span(r.tr, TRACE_COMPUTE, "backward", tf, run_now_s());
    for (int i = 0; i < L + 2 && !o->overlap; i++)
      reduce_block(&r, gpt_block_at(&m, i < L ? L - 1 - i : i));
    fence(&r); /* on the GPU, the wait below covers the backward too */
    if (run_wait(r.ops, r.cs, r.dc, r.tr, 0, "reducing gradients", &r.waited))
      fail(&r, "reducing gradients", r.dc);
    if (r.failed) break;
    tf = run_now_s();
    if (math)
      ops.vt->adamw(ops.ctx, &o->opt, first + s + 1, r.state[0], r.state[1], r.state[2], r.state[3],
                    m.nparams);
    trace_span(r.tr, TRACE_COMPUTE, "update", tf, run_now_s());
    /* the loss over the caller's communicator: on the GPU dc takes device buffers only */
    weft_comm_t lc = o->mode != RUN_COMPUTE_ONLY ? (o->gpu ? comm : r.dc) : NULL;
    if (run_step_end(lc, r.nranks, loss, &losses[s], &clock, t0, r.waited,
                     r.rank == 0 ? o->log : NULL, first + s + 1, (double)B * T * r.nranks)) {
      fail(&r, "averaging the loss", lc);
      break;
    }
  }
  if (ops.vt->finish(ops.ctx)) r.failed = 1;
  run_stats_fill(stats, &clock, 4 * m.nparams); /* parameters, gradients, 2 moments */
  rc = run_any_rank(comm, r.failed) ? -1 : 0;   /* all save, or none waits for the others */
  /* every rank's experts and rank 0's copy of the rest make the whole model */
  if (!rc && o->save &&
      (state_io(&r, host, 1) ||
       ckpt_save_split(o->save, first + o->steps, &m, host, comm, r.rank == 0, r.rank == 0)))
    rc = -1;
  if (run_any_rank(comm, rc != 0)) rc = -1; /* every file is written before any rank returns */
  if (!rc && r.tr && trace_write(r.tr, o->trace, comm, r.rank, r.nranks)) rc = -1;
out:
  trace_free(r.tr);
  teardown(&r);
  for (int i = 0; i < 3; i++)
    free(host[i]);
  free(tok), free(tgt);
  gpt_free(&m);
  gpt_ops_close(&ops);
  data_free(&data);
  return rc;
}
