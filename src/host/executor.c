/* The host executor: runs the schedules of one op (one task, or a group's tasks at once)
 * on the calling thread. Per peer it keeps the send and the receive steps in schedule
 * order; a step moves when its dependencies are done, as far as the channel allows.
 * Incoming bytes are reduced where they lie in the channel (no extra copy). When nothing
 * moves it spins briefly, then sleeps in the transports' wait, checking the op's deadline
 * and the comm's abort flag. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "clock.h"
#include "comm.h"
#include "dtype.h"
#include "err.h"
#include "host.h"
#include "reduce.h"
#include "waitlog.h"

typedef struct {
  const weft_sched_t *s;
  const weft_task_t *task;
  char *buf[WEFT_BUF_COUNT];
  size_t es;
  weft_dtype_t dtype;
  weft_op_t op;
  uint64_t *done; /* bytes done per step */
} plan_t;

typedef struct {
  int plan;
  int32_t step;
} ref_t;

/* Ahead of its data on every channel it uses, an op sends a fingerprint: the channel's op
 * count, the bytes it will send, and its call. The receiver compares it with what its own
 * schedule expects, so ranks that called different operations fail with
 * WEFT_ERR_MISMATCH instead of hanging or mixing up data. */
typedef struct {
  uint32_t tag, chan_seq;
  uint64_t bytes;
  uint8_t coll, dtype, op, single; /* single: one collective (not p2p, not a group) */
  int32_t root;
  uint64_t count;
} fingerprint_t;

_Static_assert(sizeof(fingerprint_t) == 32, "fingerprints keep the stream 16-byte aligned");
#define FP_TAG 0x46504657u /* "WFPF" */

typedef struct {
  ref_t *q[2]; /* 0: sends, 1: receives */
  size_t n[2], pos[2];
  uint64_t bytes[2];      /* stream bytes this op sends to / expects from the peer */
  fingerprint_t fp_out;   /* what goes ahead of the sends */
  size_t fp_sent, fp_got; /* fingerprint bytes sent / received so far */
  unsigned char fp_in[sizeof(fingerprint_t)];
} peerq_t;

typedef struct {
  weft_comm_t comm;
  plan_t *plans;
  int nplans;
  peerq_t *pq;
  int *active; /* peers with steps */
  int nactive;
  ref_t *local; /* copy and reduce steps */
  size_t nlocal, local_pos;
  size_t remaining;
  int uses[WEFT_MAX_TRANSPORTS];
} exec_t;

/* Every step occupies a multiple of 16 bytes of its channel (zero padding after the
 * data), so each step starts 16-aligned in the rings and every element is read aligned. */
enum { STREAM_ALIGN = 16 };
static const char zeros[STREAM_ALIGN];

/* Offsets and counts become bytes unchecked on every step: a step lies inside its buffer
 * (tests/unit/sim.c checks every generator) whose byte size the API checked fits size_t. */
static size_t stream_len(const plan_t *pl, const weft_step_t *st) {
  return (st->count * pl->es + STREAM_ALIGN - 1) & ~(size_t)(STREAM_ALIGN - 1);
}

static int step_done(const plan_t *pl, int32_t i) {
  return i < 0 || pl->done[i] == stream_len(pl, &pl->s->steps[i]);
}
static int deps_done(const plan_t *pl, const weft_step_t *st) {
  return step_done(pl, st->dep[0]) && step_done(pl, st->dep[1]);
}
static char *addr(const plan_t *pl, int buf, uint64_t off) { return pl->buf[buf] + off * pl->es; }
static weft_op_t red_op(weft_op_t op) { return op == WEFT_AVG ? WEFT_SUM : op; }

