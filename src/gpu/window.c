/* Symmetric windows of device communicators: every rank registers a buffer, every rank maps
 * every peer's (a CUDA IPC handle of its allocation, or the pointer itself within one
 * process). An allgather or alltoall whose recvbuf lies in a window is written straight into
 * the peers' recvbufs: by the kernels (weft_dev_item_t.direct), or, from WEFT_CE_MIN_BYTES
 * per block, by the copy engines between two barrier kernels: the first lets no copy land
 * before the peer is done with its buffer, the second lets no rank go on before every copy
 * into it has landed. */
#include "window.h"

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "err.h"
#include "gpu.h"

#define WEFT_WINDOW_PAGE ((uint64_t)2 << 20)

struct weft_window {
  struct weft_window *next;
  char *buf;
  size_t bytes;
  uint64_t serial; /* registrations of the comm through this one */
  int pages; /* every rank's allocation is whole 2 MiB pages: copy engines write into it fast */
  char *peer[WEFT_DEV_MAX_RANKS];   /* every rank's buffer as mapped here */
  char *opened[WEFT_DEV_MAX_RANKS]; /* IPC mappings (of the allocations) to close */
};

struct weft_winset {
  struct weft_window *head;
  cudaStream_t side; /* the own block's local copy, beside the peers' */
  cudaEvent_t fork, join;
  uint64_t registered; /* the same on every rank: registration is collective */
  int logged, logged_direct, logged_pages, logged_split;
};

typedef struct {
  cudaIpcMemHandle_t handle;
  uint64_t base, offset, bytes, alloc;
  int32_t pid, ok;
} wcard_t;

/* The allocation holding p (cuMemGetAddressRange, reached through the runtime so that weft
 * needs no link to the driver library). */
typedef int (*range_fn_t)(unsigned long long *base, size_t *size, unsigned long long ptr);
static weft_result_t alloc_range(const void *p, char **base, size_t *size) {
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault, &q) !=
          cudaSuccess ||
      !fn || q != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return weft_set_error(WEFT_ERR_UNSUPPORTED, "weft_window_register: the CUDA driver offers "
                                                "no cuMemGetAddressRange");
  }
  unsigned long long b = 0;
  if (((range_fn_t)fn)(&b, size, (unsigned long long)(uintptr_t)p) != 0)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_window_register: %p is not device memory", p);
  *base = (char *)(uintptr_t)b;
  return WEFT_SUCCESS;
}

