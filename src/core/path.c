/* weft_comm_peer_path: how a rank reaches each peer, as the transports and the engine chose at
 * init, for tools (weft-info --ranks) and for users checking what their cluster got. */
#include <stdio.h>

#include "comm.h"
#include "err.h"

weft_result_t weft_comm_peer_path(weft_comm_t comm, int peer, char *buf, size_t len) {
  if (buf && len) buf[0] = 0;
  if (!comm || !buf || !len)
    return weft_set_error(WEFT_ERR_INVALID_ARG, "weft_comm_peer_path: NULL argument or no room");
  if (peer < 0 || peer >= comm->nranks)
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_comm_peer_path: peer %d, but the communicator has ranks 0-%d", peer,
                          comm->nranks - 1);
  const char *host = peer == comm->rank ? "self" : comm->tr[comm->peer_tr[peer]]->name;
  const char *dev = comm->engine->peer_path ? comm->engine->peer_path(comm, peer) : NULL;
  int n = dev ? snprintf(buf, len, "%s, device %s", host, dev) : snprintf(buf, len, "%s", host);
  if (n < 0 || (size_t)n >= len) {
    buf[0] = 0;
    return weft_set_error(WEFT_ERR_INVALID_ARG,
                          "weft_comm_peer_path: the path to rank %d needs %d bytes, %zu given",
                          peer, n + 1, len);
  }
  return WEFT_SUCCESS;
}
