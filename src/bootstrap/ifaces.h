/* Which network interface weft's sockets use (WEFT_SOCKET_IFNAME): a comma list of name
 * prefixes ("eth,ib"), "^" to exclude instead, "=" for exact names ("=eth0", "^=eth1"). The
 * matcher works on a list of interfaces given to it, so tests feed it made-up hosts;
 * weft_ifaces_list reads the real one. */
#ifndef WEFT_IFACES_H
#define WEFT_IFACES_H

#include <net/if.h>

#include "sockaddr.h"
#include "weft.h"

enum { WEFT_IF_UP = 1, WEFT_IF_LOOPBACK = 2 };

/* One address of one interface; an interface without an IP address has one entry of family
 * AF_UNSPEC, so the "seen" listing of an error still names it. */
typedef struct {
  char name[IF_NAMESIZE];
  unsigned flags; /* WEFT_IF_* */
  weft_sockaddr_t addr;
} weft_iface_t;

/* The position in spec's list of the first entry that names `name` (0 for the first
 * entry), or -1. spec's leading "^" and "=" are read here too; "" matches nothing. */
int weft_ifspec_position(const char *spec, const char *name);

/* Picks the address to use among ifs[0..n) for spec (WEFT_SOCKET_IFNAME's text; "" is
 * the default) and family (AF_INET, AF_INET6, or 0 for either). Only interfaces that are up
 * count, and IPv6 link-local addresses never do. Preference, best first:
 *   - a list ("eth,ib"): the interfaces of its first entry that matches any, then the next;
 *   - the default and "^" lists: ib* interfaces, then the others, then (only for "^")
 *     docker*, veth*, virbr*, then the loopback (lo*), which the default takes only when
 *     nothing else is up, and never docker*, veth* or virbr*;
 * then IPv4 before IPv6, then the order of ifs. None: WEFT_ERR_INVALID_ARG, with a message
 * listing every interface and address in ifs. */
weft_result_t weft_ifaces_pick(const weft_iface_t *ifs, int n, const char *spec, int family,
                               int *chosen);

/* "lo 127.0.0.1, ::1; eth0 10.0.0.3; ifb0 (down)": one group per interface name, in the
 * order of ifs; ends with "..." where len cuts it short. */
void weft_ifaces_describe(const weft_iface_t *ifs, int n, char *buf, size_t len);

/* The host's interfaces and addresses (getifaddrs), in the system's order; free(*out). */
weft_result_t weft_ifaces_list(weft_iface_t **out, int *n);

#endif
