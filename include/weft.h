/* weft: collective communication for training clusters.
 * The one public header: communicators, collectives, point-to-point, groups and host
 * streams. Plain C11, usable from C++, no CUDA types (a cudaStream_t is passed cast to
 * weft_stream_t on device communicators). */
#ifndef WEFT_H
#define WEFT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What libweft.so exports: the functions declared here and nothing else (the library is
 * built with hidden visibility; tests reach internals through the static library). */
#if defined(__GNUC__) || defined(__clang__)
#define WEFT_API __attribute__((visibility("default")))
#else
#define WEFT_API
#endif

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0
#define WEFT_VERSION_CODE                                                                          \
  (WEFT_VERSION_MAJOR * 10000 + WEFT_VERSION_MINOR * 100 + WEFT_VERSION_PATCH)

typedef enum {
  WEFT_SUCCESS = 0,
  WEFT_ERR_INVALID_ARG = 1, /* bad argument; nothing was changed */
  WEFT_ERR_NO_MEMORY = 2,   /* an allocation failed (host or shared memory) */
  WEFT_ERR_SYSTEM = 3,      /* an operating-system call failed (see the message) */
  WEFT_ERR_TIMEOUT = 4,     /* a wait outlasted its timeout (WEFT_TIMEOUT_MS) */
  WEFT_ERR_PEER_LOST = 5,   /* a peer closed its connection or died */
  WEFT_ERR_PROTOCOL = 6,    /* a peer sent bytes that break the wire protocol */
  WEFT_ERR_MISMATCH = 7,    /* ranks called different operations */
  WEFT_ERR_ABORTED = 8,     /* weft_comm_abort was called, or the communicator failed */
  WEFT_ERR_UNSUPPORTED = 9, /* valid request this build or machine cannot serve */
  WEFT_ERR_INTERNAL = 10,   /* a bug in weft; please report the message */
  WEFT_ERR_IN_PROGRESS = 11 /* asynchronous work has not finished yet (queries) */
} weft_result_t;

/* Element types. Integer SUM and PROD wrap modulo 2^bits (the signed ones too), MIN and MAX
 * of unsigned types compare as unsigned, and AVG divides the wrapped sum. */
typedef enum {
  WEFT_F32 = 0,
  WEFT_F64,
  WEFT_F16,
  WEFT_BF16,
  WEFT_I8,
  WEFT_U8,
  WEFT_I32,
  WEFT_I64,
  WEFT_FP8_E4M3,
  WEFT_FP8_E5M2,
  WEFT_U32, /* u32 and u64 came later: after the others, which keep their values */
  WEFT_U64,
  WEFT_DTYPE_COUNT
} weft_dtype_t;

/* Reductions of f16, bf16 and fp8 accumulate in f32 inside each step. AVG divides the sum
 * by the number of ranks (integer division for integer types). */
typedef enum { WEFT_SUM = 0, WEFT_PROD, WEFT_MIN, WEFT_MAX, WEFT_AVG, WEFT_OP_COUNT } weft_op_t;

typedef struct weft_comm *weft_comm_t;
typedef struct weft_stream *weft_stream_t;

#define WEFT_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[WEFT_UNIQUE_ID_BYTES];
} weft_unique_id_t;

#define WEFT_SPLIT_NOCOLOR (-1)

/* Communicator options. Always start from WEFT_CONFIG_INIT so that fields added later keep
 * their defaults; zero or negative means "use the environment or the default". */
typedef struct {
  size_t size;        /* sizeof(weft_config_t), set by WEFT_CONFIG_INIT */
  int64_t timeout_ms; /* every blocking wait; default WEFT_TIMEOUT_MS */
  int device;         /* CUDA device: buffers are device memory on it, and the stream
                         argument is a cudaStream_t cast to weft_stream_t (NULL: the
                         default stream); -1: host buffers and weft streams. A device
                         communicator has at most 8 ranks, all on one host (more:
                         WEFT_ERR_UNSUPPORTED); ranks may share a GPU (docs/gpu.md), and
                         init fails with WEFT_ERR_UNSUPPORTED where the GPU's SMs cannot
                         hold their kernels together */
} weft_config_t;

