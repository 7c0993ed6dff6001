/* Fuzz target: weft's public API on host buffers. Each input is a few steps (one call, or a group
 * of calls) that every rank of a 1-rank, 2-rank shm or 2-rank TCP communicator runs with its own
 * heap arena. A call must be refused with WEFT_ERR_INVALID_ARG leaving every byte as it was, or
 * succeed writing exactly what its contract says inside its own buffers; anything else aborts.
 *
 * Built with -DWEFT_FUZZ_DEVICE (replay_api_device, with replay_device.c) the same steps run on
 * device communicators on GPU 0: 1 rank, and 2 ranks sharing the GPU, as two threads of this
 * process or (fuzz_device_start(1)) rank 1 in a forked process. Each rank's arena is a
 * cudaMalloc'd block of the host arena's size (guards included) that mirrors it: copied in
 * before a step, the calls given device pointers at the same offsets on the rank's own
 * non-blocking CUDA stream, the stream synchronised, the block copied back, and the host checks
 * applied. WEFT_ERR_UNSUPPORTED (a group a device communicator does not run) counts as a
 * refusal that must leave every byte; a violation is reported and counted, not aborted on. */
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#ifdef WEFT_FUZZ_DEVICE
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz_device.h"
#endif
#include "outcome.h"
#include "weft.h"

enum { G = 64, MAXA = 60000, MAXSTEPS = 6, MAXCALLS = 4, NCOMMS = 3, CANARY = 0xCB };
enum { AR, RS, AG, BC, RED, A2A, A2AV, SENDRECV, ONEWAY, BARRIER, GROUP_END, K_COUNT };
static const char *const kname[K_COUNT] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                           "reduce",    "alltoall",       "alltoallv", "sendrecv",
                                           "oneway",    "barrier",        "group_end"};
#define NUL SIZE_MAX /* an offset standing for a NULL pointer */

typedef struct {
  int kind, nullcomm, dtype, op, root, peer_mode; /* peer: 0 the other rank, 1 self, 2 root */
  size_t es, count, soff, doff;
  int place, packed, skew, nullarr;
  size_t cnt[2][2], sd[2][2], rd[2][2]; /* alltoallv: cnt[from][to], displs[rank][peer] */
  /* per rank: buffers, alltoallv arrays, the contract's verdict per half, what was issued */
  size_t so[2], dof[2], arr[2][4][2];
  int pred[2][2], issued[2][2];
  weft_result_t rc[2][3]; /* [2]: the group_end wrapped around a send/recv pair */
} call_t;

/* ---- the communicators and the rank threads, made on the first input ---- */
static weft_comm_t comms[NCOMMS][2];
static pthread_barrier_t go_b, done_b, *go = &go_b, *done = &done_b;
static void (*job)(int rank);
static int ci, n; /* the input's communicator and its size */
static char env_algo[32] = "WEFT_ALGO=auto", env_chunk[32] = "WEFT_CHUNK_BYTES=0";
static weft_unique_id_t uid;
static weft_result_t init_rc[2];
#ifdef WEFT_FUZZ_DEVICE
static int forked; /* rank 1 runs in a child process: see to_child */
static void to_child(void), from_child(void);
#endif

static void *worker(void *arg) {
  int r = (int)(intptr_t)arg;
  for (;;) {
    pthread_barrier_wait(go);
    job(r);
    pthread_barrier_wait(done);
  }
  return NULL;
}
static void run_ranks(void (*fn)(int)) {
  job = fn;
#ifdef WEFT_FUZZ_DEVICE
  if (forked) to_child();
#endif
  pthread_barrier_wait(go);
  pthread_barrier_wait(done);
#ifdef WEFT_FUZZ_DEVICE
  if (forked) from_child();
#endif
}

#ifndef WEFT_FUZZ_DEVICE
static weft_stream_t streams[2];
static char env_transport[] = "WEFT_TRANSPORT=auto", env_check[] = "WEFT_CHECK=0";
static void init_rank(int r) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 5000; /* a mismatched pair fails instead of hanging */
  init_rc[r] = weft_comm_init(&comms[ci][r], 2, uid, r, &cfg);
  if (!streams[r]) weft_stream_create(&streams[r]);
}

/* Small rings and frames so that a few KiB already wrap them. The environment is set only
 * here and rewritten in place (putenv'd buffers) while no weft call runs. */
static void setup(void) {
  static char *fixed[] = {"WEFT_SHM_RING_BYTES=4096", "WEFT_TCP_BUF_BYTES=65536",
                          "WEFT_TCP_FRAME_BYTES=4096", "WEFT_SOCKET_IFADDR=127.0.0.1"};
  for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
    putenv(fixed[i]);
  putenv(env_transport), putenv(env_check), putenv(env_algo), putenv(env_chunk);
  pthread_barrier_init(go, NULL, 3);
  pthread_barrier_init(done, NULL, 3);
  for (int r = 0; r < 2; r++) {
    pthread_t t;
    pthread_create(&t, NULL, worker, (void *)(intptr_t)r);
  }
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = 5000;
  if (weft_get_unique_id(&uid) || weft_comm_init(&comms[0][0], 1, uid, 0, &cfg)) abort();
  for (ci = 1; ci < NCOMMS; ci++) { /* 1: shared memory; 2: TCP, with WEFT_CHECK's exchange */
    if (ci == 2) strcpy(env_transport + 15, "tcp"), env_check[11] = '1';
    if (weft_get_unique_id(&uid)) abort();
    run_ranks(init_rank);
    if (init_rc[0] || init_rc[1] || !streams[0] || !streams[1]) {
      fprintf(stderr, "fuzz_api: cannot make communicator %d: %s\n", ci, weft_get_last_error(NULL));
      abort();
    }
  }
}
#endif

