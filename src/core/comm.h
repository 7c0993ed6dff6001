/* The communicator: identity, peers and the transport serving each, the engine that runs
 * its operations (whose own state, queues and caches hang from engine_state), and failure
 * state. Everything mutable in weft lives here (or in a host stream or an engine's state). */
#ifndef WEFT_COMM_H
#define WEFT_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bootstrap.h"
#include "engine.h"
#include "schedule.h"
#include "transport.h"
#include "weft.h"

/* One collective (or send/recv) as the user asked for it. */
typedef struct weft_task {
  weft_coll_args_t args;
  weft_algo_t algo;
  weft_dtype_t dtype;
  weft_op_t op;
  const void *sendbuf;
  void *recvbuf;
  void *owned; /* freed with the task: alltoallv's copied arrays, a barrier's sink */
} weft_task_t;

/* A queued unit of work: one task, or a group's tasks, run together. */
typedef struct weft_work {
  weft_task_t *tasks;
  int ntasks;
  weft_stream_t stream;
  uint64_t ticket;
  uint64_t seq;
  weft_result_t result;
  int done;
  struct weft_work *next;
} weft_work_t;

struct weft_comm {
  int rank, nranks;
  int64_t timeout_ms;
  weft_bootstrap_t *boot;
  uint64_t magic;

  /* topology */
  int *local_rank;   /* index among ranks on this host, -1 elsewhere */
  char *host_labels; /* nranks rows of WEFT_HOST_LABEL_BYTES: each rank's host (messages) */
  int nlocal;
  int spin;
  int yield;            /* more local ranks than cores: yield instead of pausing while spinning */
  atomic_int last_algo; /* weft_algo_t of the last task tuned (weft_comm_last_algo) */

  const weft_engine_t *engine; /* runs the operations: host or gpu (engine.h) */
  void *engine_state;          /* the engine's own: its queue, caches and device state */

  /* transports, indexed as weft_transports lists them */
  const weft_transport_t *tr[WEFT_MAX_TRANSPORTS];
  void *tr_state[WEFT_MAX_TRANSPORTS];
  uint8_t *peer_tr; /* transport index serving each peer */
  int wake_fd;

  /* guards the failure state below, seq, and the engines' queues */
  pthread_mutex_t mu;
  uint64_t seq; /* operations issued: failure notices and timeouts name them */

  /* heartbeat thread: lets local peers tell a stopped or frozen process from a busy one */
  pthread_t hb_thread;
  int hb_started, hb_stop;
  pthread_cond_t hb_cv;

  /* failure */
  atomic_int aborted;
  atomic_int notified;    /* this rank has told the others about the failure */
  atomic_int fail_origin; /* rank that first saw the failure, when told by a notice; else -1 */
  char relay_text[WEFT_NOTICE_TEXT]; /* a received notice's text, passed on unchanged */
  uint64_t relay_seq;                /* and its op (0: none came) */
  weft_notice_t told;                /* what this rank told the others (code 0: nothing yet) */
  weft_result_t async_error;
  char error[1024];
};

/* Collective, at init: every rank learns whether every rank's step succeeded (mine is this
 * rank's), so that one rank's failure fails init everywhere at once instead of leaving the
 * others waiting; a failed peer is named with what ("could not set up its GPU") and its own
 * message (weft_bootstrap_agree). */
weft_result_t weft_comm_agree(struct weft_comm *c, weft_result_t mine, const char *what);
/* Records err as the comm's failure (first one wins) and tells the other ranks. */
void weft_comm_fail(struct weft_comm *comm, weft_result_t err, const char *msg, uint64_t seq);
/* The index in c->tr of the transport named name that is set up here, or -1. */
int weft_comm_transport_index(const struct weft_comm *c, const char *name);
/* Collective: another set of connections of c's transport t (tr[t]) to the peers marked in
 * use, for a component that drives them from a thread of its own (the proxy's workers); the
 * caller tears it down with tr[t]->teardown. Its waits end early on wake_fd (an eventfd the
 * caller writes, and reads the abort flag between waits), or with -1 on the communicator's
 * own, which weft_comm_abort writes. */
weft_result_t weft_comm_transport_again(struct weft_comm *c, int t, const uint8_t *use, int wake_fd,
                                        void **state);
/* Rank r's host as messages name it ("?" when not known). */
const char *weft_comm_host(const struct weft_comm *c, int r);
/* Tuner: fills task->algo and task->args.chunk through the comm's engine. Fails (nothing
 * changed) when WEFT_ALGO names no algorithm, or one the collective has but that cannot serve
 * this call. */
weft_result_t weft_tune(struct weft_comm *comm, weft_task_t *task);
/* What c's engine shows of c's device side (engine.h's device_view), or NULL: a host
 * communicator. */
static inline struct weft_dev_view *weft_comm_device_view(struct weft_comm *c) {
  return c->engine && c->engine->device_view ? c->engine->device_view(c) : NULL;
}
/* Frees what t owns (work.c); t itself stays the caller's. */
void weft_task_free(weft_task_t *t);
/* Frees a heap-allocated op, its tasks and what they own. */
void weft_work_free(weft_work_t *op);

/* Failures (failure.c). The first rank that sees one tells every other rank (over the
 * bootstrap ring and the transports' own channels), so that no rank waits for a timeout. */
/* Tells the others (once per communicator) that this comm failed with err; text is the
 * error message they will quote. */
void weft_fail_notify(weft_comm_t c, weft_result_t err, uint64_t seq, const char *text);
/* Whether this rank has told the others of a failure (weft_fail_notify); if so, *n is the
 * notice it sent. Safe from any thread. */
int weft_fail_told_others(weft_comm_t c, weft_notice_t *n);
/* A notice n that came by some other way than weft_fail_check reads (a proxy's stream):
 * returns its code, the message worded as weft_fail_check words a notice, and keeps its
 * origin and text to pass on. */
weft_result_t weft_fail_heard(weft_comm_t c, const weft_notice_t *n);
/* WEFT_SUCCESS, or the reported failure with a message naming who saw what. */
weft_result_t weft_fail_check(weft_comm_t c);
/* The same without the bootstrap ring, for threads other than the one that may be using
 * the ring (the heartbeat thread watching a device communicator). */
weft_result_t weft_fail_check_local(weft_comm_t c);
/* A data connection to peer was lost and no notice explains it: the peer is dead, said as
 * weft_fail_check says it of a dead rank (detail, the transport's words, is logged at INFO),
 * and the notice this rank sends names peer as its origin (unless one came first). */
weft_result_t weft_fail_peer_gone(weft_comm_t c, int peer, const char *detail);
/* A step with peer failed with rc: the root cause instead when there is one (what and seq
 * name the op). A peer's closed socket is often the echo of a failure it already announced,
 * or of our own abort; else it is the peer's death, which may show on its data connection
 * before any notice. */
weft_result_t weft_fail_root_cause(weft_comm_t c, weft_result_t rc, int peer, const char *what,
                                   uint64_t seq);

#endif
