/* Element types on the device: storage type, accumulation type, and conversions that give
 * the same bits as the host codecs in src/util/dtype.c (round to nearest even; fp8 saturates),
 * so host and device reductions of the same inputs agree exactly. */
#ifndef WEFT_DEVICE_TYPES_CUH
#define WEFT_DEVICE_TYPES_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "weft.h"

namespace weft {

/* Bytes of one element of a weft_dtype_t. */
__device__ inline int dtype_size(int t) {
  switch (t) {
  case WEFT_F64:
  case WEFT_I64:
  case WEFT_U64: return 8;
  case WEFT_F32:
  case WEFT_I32:
  case WEFT_U32: return 4;
  case WEFT_F16:
  case WEFT_BF16: return 2;
  default: return 1;
  }
}

struct SmallFmt {
  int eb, mb, bias;
  uint32_t maxbits, nanbits;
};

__device__ inline uint32_t small_encode(float f, SmallFmt F) {
  uint32_t u = __float_as_uint(f);
  uint32_t s = (u >> 31) << (F.eb + F.mb);
  if (isnan(f)) return s | F.nanbits;
  float a = fabsf(f);
  if (a == 0.0f) return s;
  if (isinf(a)) return s | F.maxbits;
  int e;
  frexpf(a, &e);
  int E = e - 1;
  if (E < 1 - F.bias) E = 1 - F.bias;
  float r = rintf(ldexpf(a, F.mb - E));
  if (r > (float)(4u << F.mb)) return s | F.maxbits;
  int64_t bits = ((int64_t)(E + F.bias - 1) << F.mb) + (int64_t)r;
  if (bits > (int64_t)F.maxbits) return s | F.maxbits;
  return s | (uint32_t)bits;
}

__device__ inline float small_decode(uint32_t v, SmallFmt F) {
  uint32_t emask = (1u << F.eb) - 1, mmask = (1u << F.mb) - 1;
  uint32_t sign = v >> (F.eb + F.mb) & 1;
  uint32_t E = v >> F.mb & emask, m = v & mmask;
  uint32_t mag = v & ((1u << (F.eb + F.mb)) - 1);
  float r;
  if (mag == (F.nanbits & ((1u << (F.eb + F.mb)) - 1)))
    r = __int_as_float(0x7fc00000);
  else if (E == 0)
    r = ldexpf((float)m, 1 - F.bias - F.mb);
  else
    r = ldexpf((float)(m | (1u << F.mb)), (int)E - F.bias - F.mb);
  return sign ? -r : r;
}

template <int DT> struct Ty;

/* Types that accumulate by plain conversion: S stored, A accumulated. */
template <typename S_, typename A_> struct Plain {
  typedef S_ S;
  typedef A_ A;
  __device__ static A up(S x) { return x; }
  __device__ static S down(A a) { return (S)a; }
};

template <> struct Ty<WEFT_F32> : Plain<float, float> {};
template <> struct Ty<WEFT_F64> : Plain<double, double> {};
template <> struct Ty<WEFT_F16> {
  typedef uint16_t S;
  typedef float A;
  __device__ static A up(S x) { return __half2float(__ushort_as_half(x)); }
  __device__ static S down(A a) { return __half_as_ushort(__float2half_rn(a)); }
};
template <> struct Ty<WEFT_BF16> {
  typedef uint16_t S;
  typedef float A;
  __device__ static A up(S x) { return __uint_as_float((uint32_t)x << 16); }
  __device__ static S down(A a) {
    uint32_t u = __float_as_uint(a);
    if (isnan(a)) return (S)((u >> 16) | 0x40);
    u += 0x7fff + ((u >> 16) & 1);
    return (S)(u >> 16);
  }
};
template <> struct Ty<WEFT_FP8_E4M3> {
  typedef uint8_t S;
  typedef float A;
  __device__ static A up(S x) { return small_decode(x, SmallFmt{4, 3, 7, 0x7e, 0x7f}); }
  __device__ static S down(A a) { return (S)small_encode(a, SmallFmt{4, 3, 7, 0x7e, 0x7f}); }
};
template <> struct Ty<WEFT_FP8_E5M2> {
  typedef uint8_t S;
  typedef float A;
  __device__ static A up(S x) { return small_decode(x, SmallFmt{5, 2, 15, 0x7b, 0x7e}); }
  __device__ static S down(A a) { return (S)small_encode(a, SmallFmt{5, 2, 15, 0x7b, 0x7e}); }
};
template <> struct Ty<WEFT_I8> : Plain<int8_t, int32_t> {};
template <> struct Ty<WEFT_U8> : Plain<uint8_t, uint32_t> {};
template <> struct Ty<WEFT_I32> : Plain<int32_t, int32_t> {};
template <> struct Ty<WEFT_I64> : Plain<int64_t, int64_t> {};
template <> struct Ty<WEFT_U32> : Plain<uint32_t, uint32_t> {};
template <> struct Ty<WEFT_U64> : Plain<uint64_t, uint64_t> {};

template <typename A> struct Unsigned { typedef A U; };
template <> struct Unsigned<int32_t> { typedef uint32_t U; };
template <> struct Unsigned<int64_t> { typedef uint64_t U; };

template <typename A> __device__ inline constexpr bool is_integer() { return (A)1 / (A)2 == (A)0; }

/* The host's MIN_/MAX_ forms, so NaN behaves the same on both. Integers wrap on SUM and
 * PROD (unsigned arithmetic), as on the host; unsigned types (their own Unsigned) compare
 * as unsigned. */
template <int DT, int OP>
__device__ inline typename Ty<DT>::A combine(typename Ty<DT>::A x, typename Ty<DT>::A y) {
  typedef typename Ty<DT>::A A;
  typedef typename Unsigned<A>::U U;
  if (OP == WEFT_MIN) return y < x ? y : x;
  if (OP == WEFT_MAX) return y > x ? y : x;
  if (is_integer<A>()) {
    if (OP == WEFT_PROD) return (A)((U)x * (U)y);
    return (A)((U)x + (U)y);
  }
  if (OP == WEFT_PROD) return x * y;
  return x + y;
}

/* AVG as the host does it: the sum in the element type, then divided (C's conversions:
 * u32 and u64 divide as unsigned, the narrower types as int). */
template <int DT, int OP>
__device__ inline typename Ty<DT>::S finish(typename Ty<DT>::A acc, int nranks) {
  typedef Ty<DT> T;
  typedef typename T::S S;
  typedef typename T::A A;
  if (OP != WEFT_AVG) return T::down(acc);
  if (is_integer<A>()) {
    S s = T::down(acc);
    return (S)(s / nranks);
  }
  if (DT == WEFT_F32 || DT == WEFT_F64) return T::down(acc / (A)nranks);
  return T::down(T::up(T::down(acc)) / (float)nranks);
}

} // namespace weft

#endif
