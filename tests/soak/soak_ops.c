/* The soak's items: drawn from the communicator's shared random sequence (every rank of it
 * draws the same kinds, sizes, dtypes, ops, roots and seeds, so calls match), issued blocking
 * or on the worker's stream (each rank's own choice: ops match by order, not by how they were
 * issued), and checked against bench/oracle.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "launch.h"
#include "oracle.h"
#include "soak.h"

enum { GUARD = 64, STOP_EVERY = 8 };
static const unsigned char PATTERN = 0xA5;

const char *const SOAK_KIND_NAME[NKINDS] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                            "reduce",    "alltoall",       "alltoallv", "sendrecv",
                                            "pair",      "barrier",        "group",     "split"};

uint64_t soak_rand(uint64_t *s) { /* splitmix64: tiny, and equal on every rank */
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static int reduces(int kind) { return kind == AR || kind == RS || kind == RD; }

/* Elements rank s sends to rank d in an alltoallv, at most count: the same on both ends. */
static size_t a2av_count(uint32_t seed, int s, int d, size_t count) {
  uint64_t h = (uint64_t)seed << 20 ^ (uint64_t)s << 10 ^ (uint64_t)d;
  return (size_t)(soak_rand(&h) % (count + 1));
}

/* Data movement looks at bytes only: its inputs are random bits from the rounding oracle's
 * i64 stream, byte b of rank r's input being byte b % 8 of its word b / 8 (a fraction of a
 * nanosecond per byte, where a float codec per element would cost ten times weft's copy). */
static void fill_bytes(int rank, uint32_t seed, char *dst, size_t off, size_t len) {
  uint64_t words[512];
  while (len > 0) {
    size_t w0 = off / 8, skip = off % 8, nw = (skip + len + 7) / 8;
    if (nw > 512) nw = 512;
    oracle_fill_wide(WEFT_I64, WEFT_SUM, rank, words, w0, nw, seed);
    size_t take = nw * 8 - skip < len ? nw * 8 - skip : len;
    memcpy(dst, (char *)words + skip, take);
    dst += take, off += take, len -= take;
  }
}

/* The most elements kind may take: w->max_bytes in all (blocked collectives divide it among
 * ranks). The oracle spends tens of nanoseconds per reduced element, weft a fraction of one:
 * reductions stop at an eighth, so that weft, not the check, fills the run. */
static size_t max_count(const worker_t *w, int kind, size_t es) {
  int blocked = kind == RS || kind == AG || kind == A2A || kind == A2AV;
  size_t bytes = kind == AR || kind == RS || kind == RD ? w->max_bytes / 8 * es : w->max_bytes;
  if (bytes > w->max_bytes) bytes = w->max_bytes;
  size_t c = bytes / es / (blocked ? (size_t)w->n : 1);
  return c ? c : 1;
}

/* Counts from one element to max_count / scale, log-uniform (every size class gets its
 * share), one in 16 empty, half of them odd. */
static size_t draw_count(worker_t *w, int kind, size_t es, int scale) {
  uint64_t r = soak_rand(&w->rng);
  if (r % 16 == 0) return 0;
  size_t max = max_count(w, kind, es) / (size_t)scale, count = 1;
  int bits = 0;
  while ((2ULL << bits) <= max)
    bits++;
  bits = (int)((r >> 8) % (uint64_t)(bits + 1));
  count = ((size_t)1 << bits) + (size_t)(r >> 16) % ((size_t)1 << bits);
  if (count > max) count = max;
  if (r & 1 << 4) count |= 1;
  return count ? count : 1;
}

static void draw_op(worker_t *w, sop_t *o, int kind, int scale) {
  memset(o, 0, sizeof *o);
  o->kind = kind;
  o->t = (weft_dtype_t)(soak_rand(&w->rng) % WEFT_DTYPE_COUNT);
  o->op = (weft_op_t)(soak_rand(&w->rng) % WEFT_OP_COUNT);
  o->count = draw_count(w, kind, weft_dtype_size(o->t), scale);
  o->root = (int)(soak_rand(&w->rng) % (uint64_t)w->n);
  o->seed = (uint32_t)soak_rand(&w->rng);
  o->shift = (int)(soak_rand(&w->rng) % (uint64_t)w->n);
  /* device comms refuse a send to the rank itself (a cudaMemcpyAsync's job): shift >= 1 */
  if (w->device && w->n > 1 && o->shift == 0) o->shift = 1 + o->seed % (uint32_t)(w->n - 1);
  uint64_t r = soak_rand(&w->rng);
  o->in_place = kind != A2AV && kind != SR && kind != PAIR && r % 4 == 0;
  /* floats mostly on inputs whose sums round (so the order shows), sometimes on small
   * integers, compared bit for bit; integers either way, both exact */
  o->wide = (r >> 8) % 4 < (weft_dtype_is_float(o->t) ? 3u : 2u);
}

