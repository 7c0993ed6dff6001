/* The block budget of ranks that share a GPU: how many blocks one rank's waiting kernels may
 * hold at once, so that the kernels of every rank on the GPU fit on it together and leave room
 * for the application's. Pure: share.c feeds it what CUDA and the sharers' registry report,
 * tests/unit/test_budget.c feeds it numbers. */
#ifndef WEFT_BUDGET_H
#define WEFT_BUDGET_H

#include <stdint.h>

typedef struct {
  int sms_total;           /* SMs of the GPU */
  int sms_usable;          /* SMs this process may use (an MPS limit), at most sms_total */
  int sharers;             /* ranks using the GPU at once, this communicator's and others' */
  int percent;             /* WEFT_SHARED_SM_PERCENT: what all sharers' kernels may hold */
  int occ_general, occ_ll; /* blocks of each kernel one SM keeps resident (CUDA's occupancy) */
  int nranks;              /* ranks its kernels reach, itself included (slots.h's nslots) */
} weft_dev_share_in_t;

typedef struct {
  int sharers; /* 1: not shared, and the fields below are 0 (no budget) */
  int sms;     /* SMs' worth one rank's kernels may hold */
  int general; /* blocks of one launch of the general kernel */
  int ll;      /* blocks of one launch of the low-latency kernel */
  int need;    /* fewest blocks the general kernel can work with: one send and one receive
                  per peer in a launch */
} weft_dev_budget_t;

/* What each rank of a device communicator tells the others at init (exchanged whole). */
typedef struct {
  char bus[32];          /* its GPU's PCI bus id */
  int32_t listed;        /* processes holding a device communicator on it (sharers.h) */
  int32_t asked;         /* WEFT_GPU_SHARERS */
  int32_t sms, usable;   /* the GPU's SMs, and those this process may use */
  int32_t occ, occ_ll;   /* blocks an SM keeps of the general and the low-latency kernel */
  int32_t percent, pad_; /* WEFT_SHARED_SM_PERCENT (agreed already) */
  uint64_t host;         /* its host's key: equal bus ids on two hosts are two GPUs */
} weft_dev_share_card_t;

/* Fills *out; returns 0, or -1 where the budget holds fewer blocks than the kernels need (out
 * then says how many it holds and needs). sms_usable counts as the whole pool even where MPS
 * may give each process other SMs: CUDA does not say which SMs a limited client gets, so the
 * clients may all draw on the same ones. */
int weft_dev_budget(const weft_dev_share_in_t *in, weft_dev_budget_t *out);

/* Every rank's cards to the communicator's one budget: a rank's GPU serves the most that any
 * rank on it counts (its ranks here, the registry's, WEFT_GPU_SHARERS); the budget is the
 * smallest of the ranks' whose GPU is shared (their kernels must agree on channels), and none
 * where no GPU is, or on one rank (which launches no kernel). Returns -1 where some rank's
 * budget cannot hold the kernels: *bad is that rank, *ours its communicator's ranks on its
 * GPU, and *out its budget. */
int weft_dev_budget_agree(const weft_dev_share_card_t *cards, int nranks, weft_dev_budget_t *out,
                          int *bad, int *ours);

#endif
