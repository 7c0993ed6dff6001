/* The TCP frame parser (transports/tcp/tcp.c) on crafted streams: well-formed frames arrive
 * whole; a wrong magic, a zero or oversized length and a skipped sequence are protocol
 * errors; a peer that closes in the middle of a frame is a lost peer. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <stdint.h>
#include <string.h>

#include "transport.h"

enum { MAGIC = 0x57454654, MAXF = 4096 };

static size_t put(uint8_t *b, uint32_t magic, uint32_t len, uint32_t seq, uint8_t fill) {
  uint32_t h[3] = {magic, len, seq};
  memcpy(b, h, sizeof h);
  memset(b + sizeof h, fill, len < MAXF ? len : 16);
  return sizeof h + (len < MAXF ? len : 16);
}

static weft_result_t feed(const uint8_t *b, size_t n) {
  return weft_tcp_fuzz_receive(b, n, MAGIC, MAXF);
}

static void well_formed(void **st) {
  (void)st;
  static uint8_t b[1 << 17];
  size_t n = 0;
  for (uint32_t i = 0; i < 25; i++)
    n += put(b + n, MAGIC, 4093 - i, i, (uint8_t)i);
  assert_int_equal(feed(b, n), WEFT_ERR_PEER_LOST); /* all read, then the clean close */
}

static void refused(void **st) {
  (void)st;
  uint8_t b[8192];
  size_t n = put(b, MAGIC, 10, 0, 1);
  assert_int_equal(feed(b, put(b, MAGIC ^ 1, 10, 0, 1)), WEFT_ERR_PROTOCOL);
  assert_int_equal(feed(b, put(b, MAGIC, 0, 0, 1)), WEFT_ERR_PROTOCOL);
  assert_int_equal(feed(b, put(b, MAGIC, MAXF + 1, 0, 1)), WEFT_ERR_PROTOCOL);
  n = put(b, MAGIC, 10, 0, 1);
  n += put(b + n, MAGIC, 10, 2, 1); /* frame 1 went missing */
  assert_int_equal(feed(b, n), WEFT_ERR_PROTOCOL);
}

static void cut_short(void **st) {
  (void)st;
  uint8_t b[256];
  size_t n = put(b, MAGIC, 100, 0, 7);
  assert_int_equal(feed(b, n - 40), WEFT_ERR_PEER_LOST);
  assert_int_equal(feed(b, 5), WEFT_ERR_PEER_LOST); /* half a header, then the close */
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(well_formed), cmocka_unit_test(refused),
                                     cmocka_unit_test(cut_short)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
