/* Exact inputs: SUM/AVG in [-1, 1], MIN/MAX in [-3, 3], PROD in {-1, 1, 2} with few 2s;
 * unsigned types shift up. fp8 SUM/AVG: even ranks give {0, 1} and odd ranks {-1, 0}, so any
 * partial sum of n ranks stays within n / 2 (see oracle_exact_ranks). Wide inputs and their
 * error bounds: see oracle_check_wide. */
#include "oracle.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "dtype.h"

static uint32_t mix(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}

static int input_int(weft_dtype_t t, weft_op_t op, int rank, size_t i, uint32_t seed) {
  uint32_t h =
      mix((uint32_t)i * 2654435761U ^ (uint32_t)rank * 40503U ^ seed * 97U ^ (uint32_t)(i >> 32));
  int is_unsigned = t == WEFT_U8 || t == WEFT_U32 || t == WEFT_U64;
  switch (op) {
  case WEFT_PROD:
    if ((rank + i) % 4 == 0) return 2;
    return (!is_unsigned && h % 3 == 0) ? -1 : 1;
  case WEFT_MIN:
  case WEFT_MAX: return (int)(h % 7) - (is_unsigned ? 0 : 3);
  default:
    /* A reduction adds its partials in an order of its own and fp8 rounds each one: signs
     * alternating by rank keep every partial, whatever ranks it holds, on exact integers. */
    if (t == WEFT_FP8_E4M3 || t == WEFT_FP8_E5M2) return h % 3 == 0 ? 0 : rank % 2 ? -1 : 1;
    return (int)(h % 3) - (is_unsigned ? 0 : 1);
  }
}

int oracle_exact_ranks(weft_dtype_t t) {
  /* Exact integers run to 2^(mantissa bits + 1); a partial of n ranks reaches n / 2 for
   * fp8 and n for the others. PROD's 2s come on one rank in 4: 2^(n/4) must not overflow
   * (f16: 2^15). Integers wrap, exactly; f32 and f64 hold both to millions of ranks. */
  switch (t) {
  case WEFT_FP8_E5M2: return 2 * 8;
  case WEFT_FP8_E4M3: return 2 * 16;
  case WEFT_BF16: return 256;
  case WEFT_F16: return 60;
  default: return 1 << 20;
  }
}

double oracle_input(weft_dtype_t t, weft_op_t op, int rank, size_t i, uint32_t seed) {
  return input_int(t, op, rank, i, seed);
}

/* The exact oracle's values are small integers (results mostly): their encodings, made
 * once, spare the codecs, which took most of the tests' time. Bytes are weft_dtype_store's. */
enum { SMALL = 16 };
static unsigned char small_enc[WEFT_DTYPE_COUNT][2 * SMALL + 1][8];
static pthread_once_t small_once = PTHREAD_ONCE_INIT;

static void small_init(void) {
  for (int t = 0; t < WEFT_DTYPE_COUNT; t++)
    for (int v = -SMALL; v <= SMALL; v++)
      weft_dtype_store((weft_dtype_t)t, small_enc[t][v + SMALL], 0, v);
}

static void store(weft_dtype_t t, void *buf, size_t k, size_t es, double v) {
  if (v >= -SMALL && v <= SMALL && v == (int)v && !signbit(v))
    memcpy((char *)buf + k * es, small_enc[t][(int)v + SMALL], es);
  else
    weft_dtype_store(t, buf, k, v);
}

/* Inputs are always small integers: one loop per element size, so the copies inline. */
#define FILL(ES)                                                                                   \
  for (size_t k = 0; k < count; k++)                                                               \
  memcpy(p + k * ES, small_enc[t][input_int(t, op, rank, first + k, seed) + SMALL], ES)

void oracle_fill(weft_dtype_t t, weft_op_t op, int rank, void *buf, size_t first, size_t count,
                 uint32_t seed) {
  char *p = buf;
  pthread_once(&small_once, small_init);
  switch (weft_dtype_size(t)) {
  case 1: FILL(1); break;
  case 2: FILL(2); break;
  case 4: FILL(4); break;
  default: FILL(8); break;
  }
}

void oracle_reduced(weft_dtype_t t, weft_op_t op, int nranks, void *buf, size_t first, size_t count,
                    uint32_t seed) {
  size_t es = weft_dtype_size(t);
  pthread_once(&small_once, small_init);
  for (size_t k = 0; k < count; k++) {
    double v = oracle_input(t, op, 0, first + k, seed);
    for (int r = 1; r < nranks; r++) {
      double x = oracle_input(t, op, r, first + k, seed);
      switch (op) {
      case WEFT_PROD: v *= x; break;
      case WEFT_MIN: v = x < v ? x : v; break;
      case WEFT_MAX: v = x > v ? x : v; break;
      default: v += x; break;
      }
    }
    if (op == WEFT_AVG) {
      if (weft_dtype_is_float(t) && t != WEFT_F64)
        v = (float)((float)v / (float)nranks);
      else if (t == WEFT_F64)
        v = v / nranks;
      else
        v = (double)((int64_t)v / nranks); /* C division truncates, as weft's does */
    }
    store(t, buf, k, es, v);
  }
}

