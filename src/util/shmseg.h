/* POSIX shared-memory segments that several local processes map: the shm transport's rings
 * and a device communicator's host-staged regions. */
#ifndef WEFT_SHMSEG_H
#define WEFT_SHMSEG_H

#include <stddef.h>
#include <stdint.h>

#include "weft.h"

/* "/weft-<magic>-<rank><suffix>" */
void weft_shm_name(char *buf, size_t len, uint64_t magic, int rank, const char *suffix);
/* Creates (reserving every byte, so a full /dev/shm fails here, not with SIGBUS later) or
 * opens the segment, then maps it populated. hint names the setting that shrinks it. */
weft_result_t weft_shm_map(const char *name, size_t bytes, int create, const char *hint,
                           char **out);

#endif