#define WEFT_CONFIG_INIT                                                                           \
  { sizeof(weft_config_t), 0, -1 }

/* Version as WEFT_VERSION_CODE of the library actually loaded. */
WEFT_API int weft_get_version(void);
WEFT_API const char *weft_result_string(weft_result_t r);
/* Last error message of this comm's asynchronous work or, with comm NULL (or when the comm
 * has none), of the calling thread's last failed call. Never NULL. */
WEFT_API const char *weft_get_last_error(weft_comm_t comm);

/* ---- communicators ---- */

/* Makes an id for a new communicator and starts its rendezvous service in this process;
 * hand the id to every rank (e.g. through MPI_Bcast or a file). */
WEFT_API weft_result_t weft_get_unique_id(weft_unique_id_t *id);
WEFT_API weft_result_t weft_comm_init(weft_comm_t *comm, int nranks, weft_unique_id_t id, int rank,
                                      const weft_config_t *config);
/* From WEFT_ROOT=host:port, WEFT_RANK, WEFT_NRANKS, or torchrun's MASTER_ADDR, MASTER_PORT,
 * RANK, WORLD_SIZE. Rank 0 listens on the port. */
WEFT_API weft_result_t weft_comm_init_env(weft_comm_t *comm, const weft_config_t *config);
/* Ranks with the same color form a new communicator, ordered by key then old rank.
 * WEFT_SPLIT_NOCOLOR gives *newcomm = NULL. Collective over comm. */
WEFT_API weft_result_t weft_comm_split(weft_comm_t comm, int color, int key, weft_comm_t *newcomm,
                                       const weft_config_t *config);
/* Makes *newcomm of comm's ranks less the nexclude ranks listed in exclude, numbered in the
 * order of their ranks in comm. Only the remaining ranks call it, all with the same list (in
 * any order; WEFT_ERR_MISMATCH if they differ); the excluded ones take no part and may be
 * dead: nothing waits for them. flags 0: comm stays as it was (an abort of comm, from
 * another thread too, ends a shrink in progress). WEFT_SHRINK_ABORT: comm is aborted first
 * (weft_comm_abort: its operations in flight end), as after a failure. Either way comm still
 * has to be destroyed. config as in weft_comm_split (NULL: host buffers, comm's timeout).
 * WEFT_ERR_INVALID_ARG for a rank out of range, listed twice, or the caller's own. */
#define WEFT_SHRINK_ABORT 1
WEFT_API weft_result_t weft_comm_shrink(weft_comm_t comm, const int *exclude, int nexclude,
                                        int flags, weft_comm_t *newcomm,
                                        const weft_config_t *config);
/* Waits for this comm's queued work, then frees it. Local: peers are not waited for. */
WEFT_API weft_result_t weft_comm_destroy(weft_comm_t comm);
/* Safe from any thread: every blocked or queued operation of comm ends with
 * WEFT_ERR_ABORTED. The comm still has to be destroyed. */
WEFT_API weft_result_t weft_comm_abort(weft_comm_t comm);
/* First error of asynchronous work on comm, WEFT_SUCCESS if none. */
WEFT_API weft_result_t weft_comm_get_async_error(weft_comm_t comm, weft_result_t *error);
WEFT_API weft_result_t weft_comm_count(weft_comm_t comm, int *count);
/* Device memory comm holds on its GPU (staging slots, flags, counters); 0 on host comms. */
WEFT_API weft_result_t weft_comm_device_memory(weft_comm_t comm, size_t *bytes);
WEFT_API weft_result_t weft_comm_rank(weft_comm_t comm, int *rank);