/* ---- input decoding ---- */
typedef struct {
  const uint8_t *p;
  size_t n;
} in_t;
static uint8_t u8(in_t *in) { return in->n ? (in->n--, *in->p++) : 0; }
static unsigned u16(in_t *in) { return u8(in) | (unsigned)u8(in) << 8; }
static int special(uint8_t b, int lim) {
  const int v[8] = {-1, lim, lim + 1, INT_MIN, INT_MAX, -lim, 255, -2};
  return v[b & 7];
}
/* Mostly small counts; the rest near the limits where byte sizes overflow. */
static size_t size_val(in_t *in, size_t es) {
  const size_t sp[6] = {SIZE_MAX,     SIZE_MAX / es + 1,    SIZE_MAX / es, SIZE_MAX / 4 + 1,
                        SIZE_MAX / 2, SIZE_MAX / es / 2 + 1}; /* the last: * 2 ranks overflows */
  uint8_t b = u8(in);
  uint64_t v = 0;
  if (b < 0xE0 || b > 0xE8) return b < 0xE0 ? b : b & 0x1f;
  if (b == 0xE0) return u16(in);
  if (b == 0xE8) return SIZE_MAX - u8(in);
  for (int i = 0; i < 8 && b == 0xE1; i++)
    v |= (uint64_t)u8(in) << 8 * i;
  return b == 0xE1 ? (size_t)v : sp[b - 0xE2];
}
static int dtype_ok(int t) { return t >= 0 && t < WEFT_DTYPE_COUNT; }

static void decode(in_t *in, call_t *c, size_t A) {
  memset(c, 0, sizeof *c);
  uint8_t b = u8(in), d = u8(in), o = u8(in), r = u8(in);
  c->kind = (b & 15) % K_COUNT;
  c->nullcomm = b >= 0xF0;
  c->dtype = d < 0xF0 ? d % WEFT_DTYPE_COUNT : special(d, WEFT_DTYPE_COUNT);
  c->op = o < 0xF0 ? o % WEFT_OP_COUNT : special(o, WEFT_OP_COUNT);
  c->root = r < 0xF0 ? r % n : special(r, n);
  c->peer_mode = r < 0xF0 ? r >> 7 : 2;
  c->es = dtype_ok(c->dtype) ? weft_dtype_size((weft_dtype_t)c->dtype) : 1;
  c->count = size_val(in, c->es);
  c->place = u8(in) & 7;
  c->soff = u16(in) % (A + 1) / c->es * c->es; /* element-aligned offsets into the arena */
  c->doff = u16(in) % (A + 1) / c->es * c->es;
  if (c->kind != A2AV) return;
  uint8_t f = u8(in);
  c->packed = f & 1, c->skew = f >> 1 & 1, c->nullarr = f >> 2 & 7;
  for (int i = 0; i < n * n; i++)
    c->cnt[i / n][i % n] = size_val(in, c->es);
  for (int i = 0; i < n * n && !c->packed; i++)
    c->sd[i / n][i % n] = size_val(in, c->es), c->rd[i / n][i % n] = size_val(in, c->es);
  for (int r = 0; r < n && c->packed; r++) /* blocks back to back, in peer order */
    for (int p = 1; p < n; p++)
      c->sd[r][p] = c->sd[r][p - 1] + c->cnt[r][p - 1],
      c->rd[r][p] = c->rd[r][p - 1] + c->cnt[p - 1][r];
}

static size_t at(size_t a, size_t b) {
  size_t s;
  return __builtin_add_overflow(a, b, &s) ? NUL - 1 : s;
}
static int fits(size_t a, size_t b, size_t es, size_t *out) { /* *out = a * b * es */
  return !__builtin_mul_overflow(a, b, out) && !__builtin_mul_overflow(*out, es, out);
}
static int ext(size_t off, size_t cnt, size_t es) { /* (off + cnt) * es fits */
  size_t e;
  return !__builtin_add_overflow(off, cnt, &e) && !__builtin_mul_overflow(e, es, &e);
}
static int nonroot(const call_t *c, int r) {
  return c->kind == BC || c->kind == RED ? r != c->root : r == 1;
}
/* Where rank r's buffers lie: separate, the same pointer, in place the way reduce_scatter and
 * allgather define it (per rank), or NULL on some ranks. */
static void place(call_t *c, int r) {
  size_t s = c->soff, d = c->doff, blk = 0;
  int nr = nonroot(c, r);
  switch (c->place) {
  case 1: s = d; break;
  case 2:
    if (c->kind == RS || c->kind == AG)
      *(c->kind == RS ? &d : &s) =
          fits(c->count, (size_t)r, c->es, &blk) ? at(c->kind == RS ? s : d, blk) : NUL - 1;
    else
      s = d;
    break;
  case 3: s = NUL; break;
  case 4: d = NUL; break;
  case 5: s = d = NUL; break;
  case 6: d = nr ? NUL : d; break;
  case 7: s = nr ? NUL : s; break;
  }
  c->so[r] = s, c->dof[r] = d;
  size_t *a = &c->arr[r][0][0]; /* sendcounts, sdispls, recvcounts, rdispls */
  for (int p = 0; p < n; p++)
    a[p] = c->cnt[r][p], a[2 + p] = c->sd[r][p],
    a[4 + p] = c->cnt[p][r] + (size_t)(c->skew && p == r), a[6 + p] = c->rd[r][p];
}

