/* IPv4/IPv6 socket addresses as one type: parsing numeric literals, formatting, ports. Pure
 * functions, no sockets opened and no names resolved. */
#include "sockaddr.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int weft_sockaddr_valid(const weft_sockaddr_t *a) {
  return (a->u.sa.sa_family == AF_INET && a->len == sizeof a->u.v4) ||
         (a->u.sa.sa_family == AF_INET6 && a->len == sizeof a->u.v6);
}

int weft_sockaddr_family(const weft_sockaddr_t *a) { return a->u.sa.sa_family; }

uint16_t weft_sockaddr_port(const weft_sockaddr_t *a) {
  return ntohs(a->u.sa.sa_family == AF_INET6 ? a->u.v6.sin6_port : a->u.v4.sin_port);
}

void weft_sockaddr_set_port(weft_sockaddr_t *a, uint16_t port) {
  if (a->u.sa.sa_family == AF_INET6)
    a->u.v6.sin6_port = htons(port);
  else
    a->u.v4.sin_port = htons(port);
}

void weft_sockaddr_any(int family, weft_sockaddr_t *a) {
  memset(a, 0, sizeof *a);
  if (family == AF_INET6) {
    a->u.v6.sin6_family = AF_INET6;
    a->u.v6.sin6_addr = in6addr_any;
    a->len = sizeof a->u.v6;
  } else {
    a->u.v4.sin_family = AF_INET;
    a->u.v4.sin_addr.s_addr = htonl(INADDR_ANY);
    a->len = sizeof a->u.v4;
  }
}

int weft_sockaddr_from(const struct sockaddr *sa, weft_sockaddr_t *a) {
  memset(a, 0, sizeof *a);
  if (!sa) return -1;
  if (sa->sa_family == AF_INET) {
    memcpy(&a->u.v4, sa, sizeof a->u.v4);
    a->len = sizeof a->u.v4;
  } else if (sa->sa_family == AF_INET6) {
    memcpy(&a->u.v6, sa, sizeof a->u.v6);
    a->len = sizeof a->u.v6;
  } else {
    return -1;
  }
  return 0;
}

int weft_sockaddr_parse(const char *text, weft_sockaddr_t *a) {
  char buf[WEFT_SOCKADDR_STRLEN];
  size_t n = strlen(text);
  memset(a, 0, sizeof *a);
  if (n >= sizeof buf) return -1;
  if (n >= 2 && text[0] == '[' && text[n - 1] == ']') { /* the URL form of IPv6 */
    memcpy(buf, text + 1, n - 2);
    buf[n - 2] = 0;
  } else {
    memcpy(buf, text, n + 1);
  }
  if (text[0] != '[' && inet_pton(AF_INET, buf, &a->u.v4.sin_addr) == 1) {
    a->u.v4.sin_family = AF_INET;
    a->len = sizeof a->u.v4;
    return 0;
  }
  char *pct = strchr(buf, '%');
  unsigned scope = 0;
  if (pct) { /* fe80::1%eth0 or fe80::1%2 */
    *pct++ = 0;
    char *end = NULL;
    unsigned long v = strtoul(pct, &end, 10);
    scope = (*pct && !*end) ? (unsigned)v : if_nametoindex(pct);
    if (!scope) return -1;
  }
  if (inet_pton(AF_INET6, buf, &a->u.v6.sin6_addr) != 1) {
    memset(a, 0, sizeof *a);
    return -1;
  }
  a->u.v6.sin6_family = AF_INET6;
  a->u.v6.sin6_scope_id = scope;
  a->len = sizeof a->u.v6;
  return 0;
}

int weft_sockaddr_link_local(const weft_sockaddr_t *a) {
  return a->u.sa.sa_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&a->u.v6.sin6_addr);
}

int weft_sockaddr_loopback(const weft_sockaddr_t *a) {
  if (a->u.sa.sa_family == AF_INET6) return IN6_IS_ADDR_LOOPBACK(&a->u.v6.sin6_addr);
  return a->u.sa.sa_family == AF_INET && (ntohl(a->u.v4.sin_addr.s_addr) >> 24) == 127;
}

int weft_sockaddr_is_any(const weft_sockaddr_t *a) {
  if (a->u.sa.sa_family == AF_INET6) return IN6_IS_ADDR_UNSPECIFIED(&a->u.v6.sin6_addr);
  return a->u.sa.sa_family == AF_INET && a->u.v4.sin_addr.s_addr == htonl(INADDR_ANY);
}

const char *weft_sockaddr_str(const weft_sockaddr_t *a, int with_port, char *buf, size_t len) {
  char ip[INET6_ADDRSTRLEN + IF_NAMESIZE + 1] = "?";
  int v6 = a->u.sa.sa_family == AF_INET6;
  if (v6) {
    inet_ntop(AF_INET6, &a->u.v6.sin6_addr, ip, INET6_ADDRSTRLEN);
    char name[IF_NAMESIZE];
    if (a->u.v6.sin6_scope_id && if_indextoname(a->u.v6.sin6_scope_id, name))
      snprintf(ip + strlen(ip), sizeof ip - strlen(ip), "%%%s", name);
  } else if (a->u.sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &a->u.v4.sin_addr, ip, sizeof ip);
  }
  if (!with_port)
    snprintf(buf, len, "%s", ip);
  else if (v6)
    snprintf(buf, len, "[%s]:%u", ip, (unsigned)weft_sockaddr_port(a));
  else
    snprintf(buf, len, "%s:%u", ip, (unsigned)weft_sockaddr_port(a));
  return buf;
}
