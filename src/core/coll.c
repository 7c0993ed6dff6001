/* The collective and point-to-point entry points: check every argument (a bad one returns
 * WEFT_ERR_INVALID_ARG with a message, and nothing is queued or touched), describe the
 * call as a task, let the tuner choose, and submit it (or add it to the open group). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "comm.h"
#include "dtype.h"
#include "err.h"
#include "group.h"

static weft_result_t check_common(const char *fn, weft_comm_t comm, weft_dtype_t dtype) {
  if (!comm) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: comm is NULL", fn);
  if ((unsigned)dtype >= WEFT_DTYPE_COUNT)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: dtype %d is not a weft_dtype_t", fn,
                          (int)dtype);
  return WEFT_SUCCESS;
}

static weft_result_t check_op(const char *fn, weft_op_t op) {
  if ((unsigned)op >= WEFT_OP_COUNT)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: op %d is not a weft_op_t", fn, (int)op);
  return WEFT_SUCCESS;
}

/* Byte size of count * mult elements, refusing overflow. */
static weft_result_t bytes_of(const char *fn, size_t count, size_t mult, weft_dtype_t t,
                              size_t *out) {
  size_t elems;
  if (!weft_mul_fits(count, mult, &elems) || !weft_mul_fits(elems, weft_dtype_size(t), out))
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: count %zu is too large", fn, count);
  return WEFT_SUCCESS;
}

static int overlap(const void *a, size_t alen, const void *b, size_t blen) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return alen && blen && x < y + blen && y < x + alen;
}

/* Whether p lies off bytes into base, in integers: base may be NULL when nothing moves. */
static int block_at(const void *base, size_t off, const void *p) {
  return (uintptr_t)base + off == (uintptr_t)p;
}

static weft_result_t need_buf(const char *fn, const char *name, const void *p, size_t bytes) {
  if (bytes && !p) return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: %s is NULL", fn, name);
  return WEFT_SUCCESS;
}

static weft_result_t submit(weft_comm_t comm, weft_task_t *t, weft_stream_t stream) {
  t->args.nranks = comm->nranks;
  t->args.rank = comm->rank;
  weft_result_t trc = weft_tune(comm, t);
  if (trc != WEFT_SUCCESS) {
    weft_task_free(t);
    return trc;
  }
  if (weft_group_active()) return weft_group_add(comm, t, stream);
  return comm->engine->submit(comm, t, 1, stream);
}

weft_result_t weft_allreduce(const void *sendbuf, void *recvbuf, size_t count, weft_dtype_t dtype,
                             weft_op_t op, weft_comm_t comm, weft_stream_t stream) {
  const char *fn = "weft_allreduce";
  size_t b = 0;
  CHECK(check_common(fn, comm, dtype));
  CHECK(check_op(fn, op));
  CHECK(bytes_of(fn, count, 1, dtype, &b));
  CHECK(need_buf(fn, "sendbuf", sendbuf, b));
  CHECK(need_buf(fn, "recvbuf", recvbuf, b));
  if (sendbuf != recvbuf && overlap(sendbuf, b, recvbuf, b))
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: sendbuf and recvbuf overlap but differ", fn);
  weft_task_t t = {
      .args = {.coll = WEFT_COLL_ALLREDUCE, .count = count, .in_place = sendbuf == recvbuf},
      .dtype = dtype,
      .op = op,
      .sendbuf = sendbuf,
      .recvbuf = recvbuf};
  return submit(comm, &t, stream);
}

weft_result_t weft_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                  weft_dtype_t dtype, weft_op_t op, weft_comm_t comm,
                                  weft_stream_t stream) {
  const char *fn = "weft_reduce_scatter";
  size_t sb = 0, rb = 0;
  CHECK(check_common(fn, comm, dtype));
  CHECK(check_op(fn, op));
  CHECK(bytes_of(fn, recvcount, (size_t)comm->nranks, dtype, &sb));
  CHECK(bytes_of(fn, recvcount, 1, dtype, &rb));
  CHECK(need_buf(fn, "sendbuf", sendbuf, sb));
  CHECK(need_buf(fn, "recvbuf", recvbuf, rb));
  int in_place = block_at(sendbuf, (size_t)comm->rank * rb, recvbuf);
  if (!in_place && overlap(sendbuf, sb, recvbuf, rb))
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: recvbuf overlaps sendbuf but is not sendbuf + rank * recvcount", fn);
  weft_task_t t = {
      .args = {.coll = WEFT_COLL_REDUCE_SCATTER, .count = recvcount, .in_place = in_place && rb},
      .dtype = dtype,
      .op = op,
      .sendbuf = sendbuf,
      .recvbuf = recvbuf};
  return submit(comm, &t, stream);
}