/* Moves the send queue of peer p as far as it goes. */
static weft_result_t run_sends(exec_t *x, int p, int *moved) {
  peerq_t *q = &x->pq[p];
  const weft_transport_t *tr = x->comm->tr[x->comm->peer_tr[p]];
  void *ts = x->comm->tr_state[x->comm->peer_tr[p]];
  while (q->n[0] && q->fp_sent < sizeof q->fp_out) {
    size_t acc = 0;
    CHECK(tr->send(ts, p, (const char *)&q->fp_out + q->fp_sent, sizeof q->fp_out - q->fp_sent,
                   &acc));
    if (acc == 0) return WEFT_SUCCESS;
    q->fp_sent += acc;
    *moved = 1;
  }
  while (q->pos[0] < q->n[0]) {
    ref_t r = q->q[0][q->pos[0]];
    plan_t *pl = &x->plans[r.plan];
    const weft_step_t *st = &pl->s->steps[r.step];
    if (!deps_done(pl, st)) return WEFT_SUCCESS;
    size_t len = st->count * pl->es, total = stream_len(pl, st), done = pl->done[r.step];
    while (done < total) {
      size_t acc = 0;
      if (done < len)
        CHECK(tr->send(ts, p, addr(pl, st->buf, st->off) + done, len - done, &acc));
      else
        CHECK(tr->send(ts, p, zeros, total - done, &acc));
      if (acc == 0) break;
      done += acc;
      *moved = 1;
    }
    pl->done[r.step] = done;
    if (done < total) return WEFT_SUCCESS;
    q->pos[0]++;
    x->remaining--;
  }
  return WEFT_SUCCESS;
}

static void describe_call(char *buf, size_t len, const fingerprint_t *f) {
  if (!f->single)
    snprintf(buf, len, "a group, send/recv or alltoallv moving %llu bytes",
             (unsigned long long)f->bytes);
  else
    weft_call_name(buf, len, (weft_coll_t)f->coll, f->count, (weft_dtype_t)f->dtype,
                   (weft_op_t)f->op, (int)f->root);
}

/* Compares the peer's fingerprint with this rank's own view of the channel. */
static weft_result_t check_fingerprint(exec_t *x, int p) {
  peerq_t *q = &x->pq[p];
  fingerprint_t in, *mine = &q->fp_out;
  memcpy(&in, q->fp_in, sizeof in);
  uint32_t want_seq = weft_host_of(x->comm)->chan_recv[p];
  if (in.tag != FP_TAG)
    return weft_set_error(WEFT_ERR_PROTOCOL, "rank %d: the stream from rank %d lost its framing",
                          x->comm->rank, p);
  int same_call = !(in.single && mine->single) ||
                  (in.coll == mine->coll && in.dtype == mine->dtype && in.count == mine->count &&
                   in.root == mine->root && in.op == mine->op);
  if (in.chan_seq == want_seq && in.bytes == q->bytes[1] && same_call) return WEFT_SUCCESS;
  char theirs[128], ours[128];
  fingerprint_t expect = *mine;
  expect.bytes = q->bytes[1];
  describe_call(theirs, sizeof theirs, &in);
  describe_call(ours, sizeof ours, &expect);
  return weft_set_error(WEFT_ERR_MISMATCH,
                        "rank %d called %s as its op %u with rank %d, which called %s as op %u "
                        "(%llu bytes sent, %llu expected)",
                        p, theirs, in.chan_seq, x->comm->rank, ours, want_seq,
                        (unsigned long long)in.bytes, (unsigned long long)q->bytes[1]);
}

