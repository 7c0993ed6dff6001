/* A device operation's submission: its buffers checked (device memory of this GPU), the
 * path chosen (copy engines or kernels into windows, a low-latency kernel, or the general
 * one's plan), and one launch (or a few, for many sends and receives) on the caller's stream,
 * with no host synchronisation, so that it can be captured in a CUDA graph. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "err.h"
#include "gpu.h"
#include "region.h"
#include "self_pairs.h"
#include "window.h"

/* Device buffers only: a host pointer would fault the kernel and poison the context. */
weft_result_t weft_dev_check_ptr(struct weft_dev *d, const char *what, const void *p,
                                 size_t bytes) {
  if (!bytes) return WEFT_SUCCESS;
  for (int i = 0; i < 8; i++)
    if (d->checked[i] == p) return WEFT_SUCCESS;
  struct cudaPointerAttributes a;
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    cudaGetLastError();
    return weft_set_error(WEFT_ERR_INVALID_ARG, "%s %p is not memory CUDA knows", what, p);
  }
  if (a.type == cudaMemoryTypeManaged ||
      (a.type == cudaMemoryTypeDevice && a.device == d->device)) {
    d->checked[d->checked_next++ & 7] = p;
    return WEFT_SUCCESS;
  }
  if (a.type != cudaMemoryTypeDevice)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "%s %p is host memory; a device communicator needs device buffers", what,
                          p);
  return weft_set_error(WEFT_ERR_INVALID_ARG, "%s %p is on GPU %d; this communicator's GPU is %d",
                        what, p, a.device, d->device);
}

/* Every buffer of the operation, before anything is planned or launched. */
static weft_result_t check_buffers(weft_comm_t c, const weft_task_t *tasks, int ntasks) {
  for (int i = 0; i < ntasks; i++) {
    size_t in_b = 0, out_b = 0;
    if (!weft_dev_extents(c->rank, c->nranks, &tasks[i], &in_b, &out_b))
      return weft_set_error(WEFT_ERR_INVALID_ARG, "%s: a buffer's extent overflows size_t",
                            weft_coll_name(tasks[i].args.coll));
    CHECK(weft_dev_check_ptr(dev_of(c), "sendbuf", tasks[i].sendbuf, in_b));
    CHECK(weft_dev_check_ptr(dev_of(c), "recvbuf", tasks[i].recvbuf, out_b));
  }
  return WEFT_SUCCESS;
}

/* The operation's part of the low-latency launch; returns its block count. */
static int prepare_ll(struct weft_dev *d, const weft_task_t *t, int kind, int wide) {
  weft_dev_ll_t *P = &d->ll;
  P->kind = (uint8_t)kind;
  P->root = t->args.root;
  P->send = t->sendbuf;
  P->recv = t->recvbuf;
  P->count = t->args.count;
  P->dtype = (uint8_t)t->dtype;
  P->op = (uint8_t)t->op;
  if (wide) return WEFT_DEV_LL128_CHANNELS;
  /* Blocks of ll_block bytes, fewer and fuller once that would pass the channels: a thread
   * polls its packets one after another, so short blocks answer sooner. */
  size_t bytes = t->args.count * weft_dtype_size(t->dtype), per = d->ll_block;
  size_t fit = (bytes + (size_t)d->ll_channels - 1) / (size_t)d->ll_channels;
  fit = (fit + 15) / 16 * 16;
  if (fit > per) per = fit;
  P->block_bytes = (uint32_t)per;
  return (int)((bytes + per - 1) / per);
}

/* One rank: a collective's result is its input (a reduction over one rank included), so no
 * kernel runs; a device-to-device copy where the output lies elsewhere, nothing in place (a
 * 1-rank data-parallel trainer's gradient allreduce costs nothing). */
static weft_result_t one_rank(const weft_task_t *tasks, int ntasks, cudaStream_t s) {
  for (int i = 0; i < ntasks; i++) {
    const weft_task_t *t = &tasks[i];
    const weft_coll_args_t *a = &t->args;
    size_t es = weft_dtype_size(t->dtype), n = a->count;
    const char *from = t->sendbuf;
    char *to = t->recvbuf;
    if (a->coll == WEFT_COLL_ALLTOALLV) /* the kernel moves sendcounts[me] elements */
      from += a->sdispls[0] * es, to += a->rdispls[0] * es, n = a->sendcounts[0];
    if (!n || from == to) continue;
    cudaError_t e = cudaMemcpyAsync(to, from, n * es, cudaMemcpyDeviceToDevice, s);
    if (e != cudaSuccess)
      return weft_set_error(WEFT_ERR_SYSTEM, "%s on one rank: the copy failed: %s",
                            weft_coll_name(a->coll), cudaGetErrorString(e));
  }
  return WEFT_SUCCESS;
}

