/* How a device communicator fails: a kernel that waited too long, or found a peer's window
 * buffer elsewhere, writes its error into host-mapped memory; the heartbeat thread (and every
 * query and submit) turns it into the comm's failure with a message naming the operation. A
 * wait that lasts past WEFT_WAIT_REPORT_S notes itself beside it, and is said at WARN. */
#include <stdio.h>

#include "clock.h"
#include "err.h"
#include "gpu.h"
#include "op.h"

/* The flag at offset off of a region (kernels/dev.h), or of an MoE window: what its count
 * counts. */
static const char *flag_name(uint64_t off) {
  return off == WEFT_DEV_WHERE_PROGRESS      ? "own sender block's round"
         : off == WEFT_DEV_WHERE_MOE_RECORDS ? "records' round"
         : off == WEFT_DEV_WHERE_MOE_ACKS    ? "acknowledged round"
         : off < WEFT_DEV_DONE_OFF(0, 0)     ? "sent-chunk"
         : off < WEFT_DEV_DIN_OFF(0, 0)      ? "freed-slot"
         : off < WEFT_DEV_DOUT_OFF(0, 0)     ? "entered-operation"
                                             : "finished-operation";
}

/* The rank a kernel named by its slot (the rank itself up to WEFT_DEV_MAX_RANKS ranks). */
static int rank_of_slot(const struct weft_dev *d, int slot) {
  const weft_dev_slots_t *sl = &d->plan.slots;
  return slot >= 0 && slot < sl->nslots ? sl->rank[slot] : slot;
}

/* "the device kernel of the ring allreduce (channel 3)" and " (its sent-chunk count stood at 0,
 * 1 awaited)" of a report e. */
static void say_wait(volatile const weft_dev_error_t *e, char *what, size_t wn, char *flag,
                     size_t fn) {
  weft_dev_op_t op = weft_dev_op_from_report(e->kind);
  /* a rank writing into windows against one that is not waits on flags of its own */
  const char *hint = op.windows ? " (on windows: did every rank pass window buffers, at the same "
                                  "offsets?)"
                                : "";
  if (op.moe) /* one lone block waits, on no channel */
    snprintf(what, wn, "the device kernel of the %s", weft_dev_op_name(op));
  else
    snprintf(what, wn, "the %sdevice kernel of the %s%s (channel %d)",
             weft_dev_proto_prefix(op.proto), weft_dev_op_name(op), hint, e->channel);
  flag[0] = 0;
  if (e->want)
    snprintf(flag, fn, " (its %s count stood at %llu, %llu awaited)", flag_name(e->where),
             (unsigned long long)e->seen, (unsigned long long)e->want);
}

/* A wait note becomes a WARN once per WEFT_WAIT_REPORT_S while kernels keep writing it. It is
 * cleared at every look, so that one left by a wait that has ended is never said later;
 * kernels still waiting write it again within the 100 ms between looks. */
static void poll_wait(weft_comm_t c, struct weft_dev *d) {
  volatile weft_dev_error_t *w = d->err_h + 1;
  const uint64_t waited = w->waited_ns;
  if (!waited) return;
  weft_dev_error_t seen = {.peer = w->peer,
                           .channel = w->channel,
                           .kind = w->kind,
                           .where = w->where,
                           .want = w->want,
                           .seen = w->seen};
  w->waited_ns = 0;
  const int64_t period = weft_log_wait_report_ms(), now = weft_now_ms();
  int64_t said = atomic_load(&d->wait_said_ms);
  if (d->err_h[0].code != WEFT_DEV_ERR_NONE || period <= 0 || now - said < period ||
      !atomic_compare_exchange_strong(&d->wait_said_ms, &said, now))
    return; /* a failure is said instead; or said lately */
  char what[256], flag[96];
  say_wait(&seen, what, sizeof what, flag, sizeof flag);
  weft_log(WEFT_LOG_WARN | WEFT_LOG_FORCE, WEFT_SUB_COLL, __FILE__, __LINE__,
           "rank %d: %s has waited %.1f s for rank %d%s; it gives up at %.0f s (the "
           "communicator's timeout): that rank is late, hung, or called a different operation",
           c->rank, what, (double)waited / 1e9, rank_of_slot(d, seen.peer), flag,
           (double)c->timeout_ms / 1e3);
}

/* A kernel's error becomes the comm's failure (cheap: one read of host memory). */
void weft_dev_poll_error(weft_comm_t c) {
  struct weft_dev *d = dev_of(c);
  volatile weft_dev_error_t *e = d->err_h;
  if (e->code != WEFT_DEV_ERR_NONE) {
    char msg[512];
    weft_result_t code = WEFT_ERR_TIMEOUT;
    int peer = rank_of_slot(d, e->peer);
    if (e->code == WEFT_DEV_ERR_MISMATCH) {
      code = WEFT_ERR_INVALID_ARG;
      snprintf(msg, sizeof msg,
               "rank %d: the %s on windows found rank %d's buffer at another window or offset, "
               "or of another size (channel %d); it was neither read nor written: every rank "
               "must pass the same offset in the same window",
               c->rank, weft_dev_op_name(weft_dev_op_from_report(e->kind)), peer, e->channel);
    } else {
      char what[256], flag[96];
      say_wait(e, what, sizeof what, flag, sizeof flag);
      snprintf(msg, sizeof msg,
               "rank %d: %s waited more than %lld ms for rank %d%s: that rank is hung, dead, or "
               "called a different operation",
               c->rank, what, (long long)c->timeout_ms, peer, flag);
    }
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->seq;
    pthread_mutex_unlock(&c->mu);
    weft_comm_fail(c, code, msg, seq);
  }
}

void weft_dev_watch(weft_comm_t c) {
  weft_dev_poll_error(c);
  poll_wait(c, dev_of(c));
  /* failures other ranks reported, or a local peer that died */
  weft_result_t rc = weft_fail_check_local(c);
  if (rc != WEFT_SUCCESS) {
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->seq;
    pthread_mutex_unlock(&c->mu);
    weft_comm_fail(c, rc, weft_thread_error(), seq);
  }
  pthread_mutex_lock(&c->mu);
  int failed = c->async_error != WEFT_SUCCESS;
  pthread_mutex_unlock(&c->mu);
  if (failed || atomic_load(&c->aborted)) weft_dev_abort(c);
}

void weft_dev_abort(weft_comm_t c) { ((volatile int32_t *)dev_of(c)->abort_h)[0] = 1; }
