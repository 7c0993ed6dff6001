/* Sends and receives between a device rank and itself never reach the kernels: the k-th
 * receive from itself in a call or group takes the k-th send to itself, as one copy on the
 * caller's stream. Pairing them needs no GPU; tests/unit/test_self_pairs.c checks it. */
#ifndef WEFT_SELF_PAIRS_H
#define WEFT_SELF_PAIRS_H

#include "comm.h"

/* Whether task t is a send to, or a receive from, rank itself. */
int weft_dev_is_self(int rank, const weft_task_t *t);
/* Pairs the self receives of tasks with the self sends: pair[i] is, for a self receive i,
 * the index of its send, and -1 for every other task. *nself counts the self tasks. Every
 * self send needs its receive and the sizes must agree; else WEFT_ERR_INVALID_ARG and a
 * message. pair holds ntasks entries. */
weft_result_t weft_dev_self_pairs(int rank, const weft_task_t *tasks, int ntasks, int *pair,
                                  int *nself);

#endif