static void draw_item(worker_t *w, item_t *it) {
  /* weights: 4 each for the collectives and p2p, 1 for barriers, 3 for groups, and with
   * --split 1 for a split of the world comm. Off by default: a weft bug, found by this soak,
   * fails it (soak.c's usage). Host runs only: a device comm's cudaFree waits for every
   * kernel of the process, which may wait for peers blocked in theirs. */
  int weight[NKINDS] = {4, 4, 4, 4, 4, 4, 4, 4, 4, 1, 3, 1}, total = 0, kind = 0;
  if (w->id != 0 || w->device || !w->split) weight[SPLIT] = 0;
  for (int k = 0; k < NKINDS; k++)
    total += weight[k];
  int pick = (int)(soak_rand(&w->rng) % (uint64_t)total);
  while (pick >= weight[kind])
    pick -= weight[kind++];
  it->kind = kind;
  it->nops = 1;
  if (kind == GROUP) {
    it->nops = 2 + (int)(soak_rand(&w->rng) % (SOAK_MAX_MEMBERS - 1));
    for (int i = 0, na2av = 0; i < it->nops; i++) {
      int k = (int)(soak_rand(&w->rng) % (SR + 1));
      /* a device launch holds at most 2 alltoallv (src/gpu/dev_plan.c): more are refused */
      if (k == A2AV && w->device && ++na2av > 2) k = A2A;
      draw_op(w, &it->ops[i], k, it->nops);
    }
  } else {
    draw_op(w, &it->ops[0], kind, 1);
  }
}

/* Lays out o's buffers on this rank (rank r of n) and fills its inputs. */
static int prepare(worker_t *w, sop_t *o, int r, int n) {
  size_t c = o->count, es = weft_dtype_size(o->t);
  int kind = o->kind == SPLIT ? AR : o->kind;
  o->idle = (kind == PAIR && (r ^ 1) >= n) || (kind == SR && w->device && n == 1);
  o->in_elems = o->out_elems = kind == BAR ? 0 : c;
  if (kind == RS || kind == A2A) o->in_elems = c * (size_t)n;
  if (kind == AG || kind == A2A) o->out_elems = c * (size_t)n;
  if (kind == A2AV) { /* per-pair counts, gaps of 1 (send) and 2 (receive) elements */
    o->sc = calloc((size_t)n * 4, sizeof *o->sc);
    if (!o->sc) return -1;
    o->sd = o->sc + n, o->rc = o->sc + 2 * n, o->rd = o->sc + 3 * n;
    o->in_elems = o->out_elems = 0;
    for (int p = 0; p < n; p++) {
      o->sc[p] = a2av_count(o->seed, r, p, c), o->rc[p] = a2av_count(o->seed, p, r, c);
      o->sd[p] = o->in_elems, o->rd[p] = o->out_elems;
      o->in_elems += o->sc[p] + 1, o->out_elems += o->rc[p] + 2;
    }
  }
  size_t in_b = o->in_elems * es, out_b = o->out_elems * es;
  size_t sbytes = (o->in_place && out_b > in_b ? out_b : in_b) + GUARD;
  if (sbuf_alloc(w, &o->send, sbytes) || (!o->in_place && sbuf_alloc(w, &o->recv, out_b + GUARD)) ||
      !(o->send0 = malloc(sbytes)))
    return -1;
  memset(o->send.host, PATTERN, sbytes);
  if (!o->in_place) memset(o->recv.host, PATTERN, out_b + GUARD);
  char *in = o->send.host + (o->in_place && kind == AG ? (size_t)r * c * es : 0);
  size_t fill = kind == AG ? c : o->in_elems;
  if (reduces(kind) && !o->wide)
    oracle_fill(o->t, o->op, r, in, 0, fill, o->seed);
  else if (reduces(kind))
    oracle_fill_wide(o->t, o->op, r, in, 0, fill, o->seed);
  else /* every bit random, so a misplaced byte shows */
    fill_bytes(r, o->seed, in, 0, fill * es);
  memcpy(o->send0, o->send.host, sbytes);
  return sbuf_upload(w, &o->send) || (!o->in_place && sbuf_upload(w, &o->recv)) ? -1 : 0;
}