static weft_result_t winset(weft_comm_t c) {
  if (dev_of(c)->wins) return WEFT_SUCCESS;
  struct weft_winset *ws = calloc(1, sizeof *ws);
  if (!ws) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_window_register: out of memory");
  if (cudaStreamCreateWithFlags(&ws->side, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&ws->fork, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&ws->join, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    if (ws->side) cudaStreamDestroy(ws->side);
    if (ws->fork) cudaEventDestroy(ws->fork);
    free(ws);
    return weft_set_error(WEFT_ERR_SYSTEM, "weft_window_register: no CUDA stream or event");
  }
  dev_of(c)->wins = ws;
  return WEFT_SUCCESS;
}

static void unmap_window(struct weft_window *w) {
  for (int p = 0; p < WEFT_DEV_MAX_RANKS; p++)
    if (w->opened[p]) cudaIpcCloseMemHandle(w->opened[p]);
  free(w);
}

/* Maps every peer's buffer; 0 (with the error set) where one does not open. */
static int map_window(weft_comm_t c, const weft_regions_t *rg, const wcard_t *cards,
                      struct weft_window *w) {
  /* a rank is its slot here: windows exist only up to WEFT_DEV_MAX_RANKS (slots.h) */
  for (int p = 0; p < c->nranks; p++) {
    if (p == c->rank) {
      w->peer[p] = w->buf;
    } else if (weft_regions_local_device(rg, p) >=
               0) { /* same process: its pointer, peer access is on */
      w->peer[p] = (char *)(uintptr_t)(cards[p].base + cards[p].offset);
    } else {
      void *ptr = NULL;
      cudaError_t e = cudaIpcOpenMemHandle(&ptr, cards[p].handle, cudaIpcMemLazyEnablePeerAccess);
      if (e != cudaSuccess) {
        cudaGetLastError();
        weft_set_error(WEFT_ERR_SYSTEM,
                       "weft_window_register: rank %d cannot map rank %d's buffer: %s", c->rank, p,
                       cudaGetErrorString(e));
        return 0;
      }
      w->opened[p] = ptr;
      w->peer[p] = (char *)ptr + cards[p].offset;
    }
  }
  return 1;
}

weft_result_t weft_window_register(weft_comm_t c, void *buf, size_t bytes, weft_window_t *win) {
  if (win) *win = NULL;
  if (!c || !win)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_window_register: NULL argument");
  const weft_regions_t *rg = c->engine == &weft_engine_gpu ? dev_of(c)->regions : NULL;
  if (!rg)
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "weft_window_register: windows need a device communicator");
  if (weft_regions_host_staged(rg) || weft_regions_spans_hosts(rg))
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "weft_window_register: this communicator stages through host memory "
                          "(its GPUs cannot map each other, or it spans hosts), so it has no "
                          "windows");
  if (!dev_of(c)->plan.slots.identity)
    return weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "weft_window_register: windows need every rank to map every other; "
                          "this communicator has %d ranks, more than the %d that do",
                          c->nranks, WEFT_DEV_MAX_RANKS);
  if (!buf || !bytes)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_window_register: buffer %p of %zu bytes", buf,
                          bytes);
  int saved = -1;
  if (cudaGetDevice(&saved) != cudaSuccess || cudaSetDevice(weft_regions_device(rg)) != cudaSuccess)
    return weft_set_error(WEFT_ERR_SYSTEM, "weft_window_register: cannot make GPU %d current",
                          weft_regions_device(rg));
  weft_result_t rc = WEFT_SUCCESS;
  struct weft_window *w = NULL;
  wcard_t *cards = calloc((size_t)c->nranks, sizeof *cards);
  int32_t *ok = calloc((size_t)c->nranks, sizeof *ok);
  if (!cards || !ok) ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "weft_window_register: out of memory");
  /* this rank's card: ok stays 0 (with the reason kept) where its buffer cannot be shared */
  wcard_t *me = &cards[c->rank];
  char *base = NULL;
  size_t size = 0;
  struct cudaPointerAttributes a;
  weft_result_t mine = WEFT_SUCCESS;
  char why[256] = "";
  if (cudaPointerGetAttributes(&a, buf) != cudaSuccess || a.type != cudaMemoryTypeDevice ||
      a.device != weft_regions_device(rg)) {
    cudaGetLastError();
    mine = weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_window_register: %p is not device memory of this communicator's "
                          "GPU %d",
                          buf, weft_regions_device(rg));
  } else if ((mine = alloc_range(buf, &base, &size)) == WEFT_SUCCESS &&
             (char *)buf + bytes > base + size) {
    mine = weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_window_register: %zu bytes from %p pass the end of its allocation",
                          bytes, buf);
  } else if (mine == WEFT_SUCCESS && cudaIpcGetMemHandle(&me->handle, base) != cudaSuccess) {
    cudaGetLastError();
    mine = weft_set_error(WEFT_ERR_UNSUPPORTED,
                          "weft_window_register: %p cannot be shared with other processes (memory "
                          "from cudaMalloc can; pools and virtual memory cannot)",
                          buf);
  }
  if (mine != WEFT_SUCCESS) snprintf(why, sizeof why, "%s", weft_thread_error());
  me->ok = mine == WEFT_SUCCESS;
  me->base = (uint64_t)(uintptr_t)base;
  me->offset = (uint64_t)((char *)buf - base);
  me->bytes = bytes;
  me->alloc = (uint64_t)size;
  me->pid = (int32_t)getpid();
  CHECK_GOTO(weft_bootstrap_allgather(c->boot, cards, sizeof *cards), rc, out);
  for (int p = 0; p < c->nranks; p++) /* a rank writes at its own offset into every peer's */
    if (cards[p].ok && cards[p].bytes != bytes)
      ERR_GOTO(rc, out, WEFT_ERR_INVALID_ARG,
               "weft_window_register: rank %d registers %llu bytes and rank %d %zu: windows are "
               "the same size on every rank",
               p, (unsigned long long)cards[p].bytes, c->rank, bytes);
  for (int p = 0; p < c->nranks; p++)
    if (!cards[p].ok)
      ERR_GOTO(rc, out, mine != WEFT_SUCCESS ? mine : WEFT_ERR_INVALID_ARG, "%s",
               mine != WEFT_SUCCESS ? why
                                    : "weft_window_register: another rank's buffer was refused");
  CHECK_GOTO(winset(c), rc, out);
  w = calloc(1, sizeof *w);
  if (!w) ERR_GOTO(rc, out, WEFT_ERR_NO_MEMORY, "weft_window_register: out of memory");
  w->buf = buf;
  w->bytes = bytes;
  /* Copy-engine writes into a peer's IPC mapping of an allocation that is not whole 2 MiB
   * pages ran at 272-296 GB/s each way against 392 (SM writes: 365 either way;
   * bench/results/2026-11-30-h200x2-ipc-probe.txt). */
  w->pages = 1;
  for (int p = 0; p < c->nranks; p++)
    w->pages &= cards[p].alloc % WEFT_WINDOW_PAGE == 0;
  ok[c->rank] = map_window(c, rg, cards, w);
  if (!ok[c->rank]) snprintf(why, sizeof why, "%s", weft_thread_error());
  CHECK_GOTO(weft_bootstrap_allgather(c->boot, ok, sizeof *ok), rc, out);
  for (int p = 0; p < c->nranks; p++)
    if (!ok[p])
      ERR_GOTO(rc, out, WEFT_ERR_SYSTEM, "%s",
               !ok[c->rank] ? why : "weft_window_register: another rank could not map a buffer");
  w->serial = ++dev_of(c)->wins->registered;
  w->next = dev_of(c)->wins->head;
  dev_of(c)->wins->head = w;
  *win = w;
  w = NULL;
  WEFT_INFO(WEFT_SUB_INIT, "rank %d: window of %zu bytes at %p registered", c->rank, bytes, buf);
