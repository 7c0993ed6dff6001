/* How a rank of a host communicator learns what it receives in a batch: how many tokens
 * each rank sends it and those tokens' ids, through weft's own alltoall and alltoallv.
 * (Device communicators route on the GPU: device_layout.c.) */
#include <stdlib.h>
#include <string.h>

#include "checked.h"
#include "comm.h"
#include "err.h"
#include "moe.h"

weft_result_t weft_moe_exchange(weft_moe_t m, weft_moe_plan_t *p, const char *fn) {
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