static void free_op(sop_t *o) {
  sbuf_free(&o->send);
  sbuf_free(&o->recv);
  free(o->send0);
  free(o->sc);
  o->send0 = NULL, o->sc = NULL;
}

/* Issues o on comm (rank r of n); inside a group when the item is one. */
static weft_result_t issue(const sop_t *o, weft_comm_t comm, int r, int n, weft_stream_t st) {
  size_t c = o->count, es = weft_dtype_size(o->t);
  char *in = o->send.dev, *out = o->in_place ? o->send.dev : o->recv.dev;
  if (o->in_place && o->kind == AG) in += (size_t)r * c * es;
  if (o->in_place && o->kind == RS) out += (size_t)r * c * es;
  weft_dtype_t t = o->t;
  weft_result_t rc = WEFT_SUCCESS, rc2;
  int to = (r + o->shift) % n, from = (r + n - o->shift) % n, partner = r ^ 1;
  if (o->idle) return WEFT_SUCCESS;
  switch (o->kind) {
  case SPLIT:
  case AR: return weft_allreduce(in, out, c, t, o->op, comm, st);
  case RS: return weft_reduce_scatter(in, out, c, t, o->op, comm, st);
  case AG: return weft_allgather(in, out, c, t, comm, st);
  case BC: return weft_broadcast(in, out, c, t, o->root, comm, st);
  case RD: return weft_reduce(in, out, c, t, o->op, o->root, comm, st);
  case A2A: return weft_alltoall(in, out, c, t, comm, st);
  case A2AV: return weft_alltoallv(in, o->sc, o->sd, out, o->rc, o->rd, t, comm, st);
  case SR: /* a shifted ring in one group (shift 0: each rank to itself) */
    weft_group_start();
    weft_send(in, c, t, to, comm, st);
    weft_recv(out, c, t, from, comm, st);
    return weft_group_end();
  case PAIR: /* neighbours exchange without a group: the lower sends first */
    if (r < partner) {
      rc = weft_send(in, c, t, partner, comm, st);
      rc2 = weft_recv(out, c, t, partner, comm, st);
    } else {
      rc = weft_recv(out, c, t, partner, comm, st);
      rc2 = weft_send(in, c, t, partner, comm, st);
    }
    return rc != WEFT_SUCCESS ? rc : rc2;
  default: return weft_barrier(comm, st);
  }
}

static int untouched(const char *p, size_t len) {
  for (size_t i = 0; i < len; i++)
    if ((unsigned char)p[i] != PATTERN) return 0;
  return 1;
}

