/* How a rank learns what it receives in a batch: how many tokens each rank sends it and
 * those tokens' ids. Host communicators exchange them with weft's own alltoall and
 * alltoallv; device communicators take the bootstrap ring (their collectives want device
 * buffers, and the ids are on the host by then), each rank reading its share of all ids. */
#include <stdlib.h>
#include <string.h>

#include "bootstrap.h"
#include "checked.h"
#include "comm.h"
#include "err.h"
#include "moe.h"

static weft_result_t by_collectives(weft_moe_t m, weft_moe_plan_t *p, const char *fn) {
  size_t n = (size_t)m->nranks, k = (size_t)p->k;
  p->recv_tok = calloc(n, sizeof *p->recv_tok);
  size_t *sc = calloc(4 * n, sizeof *sc), *sd = sc + n, *rc_ = sc + 2 * n, *rd = sc + 3 * n;
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  if (!p->recv_tok || !sc) v.code = MOE_NO_MEM;
  weft_result_t rc = weft_moe_agree(m, fn, v);
  if (rc == WEFT_SUCCESS) /* size_t counts as u64: weft_dtype has no size_t */
    rc = weft_alltoall(p->send_tok, p->recv_tok, 1, WEFT_U64, m->comm, NULL);
  if (rc == WEFT_SUCCESS) {
    v.code = weft_moe_plan_recv_alloc(p) ? MOE_NO_MEM : MOE_OK;
    rc = weft_moe_agree(m, fn, v);
  }
  if (rc == WEFT_SUCCESS) {
    for (size_t r = 0; r < n; r++) /* ids per entry k: extents checked in recv_alloc */
      sc[r] = p->send_tok[r] * k, sd[r] = p->send_off[r] * k, rc_[r] = p->recv_tok[r] * k,
      rd[r] = p->recv_off[r] * k;
    rc = weft_alltoallv(p->send_ids, sc, sd, p->recv_ids, rc_, rd, WEFT_I32, m->comm, NULL);
  }
  free(sc);
  return rc;
}

/* Every rank's token count, then every rank's ids padded to the longest; a rank keeps the
 * rows that choose one of its experts, in source and token order (what an alltoallv of the
 * send side would have delivered). */
static weft_result_t by_ring(weft_moe_t m, weft_moe_plan_t *p, const void *ids, const char *fn) {
  int n = m->nranks;
  size_t k = (size_t)p->k, most = 0, cells = 0, bytes = 0;
  int64_t *tok = calloc((size_t)n, sizeof *tok);
  int32_t *all = NULL;
  weft_moe_verdict_t v = {MOE_OK, 0, 0, 0};
  if (!tok) v.code = MOE_NO_MEM;
  weft_result_t rc = weft_moe_agree(m, fn, v);
  if (rc != WEFT_SUCCESS) goto out;
  tok[m->rank] = (int64_t)p->tokens;
  CHECK_GOTO(weft_bootstrap_allgather(m->comm->boot, tok, sizeof *tok), rc, out);
  for (int s = 0; s < n; s++)
    most = (size_t)tok[s] > most ? (size_t)tok[s] : most;
  /* every rank computes the same size from the same counts */
  if (!weft_mul_fits(most ? most : 1, k, &cells) ||
      !weft_mul_fits(cells, (size_t)n * sizeof *all, &bytes) || !(all = malloc(bytes)))
    v.code = MOE_NO_MEM;
  p->recv_tok = calloc((size_t)n, sizeof *p->recv_tok);
  if (!p->recv_tok) v.code = MOE_NO_MEM;
  CHECK_GOTO(weft_moe_agree(m, fn, v), rc, out);
  int32_t *mine = all + (size_t)m->rank * cells;
  for (size_t i = 0; i < p->tokens * k; i++) /* ids were checked to be in [-1, experts) */
    mine[i] = (int32_t)weft_moe_id_at(ids, m->cfg.index_type, i);
  CHECK_GOTO(weft_bootstrap_allgather(m->comm->boot, all, cells * sizeof *all), rc, out);
  int64_t first = (int64_t)m->rank * m->local, last = first + m->local;
  for (int pass = 0; pass < 2; pass++) {
    size_t at = 0;
    for (int s = 0; s < n; s++)
      for (size_t t = 0; t < (size_t)tok[s]; t++) {
        const int32_t *row = all + (size_t)s * cells + t * k;
        int here = 0;
        for (size_t j = 0; j < k && !here; j++)
          here = row[j] >= first && row[j] < last;
        if (!here) continue;
        if (pass == 0)
          p->recv_tok[s]++;
        else
          memcpy(p->recv_ids + at++ * k, row, k * sizeof *row);
      }
    if (pass == 0) {
      v.code = weft_moe_plan_recv_alloc(p) ? MOE_NO_MEM : MOE_OK;
      CHECK_GOTO(weft_moe_agree(m, fn, v), rc, out);
    }
  }
out:
  free(tok);
  free(all);
  return rc;
}

weft_result_t weft_moe_exchange(weft_moe_t m, weft_moe_plan_t *p, const void *ids, const char *fn) {
  return m->device ? by_ring(m, p, ids, fn) : by_collectives(m, p, fn);
}
