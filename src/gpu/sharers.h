/* Which processes hold a device communicator on a GPU: a small segment per GPU in /dev/shm
 * (8 KiB, unlinked by the last to leave), a slot per communicator owned by its process. A
 * communicator that sees only some of the ranks sharing its GPU (a data-parallel group across GPUs,
 * made after the world) learns here how many processes its GPU serves. No CUDA here. */
#ifndef WEFT_SHARERS_H
#define WEFT_SHARERS_H

#include <stddef.h>

#include "weft.h"

enum { WEFT_SHARERS_SLOTS = 1024 }; /* communicators on one GPU, of all processes */

typedef struct weft_sharers weft_sharers_t;

/* The segment's name for a GPU's PCI bus id: "/weft-gpu-<bus id>". */
void weft_sharers_name(char *buf, size_t len, const char *bus);
/* Maps the segment `name` (creating it, mode 0600), and claims a slot for this process (a
 * slot of a process that has exited is taken back first). WEFT_ERR_SYSTEM where /dev/shm
 * fails; a full segment is no error (*out is still counted from, the slot is missing). */
weft_result_t weft_sharers_join(const char *name, weft_sharers_t **out);
/* Distinct live processes holding a slot, this one included (at least 1). */
int weft_sharers_count(const weft_sharers_t *s);
/* Frees the slot and unmaps; the last holder unlinks the segment (NULL: nothing). */
void weft_sharers_leave(weft_sharers_t *s);

#endif