/* Checks o's result on this rank; returns why it is wrong, or NULL. */
static const char *check(worker_t *w, sop_t *o, int r, int n, char *why, size_t len) {
  size_t c = o->count, es = weft_dtype_size(o->t), out_b = o->out_elems * es;
  int kind = o->kind == SPLIT ? AR : o->kind;
  size_t sbytes = o->send.bytes;
  if (kind == BAR || o->idle) return NULL;
  if (sbuf_download(w, &o->send) || (!o->in_place && sbuf_download(w, &o->recv)))
    return "copying the buffers back from the device failed";
  char *out = o->in_place ? o->send.host : o->recv.host;
  if (o->in_place && kind == RS) out += (size_t)r * c * es;
  if (!o->in_place && memcmp(o->send.host, o->send0, sbytes) != 0) return "sendbuf was modified";
  if (!untouched(o->send.host + sbytes - GUARD, GUARD) ||
      (!o->in_place && !untouched(out + out_b, GUARD)))
    return "wrote past the end of a buffer";
  if (kind == RD && r != o->root) { /* a non-root rank's buffers stay as they were */
    if (o->in_place ? memcmp(o->send.host, o->send0, sbytes) != 0 : !untouched(out, out_b))
      return "a non-root rank's reduce buffer was written";
    return NULL;
  }
  if (reduces(kind) && o->wide) {
    double want = 0, have = 0, tol = 0;
    size_t first = kind == RS ? (size_t)r * c : 0;
    size_t bad = oracle_check_wide(o->t, o->op, n, out, first, c, o->seed, &want, &have, &tol);
    if (bad == c) return NULL;
    snprintf(why, len, "element %zu is %.17g, expected %.17g within %.3g", bad, have, want, tol);
    return why;
  }
  char *expect = malloc(out_b + 1);
  if (!expect) return "no memory for the expected result";
  const char *res = NULL;
  size_t cmp = kind == RS ? c * es : out_b;
  switch (kind) {
  case AR:
  case RD: oracle_reduced(o->t, o->op, n, expect, 0, c, o->seed); break;
  case RS: oracle_reduced(o->t, o->op, n, expect, (size_t)r * c, c, o->seed); break;
  case AG:
  case A2A:
    for (int p = 0; p < n; p++)
      fill_bytes(p, o->seed, expect + (size_t)p * c * es, kind == A2A ? r * c * es : 0, c * es);
    break;
  case BC: fill_bytes(o->root, o->seed, expect, 0, c * es); break;
  case SR:
  case PAIR:
    fill_bytes(kind == SR ? (r + n - o->shift) % n : r ^ 1, o->seed, expect, 0, c * es);
    break;
  case A2AV:
    memset(expect, PATTERN, out_b); /* the gaps stay untouched */
    for (int p = 0; p < n; p++) {
      size_t off = 0; /* where rank p's block for r starts in p's sendbuf */
      for (int q = 0; q < r; q++)
        off += a2av_count(o->seed, p, q, c) + 1;
      fill_bytes(p, o->seed, expect + o->rd[p] * es, off * es, o->rc[p] * es);
    }
    break;
  }
  if (memcmp(out, expect, cmp) != 0) {
    size_t bad = 0;
    while (bad < cmp && out[bad] == expect[bad])
      bad++;
    unsigned long long got = 0, want = 0;
    memcpy(&got, out + bad / es * es, es < 8 ? es : 8);
    memcpy(&want, expect + bad / es * es, es < 8 ? es : 8);
    snprintf(why, len, "wrong element %zu of %zu (bytes %llx, expected %llx)", bad / es, cmp / es,
             got, want);
    res = why;
  }
  free(expect);
  return res;
}

/* The first wrong results of a worker, with what it takes to find the call again. */
static void report_wrong(worker_t *w, const sop_t *o, const char *why) {
  if (w->counts.wrong + w->counts.failed_calls > 10) return; /* the first ones tell the story */
  fprintf(stderr,
          "soak rank %d comm %d (rank %d of %d): WRONG %s dtype=%s op=%s count=%zu%s%s root=%d "
          "shift=%d seed=%u: %s\n",
          w->world_rank, w->id, w->rank, w->n, SOAK_KIND_NAME[o->kind], weft_dtype_name(o->t),
          weft_op_name(o->op), o->count, o->in_place ? " in-place" : "",
          o->wide && reduces(o->kind == SPLIT ? AR : o->kind) ? " wide" : "", o->root, o->shift,
          o->seed, why);
}

static void finish_item(worker_t *w, item_t *it, int r, int n, int ok) {
  char why[256];
  for (int i = 0; i < it->nops; i++) {
    sop_t *o = &it->ops[i];
    const char *bad = ok ? check(w, o, r, n, why, sizeof why) : NULL;
    if (bad) {
      report_wrong(w, o, bad);
      w->counts.wrong++;
    }
    if (ok && !o->idle) {
      w->counts.ops++;
      w->counts.bytes += (o->in_elems + o->out_elems) * weft_dtype_size(o->t);
    }
    free_op(o);
  }
}

static int fail_call(worker_t *w, const char *what, const char *msg) {
  if (w->counts.failed_calls++ < 10)
    fprintf(stderr, "soak rank %d comm %d (rank %d of %d): %s failed: %s\n", w->world_rank, w->id,
            w->rank, w->n, what, msg);
  /* peers waiting on this comm learn at once instead of at their timeout */
  weft_comm_abort(w->comm);
  w->stop_failed = 1;
  return -1;
}

