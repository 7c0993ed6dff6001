/* The socket address weft binds, listens on and advertises: IPv4 or IPv6, with its length.
 * It travels raw in hellos, rendezvous tables and the unique id, so anything read from the
 * network is checked (weft_sockaddr_valid) before weft connects to it. */
#ifndef WEFT_SOCKADDR_H
#define WEFT_SOCKADDR_H

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

typedef struct {
  union {
    struct sockaddr sa;
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
  } u;
  uint32_t len; /* bytes of u in use: sizeof v4 or sizeof v6 */
} weft_sockaddr_t;

/* Bracketed IPv6 with a scope name, a colon and a port: "[" 45 "%" 15 "]:" 5 and the NUL. */
#define WEFT_SOCKADDR_STRLEN 72

/* 1 when a holds an IPv4 or IPv6 address of the right length, else 0. */
int weft_sockaddr_valid(const weft_sockaddr_t *a);
int weft_sockaddr_family(const weft_sockaddr_t *a);
uint16_t weft_sockaddr_port(const weft_sockaddr_t *a);
void weft_sockaddr_set_port(weft_sockaddr_t *a, uint16_t port);
/* The wildcard address of family (AF_INET or AF_INET6), port 0. */
void weft_sockaddr_any(int family, weft_sockaddr_t *a);
/* Copies an AF_INET or AF_INET6 sockaddr; -1 for other families. */
int weft_sockaddr_from(const struct sockaddr *sa, weft_sockaddr_t *a);
/* A numeric IPv4 or IPv6 address ("10.0.0.3", "fd00::2", "fe80::1%eth0", "[::1]"), port 0;
 * -1 when text is neither. Never resolves names. */
int weft_sockaddr_parse(const char *text, weft_sockaddr_t *a);
/* 1 for an IPv6 link-local address: its scope is one host's interface index, so other hosts
 * cannot use it. */
int weft_sockaddr_link_local(const weft_sockaddr_t *a);
int weft_sockaddr_loopback(const weft_sockaddr_t *a);
/* 1 for the wildcard address (0.0.0.0 or ::). */
int weft_sockaddr_is_any(const weft_sockaddr_t *a);
/* "10.0.0.3" / "fd00::2"; with_port: "10.0.0.3:5000" / "[fd00::2]:5000". */
const char *weft_sockaddr_str(const weft_sockaddr_t *a, int with_port, char *buf, size_t len);

#endif
