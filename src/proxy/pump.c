/* The proxies' thread (pump.h). */
#include "pump.h"

#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "err.h"
#include "param.h"

enum { CHECK_MS = 5 };

/* The communicator hears of the failure before the kernels stop: a caller whose stream
 * returns early then finds the error already there. */
static void failed(weft_pump_t *P, weft_result_t rc, int tell) {
  snprintf(P->msg, sizeof P->msg, "%s", weft_thread_error());
  atomic_store(&P->status, (int)rc);
  if (tell && P->in.link.fail) P->in.link.fail(P->in.link.ctx, rc, P->msg);
  if (P->in.link.kernel_abort) __atomic_store_n(P->in.link.kernel_abort, 1, __ATOMIC_RELEASE);
}

/* Empties this pump's kick eventfd; EAGAIN (none written) is fine. */
static void drain(int fd) {
  uint64_t v;
  ssize_t r = read(fd, &v, sizeof v);
  (void)r;
}

/* Whether the host queued work since *seen (updated). */
static int kicked_since(weft_pump_t *P, uint64_t *seen) {
  if (!P->in.kicks) return 0;
  uint64_t k = atomic_load(P->in.kicks);
  if (k == *seen) return 0;
  *seen = k;
  return 1;
}

/* Adds one to a count only this thread writes: a relaxed load and store, no locked
 * read-modify-write on every pass (readers want an estimate). */
static void bump(_Atomic uint64_t *n) {
  atomic_store_explicit(n, atomic_load_explicit(n, memory_order_relaxed) + 1, memory_order_relaxed);
}

/* One pass ended `us` after the last: counted, and a pause where it is one. */
static void gap(weft_pump_t *P, int64_t us) {
  bump(&P->passes);
  if (us > WEFT_PUMP_PAUSE_US) bump(&P->pauses);
  if (us > atomic_load_explicit(&P->longest_us, memory_order_relaxed))
    atomic_store_explicit(&P->longest_us, us, memory_order_relaxed);
}

static void *pump_main(void *arg) {
  weft_pump_t *P = arg;
  const weft_proxy_link_t *in = &P->in.link;
  const int npeers = P->in.npeers > 0 ? P->in.npeers : in->nranks;
  int64_t moved_us = weft_now_us(), last = moved_us / 1000, checked = last, pass_us = moved_us;
  uint64_t kicked = P->in.kicks ? atomic_load(P->in.kicks) : 0;
  while (!atomic_load(&P->stop)) {
    if (in->abort_flag && atomic_load(in->abort_flag)) {
      weft_set_error(WEFT_ERR_ABORTED, "proxy: rank %d: the communicator was aborted", in->rank);
      failed(P, WEFT_ERR_ABORTED, 0); /* whoever aborted has told the peers */
      break;
    }
    int moved = 0, busy = 0, stalled = -1, r = 0;
    weft_result_t rc = WEFT_SUCCESS;
    for (; r < npeers && rc == WEFT_SUCCESS; r++) {
      int b = 0;
      rc = P->in.pass(P->in.self, r, &moved, &b);
      if (b && stalled < 0) stalled = P->in.peer_rank ? P->in.peer_rank[r] : r;
      busy |= b;
    }
    if (rc != WEFT_SUCCESS && in->explain && !atomic_load(&P->heard))
      rc = in->explain(in->ctx, rc, P->in.peer_rank ? P->in.peer_rank[r - 1] : r - 1);
    int64_t now_us = weft_now_us(), now = now_us / 1000; /* one clock read a pass */
    gap(P, now_us - pass_us);
    pass_us = now_us;
    if (rc == WEFT_SUCCESS && now - checked >= CHECK_MS) {
      checked = now;
      weft_notice_t n;
      if (in->told_others && in->told_others(in->ctx, &n)) {
        weft_set_error(n.code,
                       "proxy: rank %d: the communicator failed here; the proxy tells "
                       "the peers",
                       in->rank);
        failed(P, n.code, 0); /* the communicator has it; the peers are told below */
        break;
      }
      rc = in->check ? in->check(in->ctx) : WEFT_SUCCESS;
      if (rc != WEFT_SUCCESS) {
        failed(P, rc, 1); /* found elsewhere; the communicator keeps the first failure */
        break;
      }
    }
    if (moved || !busy) last = now;
    if (rc == WEFT_SUCCESS && now - last > in->timeout_ms)
      rc = weft_set_error(WEFT_ERR_TIMEOUT,
                          "proxy: rank %d: no progress with rank %d for %lld ms (the stream to "
                          "or from it stalled)",
                          in->rank, stalled, (long long)(now - last));
    /* The kernels' flags wake nothing: after a while without traffic or kicks, nap on the
     * network (a chunk posted meanwhile waits up to 1 ms, unless the host kicks), else keep
     * polling. The nap is announced before the last look at the kicks, and a kick counts
     * before it looks for nappers: one of the two sees the other. */
    int held = P->in.holds && atomic_load(P->in.holds) > 0; /* a graph may replay: no naps */
    if (moved || kicked_since(P, &kicked))
      moved_us = now_us;
    else if (rc == WEFT_SUCCESS && !held && now_us - moved_us > P->spin_us) {
      atomic_store(&P->napping, 1);
      if (kicked_since(P, &kicked))
        moved_us = now_us;
      else
        rc = in->tr->wait(in->tr_state, in->tr->arm(in->tr_state), 1);
      atomic_store(&P->napping, 0);
      bump(&P->naps);
      pass_us = weft_now_us(); /* a nap is no pause */
      if (P->in.kicks && P->in.kick_fd >= 0) drain(P->in.kick_fd);
    } else
      sched_yield();
    if (rc != WEFT_SUCCESS) {
      failed(P, rc, 1);
      break;
    }
  }
  /* Stopped on a failure (seen here, told by a peer's proxy, or by this pump), or stopped
   * (the communicator going away) after one this thread's passes never saw: the peers hear
   * of it before the connections close, else they read the close as this rank gone. A rank
   * told by another passes the notice on, with its origin, to ranks on other hosts. */
  weft_notice_t n;
  if (P->in.bye && in->told_others && in->told_others(in->ctx, &n))
    P->in.bye(P->in.self, &n);
  else if (P->in.bye && in->abort_flag && atomic_load(in->abort_flag))
    P->in.bye(P->in.self, NULL);
  return NULL;
}

