/* The communicator: identity, peers and the transport serving each, the engine that runs
 * its operations, the queue of operations and the progress thread that runs queued work,
 * failure state, and the caches. Everything mutable in weft lives here (or in a host stream
 * or an engine's state). */
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

typedef struct {
  weft_coll_args_t key; /* without the alltoallv arrays */
  weft_algo_t algo;
  weft_sched_t sched;
  uint64_t last_use;
} weft_sched_entry_t;

enum { WEFT_SCHED_CACHE = 64 };

struct weft_comm {
  int rank, nranks;
  int64_t timeout_ms;
  weft_bootstrap_t *boot;
  uint64_t magic;

  /* topology */
  int *local_rank; /* index among ranks on this host, -1 elsewhere */
  int nlocal;
  int spin;
  int yield;            /* more local ranks than cores: yield instead of pausing while spinning */
  int full_check;       /* WEFT_CHECK=1 */
  atomic_int last_algo; /* weft_algo_t of the last task tuned (weft_comm_last_algo) */

  const weft_engine_t *engine; /* runs the operations: host or gpu (engine.h) */
  void *engine_state;          /* the engine's own (the gpu engine's; the host engine's
                                  executor resources are the fields below) */

  /* transports, indexed as weft_transports lists them */
  const weft_transport_t *tr[WEFT_MAX_TRANSPORTS];
  void *tr_state[WEFT_MAX_TRANSPORTS];
  uint8_t *peer_tr; /* transport index serving each peer */
  int wake_fd;

  /* work queue and progress thread */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  weft_work_t *qhead, *qtail;
  int running; /* an op is executing (progress thread or inline) */
  int stop;
  int thread_started;
  pthread_t thread;

  /* heartbeat thread: lets local peers tell a stopped or frozen process from a busy one */
  pthread_t hb_thread;
  int hb_started, hb_stop;
  pthread_cond_t hb_cv;

  /* failure */
  atomic_int aborted;
  atomic_int notified;    /* this rank has told the others about the failure */
  atomic_int fail_origin; /* rank that first saw the failure, when told by a notice; else -1 */
  char relay_text[WEFT_NOTICE_TEXT]; /* a received notice's text, passed on unchanged */
  weft_result_t async_error;
  char error[1024];

  /* executor resources: touched only by the thread running an op */
  uint64_t seq;
  uint32_t *chan_send, *chan_recv; /* per peer: ops that used the channel (fingerprints) */
  char *scratch;
  size_t scratch_bytes;
  weft_sched_entry_t cache[WEFT_SCHED_CACHE];
  uint64_t cache_clock;
};

/* Runs one op's tasks to completion on the calling thread. */
weft_result_t weft_exec_op(struct weft_comm *comm, weft_work_t *op);
/* Queues op (or runs it inline when the queue is idle and stream is NULL). */
weft_result_t weft_enqueue(struct weft_comm *comm, weft_work_t *op);
weft_result_t weft_progress_start(struct weft_comm *comm);
void weft_progress_stop(struct weft_comm *comm);
/* Collective, at init: every rank learns whether every rank's step succeeded (mine is this
 * rank's), so that one rank's failure fails init everywhere at once instead of leaving the
 * others waiting; a failed peer is named with what ("could not set up its GPU"). */
weft_result_t weft_comm_agree(struct weft_comm *c, weft_result_t mine, const char *what);
/* Records err as the comm's failure (first one wins) and tells the other ranks. */
void weft_comm_fail(struct weft_comm *comm, weft_result_t err, const char *msg, uint64_t seq);
/* "allreduce(count 1000, float, sum)": a call as errors name it (op and root where they apply). */
void weft_call_name(char *buf, size_t len, weft_coll_t coll, uint64_t count, weft_dtype_t dtype,
                    weft_op_t op, int root);
/* WEFT_CHECK=1 (check.c): compares every rank's call before running it. */
int weft_check_applies(const weft_work_t *op);
weft_result_t weft_check_call(struct weft_comm *comm, const weft_work_t *op);
/* Tuner: fills task->algo and task->args.chunk through the comm's engine. Fails (nothing
 * changed) when WEFT_ALGO names no algorithm, or one the collective has but that cannot serve
 * this call. */
weft_result_t weft_tune(struct weft_comm *comm, weft_task_t *task);
void weft_task_free(weft_task_t *t);
/* Frees a heap-allocated op, its tasks and what they own. */
void weft_work_free(weft_work_t *op);

/* Failures (failure.c). The first rank that sees one tells every other rank (over the
 * bootstrap ring and the transports' own channels), so that no rank waits for a timeout. */
/* Tells the others (once per communicator) that this comm failed with err; text is the
 * error message they will quote. */
void weft_fail_notify(weft_comm_t c, weft_result_t err, uint64_t seq, const char *text);
/* WEFT_SUCCESS, or the reported failure with a message naming who saw what. */
weft_result_t weft_fail_check(weft_comm_t c);
/* The same without the bootstrap ring, for threads other than the one that may be using
 * the ring (the heartbeat thread watching a device communicator). */
weft_result_t weft_fail_check_local(weft_comm_t c);
/* A data connection to peer was lost and no notice explains it: the peer is dead, said as
 * weft_fail_check says it of a dead rank (detail, the transport's words, is logged at INFO). */
weft_result_t weft_fail_peer_gone(weft_comm_t c, int peer, const char *detail);
/* A step with peer failed with rc: the root cause instead when there is one (what and seq
 * name the op). A peer's closed socket is often the echo of a failure it already announced,
 * or of our own abort; else it is the peer's death, which may show on its data connection
 * before any notice. */
weft_result_t weft_fail_root_cause(weft_comm_t c, weft_result_t rc, int peer, const char *what,
                                   uint64_t seq);

#endif
