/* A device rank's peer slots (weft_dev_slots_t in dev.h): which ranks its kernels reach and
 * where it stands in each of theirs. Pure, so the unit tests check every rank's table against
 * its peers' without a GPU. */
#ifndef WEFT_GPU_SLOTS_H
#define WEFT_GPU_SLOTS_H

#include "dev.h"

/* Fills s for rank of nranks (>= 1): identity up to WEFT_DEV_MAX_RANKS, else the ring's
 * neighbours (dev.h, which also holds weft_dev_slot_of). */
void weft_dev_slots_make(int rank, int nranks, weft_dev_slots_t *s);

#endif
