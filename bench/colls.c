/* Per-collective adapters for collbench: sizes, nccl-tests' bus-bandwidth formulas, the
 * call itself, and the oracle check that gives the #wrong column. */
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "oracle.h"

const bench_coll_t bench_colls[B_NCOLLS] = {
    [B_ALLREDUCE] = {"allreduce", 2, 1}, [B_REDUCE_SCATTER] = {"reduce_scatter", 1, 1},
    [B_ALLGATHER] = {"allgather", 1, 0}, [B_BROADCAST] = {"broadcast", 0, 0},
    [B_REDUCE] = {"reduce", 0, 1},       [B_ALLTOALL] = {"alltoall", 1, 0},
    [B_ALLTOALLV] = {"alltoallv", 1, 0}, [B_SENDRECV] = {"sendrecv", 0, 0},
};

size_t bench_count(int coll, size_t bytes, size_t es, int nranks) {
  size_t c = bytes / es;
  if (coll == B_REDUCE_SCATTER || coll == B_ALLGATHER || coll == B_ALLTOALL || coll == B_ALLTOALLV)
    c /= (size_t)nranks;
  return c;
}

int bench_has_in_place(int coll) { return coll != B_SENDRECV && coll != B_ALLTOALLV; }

/* alltoallv: rank p sends rank q count * k / 4 elements (rounded up, so never 0), k one of
 * 2, 3, 5, 6 by (p, q): uneven, and different each way of a pair, so that a send count
 * used as a receive count shows. Blocks lie `a2av_stride` apart, leaving a gap after each. */
static size_t a2av_pair(size_t count, int p, int q) {
  static const size_t k[4] = {2, 3, 5, 6};
  return (count * k[(3 * p + 5 * q) % 4] + 3) / 4;
}

static size_t a2av_stride(size_t count) { return count + (count + 1) / 2 + count / 8 + 1; }

const size_t *bench_a2av(size_t count, int rank, int nranks) {
  /* one table per process (each rank is one), built again only when the call changes, so
   * that timed calls pay nothing for it */
  static size_t *tab, tab_count;
  static int tab_rank = -1, tab_n;
  if (tab && tab_count == count && tab_rank == rank && tab_n == nranks) return tab;
  size_t n = (size_t)nranks, s = a2av_stride(count), *t = realloc(tab, 4 * n * sizeof *t);
  if (!t) return NULL;
  for (int p = 0; p < nranks; p++) {
    t[p] = a2av_pair(count, rank, p);
    t[n + (size_t)p] = (size_t)p * s;
    t[2 * n + (size_t)p] = a2av_pair(count, p, rank);
    t[3 * n + (size_t)p] = (n - 1 - (size_t)p) * s;
  }
  tab = t, tab_count = count, tab_rank = rank, tab_n = nranks;
  return tab;
}

/* Elements all ranks send together, and those of them that go to another rank. */
static void a2av_sums(size_t count, int nranks, double *all, double *remote) {
  *all = *remote = 0;
  for (int p = 0; p < nranks; p++)
    for (int q = 0; q < nranks; q++) {
      double c = (double)a2av_pair(count, p, q);
      *all += c;
      if (p != q) *remote += c;
    }
}

size_t bench_row_bytes(int coll, size_t count, size_t es, int nranks) {
  if (coll == B_ALLTOALLV) {
    double all, remote;
    a2av_sums(count, nranks, &all, &remote);
    return (size_t)(all / nranks + 0.5) * es;
  }
  size_t nin, nout;
  bench_buf_elems(coll, count, nranks, &nin, &nout);
  return (nin > nout ? nin : nout) * es;
}

/* nccl-tests: allreduce 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n; others 1.
 * alltoallv: the share of the bytes sent that go to another rank, as (n-1)/n is for
 * alltoall's even blocks. */
double bench_busbw(int coll, double algbw, size_t count, int nranks) {
  double f = bench_colls[coll].bus_factor_num;
  if (f == 0 || nranks == 1) return algbw;
  if (coll == B_ALLTOALLV) {
    double all, remote;
    a2av_sums(count, nranks, &all, &remote);
    return all > 0 ? algbw * remote / all : algbw;
  }
  return algbw * f * (nranks - 1) / nranks;
}

void bench_buf_elems(int coll, size_t count, int nranks, size_t *in, size_t *out) {
  size_t n = (size_t)nranks;
  *in = *out = count;
  if (coll == B_REDUCE_SCATTER || coll == B_ALLTOALL) *in = count * n;
  if (coll == B_ALLGATHER || coll == B_ALLTOALL) *out = count * n;
  if (coll == B_ALLTOALLV) *in = *out = a2av_stride(count) * n;
}

