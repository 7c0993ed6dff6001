/* Checked size arithmetic for argument checks: every count, displacement and element size
 * from a caller becomes a byte extent here, and a product or sum that does not fit in size_t
 * is refused instead of wrapping into a small, valid-looking number. */
#ifndef WEFT_CHECKED_H
#define WEFT_CHECKED_H

#include <stddef.h>

/* *out = a * b; 0 when it overflows. */
static inline int weft_mul_fits(size_t a, size_t b, size_t *out) {
  return !__builtin_mul_overflow(a, b, out);
}
/* *out = a + b; 0 when it overflows. */
static inline int weft_add_fits(size_t a, size_t b, size_t *out) {
  return !__builtin_add_overflow(a, b, out);
}
/* *bytes = (offset + count) * es, the end of a block in bytes; 0 when it overflows. */
static inline int weft_extent_fits(size_t offset, size_t count, size_t es, size_t *bytes) {
  size_t end;
  return weft_add_fits(offset, count, &end) && weft_mul_fits(end, es, bytes);
}

#endif
