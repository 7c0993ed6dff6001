/* Fuzz target: arbitrary bytes as a TCP data stream from a peer (transports/tcp/tcp.c's frame
 * parser and staging ring). The bytes must end cleanly or be refused as a protocol error;
 * any other result, or a crash or sanitizer report, is a bug. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "outcome.h"
#include "transport.h"

/* accept: every frame was read and then the peer's close was seen (the stream's clean end,
 * WEFT_ERR_PEER_LOST, also after a cut-off frame: the receiver cannot tell until it needs
 * the bytes); pending: a frame never completed; refuse: a bad frame header. */
void fuzz_outcome(const uint8_t *data, size_t size, char *out, size_t len) {
  if (size > 1 << 20) {
    snprintf(out, len, "skip (over 1 MiB)");
    return;
  }
  weft_result_t rc = weft_tcp_fuzz_receive(data, size, 0x57454654u, 4096);
  if (rc != WEFT_SUCCESS && rc != WEFT_ERR_PEER_LOST && rc != WEFT_ERR_PROTOCOL) {
    fprintf(stderr, "fuzz_tcp_stream: unexpected result %s\n", weft_result_string(rc));
    abort();
  }
  if (rc == WEFT_ERR_PEER_LOST)
    snprintf(out, len, "accept");
  else if (rc == WEFT_SUCCESS)
    snprintf(out, len, "pending");
  else
    snprintf(out, len, "refuse %s", fuzz_result_name(rc));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char out[64];
  fuzz_outcome(data, size, out, sizeof out);
  return 0;
}