/* ---- the contract: which calls weft.h says are valid (pointers as the rank passes them) ---- */
static char *arena[2];     /* the bytes the checks read */
static uintptr_t vbase[2]; /* where the rank's pointers start: arena, or its device block's */
static char *ptr(int r, size_t off) { /* wrapping: offsets of invalid calls may be huge */
  return off == NUL ? NULL : (char *)(vbase[r] + off);
}
static int need(const char *p, size_t b) { return !b || p; }
static int ovl(const char *a, size_t al, const char *b, size_t bl) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return al && bl && x < y + bl && y < x + al;
}
static int peer_of(const call_t *c, int r) {
  if (c->kind == ONEWAY && n == 2 && c->peer_mode != 2) return 1 - r;
  return c->peer_mode == 2 ? c->root : c->peer_mode ? r : (r + 1) % n;
}
static int valid(const call_t *c, int r, int half) {
  const char *s = ptr(r, c->so[r]), *d = ptr(r, c->dof[r]);
  size_t es = c->es, b, sb, rb;
  int root = r == c->root, red = c->kind == AR || c->kind == RS || c->kind == RED;
  if (c->kind == GROUP_END) return 0; /* issued outside groups only */
  if (c->nullcomm) return 0;
  if (c->kind == BARRIER) return 1;
  if (!dtype_ok(c->dtype) || (red && (c->op < 0 || c->op >= WEFT_OP_COUNT))) return 0;
  switch (c->kind) {
  case AR:
    return fits(c->count, 1, es, &b) && need(s, b) && need(d, b) && (s == d || !ovl(s, b, d, b));
  case RS:
    if (!fits(c->count, (size_t)n, es, &sb) || !fits(c->count, 1, es, &rb)) return 0;
    return need(s, sb) && need(d, rb) &&
           ((uintptr_t)s + r * rb == (uintptr_t)d || !ovl(s, sb, d, rb));
  case AG:
    if (!fits(c->count, 1, es, &sb) || !fits(c->count, (size_t)n, es, &rb)) return 0;
    return need(s, sb) && need(d, rb) &&
           ((uintptr_t)d + r * sb == (uintptr_t)s || !ovl(s, sb, d, rb));
  case BC:
  case RED:
    if (c->root < 0 || c->root >= n || !fits(c->count, 1, es, &b)) return 0;
    if ((c->kind == RED || root) && !need(s, b)) return 0;
    if ((c->kind == BC || root) && !need(d, b)) return 0;
    return !root || s == d || !ovl(s, b, d, b);
  case A2A:
    return fits(c->count, (size_t)n, es, &b) && need(s, b) && need(d, b) &&
           (s == d || !ovl(s, b, d, b));
  case A2AV: {
    const size_t *a = &c->arr[r][0][0];
    size_t se = 0, re = 0, total = 0;
    if (c->nullarr >= 1 && c->nullarr <= 4) return 0;
    for (int p = 0; p < n; p++) {
      if (!ext(a[2 + p], a[p], es) || !ext(a[6 + p], a[4 + p], es) ||
          __builtin_add_overflow(total, a[p], &total))
        return 0;
      if (a[p] && a[2 + p] + a[p] > se) se = a[2 + p] + a[p];
      if (a[4 + p] && a[6 + p] + a[4 + p] > re) re = a[6 + p] + a[4 + p];
    }
    return a[r] == a[4 + r] && need(s, se) && need(d, re) && !ovl(s, se * es, d, re * es);
  }
  default: /* SENDRECV (half 0 sends, 1 receives), ONEWAY (rank 0 sends, 1 receives) */
    if (peer_of(c, r) < 0 || peer_of(c, r) >= n || !fits(c->count, 1, es, &b)) return 0;
    return need(c->kind == ONEWAY && n == 2 ? (r ? d : s) : half ? d : s, b);
  }
}

/* ---- what an accepted call must do: E computed from the images P taken before the step ---- */
static uint8_t P[2][MAXA], E[2][MAXA], wm[2][MAXA], rm[2][MAXA]; /* masks: bit per call */
static size_t A;
static int dry, unfit, inexact, fill_t;
static const int fmt[WEFT_DTYPE_COUNT][2] = {
    [WEFT_F32] = {8, 23}, [WEFT_F64] = {11, 52},    [WEFT_F16] = {5, 10},
    [WEFT_BF16] = {8, 7}, [WEFT_FP8_E4M3] = {4, 3}, [WEFT_FP8_E5M2] = {5, 2}};
static double load(int t, const uint8_t *p) {
  uint64_t u = 0;
  memcpy(&u, p, weft_dtype_size((weft_dtype_t)t));
  switch (t) {
  case WEFT_I8: return (int8_t)u;
  case WEFT_U8: return (uint8_t)u;
  case WEFT_I32: return (int32_t)u;
  case WEFT_I64: return (double)(int64_t)u;
  case WEFT_U32: return (uint32_t)u;
  case WEFT_U64: return (double)u; /* values here stay small: exact */
  }
  int eb = fmt[t][0], mb = fmt[t][1], bias = (1 << (eb - 1)) - 1;
  uint64_t m = u & ((1ull << mb) - 1), e = u >> mb & ((1ull << eb) - 1);
  double v = e ? ldexp(1 + ldexp((double)m, -mb), (int)e - bias) : ldexp((double)m, 1 - bias - mb);
  return u >> (eb + mb) & 1 ? -v : v;
}
/* Exact for every value that occurs here: multiples of 1/2 up to 4 in magnitude. */
static void store(int t, uint8_t *p, double v) {
  uint64_t u = (uint64_t)(int64_t)v;
  if (fmt[t][0]) {
    int eb = fmt[t][0], mb = fmt[t][1], e;
    double f = frexp(fabs(v), &e);
    u = v == 0 ? 0 : (uint64_t)(e - 1 + (1 << (eb - 1)) - 1) << mb | (uint64_t)ldexp(2 * f - 1, mb);
    if (signbit(v)) u |= 1ull << (eb + mb);
  }
  memcpy(p, &u, weft_dtype_size((weft_dtype_t)t));
}
static int span(size_t off, size_t len) { /* inside the arena; 0: nothing to do */
  if (!len) return 0;
  if (off > A || len > A - off) unfit = 1;
  return !unfit && !dry;
}
static void mark(uint8_t *m, size_t off, size_t len, int bit) {
  for (size_t j = 0; j < len; j++)
    m[off + j] |= (uint8_t)bit;
}
static void copy(int dr, size_t doff, int sr, size_t soff, size_t len, int wbit, int rbit) {
  int a = span(doff, len), b = span(soff, len);
  if (!a || !b) return;
  for (size_t j = 0; j < len; j++) /* blocks of one call that overlap: any order is right */
    inexact |= (wm[dr][doff + j] & wbit) != 0;
  memcpy(E[dr] + doff, P[sr] + soff, len);
  mark(wm[dr], doff, len, wbit), mark(rm[sr], soff, len, rbit);
}
/* count elements at doff of rank dr = op over the ranks k of their elements at src[k] */
static void reduce_into(const call_t *c, int dr, size_t doff, const size_t *src, int bit) {
  size_t es = c->es, len = c->count * es;
  int ok = span(doff, len);
  for (int k = 0; k < n; k++)
    ok &= span(src[k], len);
  if (!ok) return;
  mark(wm[dr], doff, len, bit);
  for (int k = 0; k < n; k++)
    mark(rm[k], src[k], len, bit);
  if (c->dtype != fill_t) inexact = 1; /* the values were laid out for another type */
  for (size_t i = 0; i < c->count && !inexact; i++) {
    double acc = 0;
    for (int k = 0; k < n; k++) {
      double v = load(c->dtype, P[k] + src[k] + i * es);
      acc = k == 0               ? v
            : c->op == WEFT_PROD ? acc * v
            : c->op == WEFT_MIN  ? (v < acc ? v : acc)
            : c->op == WEFT_MAX  ? (v > acc ? v : acc)
                                 : acc + v;
    }
    if (c->op == WEFT_AVG) acc = fmt[c->dtype][0] ? acc / n : trunc(acc / n);
    store(c->dtype, E[dr] + doff + i * es, acc);
  }
}
static void model(const call_t *c, int i) {
  size_t es = c->es, b = c->count * es, src[2];
  for (int r = 0; r < n; r++) {
    int p = peer_of(c, r);
    switch (c->kind) {
    case AR:
    case RS:
    case RED:
      if (c->kind == RED && r != c->root) break;
      for (int k = 0; k < n; k++)
        src[k] = c->kind == RS ? at(c->so[k], (size_t)r * b) : c->so[k];
      reduce_into(c, r, c->dof[r], src, 1 << i);
      break;
    case AG:
      for (int k = 0; k < n; k++)
        copy(r, at(c->dof[r], (size_t)k * b), k, c->so[k], b, 1 << i, 1 << i);
      break;
    case BC: copy(r, c->dof[r], c->root, c->so[c->root], b, 1 << i, 1 << i); break;
    case A2A:
      for (int k = 0; k < n; k++)
        copy(r, at(c->dof[r], (size_t)k * b), k, at(c->so[k], (size_t)r * b), b, 1 << i, 1 << i);
      break;
    case A2AV:
      for (int k = 0; k < n; k++)
        copy(r, at(c->dof[r], c->arr[r][3][k] * es), k, at(c->so[k], c->arr[k][1][r] * es),
             c->arr[k][0][r] * es, 1 << i, 1 << i);
      break;
    case SENDRECV:
    case ONEWAY: /* the receive is its own bit: it may not overwrite what the send still reads */
      if (c->kind == ONEWAY && n == 2 && r == 0) break;
      copy(r, c->dof[r], p, c->so[p], b, 16 << i, 1 << i);
      break;
    }
  }
}

