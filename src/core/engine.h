/* The interface every engine implements. An engine decides how a communicator's operations
 * run: the host engine (src/host) runs schedules over the transports on the progress thread;
 * the gpu engine (src/gpu) launches kernels on the caller's CUDA stream. The API, groups, the
 * comm lifecycle and the tuner call these and never ask which engine serves a communicator. */
#ifndef WEFT_ENGINE_H
#define WEFT_ENGINE_H

#include <stddef.h>

#include "schedule.h"
#include "weft.h"

struct weft_comm;
struct weft_work;
struct weft_dev_view;
typedef struct weft_task weft_task_t;

typedef struct weft_engine {
  size_t size;
  const char *name;
  /* The heartbeat thread runs for its communicators even with one rank on the host: watch
   * is what finds their failures and long waits (a device kernel's, which no host thread
   * waits on). */
  int watch_always;
  /* Whether it serves communicators made with config (NULL: the defaults). The first engine
   * of weft_engines that does serves the communicator. */
  int (*serves)(const weft_config_t *config);
  /* Collective, once bootstrap and transports are up; on failure it leaves nothing behind. */
  weft_result_t (*setup)(struct weft_comm *c, const weft_config_t *config);
  /* Waits for c's last operation (and, where they write into c's memory, the peers'), then
   * releases what setup made. */
  void (*free)(struct weft_comm *c);
  /* Fills t->algo (and t->args.chunk): forced is WEFT_ALGO's choice (WEFT_ALGO_AUTO when
   * unset). Fails, changing nothing, when forced is an algorithm the collective has but that
   * cannot serve this call. */
  weft_result_t (*tune)(const struct weft_comm *c, weft_task_t *t, weft_algo_t forced);
  /* Runs tasks (one call, or a group's calls on c) ordered on stream. It takes what the tasks
   * own (freed now or when the operation completes); the array stays the caller's. */
  weft_result_t (*submit)(struct weft_comm *c, weft_task_t *tasks, int ntasks,
                          weft_stream_t stream);
  /* A group's calls on several communicators of this engine: ops[k] on comms[k], streams[k]
   * the stream of that communicator's first call. Takes the ops. */
  weft_result_t (*submit_group)(struct weft_comm **comms, struct weft_work **ops,
                                const weft_stream_t *streams, int n);
  /* From the heartbeat thread (every 100 ms) and from queries: failures no host thread waits
   * for become the communicator's, and a failed communicator's work gives up. */
  void (*watch)(struct weft_comm *c);
  /* Makes running and later operations of c give up at once. */
  void (*cancel)(struct weft_comm *c);
  /* Bytes of accelerator memory c holds (weft_comm_device_memory). */
  size_t (*memory)(const struct weft_comm *c);
  /* One byte that weft_barrier's allreduce may read and write in place, or NULL: a fresh
   * host byte per call will do. */
  void *(*barrier_byte)(struct weft_comm *c);
  /* Optional (NULL: the engine serves host buffers only). What the layers above (MoE) may see
   * and use of c's device side (src/gpu/dev_view.h); NULL where c has none. */
  struct weft_dev_view *(*device_view)(struct weft_comm *c);
  /* Optional: the path of c's device side to peer ("p2p", "host-staged", "proxy"), or NULL
   * where c has none (weft_comm_peer_path). */
  const char *(*peer_path)(const struct weft_comm *c, int peer);
} weft_engine_t;

/* The engines of this build, most specific first (engines.c). */
extern const weft_engine_t *const weft_engines[];
extern const int weft_nengines;

#endif