/* ---- rounding oracle ----
 * Float inputs have random mantissas (every bit of t's significand), so nearly every sum
 * rounds and two orders give different bits; magnitudes in [1/2, 1) (PROD: [3/4, 3/2]),
 * exact in t, with a random sign: no zeros (MIN of -0 and +0 depends on the order), nothing
 * near overflow, products of 8 ranks in [0.1, 26], inside every type's normal range.
 * Integers: every bit random, so SUM and PROD wrap (and wrapping is exact in any order). */

static uint64_t wide_bits(int rank, size_t i, uint32_t seed) {
  uint32_t a = mix((uint32_t)i * 2246822519U ^ (uint32_t)rank * 3266489917U ^ seed * 668265263U ^
                   (uint32_t)(i >> 32));
  return (uint64_t)a << 32 | mix(a ^ 0x9e3779b9U ^ (uint32_t)rank);
}

/* An integer as t holds it, in 64 bits: signed types sign-extended, unsigned ones
 * zero-extended; int_less and int_div then compare and divide in t's own signedness. */
static int int_unsigned(weft_dtype_t t) { return t == WEFT_U8 || t == WEFT_U32 || t == WEFT_U64; }

static uint64_t int_wrap(weft_dtype_t t, uint64_t v) {
  switch (t) {
  case WEFT_I8: return (uint64_t)(int64_t)(int8_t)v;
  case WEFT_U8: return (uint8_t)v;
  case WEFT_I32: return (uint64_t)(int64_t)(int32_t)v;
  case WEFT_U32: return (uint32_t)v;
  default: return v; /* i64, u64 */
  }
}

static int int_less(weft_dtype_t t, uint64_t x, uint64_t y) {
  return int_unsigned(t) ? x < y : (int64_t)x < (int64_t)y;
}

static uint64_t int_div(weft_dtype_t t, uint64_t x, int n) {
  return int_unsigned(t) ? x / (uint64_t)n : (uint64_t)((int64_t)x / n);
}

static double int_double(weft_dtype_t t, uint64_t x) {
  return int_unsigned(t) ? (double)x : (double)(int64_t)x;
}

static uint64_t int_load(weft_dtype_t t, const void *buf, size_t k) {
  const char *p = (const char *)buf + k * weft_dtype_size(t);
  uint64_t v = 0;
  memcpy(&v, p, weft_dtype_size(t)); /* little-endian: the low bytes */
  return int_wrap(t, v);
}

static void int_store(weft_dtype_t t, void *buf, size_t k, uint64_t v) {
  memcpy((char *)buf + k * weft_dtype_size(t), &v, weft_dtype_size(t)); /* the low bytes */
}

/* Fraction bits of t's significand. */
static int frac_bits(weft_dtype_t t) {
  switch (t) {
  case WEFT_F32: return 23;
  case WEFT_F64: return 52;
  case WEFT_F16: return 10;
  case WEFT_BF16: return 7;
  case WEFT_FP8_E4M3: return 3;
  default: return 2; /* e5m2 */
  }
}

/* The float input: built on t's grid, so storing it in t is exact. */
static double wide_float(weft_dtype_t t, weft_op_t op, int rank, size_t i, uint32_t seed) {
  uint64_t h = wide_bits(rank, i, seed);
  int p = frac_bits(t);
  double ulp = 1.0 / (double)(1ULL << p), m = (double)(h >> (64 - p)), mag;
  if (op != WEFT_PROD)
    mag = 0.5 + 0.5 * m * ulp; /* [1/2, 1), spacing ulp/2 */
  else if (h & 2)
    mag = 1 + (double)(h >> (65 - p)) * ulp; /* [1, 3/2), spacing ulp */
  else
    mag = 0.75 + 0.5 * (double)(h >> (65 - p)) * ulp; /* [3/4, 1), spacing ulp/2 */
  return (h & 1) ? -mag : mag;
}

void oracle_fill_wide(weft_dtype_t t, weft_op_t op, int rank, void *buf, size_t first, size_t count,
                      uint32_t seed) {
  for (size_t k = 0; k < count; k++) {
    if (weft_dtype_is_float(t))
      weft_dtype_store(t, buf, k, wide_float(t, op, rank, first + k, seed));
    else
      int_store(t, buf, k, int_wrap(t, wide_bits(rank, first + k, seed)));
  }
}