/* Synchronises the stream and checks every pending item. */
static int drain(worker_t *w) {
  char msg[512] = "";
  int ok = w->npending == 0 || soak_sync(w, msg, sizeof msg) == 0;
  for (int i = 0; i < w->npending; i++)
    finish_item(w, &w->pending[i], w->rank, w->n, ok);
  w->npending = 0;
  soak_arena_reset(w);
  return ok ? 0 : fail_call(w, "stream synchronize", msg);
}

/* A split of the world comm (three shapes, all ranks alike), one allreduce on the new comm
 * (checked as the world's items are), then its destruction. */
static int run_split(worker_t *w, item_t *it) {
  int shape = (int)(it->ops[0].seed % 3), color = 0, key = w->rank;
  if (shape == 1) color = w->rank % 2;
  if (shape == 2) color = w->rank == 0 ? WEFT_SPLIT_NOCOLOR : 0, key = -w->rank;
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 120000;
  weft_comm_t sub = NULL;
  if (weft_comm_split(w->comm, color, key, &sub, &cfg) != WEFT_SUCCESS)
    return fail_call(w, "weft_comm_split", weft_get_last_error(NULL));
  if (!sub) return 0; /* NOCOLOR: this rank sits it out */
  int sr = 0, sn = 0;
  weft_comm_rank(sub, &sr);
  weft_comm_count(sub, &sn);
  sop_t *o = &it->ops[0];
  int ok = prepare(w, o, sr, sn) == 0;
  weft_result_t rc = ok ? issue(o, sub, sr, sn, NULL) : WEFT_ERR_NO_MEMORY;
  char msg[512];
  snprintf(msg, sizeof msg, "%s", weft_get_last_error(sub));
  finish_item(w, it, sr, sn, rc == WEFT_SUCCESS);
  if (weft_comm_destroy(sub) != WEFT_SUCCESS && rc == WEFT_SUCCESS) {
    rc = WEFT_ERR_INTERNAL;
    snprintf(msg, sizeof msg, "weft_comm_destroy: %s", weft_get_last_error(NULL));
  }
  return rc == WEFT_SUCCESS ? 0 : fail_call(w, "an allreduce on a split comm", msg);
}

/* The ranks agree to stop once any of them is past the deadline (MAX of a flag): every
 * rank then leaves after the same item. Called with nothing pending (the arena is free). */
static int agree_stop(worker_t *w, int *stop) {
  int32_t v[2] = {launch_now_ms() >= w->deadline_ms, -1};
  char msg[512] = "";
  sbuf_t b;
  weft_result_t rc = WEFT_ERR_NO_MEMORY;
  if (sbuf_alloc(w, &b, sizeof v) == 0) {
    memcpy(b.host, v, sizeof v);
    if (sbuf_upload(w, &b) == 0 && soak_order_enter(w) == 0) {
      rc = weft_allreduce(b.dev, (int32_t *)b.dev + 1, 1, WEFT_I32, WEFT_MAX, w->comm,
                          w->device ? w->stream : NULL);
      if (soak_order_leave(w) && rc == WEFT_SUCCESS) rc = WEFT_ERR_INTERNAL;
    }
    if (rc != WEFT_SUCCESS)
      snprintf(msg, sizeof msg, "%s", weft_get_last_error(w->comm));
    else if (w->device && soak_sync(w, msg, sizeof msg))
      rc = WEFT_ERR_INTERNAL;
    if (rc == WEFT_SUCCESS && sbuf_download(w, &b)) rc = WEFT_ERR_INTERNAL;
    memcpy(v, b.host, sizeof v);
  }
  sbuf_free(&b);
  soak_arena_reset(w);
  if (rc != WEFT_SUCCESS) return fail_call(w, "the stop vote", msg);
  if (v[1] != 0 && v[1] != 1) w->counts.wrong++;
  w->counts.ops++;
  *stop = v[1] != 0;
  return 0;
}

/* Prepares, issues and checks it (blocking host items at once, the others when this rank
 * drains); -1 when a call failed. */
