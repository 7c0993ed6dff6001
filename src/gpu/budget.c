/* The block budget of ranks sharing a GPU (budget.h). A waiting block holds its SM's share
 * until its peers write; when the waiting blocks of every rank on the GPU cannot all be
 * resident, a rank whose blocks never start leaves the others waiting forever. The budget
 * gives each rank an equal part of a fixed share of the SMs. */
#include "budget.h"

#include <string.h>

#include "slots.h"

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

/* Ranks rank r's GPU serves, and (ours) how many of them are of this communicator. */
static int sharers_of(const weft_dev_share_card_t *cards, int nranks, int r, int *ours) {
  int n = 0, most = 1;
  for (int p = 0; p < nranks; p++) {
    if (cards[p].host != cards[r].host ||
        strncmp(cards[p].bus, cards[r].bus, sizeof cards[r].bus) != 0)
      continue;
    n++;
    if (cards[p].listed > most) most = cards[p].listed;
    if (cards[p].asked > most) most = cards[p].asked;
  }
  *ours = n;
  return n > most ? n : most;
}

int weft_dev_budget_agree(const weft_dev_share_card_t *cards, int nranks, weft_dev_budget_t *out,
                          int *bad, int *ours) {
  weft_dev_budget_t all = {.sharers = 1};
  *bad = -1;
  for (int r = 0; r < nranks && nranks > 1; r++) {
    weft_dev_slots_t slots; /* a send and a receive per peer its kernels reach */
    weft_dev_slots_make(r, nranks, &slots);
    weft_dev_share_in_t in = {.sms_total = cards[r].sms,
                              .sms_usable = cards[r].usable,
                              .sharers = sharers_of(cards, nranks, r, ours),
                              .percent = cards[r].percent,
                              .occ_general = cards[r].occ,
                              .occ_ll = cards[r].occ_ll,
                              .nranks = slots.nslots};
    weft_dev_budget_t b;
    if (weft_dev_budget(&in, &b) != 0) {
      *bad = r;
      *out = b;
      return -1;
    }
    if (b.sharers == 1) continue;
    if (all.sharers == 1 || b.sms < all.sms) all.sms = b.sms;
    if (all.sharers == 1 || b.general < all.general) all.general = b.general;
    if (all.sharers == 1 || b.ll < all.ll) all.ll = b.ll;
    if (b.sharers > all.sharers) all.sharers = b.sharers;
    all.need = b.need;
  }
  *out = all;
  return 0;
}
