/* Where the example GPT keeps its activations (gpt.c lays them out, gpt_pass.c runs the
 * passes over them): per layer, then the head's arrays. Private to examples/common. */
#ifndef WEFT_EXAMPLES_GPT_ACT_H
#define WEFT_EXAMPLES_GPT_ACT_H

#include "gpt.h"

/* Activations of one forward: per layer, then the head. Offsets in floats from m->act. X1
 * and X2 are the gathered inputs of the column-parallel products (sequence parallel only);
 * FULL the gathered last residual, DFULL its gradient; PART the row-parallel products'
 * partial sums, and in the backward the gathered output gradients. G* and R* are the
 * mixture of experts' (moe_act_t), the head's M* its backward scratch (moe_scratch_t). */
enum {
  A_LN1,
  A_LN1M,
  A_LN1R,
  A_X1,
  A_QKV,
  A_ATTY,
  A_ATT,
  A_ATTP,
  A_RES2,
  A_LN2,
  A_LN2M,
  A_LN2R,
  A_X2,
  A_FCH,
  A_FCG,
  A_GPROB,
  A_GW,
  A_GF,
  A_RX,
  A_RW,
  A_RH,
  A_RG,
  A_RY,
  A_FCP,
  A_RES3,
  A_NLAYER
};
enum {
  H_ENC,
  H_FULL,
  H_LNF,
  H_LNFM,
  H_LNFR,
  H_LOGITS,
  H_PROBS,
  H_LOSSES,
  H_DRES,
  H_DFULL,
  H_DLN,
  H_PART,
  H_DQKV,
  H_DATTY,
  H_DFCH,
  H_DFCG,
  H_DLOGITS,
  H_SCRATCH,
  H_MDY,
  H_MDX,
  H_MGR,
  H_MSLOT,
  H_MSLOTS,
  H_MDP,
  H_MY,
  H_MYX,
  H_N
};

/* Activation a of layer l (l = c.layers: the head's array a). */
float *gpt_act(const gpt_t *m, int l, int a);
/* Rows of the norms and residuals: this rank's share of N with sequence parallelism. */
int gpt_rows_here(const gpt_t *m, int N);

#endif
