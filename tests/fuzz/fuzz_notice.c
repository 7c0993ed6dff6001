/* Fuzz target: arbitrary bytes from a bootstrap-ring neighbour (src/bootstrap/bootstrap.c's failure
 * channel: notices and goodbyes). Every result must be one of weft's codes, naming a real
 * rank; bytes without the magic are never read (they belong to the ring's next collective);
 * never a crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "outcome.h"
#include "socket.h"

enum { NEIGHBOUR = 0 }; /* rank 1's previous rank: the sender of the input */

/* quiet: nothing to report (a bye, then the close it announced; or bytes that begin no
 * message, left unread for the ring's next collective); lost: the neighbour's
 * socket closed without a bye; refuse: the bytes were no valid notice, reported as a
 * protocol error of the neighbour (a notice saying just that reads the same); accept: a
 * notice taken as sent, with what every rank would then print. */
void fuzz_outcome(const uint8_t *data, size_t size, char *out, size_t len) {
  snprintf(out, len, "skip");
  if (size > 1 << 16) return;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return;
  weft_sock_nonblock(sv[0]);
  weft_bootstrap_t b = {
      .rank = 1, .nranks = 4, .magic = 0x1122334455667788ull, .prev_fd = sv[0], .next_fd = -1};
  if (size && send(sv[1], data, size, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) size = 0;
  close(sv[1]);
  weft_notice_t n = {0};
  weft_result_t rc = WEFT_SUCCESS;
  for (int i = 0; i < 4096 && rc == WEFT_SUCCESS; i++) {
    n = (weft_notice_t){0};
    rc = weft_bootstrap_check(&b, &n);
  }
  int left = 0; /* bytes no message begins with: the ring's next collective reads them */
  if (ioctl(sv[0], FIONREAD, &left) != 0) left = 0;
  close(sv[0]);
  /* What a refusal looks like: the neighbour blamed, no text taken from the bytes. */
  int plain = n.origin == NEIGHBOUR && !n.text[0];
  uint64_t magic = 0;
  memcpy(&magic, data, size < sizeof magic ? size : sizeof magic);
  if (size >= sizeof magic && magic != b.magic && (rc != WEFT_SUCCESS || (size_t)left != size)) {
    fprintf(stderr, "fuzz_notice: bytes without the magic were read as a message\n");
    abort();
  }
  if (rc == WEFT_SUCCESS) {
    snprintf(out, len, left ? "quiet, %d bytes left unread" : "quiet", left);
    return;
  }
  if (rc < 0 || rc > WEFT_ERR_IN_PROGRESS || n.origin < 0 || n.origin >= b.nranks || n.code != rc ||
      n.text[sizeof n.text - 1] != 0) {
    fprintf(stderr, "fuzz_notice: bad result %d origin %d code %d\n", (int)rc, n.origin, n.code);
    abort();
  }
  if (plain && rc == WEFT_ERR_PEER_LOST && n.seq == 0)
    snprintf(out, len, "lost origin %d", n.origin);
  else if (plain && rc == WEFT_ERR_PROTOCOL)
    snprintf(out, len, "refuse %s origin %d seq %llu", fuzz_result_name(rc), n.origin,
             (unsigned long long)n.seq);
  else
    snprintf(out, len, "accept %s origin %d seq %llu text \"%s\"", fuzz_result_name(rc), n.origin,
             (unsigned long long)n.seq, n.text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[512];
  fuzz_outcome(data, size, out, sizeof out);
  return 0;
}
