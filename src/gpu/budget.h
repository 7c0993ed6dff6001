/* The block budget of ranks that share a GPU: how many blocks one rank's waiting kernels may
 * hold at once, so that the kernels of every rank on the GPU fit on it together and leave room
 * for the application's. Pure: share.c feeds it what CUDA and the sharers' registry report,
 * tests/unit/test_budget.c feeds it numbers. */
#ifndef WEFT_BUDGET_H
#define WEFT_BUDGET_H

typedef struct {
  int sms_total;           /* SMs of the GPU */
  int sms_usable;          /* SMs this process may use (an MPS limit), at most sms_total */
  int sharers;             /* ranks using the GPU at once, this communicator's and others' */
  int percent;             /* WEFT_SHARED_SM_PERCENT: what all sharers' kernels may hold */
  int occ_general, occ_ll; /* blocks of each kernel one SM keeps resident (CUDA's occupancy) */
  int nranks;              /* ranks of the communicator */
} weft_dev_share_in_t;

typedef struct {
  int sharers; /* 1: not shared, and the fields below are 0 (no budget) */
  int sms;     /* SMs' worth one rank's kernels may hold */
  int general; /* blocks of one launch of the general kernel */
  int ll;      /* blocks of one launch of the low-latency kernel */
  int need;    /* fewest blocks the general kernel can work with: one send and one receive
                  per peer in a launch */
} weft_dev_budget_t;

/* Fills *out; returns 0, or -1 where the budget holds fewer blocks than the kernels need (out
 * then says how many it holds and needs). sms_usable counts as the whole pool even where MPS
 * may give each process other SMs: CUDA does not say which SMs a limited client gets, so the
 * clients may all draw on the same ones. */
int weft_dev_budget(const weft_dev_share_in_t *in, weft_dev_budget_t *out);

#endif