/* ---- symmetric windows (device communicators) ----
 * Collective: every rank registers a device buffer of its own (any part of a cudaMalloc
 * allocation, the same size on every rank) and every rank maps every peer's. An operation
 * whose buffers lie in windows, at the same offset from the window's start on every rank,
 * skips the staging slots: allgather and alltoall (not in place) write straight into the
 * peers' recvbufs, reduce_scatter and allreduce read the peers' sendbufs (up to
 * WEFT_DIRECT_READ_MAX_BYTES from each). Ranks at different offsets fail with
 * WEFT_ERR_INVALID_ARG, and no byte of the peers' buffers is read or written. Large
 * allgather, alltoall and allreduce take the copy engines when WEFT_CE_MIN_BYTES asks (off by
 * default: the copies cannot make that check, so offsets must agree) and every rank's
 * allocation is whole 2 MiB pages, as PyTorch's caching allocator hands out; into other
 * allocations the copy engines write slowly, so the kernels do. */
typedef struct weft_window *weft_window_t;
WEFT_API weft_result_t weft_window_register(weft_comm_t comm, void *buf, size_t bytes,
                                            weft_window_t *win);
/* Collective. Waits for comm's work on the GPU; when it returns on a rank, no peer maps
 * that rank's buffer any more, which may then be freed. */
WEFT_API weft_result_t weft_window_deregister(weft_comm_t comm, weft_window_t win);

/* ---- host streams ----
 * A host stream orders asynchronous operations issued by one thread: the call returns
 * once the operation is queued, and the caller may compute while the progress thread
 * moves data. Passing NULL as stream makes the call blocking. */
WEFT_API weft_result_t weft_stream_create(weft_stream_t *stream);
/* Waits for all work queued on stream; returns the first error any of it met. */
WEFT_API weft_result_t weft_stream_synchronize(weft_stream_t stream);
/* WEFT_SUCCESS when all work is done, WEFT_ERR_IN_PROGRESS while some is queued. */
WEFT_API weft_result_t weft_stream_query(weft_stream_t stream);
WEFT_API weft_result_t weft_stream_destroy(weft_stream_t stream);

/* ---- collectives (count in elements; NCCL's argument conventions) ---- */

WEFT_API weft_result_t weft_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                      weft_dtype_t dtype, weft_op_t op, weft_comm_t comm,
                                      weft_stream_t stream);
/* sendbuf holds nranks * recvcount elements. */
WEFT_API weft_result_t weft_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                           weft_dtype_t dtype, weft_op_t op, weft_comm_t comm,
                                           weft_stream_t stream);
/* recvbuf holds nranks * sendcount elements. */
WEFT_API weft_result_t weft_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                      weft_dtype_t dtype, weft_comm_t comm, weft_stream_t stream);
WEFT_API weft_result_t weft_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                      weft_dtype_t dtype, int root, weft_comm_t comm,
                                      weft_stream_t stream);
/* recvbuf is written on root only; on the other ranks it is not touched and may be NULL. */
WEFT_API weft_result_t weft_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                   weft_dtype_t dtype, weft_op_t op, int root, weft_comm_t comm,
                                   weft_stream_t stream);
/* count elements to and from every rank: buffers hold nranks * count. */
WEFT_API weft_result_t weft_alltoall(const void *sendbuf, void *recvbuf, size_t count,
                                     weft_dtype_t dtype, weft_comm_t comm, weft_stream_t stream);
/* Counts and displacements in elements, one per rank. */
WEFT_API weft_result_t weft_alltoallv(const void *sendbuf, const size_t *sendcounts,
                                      const size_t *sdispls, void *recvbuf,
                                      const size_t *recvcounts, const size_t *rdispls,
                                      weft_dtype_t dtype, weft_comm_t comm, weft_stream_t stream);
/* Matched in issue order per (sender, receiver) pair; put a send and a recv between the
 * same ranks in one group to avoid a deadlock. */
WEFT_API weft_result_t weft_send(const void *sendbuf, size_t count, weft_dtype_t dtype, int peer,
                                 weft_comm_t comm, weft_stream_t stream);