static weft_result_t run_recvs(exec_t *x, int p, int *moved) {
  peerq_t *q = &x->pq[p];
  const weft_transport_t *tr = x->comm->tr[x->comm->peer_tr[p]];
  void *ts = x->comm->tr_state[x->comm->peer_tr[p]];
  while (q->n[1] && q->fp_got < sizeof q->fp_in) {
    const void *in;
    size_t contig, avail;
    CHECK(tr->peek(ts, p, &in, &contig, &avail));
    if (avail == 0) return WEFT_SUCCESS;
    size_t k = sizeof q->fp_in - q->fp_got;
    if (k > contig) k = contig;
    memcpy(q->fp_in + q->fp_got, in, k);
    tr->consume(ts, p, k);
    q->fp_got += k;
    *moved = 1;
    if (q->fp_got == sizeof q->fp_in) CHECK(check_fingerprint(x, p));
  }
  while (q->pos[1] < q->n[1]) {
    ref_t r = q->q[1][q->pos[1]];
    plan_t *pl = &x->plans[r.plan];
    const weft_step_t *st = &pl->s->steps[r.step];
    if (!deps_done(pl, st)) return WEFT_SUCCESS;
    size_t len = st->count * pl->es, total = stream_len(pl, st), done = pl->done[r.step];
    while (done < total) {
      const void *in;
      size_t contig, avail;
      CHECK(tr->peek(ts, p, &in, &contig, &avail));
      if (avail == 0) break;
      if (done >= len) { /* padding */
        size_t k = contig < total - done ? contig : total - done;
        tr->consume(ts, p, k);
        done += k;
        *moved = 1;
        continue;
      }
      size_t k = contig < len - done ? contig : len - done;
      char *dst = addr(pl, st->buf, st->off) + done;
      if (st->kind == WEFT_STEP_RECV) {
        memcpy(dst, in, k);
      } else {
        /* Whole elements only; rings hold multiples of 16 bytes and steps start aligned, so
         * an element is never split by the wrap, only still on its way. */
        k -= k % pl->es;
        if (k == 0) {
          if (contig == avail) break;
          return weft_set_error(WEFT_ERR_INTERNAL, "an element straddles a channel's wrap");
        }
        weft_reduce_host(pl->dtype, red_op(pl->op), dst, addr(pl, st->src_buf, st->src_off) + done,
                         in, k / pl->es);
      }
      tr->consume(ts, p, k);
      done += k;
      *moved = 1;
    }
    pl->done[r.step] = done;
    if (done < total) return WEFT_SUCCESS;
    q->pos[1]++;
    x->remaining--;
  }
  return WEFT_SUCCESS;
}

static void run_locals(exec_t *x, int *moved) {
  for (size_t i = x->local_pos; i < x->nlocal; i++) {
    ref_t r = x->local[i];
    plan_t *pl = &x->plans[r.plan];
    const weft_step_t *st = &pl->s->steps[r.step];
    if (step_done(pl, r.step) || !deps_done(pl, st)) continue;
    char *dst = addr(pl, st->buf, st->off);
    const char *src = addr(pl, st->src_buf, st->src_off);
    if (st->kind == WEFT_STEP_COPY) {
      if (dst != src) memmove(dst, src, st->count * pl->es);
    } else {
      weft_reduce_host(pl->dtype, red_op(pl->op), dst, dst, src, st->count);
    }
    pl->done[r.step] = stream_len(pl, st);
    x->remaining--;
    *moved = 1;
  }
  while (x->local_pos < x->nlocal &&
         step_done(&x->plans[x->local[x->local_pos].plan], x->local[x->local_pos].step))
    x->local_pos++;
}

/* Names what the op still waits for, for timeout messages and wait reports: a receive first,
 * since a send that has not gone yet mostly waits for one (its dependency), not for its peer. */
static void describe_wait(const exec_t *x, char *buf, size_t len) {
  snprintf(buf, len, "local steps");
  for (int d = 1; d >= 0; d--)
    for (int a = 0; a < x->nactive; a++) {
      int p = x->active[a];
      const peerq_t *q = &x->pq[p];
      if (q->pos[d] < q->n[d]) {
        ref_t r = q->q[d][q->pos[d]];
        const plan_t *pl = &x->plans[r.plan];
        const struct weft_comm *c = x->comm;
        const int far = c->local_rank && c->local_rank[p] < 0; /* named with its host */
        snprintf(buf, len, "%s rank %d%s%s%s (%llu of %llu bytes of step %d)",
                 d ? "receiving from" : "sending to", p, far ? " (host " : "",
                 far ? weft_comm_host(c, p) : "", far ? ")" : "",
                 (unsigned long long)pl->done[r.step],
                 (unsigned long long)stream_len(pl, &pl->s->steps[r.step]), (int)r.step);
        return;
      }
    }
}

/* A peer this op receives from whose fingerprint, the first thing every rank sends when it
 * starts the op, has not come: that rank has not started it (or its bytes are stuck). */
static int not_started(const void *ctx, int p) {
  const peerq_t *q = &((const exec_t *)ctx)->pq[p];
  return q->n[1] && q->fp_got < sizeof q->fp_in;
}

typedef struct {
  const exec_t *x;
  const char *what;
  uint64_t seq;
} run_wait_t;