out:
  if (w) unmap_window(w);
  free(cards);
  free(ok);
  if (saved >= 0) cudaSetDevice(saved);
  return rc;
}

char *weft_window_peer(weft_window_t w, int r) {
  return r >= 0 && r < WEFT_DEV_MAX_RANKS ? w->peer[r] : NULL;
}

weft_result_t weft_window_deregister(weft_comm_t c, weft_window_t win) {
  if (!c || !win)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_window_deregister: NULL argument");
  struct weft_winset *ws = c->engine == &weft_engine_gpu ? dev_of(c)->wins : NULL;
  struct weft_window **at = ws ? &ws->head : NULL;
  while (at && *at && *at != win)
    at = &(*at)->next;
  if (!at || !*at)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_window_deregister: %p is not a window of this communicator",
                          (void *)win);
  *at = win->next;
  /* no copy of ours into a peer may still run when its owner frees the buffer */
  weft_dev_idle(c);
  cudaStreamSynchronize(ws->side);
  unmap_window(win);
  return weft_bootstrap_barrier(c->boot);
}

void weft_window_free_all(weft_comm_t c) {
  struct weft_winset *ws = dev_of(c)->wins;
  if (!ws) return;
  cudaStreamSynchronize(ws->side);
  while (ws->head) {
    struct weft_window *w = ws->head;
    ws->head = w->next;
    unmap_window(w);
  }
  cudaStreamDestroy(ws->side);
  cudaEventDestroy(ws->fork);
  cudaEventDestroy(ws->join);
  free(ws);
  dev_of(c)->wins = NULL;
}

/* The window holding [p, p + bytes), or NULL. */
static struct weft_window *find(const struct weft_winset *ws, const void *p, size_t bytes,
                                size_t *off) {
  for (struct weft_window *w = ws->head; w; w = w->next)
    if (weft_window_holds(w->buf, w->bytes, p, bytes, off)) return w;
  return NULL;
}