weft_result_t bench_call(int coll, const void *s, void *r, size_t count, const bench_opts_t *o,
                         weft_comm_t comm, int rank, int nranks) {
  weft_stream_t st = (weft_stream_t)o->stream;
  switch (coll) {
  case B_ALLREDUCE: return weft_allreduce(s, r, count, o->dtype, o->op, comm, st);
  case B_REDUCE_SCATTER: return weft_reduce_scatter(s, r, count, o->dtype, o->op, comm, st);
  case B_ALLGATHER: return weft_allgather(s, r, count, o->dtype, comm, st);
  case B_BROADCAST: return weft_broadcast(s, r, count, o->dtype, o->root, comm, st);
  case B_REDUCE: return weft_reduce(s, r, count, o->dtype, o->op, o->root, comm, st);
  case B_ALLTOALL: return weft_alltoall(s, r, count, o->dtype, comm, st);
  case B_ALLTOALLV: {
    const size_t *v = bench_a2av(count, rank, nranks), n = (size_t)nranks;
    if (!v) return WEFT_ERR_NO_MEMORY;
    return weft_alltoallv(s, v, v + n, r, v + 2 * n, v + 3 * n, o->dtype, comm, st);
  }
  default: { /* ring exchange, as nccl-tests' sendrecv */
    weft_group_start();
    weft_send(s, count, o->dtype, (rank + 1) % nranks, comm, st);
    weft_recv(r, count, o->dtype, (rank + nranks - 1) % nranks, comm, st);
    return weft_group_end();
  }
  }
}

void bench_layout(int coll, char *s, char *r, size_t count, size_t es, int rank, int in_place,
                  char **in, char **out) {
  *in = s;
  *out = in_place ? s : r;
  if (in_place && coll == B_ALLGATHER) *in = s + (size_t)rank * count * es;
  if (in_place && coll == B_REDUCE_SCATTER) *out = s + (size_t)rank * count * es;
}

static uint32_t check_seed(int coll, size_t count) { return (uint32_t)count * 7u + (uint32_t)coll; }

void bench_fill(int coll, char *in, size_t count, const bench_opts_t *o, int rank, int nranks) {
  size_t nin, nout;
  bench_buf_elems(coll, count, nranks, &nin, &nout);
  weft_op_t fop = bench_colls[coll].reduces ? o->op : WEFT_SUM;
  oracle_fill(o->dtype, fop, rank, in, 0, coll == B_ALLGATHER ? count : nin,
              check_seed(coll, count));
}

long bench_check(int coll, void *s, void *r, size_t count, const bench_opts_t *o, weft_comm_t comm,
                 int rank, int nranks, int in_place, weft_result_t *rc) {
  size_t es = weft_dtype_size(o->dtype), nin, nout;
  bench_buf_elems(coll, count, nranks, &nin, &nout);
  char *in, *out;
  bench_layout(coll, s, r, count, es, rank, in_place, &in, &out);
  bench_fill(coll, in, count, o, rank, nranks);
  if (coll == B_ALLTOALLV) memset(out, BENCH_GAP_BYTE, nout * es);
  *rc = bench_call(coll, in, out, count, o, comm, rank, nranks);
  if (*rc != WEFT_SUCCESS) return (long)nout;
  return bench_wrong(coll, out, count, o, rank, nranks);
}

long bench_wrong(int coll, const char *out, size_t count, const bench_opts_t *o, int rank,
                 int nranks) {
  size_t es = weft_dtype_size(o->dtype), nin, nout;
  bench_buf_elems(coll, count, nranks, &nin, &nout);
  uint32_t seed = check_seed(coll, count);
  weft_op_t fop = bench_colls[coll].reduces ? o->op : WEFT_SUM;
  char *want = malloc(nout * es + 1);
  if (!want) return (long)nout;
  size_t cmp = nout;
  int root = o->root;
  switch (coll) {
  case B_ALLREDUCE: oracle_reduced(o->dtype, o->op, nranks, want, 0, count, seed); break;
  case B_REDUCE_SCATTER:
    oracle_reduced(o->dtype, o->op, nranks, want, (size_t)rank * count, count, seed);
    break;
  case B_ALLGATHER:
    for (int p = 0; p < nranks; p++)
      oracle_fill(o->dtype, fop, p, want + (size_t)p * count * es, 0, count, seed);
    break;
  case B_BROADCAST: oracle_fill(o->dtype, fop, root, want, 0, count, seed); break;
  case B_REDUCE:
    if (rank == root)
      oracle_reduced(o->dtype, o->op, nranks, want, 0, count, seed);
    else
      cmp = 0;
    break;
  case B_ALLTOALL:
    for (int p = 0; p < nranks; p++)
      oracle_fill(o->dtype, fop, p, want + (size_t)p * count * es, (size_t)rank * count, count,
                  seed);
    break;
  case B_ALLTOALLV: { /* block of p: p's input where p's block for this rank starts */
    const size_t *v = bench_a2av(count, rank, nranks), n = (size_t)nranks;
    if (!v) {
      free(want);
      return (long)nout;
    }
    memset(want, BENCH_GAP_BYTE, nout * es);
    for (int p = 0; p < nranks; p++)
      oracle_fill(o->dtype, fop, p, want + v[3 * n + (size_t)p] * es,
                  (size_t)rank * a2av_stride(count), v[2 * n + (size_t)p], seed);
    break;
  }
  default: oracle_fill(o->dtype, fop, (rank + nranks - 1) % nranks, want, 0, count, seed); break;
  }
  long wrong = 0;
  for (size_t i = 0; i < cmp; i++)
    wrong += memcmp(out + i * es, want + i * es, es) != 0;
  free(want);
  return wrong;
}
