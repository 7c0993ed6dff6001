/* The transports of this build and the choice of one per pair of ranks. Adding a transport
 * is its folder, its weft_transport_t, and a line in the list below: the communicator sets
 * up each transport that serves a pair (or asks to be always there), and the executor and
 * the tuner read what they need from the vtable. */
#include <stdio.h>
#include <string.h>

#include "err.h"
#include "transport.h"

extern const weft_transport_t weft_transport_shm, weft_transport_tcp;
const weft_transport_t *const weft_transports[] = {&weft_transport_shm, &weft_transport_tcp};
const int weft_ntransports = (int)(sizeof weft_transports / sizeof weft_transports[0]);

_Static_assert(sizeof weft_transports / sizeof weft_transports[0] <= WEFT_MAX_TRANSPORTS,
               "raise WEFT_MAX_TRANSPORTS");

static int find(const char *name) {
  for (int t = 0; t < weft_ntransports; t++)
    if (strcmp(weft_transports[t]->name, name) == 0) return t;
  return -1;
}

/* The best transport reaching a pair: highest priority, then the earlier in the list. */
static int best(int same_host, int only) {
  int pick = -1;
  for (int t = 0; t < weft_ntransports; t++) {
    const weft_transport_t *tr = weft_transports[t];
    if ((only >= 0 && t != only) || !tr->reaches(same_host)) continue;
    if (pick < 0 || tr->priority > weft_transports[pick]->priority) pick = t;
  }
  return pick;
}

weft_result_t weft_transport_select(int rank, int nranks, const int *host_of, const char *force,
                                    uint8_t *peer_tr, uint8_t *used) {
  int only = -1;
  if (force[0] && strcmp(force, "auto") != 0) {
    only = find(force);
    if (only < 0) {
      char names[128] = "auto";
      for (int t = 0; t < weft_ntransports; t++) {
        size_t n = strlen(names);
        snprintf(names + n, sizeof names - n, "%s%s", t + 1 < weft_ntransports ? ", " : " or ",
                 weft_transports[t]->name);
      }
      return weft_set_error(WEFT_ERR_INVALID_ARG, "WEFT_TRANSPORT=%s: use %s", force, names);
    }
  }
  /* Every pair, not only this rank's: all ranks then fail alike, at the same pair, and agree on
   * which transports any pair uses (their setups are collective). */
  memset(used, 0, (size_t)weft_ntransports);
  for (int i = 0; i < nranks; i++)
    for (int j = 0; j < nranks; j++) {
      int same = host_of[i] == host_of[j];
      int t = best(same, i == j ? -1 : only);
      if (t < 0 && only >= 0)
        return weft_set_error(WEFT_ERR_UNSUPPORTED,
                              "WEFT_TRANSPORT=%s, but it cannot connect ranks %d and %d (on %s)",
                              force, i, j, same ? "one host" : "different hosts");
      if (t < 0)
        return weft_set_error(WEFT_ERR_UNSUPPORTED, "no transport reaches from rank %d to rank %d",
                              i, j);
      used[t] = 1;
      if (i == rank) peer_tr[j] = (uint8_t)t;
    }
  return WEFT_SUCCESS;
}
