/* collbench internals: options, one collective's adapter (sizes, call, check, bus
 * bandwidth factor) and the optional peer library measured in the same run. */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "weft.h"

enum {
  B_ALLREDUCE,
  B_REDUCE_SCATTER,
  B_ALLGATHER,
  B_BROADCAST,
  B_REDUCE,
  B_ALLTOALL,
  B_ALLTOALLV,
  B_SENDRECV,
  B_NCOLLS
};

typedef struct {
  size_t min_bytes, max_bytes, step_bytes;
  double factor;
  int iters, warmup, check, root;
  weft_dtype_t dtype;
  weft_op_t op;
  int colls[B_NCOLLS], ncolls;
  int ranks;
  int hosts; /* --hosts K: the local ranks as K fake hosts (rank % K) */
  const char *json;
  int compare_mpi;
  int compare_nccl;
  int gpu;          /* device buffers, one GPU per rank */
  int graph;        /* -G: time CUDA-graph replays of the timed loop */
  void *stream;     /* cudaStream_t of this rank's calls (GPU runs) */
  weft_comm_t ctl;  /* host communicator for timing reductions and barriers */
  const char *plot; /* --plot FILE.png */
  int trace;        /* --trace: one stderr line per timed GPU loop and rank */
  int window;       /* --window: the buffers are registered windows of the device comm */
  int quiet;
} bench_opts_t;

typedef struct {
  const char *name;
  double bus_factor_num; /* busbw = algbw * f(n); see bench_busbw */
  int reduces;
} bench_coll_t;

extern const bench_coll_t bench_colls[B_NCOLLS];

/* Elements per rank for a sweep size in bytes (nccl-tests: size is the largest buffer);
 * alltoallv's is its base count per pair (see bench_a2av). */
size_t bench_count(int coll, size_t bytes, size_t es, int nranks);
/* The row's size column: nccl-tests' size, or for alltoallv the bytes a rank sends, mean
 * over the ranks (the gaps between blocks are not moved, so not counted). */
size_t bench_row_bytes(int coll, size_t count, size_t es, int nranks);
double bench_busbw(int coll, double algbw, size_t count, int nranks);
/* Whether the collective has an in-place form (sendrecv and alltoallv have none). */
int bench_has_in_place(int coll);
/* alltoallv's layout for base count `count` on `rank`: sendcounts, sdispls, recvcounts,
 * rdispls (nranks each, in elements), uneven per pair, gaps between the blocks, received
 * blocks in the reverse order of the sent ones. NULL when out of memory. */
const size_t *bench_a2av(size_t count, int rank, int nranks);
/* alltoallv's receive buffer is filled with this byte before a checked call: the gaps
 * must still hold it afterwards. */
#define BENCH_GAP_BYTE 0xA5
/* One call of coll on the given buffers. */
weft_result_t bench_call(int coll, const void *s, void *r, size_t count, const bench_opts_t *o,
                         weft_comm_t comm, int rank, int nranks);
/* Buffer sizes in elements. */
void bench_buf_elems(int coll, size_t count, int nranks, size_t *in, size_t *out);
/* Where in and out lie for a case (in place: inside one buffer, as NCCL puts them). */
void bench_layout(int coll, char *s, char *r, size_t count, size_t es, int rank, int in_place,
                  char **in, char **out);
/* The oracle's input of this rank, and the number of elements of out that differ from
 * the oracle's output. */
void bench_fill(int coll, char *in, size_t count, const bench_opts_t *o, int rank, int nranks);
long bench_wrong(int coll, const char *out, size_t count, const bench_opts_t *o, int rank,
                 int nranks);
/* Fills inputs from the oracle, runs once, returns the number of wrong elements here. */
long bench_check(int coll, void *s, void *r, size_t count, const bench_opts_t *o, weft_comm_t comm,
                 int rank, int nranks, int in_place, weft_result_t *rc);

#ifdef WEFT_HAVE_CUDA
/* GPU runs (gpu.c). */
int bench_gpu_setup(int rank, void **stream); /* device of this rank, or -1 */
void bench_gpu_teardown(void *stream);
int bench_gpu_alloc(size_t bytes, void **s, void **r);
void bench_gpu_free(void *s, void *r);
long bench_gpu_check(int coll, char *ds, char *dr, size_t count, const bench_opts_t *o,
                     weft_comm_t comm, int rank, int nranks, int in_place, weft_result_t *rc);
/* *algo: weft_comm_last_algo right after the timed (or captured) calls of weft. */
double bench_gpu_time(int coll, void *in, void *out, size_t count, const bench_opts_t *o,
                      weft_comm_t comm, void *peer, int rank, int nranks, weft_result_t *rc,
                      double *submit, const char **algo);
#endif

#ifdef WEFT_HAVE_MPI
/* The same collective through MPI on MPI_COMM_WORLD; returns seconds per call (max over
 * ranks), or a negative value when MPI has no equivalent (e.g. half). */
double bench_mpi_time(int coll, void *s, void *r, size_t count, const bench_opts_t *o, int rank,
                      int nranks);
#endif

#endif