/* ---- one step: the rank threads issue the calls, then the effects are checked ---- */
static call_t calls[MAXCALLS];
static size_t keep[MAXCALLS][2][4][2]; /* the alltoallv arrays as handed over */
static char msg[MAXCALLS][2][160];
static int ncalls, grouped, nested, use_stream;
static weft_result_t gend[2][2], sync_rc[2];

static int halves(const call_t *c) {
  return c->kind == SENDRECV || (c->kind == ONEWAY && n == 1) ? 2 : 1;
}
static weft_result_t issue(call_t *c, int r, int h, weft_stream_t st) {
  weft_comm_t cm = c->nullcomm ? NULL : comms[ci][r];
  const char *s = ptr(r, c->so[r]);
  char *d = ptr(r, c->dof[r]);
  weft_dtype_t t = (weft_dtype_t)c->dtype;
  weft_op_t op = (weft_op_t)c->op;
  size_t *a[4];
  for (int k = 0; k < 4; k++)
    a[k] = c->nullarr == k + 1 ? NULL : c->arr[r][k];
  switch (c->kind) {
  case AR: return weft_allreduce(s, d, c->count, t, op, cm, st);
  case RS: return weft_reduce_scatter(s, d, c->count, t, op, cm, st);
  case AG: return weft_allgather(s, d, c->count, t, cm, st);
  case BC: return weft_broadcast(s, d, c->count, t, c->root, cm, st);
  case RED: return weft_reduce(s, d, c->count, t, op, c->root, cm, st);
  case A2A: return weft_alltoall(s, d, c->count, t, cm, st);
  case A2AV: return weft_alltoallv(s, a[0], a[1], d, a[2], a[3], t, cm, st);
  case BARRIER: return weft_barrier(cm, st);
  case GROUP_END: return weft_group_end();
  }
  int send = c->kind == ONEWAY && n == 2 ? r == 0 : h == 0;
  return send ? weft_send(s, c->count, t, peer_of(c, r), cm, st)
              : weft_recv(d, c->count, t, peer_of(c, r), cm, st);
}
/* The step's calls as rank r issues them, on stream st. */
static void issue_step(int r, weft_stream_t st) {
  for (int g = 0; g < grouped + nested; g++)
    weft_group_start();
  for (int i = 0; i < ncalls; i++) {
    call_t *c = &calls[i];
    int wrap = halves(c) == 2 && !grouped; /* a send/recv pair needs a group */
    if (wrap) weft_group_start();
    for (int h = 0; h < halves(c); h++) {
      c->rc[r][h] = c->issued[r][h] ? issue(c, r, h, st) : WEFT_SUCCESS;
      if (c->rc[r][h]) snprintf(msg[i][r], sizeof msg[i][r], "%s", weft_get_last_error(NULL));
    }
    c->rc[r][2] = wrap ? weft_group_end() : WEFT_SUCCESS;
  }
  for (int g = 0; g < 2; g++)
    gend[r][g] = g < grouped + nested ? weft_group_end() : WEFT_SUCCESS;
}

#ifndef WEFT_FUZZ_DEVICE
static void step_rank(int r) {
  if (r >= n) return;
  weft_stream_t st = use_stream ? streams[r] : NULL;
  issue_step(r, st);
  sync_rc[r] = st ? weft_stream_synchronize(st) : WEFT_SUCCESS;
}
#else
/* ---- device mode: the ranks' device blocks, streams, and rank 1's process ---- */
static cudaStream_t dstream[2];
static char *dblock[2], *hblock[2]; /* a rank's block of A + 2 * G bytes, and its host image */
static char why[2][160];            /* what failed on a rank, for the report */
static fuzz_device_stats_t stats;
static int started, ready; /* ready: every communicator made */

