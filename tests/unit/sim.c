/* The simulator: one process, all ranks, channels as bounded FIFOs of elements. A step is
 * runnable under the executor's rules (dependencies done; send and receive steps in order
 * per peer); each move does a random part of it, so reads and writes interleave as on a
 * real machine. Reduction inputs are small integers, so every order gives exact results. */
#include "sim.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "reduce.h"

/* Every buffer lies between guard bytes and recvbuf starts filled with them, so a write
 * past a buffer or into an alltoallv gap, and a result never written, show as changed. */
#define GUARD   64
#define PATTERN 0xA5

typedef struct {
  char *data;
  uint64_t head, tail, cap; /* in elements */
} chan_t;

/* Where a recvbuf element of alltoallv or send/recv comes from; rank -1: a gap. */
typedef struct {
  int32_t rank;
  uint64_t idx;
} src_t;

/* A message of a send/recv group: s's sendbuf[sbase, +count) to d's recvbuf[rbase, ...). */
typedef struct {
  int s, d;
  uint64_t count, sbase, rbase;
} msg_t;

typedef struct {
  size_t msg;
  int send;
} p2p_op_t;

enum { MEM_SEND, MEM_RECV, MEM_SCRATCH, MEM_COUNT };

typedef struct {
  weft_sched_t s;
  char *buf[WEFT_BUF_COUNT];
  uint64_t size[WEFT_BUF_COUNT]; /* elements the API gives each buffer */
  char *mem[MEM_COUNT];          /* guarded allocations; in place MEM_SEND holds both */
  uint64_t mem_len[MEM_COUNT];
  char *send_init; /* sendbuf as filled */
  size_t *v;       /* alltoallv: sendcounts, sdispls, recvcounts, rdispls */
  src_t *map;      /* alltoallv, send/recv: the source of every recvbuf element */
  p2p_op_t *ops;   /* send/recv: this rank's group in issue order */
  size_t nops;
  uint64_t *done;                /* elements done per step */
  size_t *sendq_pos, *recvq_pos; /* per peer: position in its queue */
  int32_t **sq, **rq;            /* per peer: send / receive steps in order */
  size_t *sn, *rn;
  size_t local_pos; /* no unfinished local step before this */
  size_t left;      /* unfinished steps */
} rank_t;

typedef struct {
  const sim_case_t *c;
  rank_t *ranks;
  msg_t *msgs;
  size_t nmsgs;
} sim_t;

static const char *buf_names[WEFT_BUF_COUNT] = {"sendbuf", "recvbuf", "scratch"};
static const char *kind_names[] = {"send", "recv", "recv_reduce", "copy", "reduce"};