static void release_hold(void *token) { weft_rproxy_release(token); }

/* Captured into a CUDA graph across hosts: the graph holds the proxy awake while it lives,
 * since a replay queues nothing on the host to kick a napping worker before its first chunk
 * (as NCCL's proxy keeps polling for the operations of live graphs). Once per capture; where
 * CUDA will not, replays may find the proxy napping, as before, and INFO says so. */
static void hold_for_graph(const struct weft_comm *c, struct weft_dev *d, cudaStream_t s) {
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  cudaGraph_t g = NULL;
  cudaUserObject_t obj;
#if CUDART_VERSION >= 13000 /* the call took more outputs in CUDA 13 */
  cudaError_t e = cudaStreamGetCaptureInfo(s, &st, &id, &g, NULL, NULL, NULL);
#else
  cudaError_t e = cudaStreamGetCaptureInfo_v2(s, &st, &id, &g, NULL, NULL);
#endif
  if (e != cudaSuccess) {
    cudaGetLastError(); /* not an error of the operation's */
    return;
  }
  if (st != cudaStreamCaptureStatusActive || !g || (d->held && d->held_id == id)) return;
  void *token = weft_rproxy_hold(d->rproxy);
  if (!token || cudaUserObjectCreate(&obj, token, release_hold, 1,
                                     cudaUserObjectNoDestructorSync) != cudaSuccess) {
    weft_rproxy_release(token);
    token = NULL;
  } else if (cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove) != cudaSuccess) {
    cudaUserObjectRelease(obj, 1); /* its destructor releases the hold */
    token = NULL;
  }
  d->held = 1, d->held_id = id; /* taken or refused: once per capture either way */
  if (!token) {
    cudaGetLastError();
    WEFT_INFO(WEFT_SUB_NET,
              "rank %d: a CUDA graph could not hold the proxy awake: its replays may find it "
              "napping (up to 1 ms before their first chunk)",
              c->rank);
  }
}

