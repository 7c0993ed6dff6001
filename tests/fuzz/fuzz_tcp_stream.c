/* Fuzz target: arbitrary bytes as a TCP data stream from a peer (transports/tcp.c's frame
 * parser and staging ring). The bytes must end cleanly or be refused as a protocol error;
 * any other result, or a crash or sanitizer report, is a bug. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 20) return 0;
  weft_result_t rc = weft_tcp_fuzz_receive(data, size, 0x57454654u, 4096);
  if (rc != WEFT_SUCCESS && rc != WEFT_ERR_PEER_LOST && rc != WEFT_ERR_PROTOCOL) {
    fprintf(stderr, "fuzz_tcp_stream: unexpected result %s\n", weft_result_string(rc));
    abort();
  }
  return 0;
}
