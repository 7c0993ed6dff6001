/* A batch's layout on device communicators: the GPU routes the ids (route.cu) and leaves
 * only the counts in host-mapped memory; one exchange over the bootstrap ring carries every
 * rank's verdict, counts and token count, then each entry's meta (its local expert and index
 * there, its token) travels to other ranks by weft's device alltoallv and the receivers place every
 * choice on the GPU. The call waits for the GPU once, for the counts: the sizes it returns depend
 * on them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "checked.h"
#include "comm.h"
#include "err.h"
#include "moe_dev.h"
#include "moe_kernels.h"

static size_t up256(size_t b) { return (b + 255) / 256 * 256; }

int weft_moe_dev_staged(const size_t *bytes, int n, size_t *out) {
  *out = 0;
  for (int i = 0; i < n; i++) {
    size_t up;
    if (!weft_add_fits(bytes[i], 255, &up) || !weft_add_fits(*out, up / 256 * 256, out)) return 0;
  }
  return 1;
}

void weft_moe_dev_carve(void *block, const size_t *bytes, int n, void **pieces) {
  char *at = block;
  for (int i = 0; i < n; i++)
    pieces[i] = bytes[i] && at ? at : NULL, at = at ? at + up256(bytes[i]) : NULL;
}

static const char *const FN = "weft_moe_layout";

/* e: the CUDA error, or cudaSuccess to take the last one */
static weft_moe_verdict_t failed_with(cudaError_t e) {
  weft_set_error(WEFT_ERR_SYSTEM, "%s: %s", FN,
                 cudaGetErrorString(e != cudaSuccess ? e : cudaGetLastError()));
  return (weft_moe_verdict_t){MOE_FAILED, 0, 0, 0};
}

static weft_moe_verdict_t failed(void) { return failed_with(cudaSuccess); }

/* The send side on the GPU, which writes its counts into rec (this rank's exchange record,
 * host-mapped); the first bad id, if the GPU found one, as the verdict. */
