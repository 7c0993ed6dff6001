/* Ranks sharing a GPU, agreed at a device communicator's init: how many ranks each rank's GPU
 * serves (this communicator's, and the processes with a device communicator on it, from the
 * sharers' registry), and from that the block budget every kernel of the communicator keeps
 * (budget.c), the same on every rank. Where a GPU serves one rank, nothing changes. */
#include <cuda.h> /* CUexecAffinityParam, for cuCtxGetExecAffinity through the runtime */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "gpu.h"
#include "param.h"
#include "topo.h"

/* Whether this process's contexts on device are MPS clients (0 where CUDA cannot say). */
int weft_dev_mps(int device) {
  int on = 0;
#if CUDART_VERSION >= 12040
  if (cudaDeviceGetAttribute(&on, cudaDevAttrMpsEnabled, device) != cudaSuccess) {
    (void)cudaGetLastError(); /* an older driver: not known, so warn */
    on = 0;
  }
#else
  (void)device;
#endif
  return on;
}

/* SMs this process may use: where MPS limits its clients (an active thread percentage, from
 * CUDA_MPS_ACTIVE_THREAD_PERCENTAGE or the daemon), CUDA's SM count is already the limited
 * one (8 of an H100's 132 at 3%, measured), and the context's execution affinity says so too. */
static int usable_sms(int sms) {
  int n = sms;
  void *fn = NULL;
  enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
  if (cudaGetDriverEntryPointByVersion("cuCtxGetExecAffinity", &fn, 11040, cudaEnableDefault, &q) ==
          cudaSuccess &&
      q == cudaDriverEntryPointSuccess && fn) {
    CUresult (*get)(CUexecAffinityParam *, CUexecAffinityType) =
        (CUresult(*)(CUexecAffinityParam *, CUexecAffinityType))fn;
    CUexecAffinityParam a;
    memset(&a, 0, sizeof a);
    if (get(&a, CU_EXEC_AFFINITY_TYPE_SM_COUNT) == CUDA_SUCCESS && a.param.smCount.val > 0 &&
        (int)a.param.smCount.val < n)
      n = (int)a.param.smCount.val;
  } else {
    cudaGetLastError();
  }
  return n > 0 ? n : 1;
}

/* This rank's card: its GPU, what it may use, and who else uses it. */
static void fill_card(struct weft_dev *d, weft_dev_share_card_t *me) {
  char name[64];
  memset(me, 0, sizeof *me);
  me->host = weft_topo_host_key();
  if (cudaDeviceGetPCIBusId(me->bus, sizeof me->bus, d->device) != cudaSuccess) {
    cudaGetLastError();
    snprintf(me->bus, sizeof me->bus, "device-%d", d->device);
  }
  weft_sharers_name(name, sizeof name, me->bus);
  if (weft_sharers_join(name, &d->sharers) != WEFT_SUCCESS)
    WEFT_INFO(WEFT_SUB_INIT, "%s: this communicator counts only its own ranks on its GPU",
              weft_thread_error());
  me->listed = d->sharers ? weft_sharers_count(d->sharers) : 1;
  me->asked = (int32_t)weft_param_get_int(WEFT_PARAM_GPU_SHARERS);
  if (cudaDeviceGetAttribute(&me->sms, cudaDevAttrMultiProcessorCount, d->device) != cudaSuccess) {
    cudaGetLastError();
    me->sms = 1;
  }
  me->usable = usable_sms(me->sms);
  me->occ = weft_dev_occupancy();
  me->occ_ll = weft_dev_occupancy_ll();
  me->percent = (int32_t)weft_param_get_int(WEFT_PARAM_SHARED_SM_PERCENT);
}