/* The wait report of an op: its call, which peers have not started it, what it waits for. */
static void run_waits_for(const void *ctx, char *buf, size_t len) {
  const run_wait_t *w = ctx;
  const exec_t *x = w->x;
  const weft_task_t *t = x->plans[0].task;
  char call[128], ranks[128], late[192], now[256];
  if (x->nplans == 1)
    weft_call_name(call, sizeof call, t->args.coll, t->args.count, t->dtype, t->op, t->args.root);
  else
    snprintf(call, sizeof call, "%s of %d operations", w->what, x->nplans);
  describe_wait(x, now, sizeof now);
  int n = weft_waitlog_ranks(ranks, sizeof ranks, x->comm->nranks, not_started, x);
  if (n)
    snprintf(late, sizeof late, "nothing yet from rank%s %s (not in this operation yet?); ",
             n > 1 ? "s" : "", ranks);
  else
    late[0] = 0;
  snprintf(buf, len, "rank %d of %d: %s (op %llu) waits: %s%s", x->comm->rank, x->comm->nranks,
           call, (unsigned long long)w->seq, late, now);
}

static weft_result_t build_queues(exec_t *x) {
  weft_comm_t c = x->comm;
  size_t total = 0;
  for (int i = 0; i < x->nplans; i++) {
    const weft_sched_t *s = x->plans[i].s;
    total += s->nsteps;
    for (size_t j = 0; j < s->nsteps; j++) {
      const weft_step_t *st = &s->steps[j];
      if (st->kind == WEFT_STEP_COPY || st->kind == WEFT_STEP_REDUCE) {
        x->nlocal++;
        continue;
      }
      if (st->peer < 0 || st->peer >= c->nranks)
        return weft_set_error(WEFT_ERR_INTERNAL, "schedule names rank %d of %d", st->peer,
                              c->nranks);
      x->pq[st->peer].n[st->kind == WEFT_STEP_SEND ? 0 : 1]++;
    }
  }
  x->remaining = total;
  ref_t *refs = malloc((total + 1) * sizeof *refs);
  if (!refs) return weft_set_error(WEFT_ERR_NO_MEMORY, "executor: out of memory");
  x->local = refs;
  ref_t *next = refs + x->nlocal;
  for (int p = 0; p < c->nranks; p++) {
    for (int d = 0; d < 2; d++) {
      x->pq[p].q[d] = next;
      next += x->pq[p].n[d];
      x->pq[p].n[d] = 0;
    }
  }
  size_t nl = 0;
  for (int i = 0; i < x->nplans; i++) {
    const weft_sched_t *s = x->plans[i].s;
    for (size_t j = 0; j < s->nsteps; j++) {
      const weft_step_t *st = &s->steps[j];
      ref_t r = {i, (int32_t)j};
      if (st->kind == WEFT_STEP_COPY || st->kind == WEFT_STEP_REDUCE) {
        refs[nl++] = r;
        continue;
      }
      peerq_t *q = &x->pq[st->peer];
      int d = st->kind == WEFT_STEP_SEND ? 0 : 1;
      q->q[d][q->n[d]++] = r;
      q->bytes[d] += st->count * x->plans[i].es; /* exact: padding would hide a few bytes */
    }
  }
  const weft_task_t *t0 = x->plans[0].task;
  weft_coll_t k0 = t0->args.coll;
  /* A call is compared whole only when it is one collective whose arguments must agree on
   * every rank (alltoallv's counts differ per rank; its bytes are still compared). */
  int single =
      x->nplans == 1 && k0 != WEFT_COLL_SEND && k0 != WEFT_COLL_RECV && k0 != WEFT_COLL_ALLTOALLV;
  for (int p = 0; p < c->nranks; p++) {
    peerq_t *q = &x->pq[p];
    if (!q->n[0] && !q->n[1]) continue;
    x->active[x->nactive++] = p;
    x->uses[c->peer_tr[p]] = 1;
    /* Channel op counts advance only for channels this op uses, on both ends alike. */
    if (q->n[0])
      q->fp_out = (fingerprint_t){
          .tag = FP_TAG, .chan_seq = ++weft_host_of(c)->chan_send[p], .bytes = q->bytes[0]};
    if (q->n[1]) ++weft_host_of(c)->chan_recv[p];
    q->fp_out.tag = FP_TAG;
    q->fp_out.single = (uint8_t)single;
    q->fp_out.coll = (uint8_t)t0->args.coll;
    q->fp_out.dtype = (uint8_t)t0->dtype;
    q->fp_out.op = (uint8_t)(weft_coll_reduces(k0) ? t0->op : 0);
    q->fp_out.root = weft_coll_rooted(k0) ? t0->args.root : 0;
    q->fp_out.count = t0->args.count;
  }
  return WEFT_SUCCESS;
}