static weft_moe_verdict_t route(weft_moe_handle_t h, moe_dev_t *d, const void *ids, size_t tokens,
                                int64_t *rec, cudaStream_t st) {
  weft_moe_t m = h->moe;
  size_t n = (size_t)m->nranks, k = (size_t)m->cfg.topk, E = (size_t)m->cfg.num_experts;
  size_t w = (size_t)d->width, cells, ent, meta, masks, before, bytes[8], total;
  /* int32 indices and positions: tokens * k must stay below 2^31 */
  int fits = tokens <= INT32_MAX / k && weft_mul_fits(tokens, w, &ent) &&
             weft_mul_fits(ent, WEFT_MOE_K_META(k) * 8, &meta) &&
             weft_mul_fits(tokens, n * 4, &cells) &&
             weft_moe_k_route_scratch(tokens, (int)E, (int)n, &masks, &before);
  if (fits) {
    size_t b[8] = {(E + n + 1) * 8, (n + 1) * 8, cells, ent * 8, ent * 8, meta, masks, before};
    memcpy(bytes, b, sizeof b);
  }
  if (!fits || !weft_moe_dev_staged(bytes, 8, &total))
    return (weft_moe_verdict_t){MOE_TOO_BIG, (int64_t)tokens, 0, 0};
  if (cudaMallocFromPoolAsync(&d->block, total, m->pool, st) != cudaSuccess) {
    d->block = NULL, cudaGetLastError();
    return (weft_moe_verdict_t){MOE_NO_MEM, 0, 0, 0};
  }
  void *p[8];
  weft_moe_dev_carve(d->block, bytes, 8, p);
  weft_moe_k_route_t a = {.ids = ids,
                          .id_bytes = (int)weft_dtype_size(m->cfg.index_type),
                          .k = (int)k,
                          .experts = (int)E,
                          .nranks = (int)n,
                          .local = m->local,
                          .width = d->width,
                          .tokens = tokens,
                          .counts = p[0],
                          .bad = (unsigned long long *)((int64_t *)p[0] + E + n),
                          .send_off = p[1],
                          .pos = p[2],
                          .send_list = p[3],
                          .entries = p[4],
                          .meta = p[5],
                          .mask = p[6],
                          .before = p[7],
                          .host_counts = rec + MOE_ROUTE_HEAD};
  d->send_list = a.send_list, d->entries = a.entries, d->send_meta = a.meta, d->pos = a.pos;
  /* the host waits for the counts (in rec) while the GPU goes on placing the tokens */
  int e = weft_moe_k_route_counts(&a, st);
  if (e == (int)cudaSuccess && cudaEventRecord(d->done, st) != cudaSuccess)
    e = (int)cudaGetLastError();
  if (e == (int)cudaSuccess) e = weft_moe_k_route_place(&a, st);
  if (e != (int)cudaSuccess) { /* a kernel queued before the failure may still write rec */
    cudaStreamSynchronize(st);
    return failed_with((cudaError_t)e);
  }
  if (cudaEventSynchronize(d->done) != cudaSuccess) return failed();
  uint64_t bad = (uint64_t)rec[MOE_ROUTE_HEAD + E + n];
  if (bad == UINT64_MAX) return (weft_moe_verdict_t){MOE_OK, 0, 0, 0};
  /* the GPU names the first bad choice; the host's check says what is wrong with it */
  int64_t row[WEFT_MOE_MAX_TOPK];
  size_t t = bad / k, es = weft_dtype_size(m->cfg.index_type);
  weft_moe_bad_t why = {0};
  if (cudaMemcpyAsync(row, (const char *)ids + t * k * es, k * es, cudaMemcpyDeviceToHost, st) !=
          cudaSuccess ||
      cudaStreamSynchronize(st) != cudaSuccess)
    return failed();
  weft_moe_check_token(row, m->cfg.index_type, 0, (int)k, (int)E, &why);
  return (weft_moe_verdict_t){why.repeated ? MOE_REPEATED_ID : MOE_BAD_ID, (int64_t)t, why.slot,
                              why.id};
}

/* The plan's counts from every rank's record, the receive side's tables on the host (base
 * rows, entry offsets, padding rows: bytes[0]) and its device block (those tables, the
 * received meta, the rows of the choices, the entries' source tokens). */
