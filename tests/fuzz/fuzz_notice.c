/* Fuzz target: arbitrary bytes from a bootstrap-ring neighbour (src/bootstrap.c's failure
 * channel: notices and goodbyes). Every result must be one of weft's codes, naming a real
 * rank; never a crash. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "socket.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return 0;
  weft_sock_nonblock(sv[0]);
  weft_bootstrap_t b = {
      .rank = 1, .nranks = 4, .magic = 0x1122334455667788ull, .prev_fd = sv[0], .next_fd = -1};
  if (size && send(sv[1], data, size, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) size = 0;
  close(sv[1]);
  for (int i = 0; i < 4096; i++) {
    weft_notice_t n = {0};
    weft_result_t rc = weft_bootstrap_check(&b, &n);
    if (rc == WEFT_SUCCESS) continue;
    if (rc < 0 || rc > WEFT_ERR_IN_PROGRESS || n.origin < 0 || n.origin >= b.nranks) {
      fprintf(stderr, "fuzz_notice: bad result %d origin %d\n", (int)rc, n.origin);
      abort();
    }
    break;
  }
  close(sv[0]);
  return 0;
}
