/* Open MPI as the peer measured in the same run (collbench --compare mpi under mpirun). */
#include <limits.h>
#include <mpi.h>
#include <stdlib.h>

#include "bench.h"

static MPI_Datatype mpi_type(weft_dtype_t t) {
  switch (t) {
  case WEFT_F32: return MPI_FLOAT;
  case WEFT_F64: return MPI_DOUBLE;
  case WEFT_I8: return MPI_INT8_T;
  case WEFT_U8: return MPI_UINT8_T;
  case WEFT_I32: return MPI_INT32_T;
  case WEFT_I64: return MPI_INT64_T;
  case WEFT_U32: return MPI_UINT32_T;
  case WEFT_U64: return MPI_UINT64_T;
  default: return MPI_DATATYPE_NULL;
  }
}

static MPI_Op mpi_op(weft_op_t op) {
  switch (op) {
  case WEFT_SUM: return MPI_SUM;
  case WEFT_PROD: return MPI_PROD;
  case WEFT_MIN: return MPI_MIN;
  case WEFT_MAX: return MPI_MAX;
  default: return MPI_OP_NULL;
  }
}

/* v: alltoallv's sendcounts, sdispls, recvcounts, rdispls as MPI takes them (int). */
static int call(int coll, void *s, void *r, int count, MPI_Datatype t, MPI_Op op, int root,
                int rank, int nranks, const int *v) {
  switch (coll) {
  case B_ALLREDUCE: return MPI_Allreduce(s, r, count, t, op, MPI_COMM_WORLD);
  case B_REDUCE_SCATTER: return MPI_Reduce_scatter_block(s, r, count, t, op, MPI_COMM_WORLD);
  case B_ALLGATHER: return MPI_Allgather(s, count, t, r, count, t, MPI_COMM_WORLD);
  case B_BROADCAST: return MPI_Bcast(s, count, t, root, MPI_COMM_WORLD);
  case B_REDUCE: return MPI_Reduce(s, r, count, t, op, root, MPI_COMM_WORLD);
  case B_ALLTOALL: return MPI_Alltoall(s, count, t, r, count, t, MPI_COMM_WORLD);
  case B_ALLTOALLV:
    return MPI_Alltoallv(s, v, v + nranks, t, r, v + 2 * nranks, v + 3 * nranks, t, MPI_COMM_WORLD);
  default:
    return MPI_Sendrecv(s, count, t, (rank + 1) % nranks, 0, r, count, t,
                        (rank + nranks - 1) % nranks, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
}

double bench_mpi_time(int coll, void *s, void *r, size_t count, const bench_opts_t *o, int rank,
                      int nranks) {
  MPI_Datatype t = mpi_type(o->dtype);
  MPI_Op op = mpi_op(o->op);
  if (t == MPI_DATATYPE_NULL || (bench_colls[coll].reduces && op == MPI_OP_NULL) || count > INT_MAX)
    return -1;
  int *v = NULL, fits = 1, all_fit = 0;
  if (coll == B_ALLTOALLV) { /* weft's layout, in MPI's ints */
    const size_t *w = bench_a2av(count, rank, nranks);
    v = malloc(4 * (size_t)nranks * sizeof *v);
    fits = w && v;
    for (int i = 0; fits && i < 4 * nranks; i++) {
      fits = w[i] <= INT_MAX;
      v[i] = (int)w[i];
    }
  }
  /* every rank takes part or none does */
  MPI_Allreduce(&fits, &all_fit, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all_fit) {
    free(v);
    return -1;
  }
  for (int i = 0; i < o->warmup; i++)
    call(coll, s, r, (int)count, t, op, o->root, rank, nranks, v);
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = MPI_Wtime();
  for (int i = 0; i < o->iters; i++)
    call(coll, s, r, (int)count, t, op, o->root, rank, nranks, v);
  double dt = (MPI_Wtime() - t0) / o->iters, mx = 0;
  MPI_Allreduce(&dt, &mx, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  free(v);
  return mx;
}