static weft_result_t launch(weft_comm_t c, weft_task_t *tasks, int ntasks, weft_stream_t stream,
                            uint64_t seq) {
  struct weft_dev *d = dev_of(c);
  cudaStream_t s = (cudaStream_t)(void *)stream;
  weft_result_t rc = WEFT_SUCCESS;
  int saved = -1, nblocks = 0;
  if (weft_dev_enter(d->device, &saved) != 0)
    return weft_set_error(WEFT_ERR_SYSTEM, "cannot make GPU %d current", d->device);
  weft_proto_t proto = weft_dev_protocol(c, tasks, ntasks);
  int wide = proto == WEFT_PROTO_LL128, ll = proto != WEFT_PROTO_SIMPLE, more = 0, direct = 0;
  int llk = ll ? weft_dev_op_kind(weft_dev_op_of(tasks, proto)) : -1;
  uint8_t placed[WEFT_DEV_MAX_GROUP];
  rc = check_buffers(c, tasks, ntasks);
  if (rc == WEFT_SUCCESS && ntasks > WEFT_DEV_MAX_GROUP)
    rc = weft_set_error(WEFT_ERR_UNSUPPORTED,
                        "a group on a device communicator holds at most %d operations (%d given)",
                        WEFT_DEV_MAX_GROUP, ntasks);
  if (rc == WEFT_SUCCESS && c->nranks == 1) { /* what more ranks refuse, one refuses too */
    int ncoll = 0;
    rc = weft_dev_plan_check(&d->plan, tasks, ntasks, &ncoll);
    if (rc == WEFT_SUCCESS) rc = one_rank(tasks, ntasks, s);
    weft_dev_leave(d->device, saved);
    return rc;
  }
  weft_task_t parts[2];
  /* a forced ring runs as one, through staging, windows or not */
  int windows = ntasks == 1 && d->wins && tasks->algo != WEFT_ALGO_RING;
  if (rc == WEFT_SUCCESS && windows && weft_window_split_allreduce(c, tasks, parts)) {
    weft_dev_leave(d->device, saved);
    rc = launch(c, &parts[0], 1, stream, seq);
    return rc != WEFT_SUCCESS ? rc : launch(c, &parts[1], 1, stream, seq);
  }
  if (rc == WEFT_SUCCESS && windows) { /* into a window: copy engines */
    int taken = 0;
    weft_result_t wrc = weft_window_try(c, tasks, stream, &taken);
    if (taken) {
      weft_dev_leave(d->device, saved);
      return wrc;
    }
    /* or kernels writing into it, where the low-latency kernels, faster there, do not run.
     * The 128-byte one's rings lost to them but for reduce_scatter (allreduce of 64 MiB 238.5
     * us against 216.9, allgather of 32 MiB 63.2 against 60.8; reduce_scatter of 32 MiB 63.1
     * against 68.8; bench/results/2026-11-30-h200x2-direct-float.txt, the previous run) */
    int yield = ll && wide && llk != WEFT_DEV_REDUCE_SCATTER &&
                tasks->args.count * weft_dtype_size(tasks->dtype) > d->ll128_fit;
    direct = (!ll || yield) && weft_window_direct(c, tasks, &d->launch);
    if (direct) ll = 0;
  }
  if (rc == WEFT_SUCCESS && ll) {
    nblocks = prepare_ll(d, tasks, llk, wide);
    if ((llk == WEFT_DEV_BROADCAST || llk == WEFT_DEV_REDUCE) && !d->logged_rooted) {
      d->logged_rooted = 1;
      WEFT_INFO(WEFT_SUB_COLL, "rank %d: %s of %zu bytes by the small low-latency kernel", c->rank,
                weft_coll_name(tasks->args.coll),
                tasks->args.count * weft_dtype_size(tasks->dtype));
    }
    if (wide && !d->logged_ll128) {
      d->logged_ll128 = 1;
      WEFT_INFO(WEFT_SUB_COLL,
                "rank %d: %s of %zu bytes per peer by the 128-byte low-latency kernel", c->rank,
                weft_coll_name(tasks->args.coll),
                tasks->args.count * weft_dtype_size(tasks->dtype));
    }
  } else if (rc == WEFT_SUCCESS) {
    memset(placed, 0, (size_t)ntasks); /* only the group's part: this is every call's path */
    rc = weft_dev_plan(&d->plan, tasks, ntasks, placed, &d->launch, &nblocks, &more);
    if (rc == WEFT_SUCCESS && direct && d->launch.nitems == 1)
      nblocks = weft_dev_place_direct(&d->plan, tasks, d->direct_channels, &d->launch.items[0]);
  }
  /* Operations of one comm run in issue order even across streams (their channels are
   * shared); a stream being captured into a graph orders itself. */
  enum cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(s, &cap);
  if (rc == WEFT_SUCCESS && cap == cudaStreamCaptureStatusActive && d->rproxy)
    hold_for_graph(c, d, s);
  if (rc == WEFT_SUCCESS && (nblocks > 0 || more) && d->launched && d->last != s &&
      cap == cudaStreamCaptureStatusNone && cudaStreamWaitEvent(s, d->order, 0) != cudaSuccess)
    rc = weft_set_error(WEFT_ERR_SYSTEM, "ordering after the previous stream failed");
  /* Sends and receives that did not fit follow in further launches on the same stream;
   * the planner has already fixed which channels each one takes. */
  for (int launched = 0; rc == WEFT_SUCCESS;) {
    if (nblocks > 0) {
      /* before the launch, which takes microseconds: a napping proxy is up by the time the
       * kernel posts its first chunk (a graph's replay kicks nothing: hold_for_graph) */
      weft_rproxy_kick(d->rproxy);
      int e = !ll    ? weft_dev_launch(&d->launch, nblocks, s)
              : wide ? weft_dev_launch_ll128(&d->ll, s)
                     : weft_dev_launch_ll(&d->ll, nblocks, s);
      if (e != 0)
        rc = weft_set_error(WEFT_ERR_SYSTEM, "kernel launch of op %llu failed: %s",
                            (unsigned long long)seq, weft_dev_error_string(e));
      launched = 1;
    }
    if (rc != WEFT_SUCCESS || !more) {
      if (rc == WEFT_SUCCESS && launched && cap == cudaStreamCaptureStatusNone &&
          cudaEventRecord(d->order, s) == cudaSuccess) {
        d->last = s;
        d->launched = 1;
      }
      break;
    }
    rc = weft_dev_plan(&d->plan, tasks, ntasks, placed, &d->launch, &nblocks, &more);
  }
  weft_dev_leave(d->device, saved);
  return rc;
}

/* Sends to and receives from the rank itself: every buffer checked and the pairs matched
 * before anything runs, then the other operations launched, then one device-to-device copy
 * per pair on the same stream (capturable like the kernels). */
