/* Type table and the small-float codecs. One generic encoder serves f16 and both fp8
 * formats: it rounds |f| to the format's quantum at its exponent, which also handles
 * subnormals and the carry into the next binade. */
#include "dtype.h"

#include <math.h>
#include <string.h>

#include "err.h"

static const struct {
  const char *name;
  size_t size;
  int is_float;
} types[WEFT_DTYPE_COUNT] = {
    [WEFT_F32] = {"float", 4, 1},         [WEFT_F64] = {"double", 8, 1},
    [WEFT_F16] = {"half", 2, 1},          [WEFT_BF16] = {"bfloat16", 2, 1},
    [WEFT_I8] = {"int8", 1, 0},           [WEFT_U8] = {"uint8", 1, 0},
    [WEFT_I32] = {"int32", 4, 0},         [WEFT_I64] = {"int64", 8, 0},
    [WEFT_FP8_E4M3] = {"fp8_e4m3", 1, 1}, [WEFT_FP8_E5M2] = {"fp8_e5m2", 1, 1},
    [WEFT_U32] = {"uint32", 4, 0},        [WEFT_U64] = {"uint64", 8, 0},
};

const char *weft_dtype_name(weft_dtype_t t) {
  return (unsigned)t < WEFT_DTYPE_COUNT ? types[t].name : "invalid";
}
size_t weft_dtype_size(weft_dtype_t t) {
  return (unsigned)t < WEFT_DTYPE_COUNT ? types[t].size : 0;
}
int weft_dtype_is_float(weft_dtype_t t) {
  return (unsigned)t < WEFT_DTYPE_COUNT && types[t].is_float;
}

const char *weft_op_name(weft_op_t op) {
  static const char *names[WEFT_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};
  return (unsigned)op < WEFT_OP_COUNT ? names[op] : "invalid";
}

struct small_fmt {
  int eb, mb, bias;
  uint32_t maxbits; /* largest finite magnitude */
  uint32_t infbits; /* 0: saturate instead of overflowing to infinity */
  uint32_t nanbits;
};

static const struct small_fmt FMT_E4M3 = {4, 3, 7, 0x7e, 0, 0x7f};
static const struct small_fmt FMT_E5M2 = {5, 2, 15, 0x7b, 0, 0x7e};

static uint32_t encode(float f, const struct small_fmt *F) {
  uint32_t u;
  memcpy(&u, &f, 4);
  uint32_t s = (u >> 31) << (F->eb + F->mb);
  if (isnan(f)) return s | F->nanbits;
  float a = fabsf(f);
  if (a == 0.0f) return s;
  if (isinf(a)) return s | (F->infbits ? F->infbits : F->maxbits);
  int e;
  frexpf(a, &e);
  int E = e - 1; /* exponent of the leading bit */
  if (E < 1 - F->bias) E = 1 - F->bias;
  float r = rintf(ldexpf(a, F->mb - E)); /* significand in quanta, round to nearest even */
  if (r > (float)(4u << F->mb)) return s | (F->infbits ? F->infbits : F->maxbits);
  /* (E + bias - 1) << mb plus the significand: covers subnormals and the mantissa carry. */
  int64_t bits = ((int64_t)(E + F->bias - 1) << F->mb) + (int64_t)r;
  if (bits > (int64_t)F->maxbits) return s | (F->infbits ? F->infbits : F->maxbits);
  return s | (uint32_t)bits;
}

static float decode(uint32_t v, const struct small_fmt *F) {
  uint32_t emask = (1u << F->eb) - 1, mmask = (1u << F->mb) - 1;
  uint32_t sign = v >> (F->eb + F->mb) & 1;
  uint32_t E = v >> F->mb & emask, m = v & mmask;
  uint32_t mag = v & ((1u << (F->eb + F->mb)) - 1);
  float r;
  if (mag == (F->nanbits & ((1u << (F->eb + F->mb)) - 1)) || (F->infbits && E == emask && m != 0))
    r = NAN;
  else if (F->infbits && mag == F->infbits)
    r = INFINITY;
  else if (E == 0)
    r = ldexpf((float)m, 1 - F->bias - F->mb);
  else
    r = ldexpf((float)(m | (1u << F->mb)), (int)E - F->bias - F->mb);
  return sign ? -r : r;
}

