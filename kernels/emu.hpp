// The emulation, compiled for the host AND the device: a port of round_bits() (lib/mpsim/format/round.cpp,
// the specification) and correctly rounded fp16/bf16 arithmetic built on it. The GPU runs it next to the
// hardware intrinsics so that an exhaustive 2^32 comparison never leaves the device; the host tests
// (tests/kernels/emu_test.cpp) check it bit for bit against round_bits().
//
// Plain C++20 when not compiled by nvcc: no CUDA header, no library dependency, so host code and the
// CPU-side digest recomputation use the very same functions.
#pragma once

#include <cstdint>

#include <bit>
#include <cmath>

#if defined(__CUDACC__)
#define MPSIM_HD __host__ __device__ inline
#else
#define MPSIM_HD inline
#endif

namespace mpsim::emu {

// What round_bits needs from a Format, as a trivially copyable struct (a kernel parameter), plus the NaN
// rule of a device profile (lib/mpsim/format/profile.hpp): where `canonical_nan` is set, every NaN result
// is `canonical_nan_bits` instead of the IEEE payload-keeping NaN.
struct DevFormat {
  int man_bits = 0;
  int emin = 0;
  int emax = 0;
  int bias = 0;
  bool has_inf = true;
  std::uint8_t nan = 0;  // 0 ieee, 1 all_ones, 2 neg_zero (NanEncoding's order)
  bool flush_subnormals = false;
  bool saturate = false;
  bool canonical_nan = false;       // NaN inputs (and invalid operations) give canonical_nan_bits
  bool canonical_made_nan = false;  // ... and so do NaNs made by overflow / inf into a format without inf
  bool truncate_nan = false;        // NanRule::truncate_payload: NaN inputs cut to the format, not quieted
  bool sat_zero_positive = false;   // the .sat forms write +0 for a -0 result
  std::uint64_t sign_bit = 0;
  std::uint64_t max_finite_bits = 0;
  std::uint64_t inf_bits = 0;
  std::uint64_t nan_bits = 0;
  std::uint64_t canonical_nan_bits = 0;
};

// RoundingMode's order (round.hpp).
enum Mode : std::uint8_t { kNearestEven, kTowardZero, kUp, kDown, kNearestAway, kToOdd, kStochastic };

struct DevRounding {
  std::uint8_t mode = kNearestEven;
  bool inputs_subnormal_to_zero = false;  // InputSubnormals::zero (DAZ)
  int sr_bits = 32;
  std::uint32_t key_lo = 0;  // sr_key(seed)
  std::uint32_t key_hi = 0;
};

// ---- bit helpers that compile on both sides ----
MPSIM_HD std::uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  return std::bit_cast<std::uint64_t>(x);
#endif
}
MPSIM_HD double double_of(std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  return std::bit_cast<double>(b);
#endif
}
MPSIM_HD std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<std::uint32_t>(x);
#endif
}
MPSIM_HD float float_of(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}
MPSIM_HD int clz64(std::uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(x));
#else
  return std::countl_zero(x);
