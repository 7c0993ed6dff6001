/* How a device communicator fails: a kernel that waited too long, or found a peer's window
 * buffer elsewhere, writes its error into host-mapped memory; the heartbeat thread (and every
 * query and submit) turns it into the comm's failure with a message naming the operation. */
#include <stdio.h>

#include "err.h"
#include "gpu.h"
#include "op.h"

/* The flag at offset off of a region (kernels/dev.h): what its count counts. */
static const char *flag_name(uint64_t off) {
  return off == WEFT_DEV_WHERE_PROGRESS  ? "own sender block's round"
         : off < WEFT_DEV_DONE_OFF(0, 0) ? "sent-chunk"
         : off < WEFT_DEV_DIN_OFF(0, 0)  ? "freed-slot"
         : off < WEFT_DEV_DOUT_OFF(0, 0) ? "entered-operation"
                                         : "finished-operation";
}

/* A kernel's error becomes the comm's failure (cheap: one read of host memory). */
void weft_dev_poll_error(weft_comm_t c) {
  struct weft_dev *d = dev_of(c);
  volatile weft_dev_error_t *e = d->err_h;
  if (e->code != WEFT_DEV_ERR_NONE) {
    char msg[512];
    weft_dev_op_t op = weft_dev_op_from_report(e->kind);
    const char *what = weft_dev_op_name(op);
    /* a rank writing into windows against one that is not waits on flags of its own */
    const char *hint = op.windows ? " (on windows: did every rank pass window buffers, at the same "
                                    "offsets?)"
                                  : "";
    weft_result_t code = WEFT_ERR_TIMEOUT;
    /* kernels name a peer by its slot (the rank itself up to WEFT_DEV_MAX_RANKS ranks) */
    const weft_dev_slots_t *sl = &d->plan.slots;
    int peer = e->peer >= 0 && e->peer < sl->nslots ? sl->rank[e->peer] : e->peer;
    if (e->code == WEFT_DEV_ERR_MISMATCH) {
      code = WEFT_ERR_INVALID_ARG;
      snprintf(msg, sizeof msg,
               "rank %d: the %s on windows found rank %d's buffer at another window or offset, "
               "or of another size (channel %d); it was neither read nor written: every rank "
               "must pass the same offset in the same window",
               c->rank, what, peer, e->channel);
    } else {
      char flag[96] = "";
      if (e->want)
        snprintf(flag, sizeof flag, " (its %s count stood at %llu, %llu awaited)",
                 flag_name(e->where), (unsigned long long)e->seen, (unsigned long long)e->want);
      snprintf(msg, sizeof msg,
               "rank %d: the %sdevice kernel of the %s%s (channel %d) waited more than %lld ms for "
               "rank %d%s: that rank is hung, dead, or called a different operation",
               c->rank, weft_dev_proto_prefix(op.proto), what, hint, e->channel,
               (long long)c->timeout_ms, peer, flag);
    }
    pthread_mutex_lock(&c->mu);
    uint64_t seq = c->seq;
    pthread_mutex_unlock(&c->mu);
    weft_comm_fail(c, code, msg, seq);
  }
}

void weft_dev_watch(weft_comm_t c) {
  weft_dev_poll_error(c);
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