static weft_result_t launch_with_self(weft_comm_t c, weft_task_t *tasks, int ntasks,
                                      weft_stream_t stream, uint64_t seq) {
  struct weft_dev *d = dev_of(c);
  int *pair = malloc((size_t)ntasks * sizeof *pair), nself = 0, nrest = 0, saved = -1;
  weft_task_t *rest = malloc((size_t)ntasks * sizeof *rest);
  weft_result_t rc = WEFT_SUCCESS;
  if (!pair || !rest) {
    rc = weft_set_error(WEFT_ERR_NO_MEMORY, "send/recv to itself: out of memory");
    goto out;
  }
  if (weft_dev_enter(d->device, &saved) != 0) {
    rc = weft_set_error(WEFT_ERR_SYSTEM, "cannot make GPU %d current", d->device);
    goto out;
  }
  rc = check_buffers(c, tasks, ntasks);
  weft_dev_leave(d->device, saved);
  if (rc == WEFT_SUCCESS) rc = weft_dev_self_pairs(c->rank, tasks, ntasks, pair, &nself);
  for (int i = 0; i < ntasks && rc == WEFT_SUCCESS; i++)
    if (!weft_dev_is_self(c->rank, &tasks[i])) rest[nrest++] = tasks[i];
  if (rc == WEFT_SUCCESS && nrest) rc = launch(c, rest, nrest, stream, seq);
  if (rc != WEFT_SUCCESS) goto out;
  if (weft_dev_enter(d->device, &saved) != 0) {
    rc = weft_set_error(WEFT_ERR_SYSTEM, "cannot make GPU %d current", d->device);
    goto out;
  }
  for (int i = 0; i < ntasks && rc == WEFT_SUCCESS; i++) {
    if (pair[i] < 0) continue;
    size_t bytes = tasks[i].args.count * weft_dtype_size(tasks[i].dtype);
    cudaError_t e = bytes ? cudaMemcpyAsync(tasks[i].recvbuf, tasks[pair[i]].sendbuf, bytes,
                                            cudaMemcpyDeviceToDevice, (cudaStream_t)(void *)stream)
                          : cudaSuccess;
    if (e != cudaSuccess)
      rc = weft_set_error(WEFT_ERR_SYSTEM, "copy of a send to itself failed: %s",
                          cudaGetErrorString(e));
  }
  weft_dev_leave(d->device, saved);
out:
  free(pair);
  free(rest);
  return rc;
}

/* Past 8 ranks a message to a rank beyond the ring's neighbours is refused, but its other end
 * may be a neighbour's message, which that rank launches: failing the communicator aborts
 * that end too, instead of leaving it waiting, or its chunk unread under the next message. */
static weft_result_t refuse_far(weft_comm_t c, const weft_task_t *tasks, int ntasks, uint64_t seq) {
  const weft_dev_planner_t *p = &dev_of(c)->plan;
  for (int i = 0; i < ntasks; i++) {
    weft_coll_t k = tasks[i].args.coll;
    weft_result_t rc = k == WEFT_COLL_SEND || k == WEFT_COLL_RECV
                           ? weft_dev_plan_reaches(p, &tasks[i])
                           : WEFT_SUCCESS;
    if (rc == WEFT_SUCCESS) continue;
    char msg[768];
    snprintf(msg, sizeof msg,
             "%s; the communicator fails, since that message's other end may "
             "have gone ahead",
             weft_thread_error());
    weft_comm_fail(c, rc, msg, seq);
    return weft_set_error(rc, "%s", msg);
  }
  return WEFT_SUCCESS;
}

weft_result_t weft_dev_submit(weft_comm_t c, weft_task_t *tasks, int ntasks, weft_stream_t stream) {
  weft_dev_poll_error(c); /* the heartbeat thread watches the rest */
  pthread_mutex_lock(&c->mu);
  weft_result_t rc = c->async_error;
  uint64_t seq = ++c->seq;
  pthread_mutex_unlock(&c->mu);
  if (rc != WEFT_SUCCESS) return weft_set_error(rc, "communicator failed earlier: %s", c->error);
  if (atomic_load(&c->aborted)) return weft_set_error(WEFT_ERR_ABORTED, "communicator was aborted");
  CHECK(refuse_far(c, tasks, ntasks, seq));
  for (int i = 0; i < ntasks; i++)
    if (weft_dev_is_self(c->rank, &tasks[i]))
      return launch_with_self(c, tasks, ntasks, stream, seq);
  return launch(c, tasks, ntasks, stream, seq);
}
