/* weft_comm_shrink: a new communicator of the remaining ranks, made without the excluded
 * ones. The lowest remaining rank makes the new comm's id and hands it to the others over a
 * subset exchange of the bootstrap (each reaches it directly), then all of them init. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "comm.h"
#include "err.h"

/* Which ranks remain (ascending) and the exclude list's hash, the same on every rank that
 * passes the same set in any order. */
static weft_result_t survivors(weft_comm_t comm, const int *exclude, int nexclude, int *members,
                               int *nmembers, uint64_t *tag) {
  int n = comm->nranks;
  unsigned char *out = calloc((size_t)n, 1);
  if (!out) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_shrink: out of memory");
  weft_result_t rc = WEFT_SUCCESS;
  for (int i = 0; i < nexclude && rc == WEFT_SUCCESS; i++) {
    int r = exclude[i];
    if (r < 0 || r >= n)
      rc = weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_comm_shrink: excluded rank %d (entry %d) is not a rank of %d", r, i,
                          n);
    else if (out[r])
      rc = weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_comm_shrink: rank %d is listed twice (entry %d)", r, i);
    else if (r == comm->rank)
      rc = weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_comm_shrink: rank %d excludes itself (excluded ranks do not call "
                          "it)",
                          r);
    else
      out[r] = 1;
  }
  uint64_t h = 1469598103934665603ull ^ (uint64_t)n;
  *nmembers = 0;
  for (int r = 0; r < n && rc == WEFT_SUCCESS; r++) {
    h = (h ^ out[r]) * 1099511628211ull;
    if (!out[r]) members[(*nmembers)++] = r;
  }
  *tag = h;
  free(out);
  return rc;
}

weft_result_t weft_comm_shrink(weft_comm_t comm, const int *exclude, int nexclude, int flags,
                               weft_comm_t *newcomm, const weft_config_t *config) {
  if (!comm || !newcomm)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_shrink: comm or newcomm is NULL");
  *newcomm = NULL;
  if (nexclude < 0 || (nexclude > 0 && !exclude))
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_shrink: %d ranks to exclude at %p",
                          nexclude, (const void *)exclude);
  if (flags & ~WEFT_SHRINK_ABORT)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_shrink: unknown flags %#x", flags);
  if (config && config->size != sizeof(weft_config_t))
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_comm_shrink: config->size is %zu, expected %zu (start from "
                          "WEFT_CONFIG_INIT)",
                          config->size, sizeof(weft_config_t));
  int *members = malloc(sizeof *members * (size_t)comm->nranks), nmembers = 0;
  if (!members) return weft_set_error(WEFT_ERR_NO_MEMORY, "weft_comm_shrink: out of memory");
  uint64_t tag = 0;
  weft_result_t rc = survivors(comm, exclude, nexclude, members, &nmembers, &tag);
  if (rc != WEFT_SUCCESS) goto out;
  int newrank = 0;
  while (members[newrank] != comm->rank)
    newrank++;
  /* After an abort the comm's own abort flag is set for good: the exchange then waits on its
   * deadline alone. Without one, an abort of comm ends it. */
  const atomic_int *abort_flag = &comm->aborted;
  if (flags & WEFT_SHRINK_ABORT) {
    weft_comm_abort(comm);
    abort_flag = NULL;
  }
  weft_config_t cfg = WEFT_CONFIG_INIT;
  cfg.timeout_ms = comm->timeout_ms;
  if (!config) config = &cfg;
  struct {
    int32_t status; /* the leader's weft_get_unique_id */
    int32_t reserved;
    weft_unique_id_t id;
  } msg = {0};
  if (newrank == 0) msg.status = (int32_t)weft_get_unique_id(&msg.id);
  char why[256] = "";
  if (msg.status != WEFT_SUCCESS) snprintf(why, sizeof why, "%s", weft_thread_error());
  rc = weft_bootstrap_subset_bcast(comm->boot, members, nmembers, tag, &msg, sizeof msg,
                                   weft_deadline(comm->timeout_ms), abort_flag);
  if (rc != WEFT_SUCCESS) goto out;
  if (msg.status != WEFT_SUCCESS)
    ERR_GOTO(rc, out, (weft_result_t)msg.status,
             "weft_comm_shrink: rank %d could not make the new communicator's id%s%s", members[0],
             why[0] ? ": " : "", why);
  rc = weft_comm_init(newcomm, nmembers, msg.id, newrank, config);
out:
  free(members);
  return rc;
}
