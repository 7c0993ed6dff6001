/* The Open MPI helper in weft.h (compiled into this program, not into libweft): ranks
 * started by mpirun build a communicator and agree on a sum. Run under mpirun. */
#include <mpi.h>
#include <stdio.h>

#include "weft.h"

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n, rc = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  weft_comm_t comm;
  if (weft_comm_init_mpi(&comm, MPI_COMM_WORLD, NULL) == WEFT_SUCCESS) {
    int wr = -1, wn = 0;
    long v = rank + 1, sum = 0;
    weft_comm_rank(comm, &wr);
    weft_comm_count(comm, &wn);
    if (weft_allreduce(&v, &sum, 1, WEFT_I64, WEFT_SUM, comm, NULL) == WEFT_SUCCESS && wr == rank &&
        wn == n && sum == (long)n * (n + 1) / 2)
      rc = 0;
    else
      fprintf(stderr, "rank %d: rank %d/%d, sum %ld: %s\n", rank, wr, wn, sum,
              weft_get_last_error(comm));
    weft_comm_destroy(comm);
  } else {
    fprintf(stderr, "rank %d: weft_comm_init_mpi: %s\n", rank, weft_get_last_error(NULL));
  }
  int all = 0;
  MPI_Allreduce(&rc, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0) printf("test_mpi_init: %d ranks %s\n", n, all ? "FAILED" : "ok");
  MPI_Finalize();
  return all;
}