static weft_moe_verdict_t receive_side(weft_moe_handle_t h, moe_dev_t *d, size_t tokens,
                                       cudaStream_t st, size_t *bytes, void **p) {
  weft_moe_t m = h->moe;
  weft_moe_plan_t *pl = &h->plan;
  size_t n = (size_t)m->nranks, L = (size_t)m->local, k = (size_t)m->cfg.topk;
  const weft_moe_verdict_t too_big = {MOE_TOO_BIG, (int64_t)tokens, 0, 0};
  if (!(d->tables = malloc(n * L * 8))) return (weft_moe_verdict_t){MOE_NO_MEM, 0, 0, 0};
  size_t block = m->cfg.mode == WEFT_MOE_LOW_LATENCY ? m->cfg.max_tokens * n : 0;
  int r = weft_moe_plan_from_counts(
      pl, m->nranks, m->cfg.num_experts, m->cfg.topk, tokens, m->rank, m->routes + MOE_ROUTE_HEAD,
      moe_route_stride(m->cfg.num_experts, m->nranks), m->cfg.align, block, d->tables);
  if (r) return r == -1 ? too_big : (weft_moe_verdict_t){MOE_NO_MEM, 0, 0, 0};
  size_t nr = pl->recv_off[n], npad = 0, total, choices, cells, meta;
  for (size_t l = 0; l < L && !pl->fixed; l++) /* low-latency blocks' unused rows: left alone */
    npad += weft_moe_block_end(pl, (int)l) - (size_t)(pl->offset[l] + pl->count[l]);
  if (!weft_mul_fits(nr, k, &choices) || choices > SIZE_MAX / 8 ||
      !weft_mul_fits(nr, WEFT_MOE_K_META(k) * 8, &meta) ||
      !weft_add_fits(n * L + n + 1 + L, npad, &cells) || cells > SIZE_MAX / 8)
    return too_big;
  bytes[0] = cells * 8, bytes[1] = meta, bytes[2] = choices * 8, bytes[3] = nr * 4;
  if (!weft_moe_dev_staged(bytes, 4, &total)) return too_big;
  uint64_t *tb = realloc(d->tables, bytes[0]);
  if (!tb) return (weft_moe_verdict_t){MOE_NO_MEM, 0, 0, 0};
  d->tables = tb;
  for (size_t s = 0; s <= n; s++)
    tb[n * L + s] = pl->recv_off[s];
  uint64_t *pad = tb + n * L + n + 1;
  for (size_t l = 0, used = 0; l < L && !pl->fixed; l++)
    for (size_t row = (size_t)(pl->offset[l] + pl->count[l]), end = weft_moe_block_end(pl, (int)l);
         row < end; row++)
      pad[used++] = row;
  for (size_t l = 0; l < L; l++) /* the counts, for kernels that must not ask the host */
    pad[npad + l] = (uint64_t)pl->count[l];
  d->npad = npad;
  if (cudaMallocFromPoolAsync(&d->block2, total, m->pool, st) != cudaSuccess) {
    d->block2 = NULL, cudaGetLastError();
    return (weft_moe_verdict_t){MOE_NO_MEM, 0, 0, 0};
  }
  weft_moe_dev_carve(d->block2, bytes, 4, p);
  return (weft_moe_verdict_t){MOE_OK, 0, 0, 0};
}

/* No rank sends an entry to another (every rank sees every rank's counts): the meta
 * exchange is skipped on all ranks alike. */
static int self_only(weft_moe_t m) {
  size_t stride = moe_route_stride(m->cfg.num_experts, m->nranks);
  for (int s = 0; s < m->nranks; s++)
    for (int r = 0; r < m->nranks; r++)
      if (r != s && m->routes[(size_t)s * stride + MOE_ROUTE_HEAD + m->cfg.num_experts + r])
        return 0;
  return 1;
}

