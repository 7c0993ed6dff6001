/* The soak program's shared pieces: a worker (one communicator, its thread, its random
 * sequence and counters), the random items it runs and checks (soak_ops.c), and the buffers
 * they run on, host memory or device twins of it (soak_mem.c). soak.c drives the ranks. */
#ifndef WEFT_SOAK_H
#define WEFT_SOAK_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "weft.h"

/* What an item can be. SPLIT (world comm only, with --split) makes a communicator, runs one
 * allreduce on it and destroys it, so that comm set-up and teardown happen under load too. */
enum { AR, RS, AG, BC, RD, A2A, A2AV, SR, PAIR, BAR, GROUP, SPLIT, NKINDS };
extern const char *const SOAK_KIND_NAME[NKINDS];

enum {
  SOAK_MAX_MEMBERS = 4, /* operations in one group */
  SOAK_MAX_PENDING = 4  /* stream-ordered items queued before a synchronize */
};

typedef struct {
  uint64_t ops;   /* operations checked (a group counts its members) */
  uint64_t bytes; /* bytes of user buffers they read and wrote on this rank */
  uint64_t wrong; /* results (or untouched buffers) that did not match the oracle */
  uint64_t failed_calls;
  uint64_t kind[NKINDS]; /* items per kind */
  uint64_t streamed;     /* items issued on a stream (the rest blocking) */
} soak_counts_t;

/* Buffers weft sees: `host` itself, or (device runs) a twin in the worker's device arena. */
typedef struct {
  char *host;
  void *dev;
  size_t bytes;
} sbuf_t;

typedef struct {
  int kind;
  weft_dtype_t t;
  weft_op_t op;
  size_t count; /* elements: per rank block for RS, AG, A2A; largest pair block for A2AV */
  int in_place, wide, root, shift;
  int idle; /* nothing for this rank: a pair without a partner, a device send to itself */
  uint32_t seed;
  sbuf_t send, recv; /* recv unused in place */
  char *send0;       /* sendbuf as handed over (out of place), to see it unchanged */
  size_t in_elems, out_elems;
  size_t *sc, *sd, *rc, *rd; /* alltoallv counts and displacements (n each) */
} sop_t;

/* One issued unit: a single operation, a group of them, a pair exchange, a barrier. */
typedef struct {
  int kind, nops, streamed;
  sop_t ops[SOAK_MAX_MEMBERS];
} item_t;

/* A rank's launch order (soak_order.c), shared by its workers. */
typedef struct soak_order {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int on;             /* device runs: workers launch in the shared turn sequence */
  int serial;         /* and each launch waits on the GPU for the previous one to finish */
  int nworkers, turn; /* turn: the worker whose launch is next (-1: all have quit) */
  unsigned members, done;
  uint64_t rng; /* the turn sequence, the same on every rank */
  void *last;   /* cudaEvent_t recorded after the last launch */
} soak_order_t;

typedef struct worker {
  /* set up by soak.c */
  int id; /* which communicator (0: world) */
  weft_comm_t comm;
  int rank, n; /* in comm */
  int world_rank;
  int device; /* 1: device buffers on GPU 0 */
  size_t max_bytes;
  uint64_t rng;         /* the shared sequence: every rank of comm draws the same */
  uint64_t local_rng;   /* this rank's own choices (blocking or stream, when to synchronize) */
  weft_stream_t stream; /* host stream, or cudaStream_t cast (device runs) */
  soak_order_t *order;  /* the rank's, shared by its workers */
  void *event;          /* cudaEvent_t after this worker's last launch (serial order) */
  int64_t deadline_ms;
  int sweep; /* first every kind at the largest size and at 3 elements (the warm-up) */
  int split; /* world comm: splits among the items (--split; a weft bug) */
  /* device arena (soak_mem.c): bump-allocated, reset whenever no item is pending */
  char *arena;
  size_t arena_bytes, arena_used;
  /* run state */
  item_t pending[SOAK_MAX_PENDING];
  int npending;
  int stop_failed; /* a call failed: the comm was aborted and the worker stops */
  soak_counts_t counts;
} worker_t;

/* soak_ops.c */
uint64_t soak_rand(uint64_t *state);
/* Runs items on w->comm until the ranks agree that w->deadline_ms has passed; 0 when no
 * call failed (wrong results are counted, not returned). */
int soak_run(worker_t *w);

/* soak_mem.c: device == 0 keeps everything on the host. */
int soak_dev_available(void);   /* 1 in a CUDA build */
int soak_dev_init(worker_t *w); /* stream and arena; host runs: the weft stream */
void soak_dev_bind(void);       /* the calling thread works on GPU 0 */
void soak_dev_fini(worker_t *w);
int sbuf_alloc(worker_t *w, sbuf_t *b, size_t bytes); /* host malloc (+ device twin) */
int sbuf_upload(worker_t *w, sbuf_t *b);
int sbuf_download(worker_t *w, sbuf_t *b);
void sbuf_free(sbuf_t *b);
/* Waits for everything issued on w->stream; 0 when it all succeeded. */
int soak_sync(worker_t *w, char *why, size_t len);
void soak_arena_reset(worker_t *w);

/* soak_order.c: enter before a call that may launch, leave after it, quit when the worker
 * leaves the phase; all three do nothing unless order->on. */
int soak_order_init(soak_order_t *o);
void soak_order_fini(soak_order_t *o);
void soak_order_begin(soak_order_t *o, int nworkers, unsigned members, uint64_t seed);
int soak_order_enter(worker_t *w);
int soak_order_leave(worker_t *w);
void soak_order_quit(worker_t *w);

#endif
