/* The rules of symmetric windows that need no GPU: which buffers an operation on windows
 * reaches in its peers, when an allreduce splits for the copy engines, and where a buffer
 * lies in a window (overflow-safe). window.c applies them; tests/unit/test_window_rules.c
 * checks them anywhere. */
#ifndef WEFT_WINDOW_RULES_H
#define WEFT_WINDOW_RULES_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"

/* Which of t's buffers an operation on windows reads or writes in its peers: recvbuf
 * (allgather, alltoall), sendbuf (reduce_scatter) or both (allreduce); 0 where the staged
 * kernels run: another collective, an in-place alltoall (its peers would overwrite blocks
 * not yet sent), nothing to move, blocks under min_bytes (0: never), or more than read_max
 * bytes to read from each peer. */
enum { WEFT_DEV_DIRECT_RECV = 1, WEFT_DEV_DIRECT_SEND = 2 };
int weft_dev_direct_needs(const weft_task_t *t, int nranks, uint64_t min_bytes, uint64_t read_max);
/* The segment (elements) of an allreduce that runs as a reduce_scatter by the kernels, then an
 * allgather of the segments through the copy engines: count / nranks where that divides
 * evenly and holds at least twice ce_min bytes (two launches and a barrier lose to the
 * two-shot kernels below, bench/results/2026-11-30-h200x2-ce-allreduce.txt); else 0. */
uint64_t weft_dev_ce_split(const weft_task_t *t, int nranks, uint64_t ce_min);
/* Whether [p, p + bytes) lies inside [base, base + size); *off is p - base then. Compares
 * offsets, never p + bytes, which could wrap for a bad bytes. */
int weft_window_holds(const char *base, size_t size, const void *p, size_t bytes, size_t *off);

#endif