weft_result_t weft_allgather(const void *sendbuf, void *recvbuf, size_t sendcount,
                             weft_dtype_t dtype, weft_comm_t comm, weft_stream_t stream) {
  const char *fn = "weft_allgather";
  size_t sb = 0, rb = 0;
  CHECK(check_common(fn, comm, dtype));
  CHECK(bytes_of(fn, sendcount, 1, dtype, &sb));
  CHECK(bytes_of(fn, sendcount, (size_t)comm->nranks, dtype, &rb));
  CHECK(need_buf(fn, "sendbuf", sendbuf, sb));
  CHECK(need_buf(fn, "recvbuf", recvbuf, rb));
  int in_place = block_at(recvbuf, (size_t)comm->rank * sb, sendbuf);
  if (!in_place && overlap(sendbuf, sb, recvbuf, rb))
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: sendbuf overlaps recvbuf but is not recvbuf + rank * sendcount", fn);
  weft_task_t t = {
      .args = {.coll = WEFT_COLL_ALLGATHER, .count = sendcount, .in_place = in_place && sb},
      .dtype = dtype,
      .sendbuf = sendbuf,
      .recvbuf = recvbuf};
  return submit(comm, &t, stream);
}

static weft_result_t rooted(const char *fn, weft_coll_t coll, const void *sendbuf, void *recvbuf,
                            size_t count, weft_dtype_t dtype, weft_op_t op, int root,
                            weft_comm_t comm, weft_stream_t stream) {
  size_t b = 0;
  CHECK(check_common(fn, comm, dtype));
  if (coll == WEFT_COLL_REDUCE) CHECK(check_op(fn, op));
  if (root < 0 || root >= comm->nranks)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: root %d is not a rank of %d", fn, root,
                          comm->nranks);
  CHECK(bytes_of(fn, count, 1, dtype, &b));
  int is_root = comm->rank == root;
  /* broadcast reads sendbuf on the root only; reduce writes recvbuf on the root only */
  if (coll == WEFT_COLL_REDUCE || is_root) CHECK(need_buf(fn, "sendbuf", sendbuf, b));
  if (coll == WEFT_COLL_BROADCAST || is_root) CHECK(need_buf(fn, "recvbuf", recvbuf, b));
  int in_place = sendbuf == recvbuf;
  if (is_root && !in_place && overlap(sendbuf, b, recvbuf, b))
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: sendbuf and recvbuf overlap but differ", fn);
  weft_task_t t = {.args = {.coll = coll, .count = count, .root = root, .in_place = in_place},
                   .dtype = dtype,
                   .op = op,
                   .sendbuf = sendbuf,
                   .recvbuf = recvbuf};
  return submit(comm, &t, stream);
}

weft_result_t weft_broadcast(const void *sendbuf, void *recvbuf, size_t count, weft_dtype_t dtype,
                             int root, weft_comm_t comm, weft_stream_t stream) {
  return rooted("weft_broadcast", WEFT_COLL_BROADCAST, sendbuf, recvbuf, count, dtype, WEFT_SUM,
                root, comm, stream);
}

weft_result_t weft_reduce(const void *sendbuf, void *recvbuf, size_t count, weft_dtype_t dtype,
                          weft_op_t op, int root, weft_comm_t comm, weft_stream_t stream) {
  return rooted("weft_reduce", WEFT_COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, comm,
                stream);
}

weft_result_t weft_alltoall(const void *sendbuf, void *recvbuf, size_t count, weft_dtype_t dtype,
                            weft_comm_t comm, weft_stream_t stream) {
  const char *fn = "weft_alltoall";
  size_t b = 0;
  CHECK(check_common(fn, comm, dtype));
  CHECK(bytes_of(fn, count, (size_t)comm->nranks, dtype, &b));
  CHECK(need_buf(fn, "sendbuf", sendbuf, b));
  CHECK(need_buf(fn, "recvbuf", recvbuf, b));
  if (sendbuf != recvbuf && overlap(sendbuf, b, recvbuf, b))
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: sendbuf and recvbuf overlap but differ", fn);
  weft_task_t t = {
      .args = {.coll = WEFT_COLL_ALLTOALL, .count = count, .in_place = sendbuf == recvbuf && b},
      .dtype = dtype,
      .sendbuf = sendbuf,
      .recvbuf = recvbuf};
  return submit(comm, &t, stream);
}