#endif
}
MPSIM_HD double fma_d(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
MPSIM_HD double sqrt_d(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// The stochastic-rounding generator of round.hpp (lowbias32 over index + per-block offset).
MPSIM_HD std::uint32_t lowbias32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}
MPSIM_HD std::uint32_t sr_random(const DevRounding& r, std::uint64_t index) {
  const std::uint32_t offset = r.key_lo + lowbias32(static_cast<std::uint32_t>(index >> 32) ^ r.key_hi);
  return lowbias32(static_cast<std::uint32_t>(index) + offset);
}

constexpr std::uint64_t kDoubleSign = std::uint64_t{1} << 63;
constexpr std::uint64_t kDoubleExpMask = 0x7ff0000000000000ull;
constexpr std::uint64_t kDoubleManMask = 0x000fffffffffffffull;

MPSIM_HD std::uint64_t nan_result(std::uint64_t xbits, const DevFormat& f) {
  if (f.canonical_nan) return f.canonical_nan_bits;
  const bool neg = xbits & kDoubleSign;
  if (f.truncate_nan && f.nan == 0) {
    // profile.cpp's truncated_nan(): the payload's top bits as they are; none left: ±inf, or ±max finite.
    const std::uint64_t payload = (xbits & kDoubleManMask) >> (52 - f.man_bits);
    if (payload != 0) return (neg ? f.sign_bit : 0) | f.inf_bits | payload;
    return (neg ? f.sign_bit : 0) | (f.saturate ? f.max_finite_bits : f.inf_bits);
  }
  if (f.nan == 0) {
    const std::uint64_t payload = (xbits & kDoubleManMask) >> (52 - f.man_bits);
    return (neg ? f.sign_bit : 0) | f.inf_bits | payload | (std::uint64_t{1} << (f.man_bits - 1));
  }
  if (f.nan == 1) return (neg ? f.sign_bit : 0) | f.nan_bits;
  return f.nan_bits;
}

// A NaN produced by an overflow or an infinite input in a format without inf: the profile's canonical
// NaN applies to it too (what the device writes is one pattern whatever made the NaN).
MPSIM_HD std::uint64_t made_nan(bool neg, const DevFormat& f) {
  if (f.canonical_made_nan) return f.canonical_nan_bits;
  return f.nan == 2 ? f.nan_bits : ((neg ? f.sign_bit : 0) | f.nan_bits);
}

MPSIM_HD std::uint64_t overflow_result(bool neg, const DevFormat& f, std::uint8_t m) {
  const std::uint64_t sign = neg ? f.sign_bit : 0;
  bool to_inf = false;
  if (!f.saturate) {
    switch (m) {
      case kNearestEven:
      case kNearestAway:
      case kStochastic: to_inf = true; break;
      case kUp: to_inf = !neg; break;
      case kDown: to_inf = neg; break;
      default: to_inf = false; break;
    }
  }
  if (!to_inf) return sign | f.max_finite_bits;
  if (f.has_inf) return sign | f.inf_bits;
  return made_nan(neg, f);
}

MPSIM_HD std::uint64_t zero_result(bool neg, const DevFormat& f) { return (neg && f.nan != 2) ? f.sign_bit : 0; }

// round_bits(double, ...) of round.cpp, line for line.
MPSIM_HD std::uint64_t round_double(double x, const DevFormat& f, const DevRounding& r, std::uint64_t index = 0) {
  const std::uint64_t xbits = bits_of(x);
  const bool neg = xbits & kDoubleSign;
  const std::uint64_t ax = xbits & ~kDoubleSign;
  if (ax >= kDoubleExpMask) {
    if (ax > kDoubleExpMask) return nan_result(xbits, f);
    if (f.saturate) return (neg ? f.sign_bit : 0) | f.max_finite_bits;
    if (f.has_inf) return (neg ? f.sign_bit : 0) | f.inf_bits;
    return made_nan(neg, f);
  }
  if (ax == 0) return zero_result(neg, f);
  const int biased = static_cast<int>(ax >> 52);
  if (biased == 0 && r.inputs_subnormal_to_zero) return zero_result(neg, f);
  std::uint64_t sig;
  int e;
  if (biased == 0) {
    const int lz = clz64(ax) - 11;
    sig = ax << lz;
    e = -1022 - lz;
  } else {
    sig = (ax & kDoubleManMask) | (std::uint64_t{1} << 52);
    e = biased - 1023;
  }
  const int m = f.man_bits;
  int qe = (e > f.emin ? e : f.emin) - m;
  const int shift = qe - (e - 52);
  std::uint64_t kept;
  bool inexact, above_half, at_half;
  std::uint32_t frac32;
  if (shift == 0) {
    kept = sig;
    inexact = above_half = at_half = false;
    frac32 = 0;
  } else if (shift < 64) {
    kept = sig >> shift;
    const std::uint64_t rem = sig & ((std::uint64_t{1} << shift) - 1);
    const std::uint64_t half = std::uint64_t{1} << (shift - 1);
    inexact = rem != 0;
    above_half = rem > half;
    at_half = rem == half;
    frac32 = shift <= 32 ? static_cast<std::uint32_t>(rem << (32 - shift))
                         : static_cast<std::uint32_t>(rem >> (shift - 32));
  } else {
    kept = 0;
    inexact = true;
    above_half = at_half = false;
    frac32 = shift - 32 < 64 ? static_cast<std::uint32_t>(sig >> (shift - 32)) : 0;
  }
  std::uint64_t up = 0;
  switch (r.mode) {
    case kNearestEven: up = above_half || (at_half && (kept & 1)); break;
    case kNearestAway: up = above_half || at_half; break;
    case kTowardZero: break;
    case kUp: up = inexact && !neg; break;
    case kDown: up = inexact && neg; break;
    case kToOdd: kept |= inexact ? 1 : 0; break;
    case kStochastic: {
      const int b = r.sr_bits;
      const std::uint64_t frac = frac32 >> (32 - b);
      const std::uint64_t rnd = sr_random(r, index) >> (32 - b);
      up = (frac + rnd) >> b;
      break;
    }
    default: break;
  }
  std::uint64_t mag = kept + up;
  if (mag == 0) return zero_result(neg, f);
  if (mag >> (m + 1)) {
    mag >>= 1;
    ++qe;
  }
  const std::uint64_t sign = neg ? f.sign_bit : 0;
  if (!(mag >> m)) {
    if (f.flush_subnormals) return zero_result(neg, f);
    return sign | mag;
  }
  const int exponent = qe + m;
  if (exponent > f.emax) return overflow_result(neg, f, r.mode);
  const std::uint64_t enc = (std::uint64_t(exponent + f.bias) << m) | (mag & ((std::uint64_t{1} << m) - 1));
  if (enc > f.max_finite_bits) return overflow_result(neg, f, r.mode);
  return sign | enc;
}

// round_bits(float, ...) of round.cpp: DAZ at the float level, NaN payload built by hand.
MPSIM_HD std::uint64_t round_float(std::uint32_t b, const DevFormat& f, const DevRounding& r, std::uint64_t index = 0) {
  if (r.inputs_subnormal_to_zero && (b & 0x7f800000u) == 0) return zero_result(b >> 31, f);
  if ((b & 0x7fffffffu) > 0x7f800000u) {
    const std::uint64_t xb = (std::uint64_t(b >> 31) << 63) | kDoubleExpMask | (std::uint64_t(b & 0x7fffffu) << 29);
    return nan_result(xb, f);
  }
  return round_double(static_cast<double>(float_of(b)), f, r, index);
}

// decode() of round.cpp for IEEE-encoded formats up to 16 bits (fp16, bf16, fp8 e5m2) and all_ones ones
// (e4m3): the exact value as a double. NaNs decode to a quiet double NaN with the payload shifted up.
MPSIM_HD bool is_nan_enc(std::uint64_t bits, const DevFormat& f) {
  const std::uint64_t mag = bits & ~f.sign_bit;
  if (f.nan == 0) return mag > f.inf_bits;
  if (f.nan == 1) return mag == f.nan_bits;
  return bits == f.nan_bits;
}
MPSIM_HD double decode(std::uint64_t bits, const DevFormat& f) {
  const bool neg = bits & f.sign_bit;
  const std::uint64_t mag = bits & ~f.sign_bit;
  const int m = f.man_bits;
  const std::uint64_t man_mask = (std::uint64_t{1} << m) - 1;
  if (is_nan_enc(bits, f)) {
    if (f.nan == 0) return double_of((neg ? kDoubleSign : 0) | kDoubleExpMask | ((mag & man_mask) << (52 - m)));
    return double_of((neg && f.nan == 1 ? kDoubleSign : 0) | kDoubleExpMask | (std::uint64_t{1} << 51));
  }
  if (f.has_inf && mag == f.inf_bits) return double_of((neg ? kDoubleSign : 0) | kDoubleExpMask);
  const int field = static_cast<int>(mag >> m);
  const std::uint64_t frac = mag & man_mask;
  // value = significand * 2^exp with exp >= -1074 for every format that fits a double: build it exactly
  // from bits (no ldexp on the device).
  std::uint64_t significand = field == 0 ? frac : (frac | (man_mask + 1));
  int exp2 = (field == 0 ? f.emin : field - f.bias) - m;
  if (significand == 0) return neg ? -0.0 : 0.0;
  const int lz = clz64(significand) - 11;  // normalise to 53 bits
  significand <<= lz;
  exp2 -= lz;
  // significand * 2^exp2 = 1.f * 2^(exp2 + 52)
  const int e = exp2 + 52;
  std::uint64_t d;
  if (e >= -1022) {
    d = (std::uint64_t(e + 1023) << 52) | (significand & kDoubleManMask);
  } else {
    d = significand >> (-1022 - e);  // exact: our formats' quanta are >= 2^-1074
  }
  return double_of((neg ? kDoubleSign : 0) | d);
}

// ---- correctly rounded arithmetic ----------------------------------------------------------------
// Every operation is computed in double and rounded to odd there (Boldo & Melquiond, "When double
// rounding is odd", 2005: rounding to odd at p + 2 bits or more, then to p bits in any mode, equals one
// correct rounding): the residual of each double operation is exact (TwoSum; the FMA remainder for
// products, quotients and roots), so its sign says which way the exact result lies.
enum Op : std::uint8_t { kAdd, kSub, kMul, kDiv, kFma, kSqrt };

MPSIM_HD double round_to_odd(double s, double residual) {
  if (residual == 0) return s;
  std::uint64_t b = bits_of(s);
  if (b & 1) return s;
  const bool away = (residual > 0) == (s > 0);  // the exact value is farther from zero than s
  return double_of(away ? b + 1 : b - 1);
}

// x86's "QNaN floating-point indefinite" (Intel SDM vol. 1, 4.8.3.7): the default NaN of an invalid
// operation is negative. Only used where the profile keeps payloads.
MPSIM_HD std::uint64_t invalid_nan(const DevFormat& f) {
  if (f.canonical_nan) return f.canonical_nan_bits;
  if (f.nan == 0) return f.sign_bit | f.nan_bits;
  return made_nan(true, f);
}

// a op b (op c): operands and result are encodings of `f`. NaN operands propagate the first NaN operand
// (quieted, payload kept: x86 SSE's rule) unless the profile canonicalises.
MPSIM_HD std::uint64_t arith(Op op, std::uint64_t ab, std::uint64_t bb, std::uint64_t cb, const DevFormat& f,
                             const DevRounding& r, std::uint64_t index = 0) {
  const double a = decode(ab, f), b = decode(bb, f), c = decode(cb, f);
  const int operands = op == kSqrt ? 1 : op == kFma ? 3 : 2;
  if (a != a) return nan_result(bits_of(a), f);
  if (operands >= 2 && b != b) return nan_result(bits_of(b), f);
  if (operands == 3 && c != c) return nan_result(bits_of(c), f);
  double s = 0, residual = 0;
  const bool rd = r.mode == kDown;
  auto sum = [&](double p, double q) {  // p + q with exact residual and IEEE signs of zero
    s = p + q;
    if (s != s) return;  // inf - inf
    if (s - s != 0) { residual = 0; return; }  // an infinite operand: exact
    const double qq = s - p;
    residual = (p - (s - qq)) + (q - qq);  // Knuth's TwoSum
    if (s == 0 && residual == 0) {
      const bool pn = bits_of(p) >> 63, qn = bits_of(q) >> 63;
      const bool neg = (p == 0 && q == 0 && pn == qn) ? pn : rd;
      s = neg ? -0.0 : 0.0;
    }
  };
  switch (op) {
    case kAdd: sum(a, b); break;
    case kSub: sum(a, -b); break;
    case kMul:
      s = a * b;
      residual = (s - s == 0) ? fma_d(a, b, -s) : 0;
      break;
    case kDiv:
      s = a / b;
      if (s - s == 0 && s != 0 && b - b == 0) {
        // a/b - s = rem/b with rem = a - s*b exact (the FMA remainder).
        const double rem = fma_d(-s, b, a);
        residual = rem == 0 ? 0.0 : ((rem > 0) == (b > 0) ? 1.0 : -1.0);
      }
      break;
    case kSqrt:
      s = sqrt_d(a);
      residual = (s - s == 0 && s > 0) ? fma_d(-s, s, a) : 0;
      break;
    case kFma: {
      const double p = a * b;  // exact: 2 * (man_bits + 1) <= 53 bits for the 16-bit formats
      if (p != p) { s = p; break; }
      sum(p, c);
      break;
    }
  }
  if (s != s) return invalid_nan(f);
  return round_double(round_to_odd(s, residual), f, r, index);
}

// The PTX ".sat" forms (add.sat.f16 ...): the result clamped to [0, 1], NaN results to +0 (PTX ISA,
// "Half Precision Floating Point Instructions: add"); -0 stays -0 unless the profile says +0 (the H100
// does: arith.hpp's saturate_unit_bits).
MPSIM_HD std::uint64_t saturate01(std::uint64_t bits, const DevFormat& f) {
  if (is_nan_enc(bits, f)) return 0;
  if (bits == f.sign_bit && !f.sat_zero_positive) return bits;
  if (bits & f.sign_bit) return 0;
  const double v = decode(bits, f);
  if (v > 1.0) {
    // the encoding of 1.0: exponent field = bias, mantissa 0
    return std::uint64_t(f.bias) << f.man_bits;
  }
  return bits;
}

}  // namespace mpsim::emu