WEFT_API weft_result_t weft_recv(void *recvbuf, size_t count, weft_dtype_t dtype, int peer,
                                 weft_comm_t comm, weft_stream_t stream);
WEFT_API weft_result_t weft_barrier(weft_comm_t comm, weft_stream_t stream);

/* Operations issued between start and end (on this thread) run as one: concurrently, and
 * with the stream of the first one. A group spanning several communicators completes before
 * weft_group_end returns (each comm progresses on its own thread). Nestable; errors are
 * reported by weft_group_end. A group may span at most WEFT_GROUP_MAX_COMMS communicators:
 * weft_group_end refuses one over more with WEFT_ERR_INVALID_ARG, and none of its
 * operations runs. */
#define WEFT_GROUP_MAX_COMMS 64
WEFT_API weft_result_t weft_group_start(void);
WEFT_API weft_result_t weft_group_end(void);
/* Like weft_group_end, but at the outermost level the group's operations are dropped unrun
 * (nothing was sent, no buffer touched); an inner level just ends. */
WEFT_API weft_result_t weft_group_discard(void);

/* ---- debugging ---- */

/* The algorithm chosen for the last operation this process issued on comm (the last of a
 * group): "ring", "rhd", "tree", "direct", "pairwise" or "chain" on host buffers, "oneshot",
 * "twoshot", "ring" or "direct" on device buffers; "none" before the first (and for a NULL
 * comm). Tests and benchmarks use it to show which algorithm ran. */
WEFT_API const char *weft_comm_last_algo(weft_comm_t comm);

/* How this rank of comm reaches rank peer, written into buf (len bytes with the NUL): the
 * host transport ("self", "shm" or "tcp"), and on a device communicator the path of its
 * kernels' chunks after a comma: "p2p" (the peer's region mapped: NVLink or a shared GPU),
 * "host-staged" (host shared memory), "proxy" (a peer on another host, through the proxy
 * over tcp) or "ring" (past 8 ranks, a rank that is not a ring neighbour: chunks reach it
 * through the ranks between), e.g. "tcp, device proxy". Local: no peer is asked.
 * WEFT_ERR_INVALID_ARG, with buf left "" where len allows, for a NULL comm or buf, a peer out of
 * range, or a buf too short for the answer. */
WEFT_API weft_result_t weft_comm_peer_path(weft_comm_t comm, int peer, char *buf, size_t len);

/* ---- environment parameters (WEFT_*): one table, printable ---- */
WEFT_API int weft_param_count(void);
/* value is the current setting (environment or default). */
WEFT_API weft_result_t weft_param_info(int index, const char **name, const char **value,
                                       const char **default_value, const char **help);

WEFT_API const char *weft_dtype_name(weft_dtype_t dtype);
WEFT_API size_t weft_dtype_size(weft_dtype_t dtype);
WEFT_API const char *weft_op_name(weft_op_t op);

#ifdef MPI_VERSION
/* Open MPI helper, compiled into the caller (include mpi.h before weft.h): libweft itself
 * never depends on MPI. Collective over mpi_comm. */
static inline weft_result_t weft_comm_init_mpi(weft_comm_t *comm, MPI_Comm mpi_comm,
                                               const weft_config_t *config) {
  int rank = 0, nranks = 0, rc = 0;
  weft_unique_id_t id;
  weft_result_t r = WEFT_SUCCESS;
  MPI_Comm_rank(mpi_comm, &rank);
  MPI_Comm_size(mpi_comm, &nranks);
  if (rank == 0) r = weft_get_unique_id(&id);
  rc = (int)r;
  MPI_Bcast(&rc, 1, MPI_INT, 0, mpi_comm);
  if (rc != 0) return (weft_result_t)rc;
  MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, mpi_comm);
  return weft_comm_init(comm, nranks, id, rank, config);
}
#endif

#ifdef __cplusplus
}
#endif
#endif