weft_result_t weft_pump_start(weft_pump_t *p, const weft_pump_init_t *in) {
  memset(p, 0, sizeof *p);
  p->in = *in;
  p->spin_us = weft_param_get_int(WEFT_PARAM_PROXY_SPIN_US);
  int e = pthread_create(&p->thread, NULL, pump_main, p);
  if (e) return weft_set_error(WEFT_ERR_SYSTEM, "proxy: thread: %s", strerror(e));
  p->started = 1;
  return WEFT_SUCCESS;
}

weft_result_t weft_proxy_take(const weft_proxy_link_t *l, int peer, void *dst, size_t n,
                              size_t *got) {
  if (l->tr->recv_into) return l->tr->recv_into(l->tr_state, peer, dst, n, got);
  const void *p;
  size_t contig = 0, total = 0;
  CHECK(l->tr->peek(l->tr_state, peer, &p, &contig, &total));
  *got = contig < n ? contig : n;
  if (*got) {
    memcpy(dst, p, *got);
    l->tr->consume(l->tr_state, peer, *got);
  }
  return WEFT_SUCCESS;
}

weft_result_t weft_proxy_give(const weft_proxy_link_t *l, int peer, const void *hdr, size_t hn,
                              const void *body, size_t bn, size_t *at, int *moved) {
  while (*at < hn + bn) {
    size_t acc = 0;
    if (l->tr->sendv) {
      struct iovec v[2];
      int nv = 0;
      if (*at < hn) v[nv++] = (struct iovec){(char *)hdr + *at, hn - *at};
      if (bn)
        v[nv++] =
            (struct iovec){(char *)body + (*at > hn ? *at - hn : 0), *at > hn ? hn + bn - *at : bn};
      CHECK(l->tr->sendv(l->tr_state, peer, v, nv, &acc));
    } else if (*at < hn) {
      CHECK(l->tr->send(l->tr_state, peer, (const char *)hdr + *at, hn - *at, &acc));
    } else {
      CHECK(l->tr->send(l->tr_state, peer, (const char *)body + (*at - hn), hn + bn - *at, &acc));
    }
    if (!acc) return WEFT_SUCCESS;
    *at += acc;
    *moved = 1;
  }
  return WEFT_SUCCESS;
}

weft_result_t weft_pump_status(weft_pump_t *p) {
  weft_result_t rc = (weft_result_t)atomic_load(&p->status);
  return rc == WEFT_SUCCESS ? rc : weft_set_error(rc, "%s", p->msg);
}

void weft_pump_counts(weft_pump_t *p, uint64_t *sent, uint64_t *received) {
  if (sent) *sent = atomic_load(&p->sent);
  if (received) *received = atomic_load(&p->received);
}

void weft_pump_stats(weft_pump_t *p, weft_proxy_stats_t *s) {
  s->passes += atomic_load_explicit(&p->passes, memory_order_relaxed);
  s->naps += atomic_load_explicit(&p->naps, memory_order_relaxed);
  s->pauses += atomic_load_explicit(&p->pauses, memory_order_relaxed);
  int64_t l = atomic_load_explicit(&p->longest_us, memory_order_relaxed);
  if (l > s->longest_us) s->longest_us = l;
}

void weft_pump_stop(weft_pump_t *p) {
  atomic_store(&p->stop, 1);
  if (p->started) pthread_join(p->thread, NULL);
  p->started = 0;
}