/* Fills a table of where [p, p + bytes) lies on every rank; the window, or NULL where none
 * holds it. */
static const struct weft_window *direct_table(const struct weft_winset *ws, const void *p,
                                              size_t bytes, int n, char **table, uint64_t *where) {
  size_t off = 0;
  const struct weft_window *w = find(ws, p, bytes, &off);
  if (!w) return NULL;
  for (int r = 0; r < n; r++)
    table[r] = w->peer[r] + off;
  *where = w->serial << 48 | (uint64_t)off;
  return w;
}

int weft_window_direct(struct weft_comm *c, const weft_task_t *t, weft_dev_launch_t *L) {
  struct weft_winset *ws = dev_of(c)->wins;
  if (!ws || !ws->head) return 0;
  /* NVLink reads fell behind the staged writes past the cap (on 128 channels: 256 MiB
   * allreduce 819 us against 803, bench/results/2026-11-30-h200x2-tuning-16.txt) */
  int needs =
      weft_dev_direct_needs(t, c->nranks, dev_of(c)->direct_min, dev_of(c)->direct_read_max);
  if (!needs) return 0;
  weft_coll_t k = t->args.coll;
  size_t n = (size_t)c->nranks, blk = t->args.count * weft_dtype_size(t->dtype);
  /* a block per rank on both sides, but for allreduce's whole buffers */
  size_t span = k == WEFT_COLL_ALLREDUCE ? blk : blk * n;
  L->direct_where = L->direct_where_send = 0;
  if (k == WEFT_COLL_REDUCE_SCATTER) { /* its table holds the peers' sendbufs */
    if (!direct_table(ws, t->sendbuf, span, (int)n, L->direct, &L->direct_where)) return 0;
  } else {
    if (!direct_table(ws, t->recvbuf, span, (int)n, L->direct, &L->direct_where)) return 0;
    if ((needs & WEFT_DEV_DIRECT_SEND) &&
        !direct_table(ws, t->sendbuf, span, (int)n, L->direct_send, &L->direct_where_send))
      return 0;
  }
  L->direct_bytes = (uint64_t)span;
  if (!ws->logged_direct) {
    ws->logged_direct = 1;
    WEFT_INFO(WEFT_SUB_COLL,
              "rank %d: %s of %zu bytes per rank straight into (or from) the peers' windows",
              c->rank, weft_coll_name(k), blk);
  }
  return 1;
}

/* Where the copy engines take t (an allgather or alltoall; min is dev_of(c)->ce_min): a
 * window of whole pages on every rank, from min bytes per block, by the kernels' rule for writing
 * into the peers (an in-place alltoall stays staged); peer gets the peers' recvbufs. */
static const struct weft_window *ce_window(weft_comm_t c, const weft_task_t *t, uint64_t min,
                                           char **peer) {
  struct weft_winset *ws = dev_of(c)->wins;
  weft_coll_t k = t->args.coll;
  size_t blk = t->args.count * weft_dtype_size(t->dtype);
  if (!weft_dev_direct_needs(t, c->nranks, min, UINT64_MAX)) return NULL;
  uint64_t where = 0;
  const struct weft_window *w =
      direct_table(ws, t->recvbuf, blk * (size_t)c->nranks, c->nranks, peer, &where);
  if (w && !w->pages) {
    if (!ws->logged_pages) {
      ws->logged_pages = 1;
      WEFT_INFO(WEFT_SUB_COLL,
                "rank %d: %s of %zu bytes per rank by the kernels, not the copy engines: some "
                "rank's window lies in an allocation that is not whole 2 MiB pages",
                c->rank, weft_coll_name(k), blk);
    }
    return NULL;
  }
  return w;
}