static weft_result_t refuse(const struct weft_comm *c, const weft_dev_share_card_t *k, int r,
                            int ours, const weft_dev_budget_t *b) {
  return weft_set_error(
      WEFT_ERR_UNSUPPORTED,
      "weft_comm_init: GPU %s serves %d ranks (%d of this communicator, rank %d among them): "
      "their kernels may hold WEFT_SHARED_SM_PERCENT=%d%% of the %d SMs a process may use "
      "there (CUDA's count: MPS's active thread percentage lowers it), %d SMs a rank, room for %d "
      "blocks of weft's general kernel and %d of its low-latency kernel, where a rank of a "
      "communicator of %d ranks needs %d (a send and a receive per peer its kernels reach) and "
      "1; raise CUDA_MPS_ACTIVE_THREAD_PERCENTAGE (or the MPS daemon's "
      "set_default_active_thread_percentage) or WEFT_SHARED_SM_PERCENT, or put fewer ranks on "
      "the GPU",
      k->bus, b->sharers, ours, r, k->percent, k->usable, b->sms, b->general, b->ll, c->nranks,
      b->need);
}

weft_result_t weft_dev_share_agree(struct weft_comm *c, struct weft_dev *d) {
  weft_dev_share_card_t *cards = calloc((size_t)c->nranks, sizeof *cards);
  if (!cards) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_init: out of memory");
  fill_card(d, &cards[c->rank]);
  weft_result_t rc = weft_bootstrap_allgather(c->boot, cards, sizeof *cards);
  weft_dev_budget_t b;
  int bad = -1, ours = 0;
  if (rc == WEFT_SUCCESS && weft_dev_budget_agree(cards, c->nranks, &b, &bad, &ours) != 0)
    rc = refuse(c, &cards[bad], bad, ours, &b);
  if (rc == WEFT_SUCCESS) d->budget = b;
  free(cards);
  return rc;
}

void weft_dev_budget_apply(struct weft_dev *d) {
  const weft_dev_budget_t *b = &d->budget;
  d->ll_channels = WEFT_DEV_LL_CHANNELS;
  d->plan.max_blocks = 0;
  if (b->sharers < 2) return;
  /* Staging is sized for max_channels: a budget of fewer blocks holds less memory too. Split
   * roles would make a channel's blocks wait for each other, and the 128-byte kernel and the
   * copy engines launch a fixed number of blocks (and a shared GPU does not promise the
   * former's 128-byte stores land whole). */
  if (d->plan.max_channels > b->general) d->plan.max_channels = b->general;
  d->plan.max_blocks = b->general;
  d->plan.split = 0;
  if (d->direct_channels > b->general) d->direct_channels = b->general;
  if (d->ll_channels > b->ll) d->ll_channels = b->ll;
  d->ll128_max[0] = d->ll128_max[1] = 0;
}

void weft_dev_budget_log(const struct weft_comm *c, const struct weft_dev *d) {
  const weft_dev_budget_t *b = &d->budget;
  if (b->sharers < 2)
    WEFT_INFO(WEFT_SUB_INIT,
              "rank %d: %s: no block budget (a collective on up to %d channels, %s; a message "
              "on up to %d; the low-latency kernel on up to %d blocks, to %llu bytes per peer; "
              "the 128-byte one to %llu)",
              c->rank,
              c->nranks > 1 ? "its GPU serves this rank alone"
                            : "a communicator of one rank launches no kernel of its own",
              d->plan.max_channels, d->plan.split ? "split roles" : "one role",
              weft_dev_plan_p2p_channels(&d->plan), d->ll_channels,
              (unsigned long long)d->ll_lim[1], (unsigned long long)d->ll128_max[1]);
  else
    WEFT_INFO(WEFT_SUB_INIT,
              "rank %d: its GPU serves %d ranks (on the GPU that serves most): each rank's "
              "kernels hold at most %d SMs' worth, %d blocks of a general kernel launch (a "
              "collective on up to %d channels, one role; a message on up to %d; collectives "
              "and messages in launches apart) and %d of the low-latency kernel (to %llu bytes "
              "per peer); no 128-byte kernel, no copy engines",
              c->rank, b->sharers, b->sms, b->general, d->plan.max_channels,
              weft_dev_plan_p2p_channels(&d->plan), d->ll_channels,
              (unsigned long long)d->ll_lim[1]);
}