static int run_item(worker_t *w, item_t *it) {
  weft_stream_t st = it->streamed || w->device ? w->stream : NULL;
  int ok = 1;
  for (int i = 0; i < it->nops && ok; i++)
    ok = prepare(w, &it->ops[i], w->rank, w->n) == 0;
  if (!ok) { /* frees what was allocated: draw_op zeroed every op */
    finish_item(w, it, w->rank, w->n, 0);
    return fail_call(w, "allocating buffers", "out of memory");
  }
  if (soak_order_enter(w)) {
    finish_item(w, it, w->rank, w->n, 0);
    return fail_call(w, "waiting for the previous launch", "cudaStreamWaitEvent failed");
  }
  if (it->kind == GROUP) weft_group_start();
  weft_result_t rc = WEFT_SUCCESS;
  for (int i = 0; i < it->nops; i++) {
    weft_result_t e = issue(&it->ops[i], w->comm, w->rank, w->n, st);
    if (rc == WEFT_SUCCESS) rc = e;
  }
  if (it->kind == GROUP) rc = weft_group_end();
  char msg[512];
  snprintf(msg, sizeof msg, "%s", weft_get_last_error(w->comm));
  if (soak_order_leave(w) && rc == WEFT_SUCCESS) {
    rc = WEFT_ERR_INTERNAL;
    snprintf(msg, sizeof msg, "cudaEventRecord after the launch failed");
  }
  if (rc != WEFT_SUCCESS) {
    finish_item(w, it, w->rank, w->n, 0);
    return fail_call(w, SOAK_KIND_NAME[it->kind], msg);
  }
  if (!it->streamed && !w->device) { /* done when the call returned */
    finish_item(w, it, w->rank, w->n, 1);
    return 0;
  }
  /* a stream item waits for its synchronize; this rank drains after a random depth */
  w->npending++;
  if (!it->streamed || w->npending == SOAK_MAX_PENDING || soak_rand(&w->local_rng) % 3 == 0)
    return drain(w);
  return 0;
}

/* Every kind at the largest size and at a few elements, out of place and in place: weft's and
 * the allocator's high-water marks (scratch, staging) are reached before the warm-up's
 * sample, and every kernel of a device comm has run once. The shifted ring runs every shift:
 * shm makes a pair's ring on its first send, and a pair first used after the sample would
 * count as growth. */
static int sweep(worker_t *w) {
  for (int kind = AR; kind <= PAIR; kind++)
    for (int big = 1; big >= 0; big--)
      for (int ip = 0; ip <= (kind != A2AV && kind != SR && kind != PAIR); ip++)
        for (int shift = kind == SR && w->device && w->n > 1; shift < (kind == SR ? w->n : 1);
             shift++) {
          item_t *it = &w->pending[w->npending];
          it->kind = kind, it->nops = 1, it->streamed = 0;
          draw_op(w, &it->ops[0], kind, 1);
          it->ops[0].count = big ? max_count(w, kind, weft_dtype_size(it->ops[0].t)) : 3;
          it->ops[0].in_place = ip;
          if (kind == SR) it->ops[0].shift = shift;
          w->counts.kind[kind]++;
          if (run_item(w, it)) return -1;
        }
  return drain(w);
}

int soak_run(worker_t *w) {
  int stop = 0;
  if (w->sweep && sweep(w)) stop = 1;
  for (int items = 0; !w->stop_failed && !stop; items++) {
    if (items % STOP_EVERY == 0 && (drain(w) || agree_stop(w, &stop) || stop)) break;
    item_t *it = &w->pending[w->npending];
    draw_item(w, it);
    w->counts.kind[it->kind]++;
    if (it->kind == SPLIT) {
      if (run_split(w, it)) break;
      continue;
    }
    /* blocking or stream-ordered: this rank's own choice (device runs always pass their
     * stream, and a blocking item is synchronised at once) */
    it->streamed = soak_rand(&w->local_rng) % 2;
    w->counts.streamed += it->streamed;
    if (run_item(w, it)) break;
  }
  if (!w->stop_failed) {
    drain(w);
  } else {
    char msg[64];
    if (w->npending) soak_sync(w, msg, sizeof msg); /* fails at once: the comm is aborted */
    for (int i = 0; i < w->npending; i++)
      finish_item(w, &w->pending[i], w->rank, w->n, 0);
    w->npending = 0;
  }
  soak_order_quit(w);
  return w->stop_failed ? 1 : 0;
}
