/* Interface choice for weft's sockets: WEFT_SOCKET_IFNAME's list syntax, the default that
 * keeps away from container and virtual bridges, and the listing of what was seen when
 * nothing matches (init hanging on an unreachable docker0 address is the usual trap). */
#include "ifaces.h"

#include <errno.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

/* Virtual interfaces of containers and VMs: their addresses are private to this host. */
static const char *const virtual_prefixes[] = {"docker", "veth", "virbr"};

static int has_prefix(const char *name, const char *prefix) {
  return strncmp(name, prefix, strlen(prefix)) == 0;
}

int weft_ifspec_position(const char *spec, const char *name) {
  int exact = 0;
  if (spec[0] == '^') spec++;
  if (spec[0] == '=') {
    exact = 1;
    spec++;
  }
  int pos = 0;
  for (const char *p = spec; *p;) {
    size_t len = strcspn(p, ",");
    size_t nlen = strlen(name);
    if (len > 0 && (exact ? (nlen == len && strncmp(name, p, len) == 0)
                          : (nlen >= len && strncmp(name, p, len) == 0)))
      return pos;
    if (len > 0) pos++;
    p += len;
    if (*p == ',') p++;
  }
  return -1;
}

static int is_loopback(const weft_iface_t *i) {
  return (i->flags & WEFT_IF_LOOPBACK) || has_prefix(i->name, "lo");
}

static int is_virtual(const weft_iface_t *i) {
  for (size_t k = 0; k < sizeof virtual_prefixes / sizeof virtual_prefixes[0]; k++)
    if (has_prefix(i->name, virtual_prefixes[k])) return 1;
  return 0;
}

/* Lower is better; -1: not a candidate. */
static int tier(const weft_iface_t *i, const char *spec, int family) {
  int f = weft_sockaddr_family(&i->addr);
  if (!(i->flags & WEFT_IF_UP) || (f != AF_INET && f != AF_INET6)) return -1;
  if ((family && f != family) || weft_sockaddr_link_local(&i->addr)) return -1;
  if (spec[0] && spec[0] != '^') return weft_ifspec_position(spec, i->name);
  int excluding = spec[0] == '^';
  if (excluding && weft_ifspec_position(spec, i->name) >= 0) return -1;
  if (is_loopback(i)) return 3;
  if (is_virtual(i)) return excluding ? 2 : -1;
  return has_prefix(i->name, "ib") ? 0 : 1;
}

weft_result_t weft_ifaces_pick(const weft_iface_t *ifs, int n, const char *spec, int family,
                               int *chosen) {
  int best = -1, best_tier = 0;
  for (int i = 0; i < n; i++) {
    int t = tier(&ifs[i], spec, family);
    if (t < 0) continue;
    int v6 = weft_sockaddr_family(&ifs[i].addr) == AF_INET6;
    int b6 = best >= 0 && weft_sockaddr_family(&ifs[best].addr) == AF_INET6;
    if (best < 0 || t < best_tier || (t == best_tier && b6 && !v6)) {
      best = i;
      best_tier = t;
    }
  }
  if (best >= 0) {
    *chosen = best;
    return WEFT_SUCCESS;
  }
  char seen[600];
  weft_ifaces_describe(ifs, n, seen, sizeof seen);
  const char *fam = family == AF_INET    ? " with an IPv4 address"
                    : family == AF_INET6 ? " with an IPv6 address other than link-local"
                                         : " with an address";
  if (!spec[0])
    return weft_set_error(WEFT_ERR_INVALID_ARG, "no network interface is up%s; seen: %s", fam,
                          seen);
  return weft_set_error(WEFT_ERR_INVALID_ARG,
                        "WEFT_SOCKET_IFNAME=%.64s: matches no interface that is up%s; seen: %s",
                        spec, fam, seen);
}

void weft_ifaces_describe(const weft_iface_t *ifs, int n, char *buf, size_t len) {
  size_t o = 0;
  buf[0] = 0;
  for (int i = 0; i < n && o < len; i++) {
    int first = 1;
    for (int j = 0; j < i && first; j++)
      first = strcmp(ifs[j].name, ifs[i].name) != 0;
    if (!first) continue;
    int r = snprintf(buf + o, len - o, "%s%s%s", o ? "; " : "", ifs[i].name,
                     (ifs[i].flags & WEFT_IF_UP) ? "" : " (down)");
    o += r > 0 ? (size_t)r : 0;
    int addrs = 0;
    for (int j = i; j < n && o < len; j++) {
      if (strcmp(ifs[j].name, ifs[i].name) != 0 || !weft_sockaddr_valid(&ifs[j].addr)) continue;
      weft_sockaddr_t a = ifs[j].addr;
      if (weft_sockaddr_family(&a) == AF_INET6) a.u.v6.sin6_scope_id = 0; /* the name says it */
      char s[WEFT_SOCKADDR_STRLEN];
      r = snprintf(buf + o, len - o, "%s%s", addrs++ ? ", " : " ",
                   weft_sockaddr_str(&a, 0, s, sizeof s));
      o += r > 0 ? (size_t)r : 0;
    }
  }
  if (o >= len && len > 4) memcpy(buf + len - 4, "...", 4);
}

weft_result_t weft_ifaces_list(weft_iface_t **out, int *n) {
  struct ifaddrs *head = NULL;
  if (getifaddrs(&head) != 0)
    return weft_set_error(WEFT_ERR_SYSTEM, "getifaddrs: %s", strerror(errno));
  int count = 0;
  for (struct ifaddrs *i = head; i; i = i->ifa_next)
    count++;
  weft_iface_t *ifs = calloc(count ? (size_t)count : 1, sizeof *ifs);
  if (!ifs) {
    freeifaddrs(head);
    return weft_set_error(WEFT_ERR_NO_MEMORY, "interfaces: out of memory");
  }
  int k = 0;
  for (struct ifaddrs *i = head; i; i = i->ifa_next) {
    weft_iface_t *e = &ifs[k++];
    snprintf(e->name, sizeof e->name, "%s", i->ifa_name ? i->ifa_name : "?");
    e->flags = ((i->ifa_flags & IFF_UP) ? WEFT_IF_UP : 0u) |
               ((i->ifa_flags & IFF_LOOPBACK) ? WEFT_IF_LOOPBACK : 0u);
    weft_sockaddr_from(i->ifa_addr, &e->addr); /* AF_PACKET and the like: no address */
  }
  freeifaddrs(head);
  *out = ifs;
  *n = k;
  return WEFT_SUCCESS;
}
