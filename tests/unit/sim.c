/* The simulator: one process, all ranks, channels as bounded FIFOs of elements. A step is
 * runnable under the executor's rules (dependencies done; send and receive steps in order
 * per peer); each move does a random part of it, so reads and writes interleave as on a
 * real machine. Inputs are small integers, so every reduction order gives exact results. */
#include "sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "reduce.h"

typedef struct {
  char *data;
  uint64_t head, tail, cap; /* in elements */
} chan_t;

typedef struct {
  weft_sched_t s;
  char *buf[WEFT_BUF_COUNT];
  char *send_alloc, *recv_alloc;
  uint64_t *done;                /* elements done per step */
  size_t *sendq_pos, *recvq_pos; /* per peer: position in its queue */
  int32_t **sq, **rq;            /* per peer: send / receive steps in order */
  size_t *sn, *rn;
  size_t local_pos; /* no unfinished local step before this */
  size_t left;      /* unfinished steps */
} rank_t;

static uint32_t rnd(uint32_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 17;
  *s ^= *s << 5;
  return *s;
}

/* Input element i of rank r: small integers, positive for PROD so it stays bounded. */
static double input(const sim_case_t *c, int r, uint64_t i) {
  uint32_t h = (uint32_t)(r * 7919u + (uint32_t)i * 104729u + c->seed * 31u);
  h ^= h >> 15;
  if (c->op == WEFT_PROD) return (h % 3 == 0) ? 2.0 : 1.0;
  return (double)(int)(h % 7) - 3.0;
}