static weft_result_t cuda_failed(int r, cudaError_t e, const char *what) {
  if (e == cudaSuccess) return WEFT_SUCCESS;
  snprintf(why[r], sizeof why[r], "%s: %s", what, cudaGetErrorString(e));
  return WEFT_ERR_SYSTEM;
}
/* host image <-> device block, on the rank's stream, waited for */
static weft_result_t copy_block(int r, int in) {
  cudaStream_t s = dstream[r];
  cudaError_t e = cudaMemcpyAsync(in ? dblock[r] : hblock[r], in ? hblock[r] : dblock[r], A + 2 * G,
                                  in ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  return cuda_failed(r, e, in ? "copying the arena in" : "copying the arena back");
}
/* A device step: arena in, the calls on the rank's CUDA stream, the stream and the
 * communicator's kernels waited for, arena back. Never the legacy stream nor a device-wide
 * synchronisation: the other rank's kernels may be waiting for this rank's. */
static void dev_step_rank(int r) {
  if (r >= n) return;
  why[r][0] = 0;
  weft_result_t rc = copy_block(r, 1), async = WEFT_SUCCESS;
  issue_step(r, (weft_stream_t)(void *)dstream[r]);
  weft_result_t e = cuda_failed(r, cudaStreamSynchronize(dstream[r]), "cudaStreamSynchronize");
  if (weft_comm_get_async_error(comms[ci][r], &async) == WEFT_SUCCESS && async && !why[r][0])
    snprintf(why[r], sizeof why[r], "the communicator failed: %s",
             weft_get_last_error(comms[ci][r]));
  weft_result_t back = copy_block(r, 0);
  sync_rc[r] = rc ? rc : e ? e : async ? async : back;
}
static void dev_alloc_rank(int r) {
  void *p = NULL;
  if (r >= n) return;
  why[r][0] = 0;
  sync_rc[r] = cuda_failed(r, cudaMalloc(&p, A + 2 * G), "cudaMalloc of the arena");
  dblock[r] = p;
}
static void dev_free_rank(int r) {
  if (r < n && dblock[r]) cudaFree(dblock[r]);
  if (r < n) dblock[r] = NULL;
}
static void dev_init_rank(int r) {
  weft_config_t cfg = WEFT_CONFIG_INIT;
  if (r >= n) return;
  why[r][0] = 0;
  cfg.device = 0;
  cfg.timeout_ms = 60000; /* kernels wait for the peer's; under memcheck that can take long */
  init_rc[r] = cuda_failed(r, cudaSetDevice(0), "cudaSetDevice(0)");
  if (!init_rc[r] && !dstream[r])
    init_rc[r] = cuda_failed(r, cudaStreamCreateWithFlags(&dstream[r], cudaStreamNonBlocking),
                             "cudaStreamCreateWithFlags");
  if (!init_rc[r]) init_rc[r] = weft_comm_init(&comms[ci][r], n, uid, r, &cfg);
  if (init_rc[r] && !why[r][0]) snprintf(why[r], sizeof why[r], "%s", weft_get_last_error(NULL));
}
static void dev_destroy_rank(int r) {
  if (r < n && comms[ci][r]) weft_comm_destroy(comms[ci][r]);
  if (r < n) comms[ci][r] = NULL;
}
static void dev_idle_rank(int r) { (void)r; }

/* With rank 1 in a child process, what its step reads goes to it through shared memory before
 * the go barrier, and what it wrote comes back after the done barrier (the barriers are
 * process-shared there). Its host image is in that memory too. */
typedef struct {
  pthread_barrier_t go, done;
  void (*job)(int rank); /* the same address in the child: forked, not exec'd */
  int quit, ci, n, ncalls, grouped, nested;
  size_t A;
  call_t calls[MAXCALLS];
  weft_unique_id_t uid;
  char algo[32], chunk[32];
  weft_result_t rc[MAXCALLS][3], gend[2], sync_rc, init_rc; /* back from rank 1 */
  char msg[MAXCALLS][160], why[160];
  uintptr_t dblock;
  char host[2][MAXA + 2 * G]; /* both ranks' host images */
} shared_t;
static shared_t *S;
static pid_t child;
static pthread_t watcher;

static void to_child(void) {
  S->job = job, S->ci = ci, S->n = n, S->ncalls = ncalls, S->grouped = grouped;
  S->nested = nested, S->A = A, S->uid = uid;
  memcpy(S->calls, calls, sizeof calls);
  memcpy(S->algo, env_algo, sizeof env_algo), memcpy(S->chunk, env_chunk, sizeof env_chunk);
}
static void from_child(void) {
  for (int i = 0; i < MAXCALLS; i++) {
    memcpy(calls[i].rc[1], S->rc[i], sizeof S->rc[i]);
    memcpy(msg[i][1], S->msg[i], sizeof S->msg[i]);
  }
  memcpy(gend[1], S->gend, sizeof S->gend);
  sync_rc[1] = S->sync_rc, init_rc[1] = S->init_rc;
  memcpy(why[1], S->why, sizeof S->why);
  dblock[1] = (char *)S->dblock; /* its address there: only ever used as a number here */
}
/* Rank 1's process: the worker loop, with the step copied in and the results out. */
static void child_main(pid_t parent) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);
  for (;;) {
    pthread_barrier_wait(go);
    job = S->job, ci = S->ci, n = S->n, ncalls = S->ncalls, grouped = S->grouped;
    nested = S->nested, A = S->A, uid = S->uid;
    vbase[1] = (uintptr_t)dblock[1] + G; /* as the parent computed it from S->dblock */
    memcpy(calls, S->calls, sizeof calls);
    memcpy(env_algo, S->algo, sizeof env_algo), memcpy(env_chunk, S->chunk, sizeof env_chunk);
    job(1);
    for (int i = 0; i < MAXCALLS; i++) {
      memcpy(S->rc[i], calls[i].rc[1], sizeof S->rc[i]);
      memcpy(S->msg[i], msg[i][1], sizeof S->msg[i]);
    }
    memcpy(S->gend, gend[1], sizeof S->gend);
    S->sync_rc = sync_rc[1], S->init_rc = init_rc[1], S->dblock = (uintptr_t)dblock[1];
    memcpy(S->why, why[1], sizeof S->why);
    int quit = S->quit;
    pthread_barrier_wait(done);
    if (quit) {
      fflush(NULL);
      _exit(0);
    }
  }
}