static weft_result_t run(exec_t *x, const char *what, uint64_t seq) {
  weft_comm_t c = x->comm;
  int64_t deadline = weft_deadline(c->timeout_ms);
  int idle = 0;
  int64_t spin_end = 0;
  uint64_t token[WEFT_MAX_TRANSPORTS] = {0};
  run_wait_t rw = {.x = x, .what = what, .seq = seq};
  weft_waitlog_t wl;
  weft_waitlog_init(&wl, WEFT_SUB_COLL, deadline, NULL, run_waits_for, &rw);
  while (x->remaining) {
    int sleepy = idle >= c->spin;
    if (sleepy)
      for (int t = 0; t < WEFT_MAX_TRANSPORTS; t++)
        if (x->uses[t]) token[t] = c->tr[t]->arm(c->tr_state[t]);
    int moved = 0;
    for (int a = 0; a < x->nactive; a++) {
      weft_result_t rc = run_sends(x, x->active[a], &moved);
      if (rc == WEFT_SUCCESS) rc = run_recvs(x, x->active[a], &moved);
      if (rc == WEFT_SUCCESS) continue;
      return weft_fail_root_cause(c, rc, x->active[a], what, seq);
    }
    if (x->local_pos < x->nlocal) run_locals(x, &moved);
    if (moved) {
      idle = 0;
      continue;
    }
    if (atomic_load_explicit(&c->aborted, memory_order_relaxed))
      return weft_set_error(WEFT_ERR_ABORTED, "%s (op %llu) ended: communicator aborted", what,
                            (unsigned long long)seq);
    if (++idle < c->spin) {
      if (!c->yield) {
        weft_cpu_relax();
        continue;
      }
      /* A yield can cost a whole time slice on a loaded host (2000 of them: seconds), and
       * notices and the deadline are looked at only once spinning ends: cap it in time. */
      if (idle == 1) spin_end = weft_now_ms() + 10;
      if (idle % 16 != 0 || weft_now_ms() < spin_end) {
        sched_yield();
        continue;
      }
      idle = c->spin;
    }
    if (weft_now_ms() > deadline) {
      char buf[256];
      describe_wait(x, buf, sizeof buf);
      return weft_set_error(WEFT_ERR_TIMEOUT,
                            "rank %d: %s (op %llu) timed out after %lld ms %s; a peer may have "
                            "died or called a different operation",
                            c->rank, what, (unsigned long long)seq, (long long)c->timeout_ms, buf);
    }
    weft_waitlog_tick(&wl);
    if (!sleepy) continue; /* arm first, then one more look, then sleep */
    CHECK(weft_fail_check(c));
    /* Sleep in the transport that sleeps longest; with others in use too, only 1 ms, since
     * their wake-ups cannot reach it. */
    int w = -1, nused = 0;
    for (int t = 0; t < WEFT_MAX_TRANSPORTS; t++)
      if (x->uses[t]) {
        nused++;
        if (w < 0 || c->tr[t]->wait_ms > c->tr[w]->wait_ms) w = t;
      }
    if (w >= 0)
      CHECK(c->tr[w]->wait(c->tr_state[w], token[w], nused > 1 ? 1 : c->tr[w]->wait_ms));
    else
      sched_yield();
  }
  return WEFT_SUCCESS;
}

/* Bytes of scratch pl takes, whole cache lines; 0 when that overflows. */
static int scratch_of(const plan_t *pl, size_t *bytes) {
  size_t b;
  if (!weft_mul_fits(pl->s->scratch_count, pl->es, &b) || !weft_add_fits(b, 63, &b)) return 0;
  *bytes = b & ~(size_t)63;
  return 1;
}

