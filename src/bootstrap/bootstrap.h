/* Bootstrap: the unique id, the TCP rendezvous at the root, and a ring of sockets between
 * ranks for the small collective exchanges that setting up a communicator needs
 * (allgather, barrier). Slow path only: data never goes through here. */
#ifndef WEFT_BOOTSTRAP_H
#define WEFT_BOOTSTRAP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "sockaddr.h"
#include "weft.h"

/* 2: addresses are weft_sockaddr_t (IPv4 or IPv6), 32 bytes, in hellos and the table;
 * 3: the tcp transport's setup exchange carries each rank's address or why it has none;
 * 5: the bootstrap's allgather runs in log2(nranks) steps over skip connections;
 * 6: the tcp transport's pairs connect on their first use;
 * 7: the root sends a rank only the addresses it connects to; an allgather spreads the rest */
#define WEFT_WIRE_VERSION 7u

/* The root takes at most 2^20 ranks, so an allgather takes at most 20 steps. */
#define WEFT_BOOT_MAX_RANKS (1 << 20)
#define WEFT_BOOT_MAX_STEPS 20

enum weft_msg_type {
  WEFT_MSG_ROOT_HELLO = 0x10,
  WEFT_MSG_ROOT_TABLE = 0x11,
  WEFT_MSG_RING_HELLO = 0x12,
  WEFT_MSG_TCP_HELLO = 0x13,
  WEFT_MSG_NOTICE = 0x14,       /* a rank failed: forwarded around the ring */
  WEFT_MSG_BYE = 0x15,          /* the sender destroys its communicator: its close is no failure */
  WEFT_MSG_SUBSET_HELLO = 0x16, /* a member of a subset exchange reaches its lowest rank */
  WEFT_MSG_SUBSET_DATA = 0x17,  /* the lowest rank's answer */
  WEFT_MSG_SKIP_HELLO = 0x18    /* a connection for an allgather step of 2^k ranks */
};

/* A failure notice: origin is the rank that first saw the failure; text is its error
 * message (so every rank can say what happened, e.g. both calls of a mismatch). */
#define WEFT_NOTICE_BYTES 256
#define WEFT_NOTICE_TEXT  (WEFT_NOTICE_BYTES - 32)
typedef struct {
  int origin;
  weft_result_t code;
  uint64_t seq;
  char text[WEFT_NOTICE_TEXT];
} weft_notice_t;

/* What a weft_unique_id_t holds. */
typedef struct {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  weft_sockaddr_t root;
} weft_id_body_t;

/* 48 bytes with an IPv6 root address: room to spare in the id. */
_Static_assert(sizeof(weft_id_body_t) <= WEFT_UNIQUE_ID_BYTES, "the id body fits the unique id");

typedef struct weft_bootstrap {
  int rank, nranks;
  uint64_t magic; /* random per communicator, chosen by the root */
  int64_t timeout_ms;
  const atomic_int *abort_flag;
  int next_fd, prev_fd;
  /* the allgather's step k >= 1 sends to rank + 2^k on skip_out[k] and reads rank - 2^k's on
   * skip_in[k] (step 0 is the ring's); -1 past the steps nranks needs */
  int skip_out[WEFT_BOOT_MAX_STEPS], skip_in[WEFT_BOOT_MAX_STEPS];
  weft_sockaddr_t my_addr; /* how the others reach this rank (port 0) */
  /* kept from init for exchanges among a subset of the ranks (weft_comm_shrink), which the
   * ring cannot serve when a rank outside the subset is dead: this rank's listening socket
   * and every rank's (the first allgather's) */
  int listen_fd;
  weft_sockaddr_t *table;
  uint32_t subset_seq; /* subset exchanges so far: a late or stray one is told apart */
  /* failure channel: partial notices read so far, neighbours that said bye, and sides whose
   * next bytes belong to a bootstrap collective (left for it; cleared when one starts) */
  unsigned char rbuf[2][WEFT_NOTICE_BYTES];
  size_t rgot[2];
  int bye[2];
  atomic_int held[2];
  pthread_mutex_t send_mu;
} weft_bootstrap_t;

/* Starts the root's rendezvous thread on listen_fd (which it then owns). */
weft_result_t weft_bootstrap_root_start(int listen_fd, uint64_t id_magic, int64_t timeout_ms);
weft_result_t weft_bootstrap_init(const weft_id_body_t *id, int rank, int nranks,
                                  int64_t timeout_ms, const atomic_int *abort_flag,
                                  weft_bootstrap_t **out);
/* data holds nranks blocks of size bytes; this rank's block must be filled in. In
 * ceil(log2 nranks) steps (Bruck's): step k sends the 2^k blocks gathered so far to rank + 2^k,
 * so the ring's neighbours alone would cost nranks - 1. */
weft_result_t weft_bootstrap_allgather(weft_bootstrap_t *b, void *data, size_t size);
weft_result_t weft_bootstrap_barrier(weft_bootstrap_t *b);
/* Collective, a barrier that carries outcomes (agree.c): every rank passes its own (mine, with
 * its message as this thread's error where it failed). Returns WEFT_SUCCESS when all
 * succeeded; else this rank's own failure, or the first failed rank's code and message
 * ("WHERE: rank N WHAT (code): its message"); or the ring's error. */
weft_result_t weft_bootstrap_agree(weft_bootstrap_t *b, weft_result_t mine, const char *where,
                                   const char *what);
/* Text another rank sent (agreements, setup exchanges): terminated within its n bytes, every
 * character outside printable ASCII made '?'. Returns s. */
char *weft_net_text(char *s, size_t n);
/* An error code another rank sent: itself where it is one of weft_result_t's errors, else
 * WEFT_ERR_PROTOCOL. */
weft_result_t weft_net_code(int32_t code);
/* Hands size bytes at data from members[0] to every other member, with no other rank taking
 * part: each member connects to the listening socket members[0] kept since init. members are
 * n distinct ranks in ascending order, this rank among them; every member passes the same
 * members, size and tag (else WEFT_ERR_MISMATCH on every member the first one hears from).
 * Waits until deadline, or until *abort_flag is set (abort_flag may be NULL). */
weft_result_t weft_bootstrap_subset_bcast(weft_bootstrap_t *b, const int *members, int n,
                                          uint64_t tag, void *data, size_t size, int64_t deadline,
                                          const atomic_int *abort_flag);
void weft_bootstrap_free(weft_bootstrap_t *b);

/* After init the ring sockets are idle, so they double as the failure channel. Best
 * effort, never blocks: sends n to both neighbours. */
void weft_bootstrap_notify(weft_bootstrap_t *b, const weft_notice_t *n);
/* Tells both neighbours this rank is leaving on purpose (before destroy closes the ring). */
void weft_bootstrap_bye(weft_bootstrap_t *b);
/* Reads the ring sockets without blocking. WEFT_SUCCESS: nothing happened. Otherwise *n
 * says who failed how: a notice, or a neighbour whose socket closed without a bye. */
weft_result_t weft_bootstrap_check(weft_bootstrap_t *b, weft_notice_t *n);
/* The ring's sockets, for poll sets (returns how many, 0 to 2). */
int weft_bootstrap_fds(const weft_bootstrap_t *b, int fds[2]);
/* The same less the sides whose next bytes are left for a bootstrap collective: the ones
 * worth polling for notices (polling the others would return at once until it runs). */
int weft_bootstrap_watch_fds(const weft_bootstrap_t *b, int fds[2]);
uint64_t weft_random_u64(void);

#endif