int weft_window_split_allreduce(weft_comm_t c, const weft_task_t *t, weft_task_t parts[2]) {
  struct weft_winset *ws = dev_of(c)->wins;
  /* every operation on a comm with windows passes here: the threshold is read for allreduce
   * only, and once */
  if (!ws || !ws->head || t->args.coll != WEFT_COLL_ALLREDUCE) return 0;
  uint64_t es = weft_dtype_size(t->dtype), min = dev_of(c)->ce_min,
           seg = weft_dev_ce_split(t, c->nranks, min);
  if (!seg) return 0;
  char *mine = (char *)t->recvbuf + (uint64_t)c->rank * seg * es, *peer[WEFT_DEV_MAX_RANKS];
  weft_task_t ag = *t, rs = *t;
  ag.args.coll = WEFT_COLL_ALLGATHER;
  ag.args.count = seg;
  ag.args.in_place = 1;
  ag.sendbuf = mine;
  ag.algo = WEFT_ALGO_DIRECT;
  ag.owned = NULL;
  if (!ce_window(c, &ag, min, peer)) return 0;
  rs.args.coll = WEFT_COLL_REDUCE_SCATTER;
  rs.args.count = seg;
  rs.args.in_place = t->sendbuf == t->recvbuf; /* then mine is sendbuf + rank * seg */
  rs.recvbuf = mine;
  rs.algo = WEFT_ALGO_DIRECT;
  rs.owned = NULL;
  parts[0] = rs;
  parts[1] = ag;
  if (!ws->logged_split) {
    ws->logged_split = 1;
    WEFT_INFO(WEFT_SUB_COLL,
              "rank %d: allreduce of %llu bytes as a reduce_scatter by the kernels, then an "
              "allgather through the copy engines",
              c->rank, (unsigned long long)(t->args.count * es));
  }
  return 1;
}

weft_result_t weft_window_try(weft_comm_t c, const weft_task_t *t, weft_stream_t stream,
                              int *taken) {
  *taken = 0;
  struct weft_winset *ws = dev_of(c)->wins;
  weft_coll_t k = t->args.coll;
  if (!ws || !ws->head || (k != WEFT_COLL_ALLGATHER && k != WEFT_COLL_ALLTOALL))
    return WEFT_SUCCESS;
  size_t n = (size_t)c->nranks, me = (size_t)c->rank;
  size_t blk = t->args.count * weft_dtype_size(t->dtype);
  const char *send = t->sendbuf;
  char *recv = t->recvbuf, *peer[WEFT_DEV_MAX_RANKS];
  if (!ce_window(c, t, dev_of(c)->ce_min, peer)) return WEFT_SUCCESS;
  *taken = 1;
  cudaStream_t s = (cudaStream_t)(void *)stream;
  CHECK(weft_barrier(c, stream));
  CUDA_CHECK(cudaEventRecord(ws->fork, s), "window: cudaEventRecord");
  CUDA_CHECK(cudaStreamWaitEvent(ws->side, ws->fork, 0), "window: cudaStreamWaitEvent");
  const char *own = k == WEFT_COLL_ALLGATHER ? send : send + me * blk;
  if (own != recv + me * blk)
    CUDA_CHECK(cudaMemcpyAsync(recv + me * blk, own, blk, cudaMemcpyDeviceToDevice, ws->side),
               "window: the own block's copy");
  for (size_t d = 1; d < n; d++) {
    size_t p = (me + d) % n;
    const char *src = k == WEFT_COLL_ALLGATHER ? send : send + p * blk;
    CUDA_CHECK(cudaMemcpyAsync(peer[p] + me * blk, src, blk, cudaMemcpyDeviceToDevice, s),
               "window: a copy into a peer");
  }
  CUDA_CHECK(cudaEventRecord(ws->join, ws->side), "window: cudaEventRecord");
  CUDA_CHECK(cudaStreamWaitEvent(s, ws->join, 0), "window: cudaStreamWaitEvent");
  if (!ws->logged) {
    ws->logged = 1;
    WEFT_INFO(WEFT_SUB_COLL, "rank %d: %s of %zu bytes per rank through the copy engines", c->rank,
              k == WEFT_COLL_ALLGATHER ? "allgather" : "alltoall", blk);
  }
  return weft_barrier(c, stream);
}