static uint32_t rnd(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

/* Prints one failure, prefixed with everything needed to rerun the case. */
static void say(const sim_case_t *c, const char *fmt, ...) {
  fprintf(stderr, "sim: %s/%s n=%d %s %s count=%llu chunk=%llu in_place=%d root=%d seed=%u: ",
          weft_coll_name(c->coll), weft_algo_name(c->algo), c->nranks, weft_dtype_name(c->dtype),
          weft_op_name(c->op), (unsigned long long)c->count, (unsigned long long)c->chunk,
          c->in_place, c->root, c->seed);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

static char *guarded(uint64_t len, size_t es) {
  char *p = malloc(2 * GUARD + len * es);
  if (!p) return NULL;
  memset(p, PATTERN, 2 * GUARD + len * es);
  return p + GUARD;
}

/* Input element i of rank r. Reductions: small integers, positive for PROD so it stays
 * bounded. Data movement: values spread wide (exact in f32), so a misplaced one shows. */
static double input(const sim_case_t *c, int r, uint64_t i) {
  uint32_t h = (uint32_t)(r * 7919u + (uint32_t)i * 104729u + c->seed * 31u);
  h ^= h >> 15;
  if (!weft_coll_reduces(c->coll)) {
    h *= 2654435761u;
    return (double)(h % 1000003u) - 500001.0;
  }
  if (c->op == WEFT_PROD) return (h % 3 == 0) ? 2.0 : 1.0;
  return (double)(int)(h % 7) - 3.0;
}

/* Elements of sendbuf and recvbuf the API gives rank r (alltoallv and send/recv: laid out
 * before). Broadcast reads sendbuf on the root only; reduce writes recvbuf on it only. */
static uint64_t in_count(const sim_case_t *c, int r) {
  switch (c->coll) {
  case WEFT_COLL_REDUCE_SCATTER:
  case WEFT_COLL_ALLTOALL: return c->count * (uint64_t)c->nranks;
  case WEFT_COLL_BROADCAST: return r == c->root ? c->count : 0;
  default: return c->count;
  }
}
static uint64_t out_count(const sim_case_t *c, int r) {
  switch (c->coll) {
  case WEFT_COLL_ALLGATHER:
  case WEFT_COLL_ALLTOALL: return c->count * (uint64_t)c->nranks;
  case WEFT_COLL_REDUCE: return r == c->root ? c->count : 0;
  default: return c->count;
  }
}

static double apply(weft_op_t op, double x, double y) {
  switch (op) {
  case WEFT_PROD: return x * y;
  case WEFT_MIN: return y < x ? y : x;
  case WEFT_MAX: return y > x ? y : x;
  default: return x + y;
  }
}

/* Element i of rank r's recvbuf, as the dtype holds it. AVG divides the sum as the
 * executor does: integer division for integer types. */
static double expected(const sim_case_t *c, int r, uint64_t i) {
  int n = c->nranks;
  double v = 0;
  switch (c->coll) {
  case WEFT_COLL_ALLREDUCE:
  case WEFT_COLL_REDUCE:
  case WEFT_COLL_REDUCE_SCATTER: {
    uint64_t src = c->coll == WEFT_COLL_REDUCE_SCATTER ? (uint64_t)r * c->count + i : i;
    v = input(c, 0, src);
    for (int j = 1; j < n; j++)
      v = apply(c->op, v, input(c, j, src));
    if (c->op == WEFT_AVG) v = weft_dtype_is_float(c->dtype) ? v / n : (double)((long long)v / n);
    break;
  }
  case WEFT_COLL_ALLGATHER: v = input(c, (int)(i / c->count), i % c->count); break;
  case WEFT_COLL_BROADCAST: v = input(c, c->root, i); break;
  case WEFT_COLL_ALLTOALL:
    v = input(c, (int)(i / c->count), (uint64_t)r * c->count + i % c->count);
    break;
  default: break;
  }
  char tmp[16];
  weft_dtype_store(c->dtype, tmp, 0, v);
  return weft_dtype_load(c->dtype, tmp, 0);
}

/* Lays blocks of counts[] out in a random order with gaps of 0..2 elements before each; a
 * zero-count block gets any displacement, even past the end. Returns the end. */
static uint64_t place(int n, const size_t *counts, size_t *displs, int *perm, uint32_t *g) {
  for (int i = 0; i < n; i++)
    perm[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)(rnd(g) % (uint32_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  uint64_t pos = 0, end = 0;
  for (int i = 0; i < n; i++) {
    int p = perm[i];
    pos += rnd(g) % 3;
    if (counts[p] == 0) {
      displs[p] = rnd(g) % (pos + 9);
      continue;
    }
    displs[p] = pos;
    end = pos += counts[p];
  }
  return end;
}

/* Per-pair counts 0..count (a quarter of them zero) and gapped, shuffled displacements. */
static int layout_alltoallv(sim_t *sm, uint32_t *g) {
  const sim_case_t *c = sm->c;
  int n = c->nranks;
  size_t *m = malloc((size_t)n * n * sizeof *m);
  int *perm = malloc((size_t)n * sizeof *perm);
  if (!m || !perm) {
    free(m);
    free(perm);
    return -1;
  }
  for (int i = 0; i < n * n; i++)
    m[i] = rnd(g) % 4 == 0 ? 0 : rnd(g) % (c->count + 1);
  int rc = 0;
  for (int r = 0; r < n && rc == 0; r++) {
    rank_t *rk = &sm->ranks[r];
    size_t *v = rk->v = calloc(4 * (size_t)n, sizeof *v);
    if (!v) {
      rc = -1;
      break;
    }
    for (int p = 0; p < n; p++) {
      v[p] = m[r * n + p];
      v[2 * n + p] = m[p * n + r];
    }
    rk->size[WEFT_BUF_SEND] = place(n, v, v + n, perm, g);
    rk->size[WEFT_BUF_RECV] = place(n, v + 2 * n, v + 3 * n, perm, g);
  }
  for (int r = 0; r < n && rc == 0; r++) {
    rank_t *rk = &sm->ranks[r];
    const size_t *rc_ = rk->v + 2 * n, *rd = rk->v + 3 * n;
    rk->map = malloc((rk->size[WEFT_BUF_RECV] + 1) * sizeof *rk->map);
    if (!rk->map) {
      rc = -1;
      break;
    }
    for (uint64_t i = 0; i < rk->size[WEFT_BUF_RECV]; i++)
      rk->map[i].rank = -1;
    for (int p = 0; p < n; p++)
      for (size_t k = 0; k < rc_[p]; k++)
        rk->map[rd[p] + k] = (src_t){p, sm->ranks[p].v[n + r] + k};
  }
  free(m);
  free(perm);
  return rc;
}

static int op_key(const sim_t *sm, const p2p_op_t *o) {
  const msg_t *m = &sm->msgs[o->msg];
  return o->send ? sm->c->nranks + m->d : m->s;
}

/* A group of 0..2 messages of 0..count elements for every ordered pair (self included).
 * Each rank issues its part in a random order that keeps each peer's messages in order;
 * buffers lie in one sendbuf and one recvbuf per rank, with gaps between. */
static int layout_p2p(sim_t *sm, uint32_t *g) {
  const sim_case_t *c = sm->c;
  int n = c->nranks;
  sm->msgs = malloc((2 * (size_t)n * n + 1) * sizeof *sm->msgs);
  if (!sm->msgs) return -1;
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++)
      for (uint32_t j = rnd(g) % 3; j > 0; j--)
        sm->msgs[sm->nmsgs++] = (msg_t){s, d, rnd(g) % (c->count + 1), 0, 0};
  for (int r = 0; r < n; r++) {
    rank_t *rk = &sm->ranks[r];
    p2p_op_t *o = rk->ops = malloc((2 * sm->nmsgs + 1) * sizeof *o);
    if (!o) return -1;
    for (size_t i = 0; i < sm->nmsgs; i++) {
      if (sm->msgs[i].s == r) o[rk->nops++] = (p2p_op_t){i, 1};
      if (sm->msgs[i].d == r) o[rk->nops++] = (p2p_op_t){i, 0};
    }
    /* Shuffle the slots, then give each (direction, peer)'s slots its messages in order. */
    p2p_op_t *sorted = malloc((rk->nops + 1) * sizeof *sorted);
    if (!sorted) return -1;
    memcpy(sorted, o, rk->nops * sizeof *o);
    for (size_t i = rk->nops; i > 1; i--) {
      size_t j = rnd(g) % i;
      p2p_op_t t = o[i - 1];
      o[i - 1] = o[j];
      o[j] = t;
    }
    for (int key = 0; key < 2 * n; key++)
      for (size_t e = 0, p = 0; e < rk->nops; e++) {
        if (op_key(sm, &sorted[e]) != key) continue;
        while (op_key(sm, &o[p]) != key)
          p++;
        o[p++] = sorted[e];
      }
    free(sorted);
    for (size_t i = 0; i < rk->nops; i++) {
      msg_t *mi = &sm->msgs[o[i].msg];
      uint64_t *pos = &rk->size[o[i].send ? WEFT_BUF_SEND : WEFT_BUF_RECV];
      *pos += rnd(g) % 3;
      *(o[i].send ? &mi->sbase : &mi->rbase) = *pos;
      *pos += mi->count;
    }
  }
  for (int r = 0; r < n; r++) {
    rank_t *rk = &sm->ranks[r];
    rk->map = malloc((rk->size[WEFT_BUF_RECV] + 1) * sizeof *rk->map);
    if (!rk->map) return -1;
    for (uint64_t i = 0; i < rk->size[WEFT_BUF_RECV]; i++)
      rk->map[i].rank = -1;
  }
  for (size_t i = 0; i < sm->nmsgs; i++) {
    const msg_t *mi = &sm->msgs[i];
    for (uint64_t k = 0; k < mi->count; k++)
      sm->ranks[mi->d].map[mi->rbase + k] = (src_t){mi->s, mi->sbase + k};
  }
  return 0;
}

static int in_bounds(const sim_case_t *c, int r, const char *op, size_t i, const weft_step_t *st,
                     unsigned buf, uint64_t off, const uint64_t *size, const char *verb) {
  const char *kind = kind_names[st->kind];
  if (buf >= WEFT_BUF_COUNT) {
    say(c, "rank %d%s step %zu (%s, peer %d) names buffer %u", r, op, i, kind, st->peer, buf);
    return 0;
  }
  if (off > size[buf] || st->count > size[buf] - off) {
    say(c, "rank %d%s step %zu (%s, peer %d) %s %s[%lld, %lld) but %s holds %llu elements", r, op,
        i, kind, st->peer, verb, buf_names[buf], (long long)off, (long long)(off + st->count),
        buf_names[buf], (unsigned long long)size[buf]);
    return 0;
  }
  return 1;
}

/* Every step within the buffers the API gives this rank, naming real peers and earlier
 * steps: checked before the run, as a step out of bounds would corrupt the heap. */
static int check_steps(const sim_case_t *c, int r, const char *op, const weft_sched_t *s,
                       const uint64_t *size) {
  for (size_t i = 0; i < s->nsteps; i++) {
    const weft_step_t *st = &s->steps[i];
    if (st->kind > WEFT_STEP_REDUCE) {
      say(c, "rank %d%s step %zu has unknown kind %u", r, op, i, st->kind);
      return -1;
    }
    int local = st->kind == WEFT_STEP_COPY || st->kind == WEFT_STEP_REDUCE;
    if (!local && (st->peer < 0 || st->peer >= c->nranks)) {
      say(c, "rank %d%s step %zu (%s) names peer %d of %d", r, op, i, kind_names[st->kind],
          st->peer, c->nranks);
      return -1;
    }
    for (int d = 0; d < 2; d++)
      if (st->dep[d] < -1 || st->dep[d] >= (int32_t)i) {
        say(c, "rank %d%s step %zu depends on step %d, not an earlier one", r, op, i, st->dep[d]);
        return -1;
      }
    if (!in_bounds(c, r, op, i, st, st->buf, st->off, size,
                   st->kind == WEFT_STEP_SEND ? "reads" : "writes"))
      return -1;
    if (st->kind != WEFT_STEP_SEND && st->kind != WEFT_STEP_RECV &&
        !in_bounds(c, r, op, i, st, st->src_buf, st->src_off, size, "reads"))
      return -1;
  }
  return 0;
}

static int uses_src(const weft_step_t *st) {
  return st->kind != WEFT_STEP_SEND && st->kind != WEFT_STEP_RECV;
}

/* The group's schedule as the executor runs it: each operation's steps in issue order,
 * moved to where its buffers lie; each is checked against its own buffers first. */
static int build_p2p(sim_t *sm, int r, rank_t *rk) {
  const sim_case_t *c = sm->c;
  uint64_t scratch = 0;
  for (size_t k = 0; k < rk->nops; k++) {
    const msg_t *m = &sm->msgs[rk->ops[k].msg];
    int send = rk->ops[k].send, peer = send ? m->d : m->s;
    weft_coll_args_t a = {.coll = send ? WEFT_COLL_SEND : WEFT_COLL_RECV,
                          .nranks = c->nranks,
                          .rank = r,
                          .root = peer,
                          .count = m->count,
                          .chunk = c->chunk};
    weft_algo_fn fn = c->gen ? c->gen : weft_algo_lookup(a.coll, c->algo);
    if (!fn) return 1;
    weft_sched_t t;
    weft_sched_init(&t);
    weft_result_t res = fn(&a, &t);
    char label[64];
    snprintf(label, sizeof label, " op %zu (%s %d, %llu elements)", k,
             send ? "send to" : "recv from", peer, (unsigned long long)m->count);
    uint64_t size[WEFT_BUF_COUNT] = {send ? m->count : 0, send ? 0 : m->count, t.scratch_count};
    uint64_t rel[WEFT_BUF_COUNT] = {m->sbase, m->rbase, scratch};
    int rc = res == WEFT_ERR_UNSUPPORTED ? 1 : res != WEFT_SUCCESS ? -1 : 0;
    if (rc == 0) rc = check_steps(c, r, label, &t, size);
    int32_t base = (int32_t)rk->s.nsteps;
    for (size_t i = 0; i < t.nsteps && rc == 0; i++) {
      const weft_step_t *st = &t.steps[i];
      weft_sched_add(&rk->s, st->kind, st->peer, st->buf, st->off + rel[st->buf], st->src_buf,
                     uses_src(st) ? st->src_off + rel[st->src_buf] : st->src_off, st->count,
                     st->dep[0] < 0 ? -1 : st->dep[0] + base,
                     st->dep[1] < 0 ? -1 : st->dep[1] + base);
    }
    scratch += t.scratch_count;
    weft_sched_free(&t);
    if (rc) return rc;
  }
  rk->s.scratch_count = scratch;
  return weft_sched_status(&rk->s) == WEFT_SUCCESS ? 0 : -1;
}

static int setup_rank(sim_t *sm, int r, rank_t *rk) {
  const sim_case_t *c = sm->c;
  size_t es = weft_dtype_size(c->dtype);
  int listed = c->coll == WEFT_COLL_ALLTOALLV || c->coll == WEFT_COLL_SEND;
  if (!listed) {
    rk->size[WEFT_BUF_SEND] = in_count(c, r);
    rk->size[WEFT_BUF_RECV] = out_count(c, r);
  }
  uint64_t nin = rk->size[WEFT_BUF_SEND], nout = rk->size[WEFT_BUF_RECV];
  /* In place, the send buffer lies inside the recv buffer (or the reverse), as in NCCL. */
  if (c->in_place) {
    rk->mem_len[MEM_SEND] = nin > nout ? nin : nout;
    char *base = rk->mem[MEM_SEND] = guarded(rk->mem_len[MEM_SEND], es);
    if (!base) return -1;
    rk->buf[WEFT_BUF_SEND] = rk->buf[WEFT_BUF_RECV] = base;
    if (c->coll == WEFT_COLL_REDUCE_SCATTER)
      rk->buf[WEFT_BUF_RECV] = base + (size_t)r * c->count * es;
    else if (c->coll == WEFT_COLL_ALLGATHER)
      rk->buf[WEFT_BUF_SEND] = base + (size_t)r * c->count * es;
  } else {
    rk->mem_len[MEM_SEND] = nin;
    rk->mem_len[MEM_RECV] = nout;
    rk->buf[WEFT_BUF_SEND] = rk->mem[MEM_SEND] = guarded(nin, es);
    rk->buf[WEFT_BUF_RECV] = rk->mem[MEM_RECV] = guarded(nout, es);
    if (!rk->mem[MEM_SEND] || !rk->mem[MEM_RECV]) return -1;
  }
  for (uint64_t i = 0; i < nin; i++)
    weft_dtype_store(c->dtype, rk->buf[WEFT_BUF_SEND], i, input(c, r, i));
  rk->send_init = malloc(nin * es + 1);
  if (!rk->send_init) return -1;
  memcpy(rk->send_init, rk->buf[WEFT_BUF_SEND], nin * es);

  weft_sched_init(&rk->s);
  int rc;
  if (c->coll == WEFT_COLL_SEND) {
    rc = build_p2p(sm, r, rk);
  } else {
    const size_t n = (size_t)c->nranks;
    weft_coll_args_t a = {.coll = c->coll,
                          .nranks = c->nranks,
                          .rank = r,
                          .root = c->root,
                          .count = c->count,
                          .chunk = c->chunk,
                          .in_place = c->in_place};
    if (rk->v) { /* as weft_alltoallv: count is the elements this rank sends */
      a.sendcounts = rk->v, a.sdispls = rk->v + n, a.recvcounts = rk->v + 2 * n,
      a.rdispls = rk->v + 3 * n;
      a.count = 0;
      for (size_t p = 0; p < n; p++)
        a.count += rk->v[p];
    }
    weft_algo_fn fn = c->gen ? c->gen : weft_algo_lookup(c->coll, c->algo);
    if (!fn) return 1;
    weft_result_t res = fn(&a, &rk->s);
    if (res == WEFT_ERR_UNSUPPORTED) return 1;
    if (res != WEFT_SUCCESS) {
      say(c, "rank %d: the generator failed with %d", r, (int)res);
      return -1;
    }
    rk->size[WEFT_BUF_SCRATCH] = rk->s.scratch_count;
    rc = check_steps(c, r, "", &rk->s, rk->size);
  }
  if (rc) return rc;
  rk->mem_len[MEM_SCRATCH] = rk->s.scratch_count;
  rk->buf[WEFT_BUF_SCRATCH] = rk->mem[MEM_SCRATCH] = guarded(rk->s.scratch_count, es);
  if (!rk->mem[MEM_SCRATCH]) return -1;

  rk->done = calloc(rk->s.nsteps + 1, sizeof *rk->done);
  rk->left = rk->s.nsteps;
  rk->sendq_pos = calloc((size_t)c->nranks, sizeof(size_t));
  rk->recvq_pos = calloc((size_t)c->nranks, sizeof(size_t));
  rk->sq = calloc((size_t)c->nranks, sizeof(int32_t *));
  rk->rq = calloc((size_t)c->nranks, sizeof(int32_t *));
  rk->sn = calloc((size_t)c->nranks, sizeof(size_t));
  rk->rn = calloc((size_t)c->nranks, sizeof(size_t));
  if (!rk->done || !rk->sendq_pos || !rk->recvq_pos || !rk->sq || !rk->rq || !rk->sn || !rk->rn)
    return -1;
  for (int p = 0; p < c->nranks; p++) {
    rk->sq[p] = malloc((rk->s.nsteps + 1) * sizeof(int32_t));
    rk->rq[p] = malloc((rk->s.nsteps + 1) * sizeof(int32_t));
    if (!rk->sq[p] || !rk->rq[p]) return -1;
  }
  for (size_t i = 0; i < rk->s.nsteps; i++) {
    const weft_step_t *st = &rk->s.steps[i];
    if (st->kind == WEFT_STEP_SEND) rk->sq[st->peer][rk->sn[st->peer]++] = (int32_t)i;
    if (st->kind == WEFT_STEP_RECV || st->kind == WEFT_STEP_RECV_REDUCE)
      rk->rq[st->peer][rk->rn[st->peer]++] = (int32_t)i;
  }
  return 0;
}

static int step_done(const rank_t *rk, int32_t i) {
  return i < 0 || rk->done[i] == rk->s.steps[i].count;
}

static int deps_done(const rank_t *rk, const weft_step_t *st) {
  return step_done(rk, st->dep[0]) && step_done(rk, st->dep[1]);
}

/* First unfinished step of the given direction to or from peer (FIFO order). */
static int32_t queue_head(rank_t *rk, int peer, int send) {
  size_t *pos = send ? &rk->sendq_pos[peer] : &rk->recvq_pos[peer];
  int32_t *q = send ? rk->sq[peer] : rk->rq[peer];
  size_t n = send ? rk->sn[peer] : rk->rn[peer];
  while (*pos < n && step_done(rk, q[*pos]))
    (*pos)++;
  return *pos < n ? q[*pos] : -1;
}

/* One random move for rank r; returns 1 if it did something. */
static int move(const sim_case_t *c, rank_t *ranks, chan_t *ch, int r, uint32_t *seed) {
  rank_t *rk = &ranks[r];
  size_t es = weft_dtype_size(c->dtype);
  weft_op_t op = c->op == WEFT_AVG ? WEFT_SUM : c->op;
  int n = c->nranks;
  int start = (int)(rnd(seed) % (uint32_t)(2 * n + 1));
  for (int t = 0; t < 2 * n + 1; t++) {
    int slot = (start + t) % (2 * n + 1);
    int32_t i = -1;
    if (slot == 2 * n) { /* a local step whose dependencies are done */
      while (rk->local_pos < rk->s.nsteps &&
             (step_done(rk, (int32_t)rk->local_pos) ||
              (rk->s.steps[rk->local_pos].kind != WEFT_STEP_COPY &&
               rk->s.steps[rk->local_pos].kind != WEFT_STEP_REDUCE)))
        rk->local_pos++;
      for (size_t j = rk->local_pos; j < rk->s.nsteps; j++) {
        const weft_step_t *st = &rk->s.steps[j];
        if ((st->kind == WEFT_STEP_COPY || st->kind == WEFT_STEP_REDUCE) &&
            !step_done(rk, (int32_t)j) && deps_done(rk, st)) {
          i = (int32_t)j;
          break;
        }
      }
    } else {
      i = queue_head(rk, slot / 2, slot % 2 == 0);
    }
    if (i < 0) continue;
    const weft_step_t *st = &rk->s.steps[i];
    if (!deps_done(rk, st)) continue;
    uint64_t left = st->count - rk->done[i];
    uint64_t want = 1 + rnd(seed) % left;
    char *dst = rk->buf[st->buf] + (st->off + rk->done[i]) * es;
    if (st->kind == WEFT_STEP_COPY || st->kind == WEFT_STEP_REDUCE) {
      const char *src = rk->buf[st->src_buf] + st->src_off * es;
      char *d0 = rk->buf[st->buf] + st->off * es;
      if (st->kind == WEFT_STEP_COPY)
        memmove(d0, src, st->count * es);
      else
        weft_reduce_host(c->dtype, op, d0, d0, src, st->count);
      rk->done[i] = st->count;
      rk->left--;
      return 1;
    }
    if (st->kind == WEFT_STEP_SEND) {
      chan_t *q = &ch[r * n + st->peer];
      uint64_t room = q->cap - (q->head - q->tail);
      if (room == 0) continue;
      if (want > room) want = room;
      for (uint64_t k = 0; k < want; k++)
        memcpy(q->data + ((q->head + k) % q->cap) * es, dst + k * es, es);
      q->head += want;
    } else {
      chan_t *q = &ch[st->peer * n + r];
      uint64_t avail = q->head - q->tail;
      if (avail == 0) continue;
      if (want > avail) want = avail;
      for (uint64_t k = 0; k < want; k++) {
        const char *in = q->data + ((q->tail + k) % q->cap) * es;
        if (st->kind == WEFT_STEP_RECV) {
          memcpy(dst + k * es, in, es);
        } else {
          const char *src = rk->buf[st->src_buf] + (st->src_off + rk->done[i] + k) * es;
          weft_reduce_host(c->dtype, op, dst + k * es, src, in, 1);
        }
      }
      q->tail += want;
    }
    rk->done[i] += want;
    if (rk->done[i] == st->count) rk->left--;
    return 1;
  }
  return 0;
}

/* The guard bytes around each of rank r's allocations are untouched. */
static int check_guards(const sim_case_t *c, int r, const rank_t *rk) {
  static const char *names[MEM_COUNT] = {"sendbuf", "recvbuf", "scratch"};
  size_t es = weft_dtype_size(c->dtype);
  for (int m = 0; m < MEM_COUNT; m++) {
    const unsigned char *p = (const unsigned char *)rk->mem[m];
    if (!p) continue;
    const char *name = m == MEM_SEND && c->in_place ? "the in-place buffer" : names[m];
    for (int b = 0; b < GUARD; b++) {
      if (p[b - GUARD] != PATTERN) {
        say(c, "rank %d wrote %d bytes before the start of %s", r, GUARD - b, name);
        return -1;
      }
      if (p[rk->mem_len[m] * es + b] != PATTERN) {
        say(c, "rank %d wrote past the end of %s (%llu elements), at byte %d after it", r, name,
            (unsigned long long)rk->mem_len[m], b);
        return -1;
      }
    }
  }
  return 0;
}

/* Out of place, sendbuf is unchanged. In place it is (part of) the output; what stays:
 * the other ranks' blocks in reduce_scatter, all of it on reduce's non-roots and
 * broadcast's root, and the own block in allgather (its send region). */
static int check_sendbuf(const sim_case_t *c, int r, const rank_t *rk) {
  size_t es = weft_dtype_size(c->dtype);
  uint64_t lo = 0, hi = 0; /* [lo, hi): may change */
  if (c->in_place) {
    switch (c->coll) {
    case WEFT_COLL_REDUCE_SCATTER: lo = (uint64_t)r * c->count, hi = lo + c->count; break;
    case WEFT_COLL_REDUCE: hi = r == c->root ? c->count : 0; break;
    case WEFT_COLL_BROADCAST:
    case WEFT_COLL_ALLGATHER: break;
    default: hi = rk->size[WEFT_BUF_SEND]; break;
    }
  }
  for (uint64_t i = 0; i < rk->size[WEFT_BUF_SEND]; i++) {
    if (i >= lo && i < hi) continue;
    if (memcmp(rk->buf[WEFT_BUF_SEND] + i * es, rk->send_init + i * es, es) != 0) {
      say(c, "rank %d sendbuf elem %llu changed from %g to %g", r, (unsigned long long)i,
          weft_dtype_load(c->dtype, rk->send_init, i),
          weft_dtype_load(c->dtype, rk->buf[WEFT_BUF_SEND], i));
      return -1;
    }
  }
  return 0;
}

static int untouched(const char *p, size_t es) {
  for (size_t b = 0; b < es; b++)
    if ((unsigned char)p[b] != PATTERN) return 0;
  return 1;
}

/* Every result as the oracle says, and alltoallv's and send/recv's gaps untouched. */
static int check_recvbuf(const sim_t *sm, int r, const rank_t *rk) {
  const sim_case_t *c = sm->c;
  size_t es = weft_dtype_size(c->dtype);
  const char *out = rk->buf[WEFT_BUF_RECV];
  for (uint64_t i = 0; i < rk->size[WEFT_BUF_RECV]; i++) {
    const char *at = out + i * es;
    double got = weft_dtype_load(c->dtype, out, i);
    const char *never = untouched(at, es) ? " (never written)" : "";
    if (rk->map && rk->map[i].rank < 0) {
      if (untouched(at, es)) continue;
      say(c, "rank %d recvbuf elem %llu lies in a gap between blocks but was written (%g)", r,
          (unsigned long long)i, got);
      return -1;
    }
    if (rk->map) {
      const src_t *s = &rk->map[i];
      const char *want = sm->ranks[s->rank].send_init + s->idx * es;
      if (memcmp(at, want, es) == 0) continue;
      say(c, "rank %d recvbuf elem %llu = %g%s, want %g (rank %d's sendbuf elem %llu)", r,
          (unsigned long long)i, got, never, weft_dtype_load(c->dtype, want, 0), s->rank,
          (unsigned long long)s->idx);
      return -1;
    }
    double want = expected(c, r, i);
    if (got != want) {
      say(c, "rank %d recvbuf elem %llu = %g%s, want %g", r, (unsigned long long)i, got, never,
          want);
      return -1;
    }
  }
  return 0;
}

static int check(const sim_t *sm) {
  const sim_case_t *c = sm->c;
  for (int r = 0; r < c->nranks; r++) {
    const rank_t *rk = &sm->ranks[r];
    if (check_guards(c, r, rk) || check_sendbuf(c, r, rk) || check_recvbuf(sm, r, rk)) return -1;
  }
  return 0;
}

static void free_rank(rank_t *rk, int n) {
  weft_sched_free(&rk->s);
  for (int m = 0; m < MEM_COUNT; m++)
    if (rk->mem[m]) free(rk->mem[m] - GUARD);
  free(rk->send_init);
  free(rk->v);
  free(rk->map);
  free(rk->ops);
  free(rk->done);
  free(rk->sendq_pos);
  free(rk->recvq_pos);
  for (int p = 0; p < n && rk->sq; p++)
    free(rk->sq[p]);
  for (int p = 0; p < n && rk->rq; p++)
    free(rk->rq[p]);
  free(rk->sq);
  free(rk->rq);
  free(rk->sn);
  free(rk->rn);
}

int sim_run(const sim_case_t *c) {
  int listed = c->coll == WEFT_COLL_ALLTOALLV || c->coll == WEFT_COLL_SEND;
  if (listed && c->in_place) return 1; /* the API refuses overlapping buffers for these */
  int n = c->nranks, rc = 0;
  size_t es = weft_dtype_size(c->dtype);
  sim_t sm = {.c = c, .ranks = calloc((size_t)n, sizeof(rank_t))};
  chan_t *ch = calloc((size_t)n * n, sizeof *ch);
  if (!sm.ranks || !ch) rc = -1;
  uint32_t g = c->seed * 2246822519u + 7;
  if (g == 0) g = 1;
  if (rc == 0 && c->coll == WEFT_COLL_ALLTOALLV) rc = layout_alltoallv(&sm, &g);
  if (rc == 0 && c->coll == WEFT_COLL_SEND) rc = layout_p2p(&sm, &g);
  for (int r = 0; r < n && rc == 0; r++)
    rc = setup_rank(&sm, r, &sm.ranks[r]);
  for (int i = 0; i < n * n && rc == 0; i++) {
    ch[i].cap = c->channel_cap;
    ch[i].data = calloc(c->channel_cap, es);
    if (!ch[i].data) rc = -1;
  }
  uint32_t seed = c->seed * 2654435761u + 1;
  while (rc == 0) {
    int all_done = 1, moved = 0;
    for (int r = 0; r < n; r++)
      if (sm.ranks[r].left) all_done = 0;
    if (all_done) break;
    int start = (int)(rnd(&seed) % (uint32_t)n);
    for (int t = 0; t < n && !moved; t++)
      moved = move(c, sm.ranks, ch, (start + t) % n, &seed);
    if (!moved) {
      say(c, "deadlock");
      rc = -1;
    }
  }
  for (int i = 0; i < n * n && rc == 0; i++)
    if (ch[i].head != ch[i].tail) {
      say(c, "channel %d->%d left %llu elements unread", i / n, i % n,
          (unsigned long long)(ch[i].head - ch[i].tail));
      rc = -1;
    }
  /* AVG: the schedules sum, then the executor divides where a result lands. */
  for (int r = 0; r < n && rc == 0 && c->op == WEFT_AVG; r++)
    if (c->coll == WEFT_COLL_ALLREDUCE || c->coll == WEFT_COLL_REDUCE_SCATTER ||
        (c->coll == WEFT_COLL_REDUCE && r == c->root))
      weft_avg_host(c->dtype, sm.ranks[r].buf[WEFT_BUF_RECV], c->count, n);
  if (rc == 0) rc = check(&sm);
  for (int r = 0; r < n && sm.ranks; r++)
    free_rank(&sm.ranks[r], n);
  for (int i = 0; i < n * n && ch; i++)
    free(ch[i].data);
  free(ch);
  free(sm.ranks);
  free(sm.msgs);
  return rc;
}

int sim_sweep(weft_coll_t coll, weft_algo_t algo, int max_ranks) {
  static const uint64_t counts[] = {0, 1, 2, 7, 33, 1000};
  static const uint64_t chunks[] = {1, 3, 64};
  static const weft_op_t ops[] = {WEFT_SUM, WEFT_PROD, WEFT_MIN, WEFT_MAX, WEFT_AVG};
  int failures = 0, ran = 0;
  for (int n = 1; n <= max_ranks; n++)
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
      for (size_t ki = 0; ki < sizeof chunks / sizeof chunks[0]; ki++)
        for (int ip = 0; ip <= 1; ip++) {
          if (counts[ci] == 1000 && chunks[ki] == 1 && n > 8) continue; /* keeps it quick */
          sim_case_t c = {.coll = coll,
                          .algo = algo,
                          .dtype = WEFT_I32,
                          .op = ops[((size_t)n + ci + ki + (size_t)ip) % 5],
                          .nranks = n,
                          .root = (int)(ci % (size_t)n),
                          .in_place = ip,
                          .count = counts[ci],
                          .chunk = chunks[ki],
                          .channel_cap = 1 + ci % 5,
                          .seed = (uint32_t)(n * 1000 + ci * 10 + ki + ip * 5)};
          int rc = sim_run(&c);
          if (rc < 0) failures++;
          if (rc == 0) ran++;
        }
  if (ran == 0)
    fprintf(stderr, "sim: %s/%s ran no case\n", weft_coll_name(coll), weft_algo_name(algo));
  return ran == 0 ? -1 : failures;
}
