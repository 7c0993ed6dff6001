/* The block budget of ranks sharing a GPU (budget.h). A waiting block holds its SM's share
 * until its peers write; when the waiting blocks of every rank on the GPU cannot all be
 * resident, a rank whose blocks never start leaves the others waiting forever. The budget
 * gives each rank an equal part of a fixed share of the SMs. */
#include "budget.h"

#include <string.h>

int weft_dev_budget(const weft_dev_share_in_t *in, weft_dev_budget_t *out) {
  memset(out, 0, sizeof *out);
  out->sharers = in->sharers > 1 ? in->sharers : 1;
  if (out->sharers == 1) return 0;
  int usable =
      in->sms_usable > 0 && in->sms_usable < in->sms_total ? in->sms_usable : in->sms_total;
  int pool = (int)((long long)usable * in->percent / 100);
  out->sms = pool / out->sharers;
  out->general = out->sms * (in->occ_general > 0 ? in->occ_general : 1);
  out->ll = out->sms * (in->occ_ll > 0 ? in->occ_ll : 1);
  out->need = in->nranks > 1 ? 2 * (in->nranks - 1) : 1;
  return out->general >= out->need && out->ll >= 1 ? 0 : -1;
}