#if defined(__FLT16_MANT_DIG__) && (defined(__x86_64__) || defined(__aarch64__))
float weft_f16_to_f32(uint16_t h) {
  _Float16 x;
  memcpy(&x, &h, 2);
  return (float)x;
}
uint16_t weft_f32_to_f16(float f) {
  _Float16 x = (_Float16)f;
  uint16_t h;
  memcpy(&h, &x, 2);
  return h;
}
#else
static const struct small_fmt FMT_F16 = {5, 10, 15, 0x7bff, 0x7c00, 0x7e00};
float weft_f16_to_f32(uint16_t h) { return decode(h, &FMT_F16); }
uint16_t weft_f32_to_f16(float f) { return (uint16_t)encode(f, &FMT_F16); }
#endif

float weft_bf16_to_f32(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
uint16_t weft_f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if (isnan(f)) return (uint16_t)((u >> 16) | 0x40);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
float weft_e4m3_to_f32(uint8_t v) { return decode(v, &FMT_E4M3); }
uint8_t weft_f32_to_e4m3(float f) { return (uint8_t)encode(f, &FMT_E4M3); }
float weft_e5m2_to_f32(uint8_t v) { return decode(v, &FMT_E5M2); }
uint8_t weft_f32_to_e5m2(float f) { return (uint8_t)encode(f, &FMT_E5M2); }

double weft_dtype_load(weft_dtype_t t, const void *buf, size_t i) {
  const char *p = (const char *)buf + i * weft_dtype_size(t);
  switch (t) {
  case WEFT_F32: {
    float v;
    memcpy(&v, p, 4);
    return v;
  }
  case WEFT_F64: {
    double v;
    memcpy(&v, p, 8);
    return v;
  }
  case WEFT_F16: {
    uint16_t v;
    memcpy(&v, p, 2);
    return weft_f16_to_f32(v);
  }
  case WEFT_BF16: {
    uint16_t v;
    memcpy(&v, p, 2);
    return weft_bf16_to_f32(v);
  }
  case WEFT_I8: return *(const int8_t *)p;
  case WEFT_U8: return *(const uint8_t *)p;
  case WEFT_I32: {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  case WEFT_I64: {
    int64_t v;
    memcpy(&v, p, 8);
    return (double)v;
  }
  case WEFT_FP8_E4M3: return weft_e4m3_to_f32(*(const uint8_t *)p);
  case WEFT_FP8_E5M2: return weft_e5m2_to_f32(*(const uint8_t *)p);
  case WEFT_U32: {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
  }
  case WEFT_U64: {
    uint64_t v;
    memcpy(&v, p, 8);
    return (double)v;
  }
  default: return 0;
  }
}

void weft_dtype_store(weft_dtype_t t, void *buf, size_t i, double v) {
  char *p = (char *)buf + i * weft_dtype_size(t);
  switch (t) {
  case WEFT_F32: {
    float x = (float)v;
    memcpy(p, &x, 4);
    break;
  }
  case WEFT_F64: memcpy(p, &v, 8); break;
  case WEFT_F16: {
    uint16_t x = weft_f32_to_f16((float)v);
    memcpy(p, &x, 2);
    break;
  }
  case WEFT_BF16: {
    uint16_t x = weft_f32_to_bf16((float)v);
    memcpy(p, &x, 2);
    break;
  }
  case WEFT_I8: *(int8_t *)p = (int8_t)v; break;
  case WEFT_U8: *(uint8_t *)p = (uint8_t)(int64_t)v; break;
  case WEFT_I32: {
    int32_t x = (int32_t)v;
    memcpy(p, &x, 4);
    break;
  }
  case WEFT_I64: {
    int64_t x = (int64_t)v;
    memcpy(p, &x, 8);
    break;
  }
  case WEFT_FP8_E4M3: *(uint8_t *)p = weft_f32_to_e4m3((float)v); break;
  case WEFT_FP8_E5M2: *(uint8_t *)p = weft_f32_to_e5m2((float)v); break;
  case WEFT_U32: { /* a negative integer wraps, as in C's unsigned arithmetic */
    uint32_t x = (uint32_t)(int64_t)v;
    memcpy(p, &x, 4);
    break;
  }
  case WEFT_U64: {
    uint64_t x = v < 0 ? (uint64_t)(int64_t)v : (uint64_t)v;
    memcpy(p, &x, 8);
    break;
  }
  default: break;
  }
}
