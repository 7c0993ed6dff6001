/* Peer slots (slots.h). A ring table puts rank - 1, the rank and rank + 1 in slots 0, 1 and 2
 * on every rank, so a rank is its predecessor's slot 2 and its successor's slot 0; each
 * region stages what its two neighbours send, the predecessor first. */
#include "slots.h"

#include <string.h>

void weft_dev_slots_make(int rank, int nranks, weft_dev_slots_t *s) {
  memset(s, 0, sizeof *s);
  if (nranks <= WEFT_DEV_MAX_RANKS) {
    s->identity = 1;
    s->nslots = (uint8_t)nranks;
    s->self = (uint8_t)rank;
    s->nsrc = (uint8_t)(nranks > 1 ? nranks - 1 : 1);
    for (int p = 0; p < nranks; p++) {
      s->rank[p] = p;
      s->flag_out[p] = (uint8_t)rank;
      /* a region stages every other rank, in rank order, none for its owner */
      s->stage_in[p] = (uint8_t)(p < rank ? p : p > 0 ? p - 1 : 0);
      s->stage_out[p] = (uint8_t)(rank < p ? rank : rank > 0 ? rank - 1 : 0);
    }
    return;
  }
  s->nslots = 3;
  s->self = 1;
  s->nsrc = 2;
  s->rank[0] = (rank + nranks - 1) % nranks;
  s->rank[1] = rank;
  s->rank[2] = (rank + 1) % nranks;
  s->flag_out[0] = 2, s->flag_out[1] = 1, s->flag_out[2] = 0;
  s->stage_in[0] = 0, s->stage_in[2] = 1;
  s->stage_out[0] = 1, s->stage_out[2] = 0; /* we are the predecessor's second source */
}