static void finish_avg(weft_comm_t c, const weft_task_t *t) {
  if (t->op != WEFT_AVG) return;
  weft_coll_t k = t->args.coll;
  if (k == WEFT_COLL_ALLREDUCE || k == WEFT_COLL_REDUCE_SCATTER ||
      (k == WEFT_COLL_REDUCE && c->rank == t->args.root))
    weft_avg_host(t->dtype, t->recvbuf, t->args.count, c->nranks);
}

weft_result_t weft_exec_op(weft_comm_t c, weft_work_t *op) {
  weft_result_t rc = WEFT_SUCCESS;
  int n = op->ntasks;
  exec_t x = {.comm = c, .nplans = n};
  weft_sched_t *owned = calloc((size_t)n, sizeof *owned);
  int *is_owned = calloc((size_t)n, sizeof *is_owned);
  x.plans = calloc((size_t)n, sizeof *x.plans);
  x.pq = calloc((size_t)c->nranks, sizeof *x.pq);
  x.active = calloc((size_t)c->nranks, sizeof *x.active);
  if (!owned || !is_owned || !x.plans || !x.pq || !x.active)
    ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "executor: out of memory");
  size_t scratch = 0, steps = 0;
  for (int i = 0; i < n; i++) {
    const weft_task_t *t = &op->tasks[i];
    plan_t *pl = &x.plans[i];
    CHECK_GOTO(weft_host_sched(c, t, &pl->s, &owned[i], &is_owned[i]), rc, out);
    pl->task = t;
    pl->es = weft_dtype_size(t->dtype);
    pl->dtype = t->dtype;
    pl->op = t->op;
    pl->buf[WEFT_BUF_SEND] = (char *)t->sendbuf;
    pl->buf[WEFT_BUF_RECV] = t->recvbuf;
    /* a group's scratch is a sum of products that the API never saw: checked here */
    size_t mine;
    if (!scratch_of(pl, &mine) || !weft_add_fits(scratch, mine, &scratch))
      ERR_GOTO(rc, out, WEFT_ERR_INVALID_ARG, "executor: scratch of the %s overflows size_t",
               weft_coll_name(t->args.coll));
    steps += pl->s->nsteps;
  }
  weft_host_t *h = weft_host_of(c);
  if (scratch > h->scratch_bytes) {
    char *ns = realloc(h->scratch, scratch);
    if (!ns)
      ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "executor: no memory for %zu scratch bytes", scratch);
    h->scratch = ns;
    h->scratch_bytes = scratch;
  }
  uint64_t *done = calloc(steps + 1, sizeof *done);
  if (!done) ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "executor: out of memory");
  scratch = 0;
  steps = 0;
  for (int i = 0; i < n; i++) {
    plan_t *pl = &x.plans[i];
    pl->buf[WEFT_BUF_SCRATCH] = h->scratch ? h->scratch + scratch : NULL; /* none needed yet */
    size_t mine = 0;
    scratch += scratch_of(pl, &mine) ? mine : 0; /* fits: checked above */
    pl->done = done + steps;
    steps += pl->s->nsteps;
  }
  rc = build_queues(&x);
  if (rc == WEFT_SUCCESS) {
    const char *what = n == 1 ? weft_coll_name(op->tasks[0].args.coll) : "group";
    WEFT_TRACE(WEFT_SUB_COLL, "rank %d op %llu: %s of %d task(s), %s, %zu steps, %d peers", c->rank,
               (unsigned long long)op->seq, what, n, weft_algo_name(op->tasks[0].algo), steps,
               x.nactive);
    rc = run(&x, what, op->seq);
  }
  if (rc == WEFT_SUCCESS)
    for (int i = 0; i < n; i++)
      finish_avg(c, &op->tasks[i]);
  free(done);
out:
  for (int i = 0; i < n && owned && is_owned; i++)
    if (is_owned[i]) weft_sched_free(&owned[i]);
  free(owned);
  free(is_owned);
  free(x.plans);
  free(x.pq);
  free(x.active);
  free(x.local);
  return rc;
}