weft_result_t weft_alltoallv(const void *sendbuf, const size_t *sendcounts, const size_t *sdispls,
                             void *recvbuf, const size_t *recvcounts, const size_t *rdispls,
                             weft_dtype_t dtype, weft_comm_t comm, weft_stream_t stream) {
  const char *fn = "weft_alltoallv";
  CHECK(check_common(fn, comm, dtype));
  if (!sendcounts || !sdispls || !recvcounts || !rdispls)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: a count or displacement array is NULL", fn);
  size_t n = (size_t)comm->nranks, es = weft_dtype_size(dtype), send_end = 0, recv_end = 0;
  size_t total = 0;
  for (size_t p = 0; p < n; p++) {
    /* Every block's end in bytes must fit, even an empty one's: the executors and the device
     * planner turn displacements into byte offsets. Past this loop, each (displacement +
     * count) * element size, and so every offset inside a block, is known to fit. */
    size_t se, re;
    if (!weft_extent_fits(sdispls[p], sendcounts[p], es, &se) ||
        !weft_extent_fits(rdispls[p], recvcounts[p], es, &re) ||
        !weft_add_fits(total, sendcounts[p], &total))
      return weft_set_error(WEFT_ERR_INVALID_ARG,
                            "%s: (displacement + count) * %zu bytes overflows for rank %zu (send "
                            "%zu + %zu, recv %zu + %zu)",
                            fn, es, p, sdispls[p], sendcounts[p], rdispls[p], recvcounts[p]);
    if (sendcounts[p] && sdispls[p] + sendcounts[p] > send_end)
      send_end = sdispls[p] + sendcounts[p];
    if (recvcounts[p] && rdispls[p] + recvcounts[p] > recv_end)
      recv_end = rdispls[p] + recvcounts[p];
  }
  if (comm->rank >= 0 && sendcounts[comm->rank] != recvcounts[comm->rank])
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s: sendcounts[%d] = %zu but recvcounts[%d] = %zu (the self block)", fn,
                          comm->rank, sendcounts[comm->rank], comm->rank, recvcounts[comm->rank]);
  CHECK(need_buf(fn, "sendbuf", sendbuf, send_end));
  CHECK(need_buf(fn, "recvbuf", recvbuf, recv_end));
  if (overlap(sendbuf, send_end * es, recvbuf, recv_end * es))
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: sendbuf and recvbuf overlap", fn);
  size_t *v = malloc(4 * n * sizeof *v);
  if (!v) return weft_set_error(WEFT_ERR_NO_MEMORY, "%s: out of memory", fn);
  memcpy(v, sendcounts, n * sizeof *v);
  memcpy(v + n, sdispls, n * sizeof *v);
  memcpy(v + 2 * n, recvcounts, n * sizeof *v);
  memcpy(v + 3 * n, rdispls, n * sizeof *v);
  weft_task_t t = {.args = {.coll = WEFT_COLL_ALLTOALLV,
                            .sendcounts = v,
                            .sdispls = v + n,
                            .recvcounts = v + 2 * n,
                            .rdispls = v + 3 * n},
                   .dtype = dtype,
                   .sendbuf = sendbuf,
                   .recvbuf = recvbuf,
                   .owned = v};
  t.args.count = total;
  return submit(comm, &t, stream);
}

static weft_result_t p2p(const char *fn, weft_coll_t coll, const void *sbuf, void *rbuf,
                         size_t count, weft_dtype_t dtype, int peer, weft_comm_t comm,
                         weft_stream_t stream) {
  size_t b = 0;
  CHECK(check_common(fn, comm, dtype));
  if (peer < 0 || peer >= comm->nranks)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: peer %d is not a rank of %d", fn, peer,
                          comm->nranks);
  CHECK(bytes_of(fn, count, 1, dtype, &b));
  CHECK(need_buf(fn, "buffer", coll == WEFT_COLL_SEND ? sbuf : rbuf, b));
  weft_task_t t = {.args = {.coll = coll, .count = count, .root = peer},
                   .dtype = dtype,
                   .sendbuf = sbuf,
                   .recvbuf = rbuf};
  return submit(comm, &t, stream);
}

weft_result_t weft_send(const void *sendbuf, size_t count, weft_dtype_t dtype, int peer,
                        weft_comm_t comm, weft_stream_t stream) {
  return p2p("weft_send", WEFT_COLL_SEND, sendbuf, NULL, count, dtype, peer, comm, stream);
}

weft_result_t weft_recv(void *recvbuf, size_t count, weft_dtype_t dtype, int peer, weft_comm_t comm,
                        weft_stream_t stream) {
  return p2p("weft_recv", WEFT_COLL_RECV, NULL, recvbuf, count, dtype, peer, comm, stream);
}

weft_result_t weft_barrier(weft_comm_t comm, weft_stream_t stream) {
  if (!comm) return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_barrier: comm is NULL");
  /* An allreduce of one byte: completes on a rank only after every rank has joined. The
   * buffer must outlive an asynchronous call, so it lives in a small heap task copy. */
  static const uint8_t zero = 0;
  weft_task_t t = {.args = {.coll = WEFT_COLL_ALLREDUCE, .count = 1},
                   .dtype = WEFT_U8,
                   .op = WEFT_MAX,
                   .sendbuf = &zero};
  void *byte = comm->engine->barrier_byte(comm);
  if (byte) { /* the engine's memory (device buffers), stream-ordered like its operations */
    t.sendbuf = t.recvbuf = byte;
    t.args.in_place = 1;
    return submit(comm, &t, stream);
  }
  uint8_t *sink = malloc(1);
  if (!sink) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_barrier: out of memory");
  t.recvbuf = sink;
  t.owned = sink;
  return submit(comm, &t, stream);
}