/* Rank 1's process ending before it is told to would leave this one at a barrier for good. */
static void *watch_child(void *arg) {
  int st = 0;
  (void)arg;
  if (waitpid(child, &st, 0) == child && !S->quit) {
    fprintf(stderr, "replay_api_device: rank 1's process ended (%s %d) during input %ld\n",
            WIFSIGNALED(st) ? "signal" : "exit status",
            WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), stats.inputs);
    _exit(1);
  }
  return NULL;
}

int fuzz_device_start(int fork_rank1) {
  static char ifaddr[] = "WEFT_SOCKET_IFADDR=127.0.0.1";
  pthread_barrierattr_t ba;
  if (started) return 0;
  S = mmap(NULL, sizeof *S, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (S == MAP_FAILED) {
    perror("fuzz_api: mmap");
    return -1;
  }
  go = &S->go, done = &S->done;
  pthread_barrierattr_init(&ba);
  pthread_barrierattr_setpshared(&ba, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(go, &ba, 3);
  pthread_barrier_init(done, &ba, 3);
  putenv(ifaddr), putenv(env_algo), putenv(env_chunk);
  for (int r = 0; r < 2; r++)
    hblock[r] = S->host[r];
  /* before anything initialises CUDA: a child cannot use a context its parent made */
  forked = fork_rank1;
  if (forked) {
    pid_t parent = getpid();
    fflush(NULL);
    child = fork();
    if (child == 0) child_main(parent);
    if (child < 0) {
      perror("fuzz_api: fork");
      return -1;
    }
    pthread_create(&watcher, NULL, watch_child, NULL);
  }
  for (int r = 0; r < (forked ? 1 : 2); r++) {
    pthread_t t;
    pthread_create(&t, NULL, worker, (void *)(intptr_t)r);
  }
  started = 1;
  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    fprintf(stderr,
            "replay_api_device: no usable CUDA device here (%s); the device replay needs "
            "a GPU\n",
            e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    fuzz_device_stop();
    return -1;
  }
  for (ci = 0; ci < 2; ci++) { /* 0: 1 rank; 1: 2 ranks, both on GPU 0 */
    n = ci + 1;
    if (weft_get_unique_id(&uid)) {
      fprintf(stderr, "fuzz_api: weft_get_unique_id: %s\n", weft_get_last_error(NULL));
      fuzz_device_stop();
      return -1;
    }
    run_ranks(dev_init_rank);
    for (int r = 0; r < n; r++)
      if (init_rc[r]) {
        fprintf(stderr, "fuzz_api: cannot make the %d-rank device communicator (rank %d): %s\n", n,
                r, why[r]);
        fuzz_device_stop();
        return -1;
      }
  }
  ready = 1;
  return 0;
}

void fuzz_device_stop(void) {
  if (!started) return;
  if (ready && !stats.violations) /* a violation may have left a communicator failed */
    for (ci = 1; ci >= 0; ci--) {
      n = ci + 1;
      if (comms[ci][0]) run_ranks(dev_destroy_rank);
    }
  if (forked) {
    S->quit = 1;
    run_ranks(dev_idle_rank);
    pthread_join(watcher, NULL);
  }
  started = ready = 0;
}

void fuzz_device_stats(fuzz_device_stats_t *out) { *out = stats; }
#endif

/* Reports a violation: aborts on host buffers (libFuzzer keeps the input); counts it in device
 * mode, where the replay goes on with the next input. Returns 1 for check's return. */
static int fail(const call_t *only, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "fuzz_api: ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  for (const call_t *c = only ? only : calls; c < (only ? only + 1 : calls + ncalls); c++) {
    fprintf(stderr, "\n  %s(dtype %d, op %d, root %d, count %zu) place %d offsets %zu %zu",
            kname[c->kind], c->dtype, c->op, c->root, c->count, c->place, c->soff, c->doff);
    for (int r = 0; r < n; r++) /* pointers; sendcounts, sdispls, recvcounts, rdispls */
      fprintf(stderr,
              "\n    rank %d: %zd %zd issued %d%d valid %d%d; %zu %zu, %zu %zu, %zu %zu, %zu %zu",
              r, (ssize_t)c->so[r], (ssize_t)c->dof[r], c->issued[r][0], c->issued[r][1],
              c->pred[r][0], c->pred[r][1], c->arr[r][0][0], c->arr[r][0][1], c->arr[r][1][0],
              c->arr[r][1][1], c->arr[r][2][0], c->arr[r][2][1], c->arr[r][3][0], c->arr[r][3][1]);
  }
  fprintf(stderr, "\n  on %d rank(s), arena %zu bytes, %s\n", n, A, grouped ? "grouped" : "alone");
#ifdef WEFT_FUZZ_DEVICE
  stats.violations++;
  return 1;
#else
  abort();
#endif
}

/* Which ranks issue the call: all when the contract says the same on every rank; else only
 * those that must refuse it (an accepted half would wait for a peer that never comes). A valid
 * call reaching outside the arena is not issued at all (the caller's mistake, not weft's). */
static void prepare(call_t *c) {
  int all = 1;
  for (int r = 0; r < n; r++) {
    place(c, r);
    memcpy(keep[c - calls][r], c->arr[r], sizeof c->arr[r]);
  }
  for (int r = 0; r < n; r++)
    for (int h = 0; h < halves(c); h++)
      c->pred[r][h] = valid(c, r, h), all &= c->pred[r][h];
  for (int r = 0; r < n; r++)
    for (int h = 0; h < halves(c); h++)
      c->issued[r][h] = all || !c->pred[r][h];
  if (!all) return;
  dry = 1, unfit = 0;
  model(c, 0);
  dry = 0;
  if (unfit) memset(c->issued, 0, sizeof c->issued);
}

/* A device communicator may refuse what it does not run (a group of more than 2 alltoallv) with
 * WEFT_ERR_UNSUPPORTED: a refusal like WEFT_ERR_INVALID_ARG, nothing may change. */
static int unsupported(weft_result_t rc) {
#ifdef WEFT_FUZZ_DEVICE
  return rc == WEFT_ERR_UNSUPPORTED;
#else
  (void)rc;
  return 0;
#endif
}

/* 0, or 1 after fail has reported a violation (device mode: it does not abort). */
static int check(char **base) {
  int conflict = 0, refused[2] = {0, 0}, acc[MAXCALLS] = {0}, uns[MAXCALLS] = {0};
  inexact = unfit = 0; /* unfit: left by prepare's dry runs */
#ifdef WEFT_FUZZ_DEVICE
  for (int r = 0; r < n; r++) /* copies, stream, kernels: nothing else is worth checking */
    if (sync_rc[r])
      return fail(ncalls == 1 ? calls : NULL, "rank %d: %s (%s)", r, why[r],
                  fuzz_result_name(sync_rc[r]));
#endif
  for (int r = 0; r < n; r++) { /* a whole group refused: every call in it did nothing */
    for (int g = 0; g < 2; g++)
      refused[r] |= unsupported(gend[r][g]);
    if (refused[r] != refused[0])
      return fail(NULL, "the group was refused with WEFT_ERR_UNSUPPORTED on rank %d only",
                  refused[0] ? 0 : r);
  }
  for (int r = 0; r < n; r++) {
    memcpy(E[r], P[r], A);
    memset(wm[r], 0, A), memset(rm[r], 0, A);
  }
  for (int i = 0; i < ncalls; i++) {
    call_t *c = &calls[i];
    int accepted = 1, un[2] = {0, 0};
    for (int r = 0; r < n; r++) {
      for (int h = 0; h < halves(c); h++) {
        weft_result_t want = c->pred[r][h] ? WEFT_SUCCESS : WEFT_ERR_INVALID_ARG;
        accepted &= c->issued[r][h] && c->pred[r][h];
        if (c->issued[r][h] && c->pred[r][h] && unsupported(c->rc[r][h])) {
          un[r] = 1;
          continue;
        }
        if (c->issued[r][h] && c->rc[r][h] != want)
          return fail(c, "%s half %d on rank %d returned %s where the contract says %s (%s)",
                      kname[c->kind], h, r, fuzz_result_name(c->rc[r][h]), fuzz_result_name(want),
                      c->rc[r][h] ? msg[i][r] : "");
      }
      un[r] |= unsupported(c->rc[r][2]);
      if ((c->rc[r][2] && !unsupported(c->rc[r][2])) ||
          memcmp(keep[i][r], c->arr[r], sizeof keep[i][r]))
        return fail(c, "%s on rank %d: group_end %s, or the count arrays changed", kname[c->kind],
                    r, fuzz_result_name(c->rc[r][2]));
    }
    if (accepted) { /* issued on every rank: refused as unsupported on all or none */
      for (int r = 0; r < n; r++)
        un[r] |= refused[r];
      for (int r = 1; r < n; r++)
        if (un[r] != un[0])
          return fail(c, "%s refused with WEFT_ERR_UNSUPPORTED on rank %d only", kname[c->kind],
                      un[0] ? 0 : r);
    }
    uns[i] = un[0] || un[1];
    acc[i] = accepted && !uns[i];
    if (acc[i]) model(c, i);
  }
  for (int r = 0; r < n; r++)
    if ((gend[r][0] && !unsupported(gend[r][0])) || (gend[r][1] && !unsupported(gend[r][1])) ||
        sync_rc[r])
      return fail(ncalls == 1 ? calls : NULL, "rank %d: group_end %s %s, stream_synchronize %s", r,
                  fuzz_result_name(gend[r][0]), fuzz_result_name(gend[r][1]),
                  fuzz_result_name(sync_rc[r]));
  /* Calls of one group that write what another reads or writes have no defined result. */
  for (int r = 0; r < n; r++)
    for (size_t j = 0; j < A; j++)
      conflict |= (wm[r][j] & (wm[r][j] - 1)) || (wm[r][j] && (rm[r][j] & ~wm[r][j]));
  for (int r = 0; r < n; r++) {
    for (size_t j = 0; j < G; j++)
      if ((uint8_t)base[r][j] != CANARY || (uint8_t)arena[r][A + j] != CANARY)
        return fail(ncalls == 1 ? calls : NULL, "rank %d: guard byte %s the arena overwritten", r,
                    (uint8_t)base[r][j] != CANARY ? "before" : "after");
    for (size_t j = 0; j < A; j++) {
      int exact = !conflict && !inexact;
      uint8_t got = (uint8_t)arena[r][j];
      if (exact ? got == E[r][j] : wm[r][j] || got == P[r][j]) continue;
      const call_t *c = calls;
      for (int i = 0; i < ncalls; i++) /* name the call that wrote there, if one did */
        if (wm[r][j] & (0x11 << i)) c = &calls[i];
      return fail(
          ncalls == 1 || wm[r][j] ? c : NULL,
          "rank %d: arena byte %zu is %#x, expected %#x (before: %#x, %s; %d call(s) in the step)",
          r, j, got, exact ? E[r][j] : P[r][j], P[r][j],
          wm[r][j] ? "inside the call's output" : "outside every accepted call's output", ncalls);
    }
  }
#ifdef WEFT_FUZZ_DEVICE
  for (int i = 0; i < ncalls; i++) {
    int any = 0;
    for (int r = 0; r < n; r++)
      any |= calls[i].issued[r][0] || calls[i].issued[r][1];
    if (!any)
      stats.skipped++;
    else if (acc[i])
      stats.accepted++;
    else if (uns[i])
      stats.refused_unsupported++;
    else
      stats.refused_invalid++;
  }
#else
  (void)acc, (void)uns;
#endif
  return 0;
}

static int put(char *out, size_t len, size_t *o, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int k = *o < len ? vsnprintf(out + *o, len - *o, fmt, ap) : 0;
  va_end(ap);
  *o += k > 0 ? (size_t)k : 0;
  return k;
}
/* "allgather ok", "alltoallv refuse WEFT_ERR_INVALID_ARG", "r1 broadcast refuse ..." (issued
 * on rank 1 only), "sendrecv r0.recv,r1.recv refuse ...", "reduce skip" (valid, outside the
 * arena). */
static void describe(const call_t *c, char *out, size_t len, size_t *o) {
  int all = 1, any = 0, first = 1;
  weft_result_t rc = WEFT_SUCCESS, mixed = 0;
  for (int r = 0; r < n; r++)
    for (int h = 0; h < halves(c); h++) {
      all &= c->issued[r][h];
      if (!c->issued[r][h]) continue;
      mixed |= any && c->rc[r][h] != rc;
      rc = c->rc[r][h], any = 1;
    }
  put(out, len, o, "%s%s", c->nullcomm ? "NULL-comm " : "", kname[c->kind]);
  for (int r = 0; r < n && !all && any; r++)
    for (int h = 0; h < halves(c); h++)
      if (c->issued[r][h])
        put(out, len, o, "%sr%d%s", first ? " " : ",", r,
            halves(c) == 1 ? ""
            : h            ? ".recv"
                           : ".send"),
            first = 0;
  if (!any)
    put(out, len, o, " skip");
  else if (mixed)
    put(out, len, o, " mixed");
  else
    put(out, len, o, rc ? " refuse %s" : " ok", fuzz_result_name(rc));
}

static const char *const algos[8] = {"auto",   "ring",     "rhd",   "tree",
                                     "direct", "pairwise", "chain", "auto"};
static const char *const chunks[4] = {"0", "16", "256", "4096"};

/* Input: communicator byte, arena size (2 bytes), then steps: a header (bits 0-2 WEFT_ALGO,
 * 3-4 WEFT_CHUNK_BYTES, 5 host stream, 6 group, 7 nested group), a call count for groups,
 * and the calls (see decode). */
void fuzz_outcome(const uint8_t *data, size_t size, char *out, size_t len) {
  snprintf(out, len, "skip");
  if (size > 4096) return;
#ifdef WEFT_FUZZ_DEVICE
  if (!ready && fuzz_device_start(0) != 0) exit(1);
#else
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, setup);
#endif
  in_t in = {data, size};
  ci = u8(&in) % NCOMMS, n = ci ? 2 : 1;
  A = 64 + u16(&in) % (MAXA - 63);
  char *base[2];
  size_t o = 0;
#ifdef WEFT_FUZZ_DEVICE
  int tcp = ci == 2;
  ci = ci ? 1 : 0; /* no TCP variant: its calls run on the 2-rank device communicator */
  stats.inputs++;
  put(out, len, &o, "%s:",
      ci == 0 ? "1 rank dev"
      : tcp   ? "2 ranks dev (tcp input)"
              : "2 ranks dev");
  run_ranks(dev_alloc_rank);
  for (int r = 0; r < n; r++) {
    base[r] = hblock[r], arena[r] = base[r] + G;
    vbase[r] = (uintptr_t)dblock[r] + G; /* offsets past the block stay outside it there too */
    if (sync_rc[r]) {
      fprintf(stderr, "fuzz_api: rank %d: %s\n", r, why[r]);
      stats.violations++;
      put(out, len, &o, " VIOLATION (no arena)");
      in.n = 0; /* no step */
    }
  }
#else
  for (int r = 0; r < n; r++) {
    if (!(base[r] = malloc(A + 2 * G))) abort();
    arena[r] = base[r] + G;
    vbase[r] = (uintptr_t)arena[r];
  }
  put(out, len, &o, "%s:", ci == 0 ? "1 rank" : ci == 1 ? "2 ranks shm" : "2 ranks tcp");
#endif
  for (int step = 0; step < MAXSTEPS && in.n; step++) {
    uint8_t h = u8(&in);
    use_stream = h >> 5 & 1, grouped = h >> 6 & 1, nested = grouped && h >> 7;
    ncalls = grouped ? 1 + u8(&in) % MAXCALLS : 1;
    fill_t = -1;
    for (int i = 0; i < ncalls; i++) {
      decode(&in, &calls[i], A);
      if (grouped && calls[i].kind == GROUP_END) calls[i].kind = BARRIER;
      if (fill_t < 0 && dtype_ok(calls[i].dtype)) fill_t = calls[i].dtype;
    }
    if (fill_t < 0) fill_t = WEFT_U8;
    size_t fes = weft_dtype_size((weft_dtype_t)fill_t);
    /* values -2..2 (0..4 for the unsigned types): every result is exact */
    int lo = fill_t == WEFT_U8 || fill_t == WEFT_U32 || fill_t == WEFT_U64 ? 0 : 2;
    for (int r = 0; r < n; r++) {
      memset(base[r], CANARY, A + 2 * G);
      for (size_t i = 0; i < A / fes; i++)
        store(fill_t, (uint8_t *)arena[r] + i * fes,
              (double)((i * 7 + (size_t)r * 3 + (size_t)step) % 5) - lo);
      memcpy(P[r], arena[r], A);
    }
    for (int i = 0; i < ncalls; i++)
      prepare(&calls[i]);
    snprintf(env_algo + 10, sizeof env_algo - 10, "%s", algos[h & 7]);
    snprintf(env_chunk + 17, sizeof env_chunk - 17, "%s", chunks[h >> 3 & 3]);
#ifdef WEFT_FUZZ_DEVICE
    run_ranks(dev_step_rank); /* the host stream bit (use_stream) has no meaning there */
    stats.steps++;
#else
    run_ranks(step_rank);
#endif
    int bad = check(base);
    put(out, len, &o, "%s%s", step ? "; " : " ", grouped ? "group(" : "");
    for (int i = 0; i < ncalls; i++) {
      if (i) put(out, len, &o, ", ");
      describe(&calls[i], out, len, &o);
    }
    put(out, len, &o, "%s", grouped ? ")" : "");
    if (grouped && (unsupported(gend[0][0]) || unsupported(gend[0][1])))
      put(out, len, &o, " refuse %s", fuzz_result_name(WEFT_ERR_UNSUPPORTED));
    if (bad) {
      put(out, len, &o, " VIOLATION");
      break;
    }
  }
#ifdef WEFT_FUZZ_DEVICE
  run_ranks(dev_free_rank);
#else
  for (int r = 0; r < n; r++)
    free(base[r]);
#endif
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[1024];
  fuzz_outcome(data, size, out, sizeof out);
  return 0;
}