weft_result_t weft_moe_dev_layout(weft_moe_t m, weft_moe_handle_t h, const void *ids, size_t tokens,
                                  weft_moe_verdict_t mine, weft_stream_t s) {
  cudaStream_t st = (cudaStream_t)s;
  size_t n = (size_t)m->nranks, L = (size_t)m->local, k = (size_t)m->cfg.topk;
  size_t stride = moe_route_stride(m->cfg.num_experts, m->nranks), bytes[4] = {0};
  int64_t *rec = m->routes + (size_t)m->rank * stride;
  size_t *cnt = calloc(4 * n, sizeof *cnt);
  void *p[4] = {NULL};
  int saved = -1, entered = 0;
  moe_dev_t *d = h ? (h->dev = calloc(1, sizeof *d)) : NULL;
  memset(rec, 0, stride * sizeof *rec);
  if (mine.code == MOE_OK && (!d || !cnt))
    mine.code = MOE_NO_MEM;
  else if (mine.code == MOE_OK && weft_dev_enter(moe_dev(m)->device, &saved))
    mine = failed();
  else if (mine.code == MOE_OK) {
    entered = 1, d->last = st, d->width = (int)(k < n ? k : n);
    if (cudaEventCreateWithFlags(&d->done, cudaEventDisableTiming) != cudaSuccess)
      d->done = NULL, mine = failed();
    else if (moe_dev(m)->gpu_shared && /* device.c waits on it there */
             cudaEventCreateWithFlags(&d->packed, cudaEventDisableTiming) != cudaSuccess)
      d->packed = NULL, mine = failed();
    else
      mine = route(h, d, ids, tokens, rec, st);
  }
  /* one round carries every rank's verdict, counts and tokens */
  memcpy(rec, &mine, sizeof mine);
  rec[MOE_ROUTE_TOKENS(m->cfg.num_experts, m->nranks)] = (int64_t)tokens;
  weft_result_t rc = weft_bootstrap_allgather(m->comm->boot, m->routes, stride * sizeof *rec);
  if (rc == WEFT_SUCCESS) rc = weft_moe_judge(m, FN, m->routes, stride * sizeof *rec);
  if (rc != WEFT_SUCCESS) goto out;
  for (size_t s = 0; s < n; s++) { /* the direct path's rounds (direct.c) */
    int64_t t = m->routes[s * stride + MOE_ROUTE_TOKENS(m->cfg.num_experts, n)];
    d->max_tokens = t > 0 && (uint64_t)t > d->max_tokens ? (uint64_t)t : d->max_tokens;
  }
  /* the receive side, its tables on the GPU: one more round says all ranks got there (and
   * enter the alltoallv) or none did */
  weft_moe_verdict_t v = receive_side(h, d, tokens, st, bytes, p);
  weft_moe_plan_t *pl = &h->plan;
  uint64_t *tables = p[0];
  weft_moe_k_rows_t ra = {0};
  char why[256] = "";
  if (v.code == MOE_OK) {
    d->row_of = p[2], d->tok_of = p[3], d->pad = tables + n * L + n + 1;
    d->recv_off = tables + n * L;
    d->counts = (const int64_t *)(d->pad + d->npad);
    /* a rank's own entries' meta is not sent: rows reads it where route left it */
    int me = m->rank;
    weft_moe_plan_counts(pl, 0, 2 * WEFT_MOE_K_META(k), cnt, cnt + n);
    weft_moe_plan_counts(pl, 1, 2 * WEFT_MOE_K_META(k), cnt + 2 * n, cnt + 3 * n);
    ra = (weft_moe_k_rows_t){.meta = p[1],
                             .own_meta = d->send_meta ? d->send_meta + cnt[n + me] : NULL,
                             .own_lo = pl->recv_off[me],
                             .own_hi = pl->recv_off[me + 1],
                             .choices = (uint64_t)(pl->recv_off[n] * k),
                             .k = (int)k,
                             .nranks = m->nranks,
                             .local = m->local,
                             .recv_off = tables + n * L,
                             .base = tables,
                             .row_of = d->row_of,
                             .tok_of = d->tok_of};
    cnt[me] = cnt[2 * n + me] = 0;
    if (cudaMemcpyAsync(tables, d->tables, bytes[0], cudaMemcpyHostToDevice, st) != cudaSuccess) {
      snprintf(why, sizeof why, "%s: copying the plan to the GPU: %s", FN,
               cudaGetErrorString(cudaGetLastError()));
      v = (weft_moe_verdict_t){MOE_FAILED, 0, 0, 0};
    }
  }
  rc = weft_moe_agree(m, FN, v);
  if (why[0]) rc = weft_set_error(WEFT_ERR_SYSTEM, "%s", why); /* this rank's own failure */
  if (rc != WEFT_SUCCESS) goto out;
  weft_result_t step = WEFT_SUCCESS;
  if (!self_only(m))
    step = weft_alltoallv(d->send_meta, cnt, cnt + n, p[1], cnt + 2 * n, cnt + 3 * n, WEFT_I32,
                          m->comm, s);
  if (step == WEFT_SUCCESS) {
    int e = weft_moe_k_rows(&ra, st);
    if (e != (int)cudaSuccess || cudaEventRecord(d->done, st) != cudaSuccess)
      step = weft_set_error(WEFT_ERR_SYSTEM, "%s: placing the received rows: %s", FN,
                            cudaGetErrorString(e ? (cudaError_t)e : cudaGetLastError()));
  }
  rc = weft_moe_settle(m, FN, step); /* every rank makes the handle, or none does */
out:
  if (entered) weft_dev_leave(moe_dev(m)->device, saved);
  free(cnt);
  return rc;
}