/* Unit roundoff u = 2^-p of one rounding to t (p significand bits: f32 24, f64 53, f16 11,
 * bf16 8, e4m3 4, e5m2 3). 16- and 8-bit floats are reduced in f32 and narrowed (host) or
 * narrowed from an f32 accumulator (device): two roundings, u_t + u_f32 covers both. What
 * that makes of a SUM on 8 ranks (inputs in [1/2, 1], so at most 8 in magnitude): f32 3e-6,
 * f64 2e-14, f16 0.03, bf16 0.23, all below the smallest input, so a lost or doubled
 * contribution fails; e4m3 6 and e5m2 56 catch only gross errors (their exactness is what
 * the integer-valued cases check, and their order what the bit-identity check sees). */
static double unit_roundoff(weft_dtype_t t) {
  double u = ldexp(1, -(frac_bits(t) + 1));
  return t == WEFT_F32 || t == WEFT_F64 ? u : u + 0x1p-24;
}

/* The smallest subnormal of t: below the normal range a rounding errs by up to half of it,
 * whatever u says. */
static double tiniest(weft_dtype_t t) {
  switch (t) {
  case WEFT_F32: return 0x1p-149;
  case WEFT_F64: return 0x1p-1074;
  case WEFT_F16: return 0x1p-24;
  case WEFT_BF16: return 0x1p-133;
  case WEFT_FP8_E4M3: return 0x1p-9;
  default: return 0x1p-16;
  }
}

/* Higham's gamma_k = k u / (1 - k u): k roundings in a row, in any order, err by at most
 * gamma_k times the sum of the magnitudes (SUM) or the magnitude (PROD). Past k u = 1 there
 * is no such bound (fp8 e5m2 beyond 8 ranks): then only a NaN or an infinity fails. */
static double gamma_k(int k, double u) { return k * u < 1 ? k * u / (1 - k * u) : INFINITY; }

size_t oracle_check_wide(weft_dtype_t t, weft_op_t op, int nranks, const void *got, size_t first,
                         size_t count, uint32_t seed, double *want, double *have, double *tol) {
  int is_float = weft_dtype_is_float(t);
  double u = unit_roundoff(t), eta = tiniest(t);
  /* the reference is computed in double, with errors of its own: they add to the bound */
  double gt = gamma_k(nranks - 1, u), gd = gamma_k(nranks - 1, 0x1p-53);
  for (size_t k = 0; k < count; k++) {
    size_t i = first + k;
    if (!is_float) { /* wrapping arithmetic is exact in any order: compare exactly */
      uint64_t acc = int_wrap(t, wide_bits(0, i, seed)), mm = acc;
      for (int r = 1; r < nranks; r++) {
        uint64_t x = int_wrap(t, wide_bits(r, i, seed));
        if (op == WEFT_PROD)
          acc *= x;
        else
          acc += x;
        mm = op == WEFT_MIN ? (int_less(t, x, mm) ? x : mm) : (int_less(t, mm, x) ? x : mm);
      }
      uint64_t w = op == WEFT_MIN || op == WEFT_MAX ? mm : int_wrap(t, acc);
      if (op == WEFT_AVG) w = int_div(t, w, nranks); /* the wrapped sum, divided as C does */
      uint64_t g = int_load(t, got, k);
      if (g != w) {
        *want = int_double(t, w), *have = int_double(t, g), *tol = 0;
        return k;
      }
      continue;
    }
    double v = wide_float(t, op, 0, i, seed), mag = fabs(v);
    for (int r = 1; r < nranks; r++) {
      double x = wide_float(t, op, r, i, seed);
      switch (op) {
      case WEFT_PROD: v *= x; break;
      case WEFT_MIN: v = x < v ? x : v; break;
      case WEFT_MAX: v = x > v ? x : v; break;
      default: v += x; break;
      }
      mag += fabs(x);
    }
    double bound = 0; /* MIN and MAX pick an input: exact in any order */
    if (op == WEFT_SUM || op == WEFT_AVG) bound = (gt + gd) * mag + (nranks - 1) * eta;
    if (op == WEFT_AVG) { /* the sum's error shrinks by n; one more rounding, in t and in double */
      bound = (bound + (u + 0x1p-53) * (mag + bound)) / nranks + eta;
      v /= nranks;
    }
    /* partial products stay within [0.75^n, 1.5^n]: while that is normal in t, each
     * multiplication errs by at most u relative (eta / 2u is the smallest normal); past it
     * (e4m3 beyond 14 ranks) there is no bound */
    if (op == WEFT_PROD)
      bound = pow(0.75, nranks) >= eta / u * 0.5 ? (gt + gd) * fabs(v) * (1 + gd) : INFINITY;
    double g = weft_dtype_load(t, got, k);
    if (!(fabs(g - v) <= bound)) {
      *want = v, *have = g, *tol = bound;
      return k;
    }
  }
  return count;
}