static uint64_t in_count(const sim_case_t *c) {
  switch (c->coll) {
  case WEFT_COLL_REDUCE_SCATTER:
  case WEFT_COLL_ALLTOALL: return c->count * (uint64_t)c->nranks;
  default: return c->count;
  }
}
static uint64_t out_count(const sim_case_t *c) {
  switch (c->coll) {
  case WEFT_COLL_ALLGATHER:
  case WEFT_COLL_ALLTOALL: return c->count * (uint64_t)c->nranks;
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

static double expected(const sim_case_t *c, int r, uint64_t i) {
  int n = c->nranks;
  switch (c->coll) {
  case WEFT_COLL_ALLREDUCE:
  case WEFT_COLL_REDUCE:
  case WEFT_COLL_REDUCE_SCATTER: {
    uint64_t src = c->coll == WEFT_COLL_REDUCE_SCATTER ? (uint64_t)r * c->count + i : i;
    double v = input(c, 0, src);
    for (int j = 1; j < n; j++)
      v = apply(c->op, v, input(c, j, src));
    return v;
  }
  case WEFT_COLL_ALLGATHER: return input(c, (int)(i / c->count), i % c->count);
  case WEFT_COLL_BROADCAST: return input(c, c->root, i);
  case WEFT_COLL_ALLTOALL: {
    int from = (int)(i / c->count);
    return input(c, from, (uint64_t)r * c->count + i % c->count);
  }
  default: return 0;
  }
}

static int setup_rank(const sim_case_t *c, int r, rank_t *rk) {
  size_t es = weft_dtype_size(c->dtype);
  weft_coll_args_t a = {.coll = c->coll,
                        .nranks = c->nranks,
                        .rank = r,
                        .root = c->root,
                        .count = c->count,
                        .chunk = c->chunk,
                        .in_place = c->in_place};
  weft_sched_init(&rk->s);
  weft_algo_fn fn = weft_algo_lookup(c->coll, c->algo);
  if (!fn) return 1;
  weft_result_t res = fn(&a, &rk->s);
  if (res == WEFT_ERR_UNSUPPORTED) return 1;
  if (res != WEFT_SUCCESS) return -1;
  uint64_t nin = in_count(c), nout = out_count(c);
  /* In place, the send buffer lies inside the recv buffer (or the reverse), as in NCCL. */
  uint64_t total = (nin > nout ? nin : nout) + 1;
  rk->send_alloc = calloc(total, es);
  rk->recv_alloc = c->in_place ? NULL : calloc(nout + 1, es);
  rk->buf[WEFT_BUF_SCRATCH] = calloc(rk->s.scratch_count + 1, es);
  char *base = rk->send_alloc;
  if (!c->in_place) {
    rk->buf[WEFT_BUF_SEND] = base;
    rk->buf[WEFT_BUF_RECV] = rk->recv_alloc;
  } else if (c->coll == WEFT_COLL_REDUCE_SCATTER) {
    rk->buf[WEFT_BUF_SEND] = base;
    rk->buf[WEFT_BUF_RECV] = base + (size_t)r * c->count * es;
  } else if (c->coll == WEFT_COLL_ALLGATHER) {
    rk->buf[WEFT_BUF_RECV] = base;
    rk->buf[WEFT_BUF_SEND] = base + (size_t)r * c->count * es;
  } else {
    rk->buf[WEFT_BUF_SEND] = rk->buf[WEFT_BUF_RECV] = base;
  }
  /* Non-roots of reduce have no recvbuf at all: any use of it is a bug. */
  if (c->coll == WEFT_COLL_REDUCE && r != c->root && !c->in_place) rk->buf[WEFT_BUF_RECV] = NULL;
  for (uint64_t i = 0; i < nin; i++)
    weft_dtype_store(c->dtype, rk->buf[WEFT_BUF_SEND], i, input(c, r, i));
  rk->done = calloc(rk->s.nsteps + 1, sizeof *rk->done);
  rk->left = rk->s.nsteps;
  rk->sendq_pos = calloc((size_t)c->nranks, sizeof(size_t));
  rk->recvq_pos = calloc((size_t)c->nranks, sizeof(size_t));
  rk->sq = calloc((size_t)c->nranks, sizeof(int32_t *));
  rk->rq = calloc((size_t)c->nranks, sizeof(int32_t *));
  rk->sn = calloc((size_t)c->nranks, sizeof(size_t));
  rk->rn = calloc((size_t)c->nranks, sizeof(size_t));
  for (int p = 0; p < c->nranks; p++) {
    rk->sq[p] = malloc((rk->s.nsteps + 1) * sizeof(int32_t));
    rk->rq[p] = malloc((rk->s.nsteps + 1) * sizeof(int32_t));
  }
  for (size_t i = 0; i < rk->s.nsteps; i++) {
    const weft_step_t *st = &rk->s.steps[i];
    if (st->peer < 0 || st->peer >= c->nranks) return -1;
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
      const char *src = rk->buf[st->src_buf] + (st->src_off + rk->done[i]) * es;
      for (uint64_t k = 0; k < want; k++) {
        const char *in = q->data + ((q->tail + k) % q->cap) * es;
        if (st->kind == WEFT_STEP_RECV)
          memcpy(dst + k * es, in, es);
        else
          weft_reduce_host(c->dtype, op, dst + k * es, src + k * es, in, 1);
      }
      q->tail += want;
    }
    rk->done[i] += want;
    if (rk->done[i] == st->count) rk->left--;
    return 1;
  }
  return 0;
}

static int check(const sim_case_t *c, rank_t *ranks) {
  for (int r = 0; r < c->nranks; r++) {
    if (c->coll == WEFT_COLL_REDUCE && r != c->root) continue;
    for (uint64_t i = 0; i < out_count(c); i++) {
      double want = expected(c, r, i);
      double got = weft_dtype_load(c->dtype, ranks[r].buf[WEFT_BUF_RECV], i);
      if (got != want) {
        fprintf(stderr,
                "sim: %s/%s n=%d count=%llu chunk=%llu in_place=%d root=%d seed=%u: rank %d "
                "elem %llu = %g, want %g\n",
                weft_coll_name(c->coll), weft_algo_name(c->algo), c->nranks,
                (unsigned long long)c->count, (unsigned long long)c->chunk, c->in_place, c->root,
                c->seed, r, (unsigned long long)i, got, want);
        return -1;
      }
    }
  }
  return 0;
}

int sim_run(const sim_case_t *c) {
  int n = c->nranks, rc = 0;
  size_t es = weft_dtype_size(c->dtype);
  rank_t *ranks = calloc((size_t)n, sizeof *ranks);
  chan_t *ch = calloc((size_t)n * n, sizeof *ch);
  for (int r = 0; r < n && rc == 0; r++)
    rc = setup_rank(c, r, &ranks[r]);
  for (int i = 0; i < n * n && rc == 0; i++) {
    ch[i].cap = c->channel_cap;
    ch[i].data = calloc(c->channel_cap, es);
  }
  uint32_t seed = c->seed * 2654435761u + 1;
  while (rc == 0) {
    int all_done = 1, moved = 0;
    for (int r = 0; r < n; r++)
      if (ranks[r].left) all_done = 0;
    if (all_done) break;
    int start = (int)(rnd(&seed) % (uint32_t)n);
    for (int t = 0; t < n && !moved; t++)
      moved = move(c, ranks, ch, (start + t) % n, &seed);
    if (!moved) {
      fprintf(stderr, "sim: %s/%s n=%d count=%llu chunk=%llu in_place=%d: deadlock\n",
              weft_coll_name(c->coll), weft_algo_name(c->algo), n, (unsigned long long)c->count,
              (unsigned long long)c->chunk, c->in_place);
      rc = -1;
    }
  }
  for (int i = 0; i < n * n && rc == 0; i++)
    if (ch[i].head != ch[i].tail) {
      fprintf(stderr, "sim: %s/%s n=%d: channel %d->%d left %llu elements unread\n",
              weft_coll_name(c->coll), weft_algo_name(c->algo), n, i / n, i % n,
              (unsigned long long)(ch[i].head - ch[i].tail));
      rc = -1;
    }
  if (rc == 0) rc = check(c, ranks);
  for (int r = 0; r < n; r++) {
    weft_sched_free(&ranks[r].s);
    free(ranks[r].send_alloc);
    free(ranks[r].recv_alloc);
    free(ranks[r].buf[WEFT_BUF_SCRATCH]);
    free(ranks[r].done);
    free(ranks[r].sendq_pos);
    free(ranks[r].recvq_pos);
    for (int p = 0; p < n && ranks[r].sq; p++) {
      free(ranks[r].sq[p]);
      free(ranks[r].rq[p]);
    }
    free(ranks[r].sq);
    free(ranks[r].rq);
    free(ranks[r].sn);
    free(ranks[r].rn);
  }
  for (int i = 0; i < n * n; i++)
    free(ch[i].data);
  free(ch);
  free(ranks);
  return rc;
}

int sim_sweep(weft_coll_t coll, weft_algo_t algo, int max_ranks) {
  static const uint64_t counts[] = {0, 1, 2, 7, 33, 1000};
  static const uint64_t chunks[] = {1, 3, 64};
  int failures = 0, ran = 0;
  for (int n = 1; n <= max_ranks; n++)
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
      for (size_t ki = 0; ki < sizeof chunks / sizeof chunks[0]; ki++)
        for (int ip = 0; ip <= 1; ip++) {
          if (counts[ci] == 1000 && chunks[ki] == 1 && n > 8) continue; /* keeps it quick */
          sim_case_t c = {.coll = coll,
                          .algo = algo,
                          .dtype = WEFT_I32,
                          .op = (n + ci) % 3 == 0 ? WEFT_MAX : WEFT_SUM,
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
