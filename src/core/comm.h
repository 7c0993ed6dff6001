/* The communicator: identity, peers and the transport serving each, the queue of
 * operations and the progress thread that runs queued work, failure state, and the
 * caches. Everything mutable in weft lives here (or in a host stream). */
#ifndef WEFT_COMM_H
#define WEFT_COMM_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "bootstrap.h"
#include "schedule.h"
#include "transport.h"
#include "weft.h"

enum { WEFT_TR_SHM = 0, WEFT_TR_TCP, WEFT_TR_COUNT };

/* One collective (or send/recv) as the user asked for it. */
typedef struct {
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

  struct weft_dev *dev;     /* device communicators only (dev_comm.c) */
  struct weft_winset *wins; /* registered windows (window.c), NULL until the first */

  /* transports */
  const weft_transport_t *tr[WEFT_TR_COUNT];
  void *tr_state[WEFT_TR_COUNT];
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
/* Records err as the comm's failure (first one wins) and tells the other ranks. */
void weft_comm_fail(struct weft_comm *comm, weft_result_t err, const char *msg, uint64_t seq);
/* "allreduce(count 1000, float, sum)": a call as errors name it (op and root where they apply). */
void weft_call_name(char *buf, size_t len, weft_coll_t coll, uint64_t count, weft_dtype_t dtype,
                    weft_op_t op, int root);
/* WEFT_CHECK=1 (check.c): compares every rank's call before running it. */
int weft_check_applies(const weft_work_t *op);
weft_result_t weft_check_call(struct weft_comm *comm, const weft_work_t *op);
/* Tuner: fills task->algo and task->args.chunk. Fails (nothing changed) when WEFT_ALGO names
 * no algorithm, or one the collective has but that cannot serve this call. */
weft_result_t weft_tune(struct weft_comm *comm, weft_task_t *task);
void weft_task_free(weft_task_t *t);
/* Frees a heap-allocated op, its tasks and what they own. */
void weft_work_free(weft_work_t *op);

#endif
