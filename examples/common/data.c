/* The addition corpus: "a+b=c;" with a, b below 100, digits most significant first. */
#include <stdint.h>
#include <stdlib.h>

#include "data.h"

static int put_number(int *out, int v) {
  int n = 0;
  if (v >= 100) out[n++] = v / 100;
  if (v >= 10) out[n++] = v / 10 % 10;
  out[n++] = v % 10;
  return n;
}

int data_init(data_t *d, size_t len, unsigned long long seed) {
  d->len = len;
  d->stream = malloc((len + 16) * sizeof *d->stream);
  if (!d->stream) return -1;
  uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 7;
  for (size_t at = 0; at < len;) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    int a = (int)(s % 100), b = (int)(s / 100 % 100), tok[16], n = 0;
    n += put_number(tok + n, a);
    tok[n++] = 10; /* + */
    n += put_number(tok + n, b);
    tok[n++] = 11; /* = */
    n += put_number(tok + n, a + b);
    tok[n++] = 12; /* ; */
    for (int i = 0; i < n && at < len; i++)
      d->stream[at++] = tok[i];
  }
  return 0;
}

void data_free(data_t *d) {
  free(d->stream);
  d->stream = NULL;
}

void data_sample(const data_t *d, size_t g, int T, int *tokens, int *targets) {
  size_t span = d->len - (size_t)T - 1, at = (g * 7919u + 13u) % span;
  for (int t = 0; t < T; t++)
    tokens[t] = d->stream[at + (size_t)t], targets[t] = d->stream[at + (size_t)t + 1];
}
