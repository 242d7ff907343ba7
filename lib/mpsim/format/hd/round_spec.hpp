// The rounding specification, written once for the host and the CUDA device (docs/design.md: "one header for
// host and device"). round.hpp's round_bits() / decode() are these functions on a Format; kernels/emu.hpp
// calls them on the device (and in its host build) with the same plain structs, so the GPU emulation
// and the CPU specification cannot drift apart.
//
// Plain C++20 wherever nvcc does not compile it (host_device.hpp): no CUDA header, no library type with
// a std::string, nothing a kernel cannot take as a parameter. Written for clarity over speed: it works on
// the integer significand of the input, so no floating-point rounding mode or flag (MXCSR's DAZ / FTZ
// included) affects it. The semantics of every case are documented at round_bits() in round.hpp.
#pragma once

#include <cstdint>

#include "mpsim/format/hd/host_device.hpp"
#include "mpsim/format/hd/philox.hpp"

namespace mpsim::spec {

// NanEncoding's order (format.hpp; round.hpp static_asserts it).
enum Nan : std::uint8_t { kNanIeee, kNanAllOnes, kNanNegZero, kNanNone };
// RoundingMode's order (round.hpp; static_asserted there).
enum Mode : std::uint8_t { kNearestEven, kTowardZero, kUp, kDown, kNearestAway, kToOdd, kStochastic };

// What rounding needs of a Format (round.hpp's format_spec() fills it), trivially copyable.
struct FormatSpec {
  int man_bits = 0;
  int emin = 0;
  int emax = 0;
  int bias = 0;
  std::uint8_t nan = kNanIeee;
  bool has_inf = true;
  bool has_sign = true;
  bool has_zero = true;
  bool flush_subnormals = false;  // Subnormals::flush
  bool saturate = false;          // Overflow::saturate
  std::uint64_t sign_bit = 0;     // 0 in an unsigned format
  std::uint64_t storage_mask = 0;
  std::uint64_t max_finite_bits = 0;
  std::uint64_t inf_bits = 0;
  std::uint64_t nan_bits = 0;
};

// What rounding needs of a Rounding (round.hpp's rounding_spec()).
struct RoundingSpec {
  std::uint8_t mode = kNearestEven;
  bool inputs_subnormal_to_zero = false;  // InputSubnormals::zero (DAZ)
  int sr_bits = 32;                       // 1..32
  std::uint64_t seed = 0;                 // the Philox key (philox.hpp)
};

inline constexpr std::uint64_t kDoubleSign = std::uint64_t{1} << 63;
inline constexpr std::uint64_t kDoubleExpMask = 0x7ff0000000000000ull;
inline constexpr std::uint64_t kDoubleManMask = 0x000fffffffffffffull;

MPSIM_HD bool has_negative_zero(const FormatSpec& f) { return f.has_sign && f.has_zero && f.nan != kNanNegZero; }

// The NaN result of a NaN input (double bits `xbits`).
MPSIM_HD std::uint64_t nan_result(std::uint64_t xbits, const FormatSpec& f) {
  const bool neg = xbits & kDoubleSign;
  switch (f.nan) {
    case kNanIeee: {
      // Keep the sign and the top mantissa bits of the payload, set the quiet bit: what F16C's
      // vcvtps2ph and AVX512-BF16's vcvtneps2bf16 do.
      const std::uint64_t payload = (xbits & kDoubleManMask) >> (52 - f.man_bits);
      return (neg ? f.sign_bit : 0) | f.inf_bits | payload | (std::uint64_t{1} << (f.man_bits - 1));
    }
    case kNanAllOnes: return (neg ? f.sign_bit : 0) | f.nan_bits;
    case kNanNegZero: return f.nan_bits;
    default:
      // No NaN to give: ml_dtypes 0.6 returns its sign-bit pattern (-0) XOR the NaN's sign, so +NaN
      // becomes -0 and -NaN becomes +0 (measured; docs/formats.md).
      return neg ? 0 : f.sign_bit;
  }
}

// A device's unquieted NaN (profile.hpp's NanRule::truncate_payload) for a NaN input (double bits `xbits`)
// into an IEEE-encoded format: the sign and the payload's top man_bits kept as they are, nothing quieted.
// With `minus_one` the encoding is then lowered by one unit (H100 cvt.rna.satfinite.tf32.f32, recorded):
// inf_bits - 1 is max_finite_bits, and the borrow never reaches the sign. Without it a payload that lay only
// in the cut bits leaves ±inf's bits, which a saturating conversion clamps to ±max finite.
MPSIM_HD std::uint64_t truncated_nan(std::uint64_t xbits, const FormatSpec& f, bool minus_one) {
  const std::uint64_t sign = (xbits & kDoubleSign) ? f.sign_bit : 0;
  const std::uint64_t payload = (xbits & kDoubleManMask) >> (52 - f.man_bits);
  if (minus_one) return (sign | f.inf_bits | payload) - 1;
  if (payload != 0) return sign | f.inf_bits | payload;
  return sign | (f.saturate ? f.max_finite_bits : f.inf_bits);
}

// The encoding of an overflowed result of sign `neg` in mode `m`.
MPSIM_HD std::uint64_t overflow_result(bool neg, const FormatSpec& f, std::uint8_t m) {
  const std::uint64_t sign = neg ? f.sign_bit : 0;
  bool to_inf = false;
  if (!f.saturate) {
    switch (m) {
      case kNearestEven:
      case kNearestAway:
      case kStochastic: to_inf = true; break;
      case kUp: to_inf = !neg; break;
      case kDown: to_inf = neg; break;
      default: to_inf = false; break;  // toward zero, to-odd
    }
  }
  if (!to_inf || f.nan == kNanNone) return sign | f.max_finite_bits;
  if (f.has_inf) return sign | f.inf_bits;
  return f.nan == kNanNegZero ? f.nan_bits : (sign | f.nan_bits);
}

// A zero input (or a DAZ-zeroed subnormal): ±0, +0 without -0, NaN in a format without zero (ml_dtypes'
// float8_e8m0fnu).
MPSIM_HD std::uint64_t zero_result(bool neg, const FormatSpec& f) {
  if (!f.has_zero) return f.nan_bits;
  return (neg && has_negative_zero(f)) ? f.sign_bit : 0;
}

// A non-zero input whose rounded magnitude is 0: ±0, or the smallest value (encoding 0) in a format
// without zero, as ml_dtypes' float8_e8m0fnu rounds every positive float below 2^-127.
MPSIM_HD std::uint64_t underflow_result(bool neg, const FormatSpec& f) {
  if (!f.has_zero) return 0;
  return (neg && has_negative_zero(f)) ? f.sign_bit : 0;
}

// Rounds the double with bits `xbits` to `f` under `r`; `index` keys the stochastic generator.
MPSIM_HD std::uint64_t round_double_bits(std::uint64_t xbits, const FormatSpec& f, const RoundingSpec& r,
                                         std::uint64_t index) {
  const bool neg = xbits & kDoubleSign;
  const std::uint64_t ax = xbits & ~kDoubleSign;

  if (ax >= kDoubleExpMask) {
    if (ax > kDoubleExpMask) return nan_result(xbits, f);
    if (neg && !f.has_sign) return f.nan_bits;
    if (f.saturate || f.nan == kNanNone) return (neg ? f.sign_bit : 0) | f.max_finite_bits;
    if (f.has_inf) return (neg ? f.sign_bit : 0) | f.inf_bits;
    return f.nan == kNanNegZero ? f.nan_bits : ((neg ? f.sign_bit : 0) | f.nan_bits);
  }
  if (ax == 0) return zero_result(neg, f);
  // An unsigned format has no negative numbers: ml_dtypes gives NaN (float8_e8m0fnu).
  if (neg && !f.has_sign) return f.nan_bits;
  const int biased = static_cast<int>(ax >> 52);
  if (biased == 0 && r.inputs_subnormal_to_zero) return zero_result(neg, f);

  // x = sig * 2^(e - 52) with sig in [2^52, 2^53): normalise double subnormals.
  std::uint64_t sig;
  int e;
  if (biased == 0) {
    const int lz = hd::clz64(ax) - 11;
    sig = ax << lz;
    e = -1022 - lz;
  } else {
    sig = (ax & kDoubleManMask) | (std::uint64_t{1} << 52);
    e = biased - 1023;
  }

  // The quantum of the result is 2^qe: the format's ulp at x's binade, never finer than its smallest
  // subnormal. `shift` is how many low bits of sig fall below it.
  const int m = f.man_bits;
  int qe = (e > f.emin ? e : f.emin) - m;
  const int shift = qe - (e - 52);  // >= 0 because m <= 52

  std::uint64_t kept;
  bool inexact, above_half, at_half;
  std::uint32_t frac32;  // the discarded fraction of a quantum, in units of 2^-32 (truncated)
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
    frac32 =
        shift <= 32 ? static_cast<std::uint32_t>(rem << (32 - shift)) : static_cast<std::uint32_t>(rem >> (shift - 32));
  } else {
    // sig < 2^53 <= 2^(shift - 11): far below half a quantum.
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
      // Round up when the truncated fraction plus a uniform random number carries out of sr_bits bits:
      // probability frac/2^sr_bits.
      const int b = r.sr_bits;
      const std::uint64_t frac = frac32 >> (32 - b);
      const std::uint64_t rnd = philox::sr_word(r.seed, index, b) >> (32 - b);  // the stream of b bits
      up = (frac + rnd) >> b;
      break;
    }
    default: break;
  }
  std::uint64_t mag = kept + up;  // the rounded magnitude is mag * 2^qe, mag <= 2^(m+1)
  if (mag == 0) return underflow_result(neg, f);
  if (mag >> (m + 1)) {  // carried into the next binade
    mag >>= 1;
    ++qe;
  }
  const std::uint64_t sign = neg ? f.sign_bit : 0;
  const bool is_normal = mag >> m;
  if (!is_normal) {
    // Subnormal result (qe == emin - m).
    if (f.flush_subnormals) return zero_result(neg, f);
    return sign | mag;
  }
  const int exponent = qe + m;  // of the leading bit
  if (exponent > f.emax) return overflow_result(neg, f, r.mode);
  const std::uint64_t enc = (std::uint64_t(exponent + f.bias) << m) | (mag & ((std::uint64_t{1} << m) - 1));
  if (enc > f.max_finite_bits) return overflow_result(neg, f, r.mode);
  return sign | enc;
}

// float -> double by the bits: not cvtss2sd, which DAZ would make read subnormals as 0 (round.hpp).
MPSIM_HD std::uint64_t widen_float_bits(std::uint32_t b) {
  const std::uint64_t sign = std::uint64_t{b >> 31} << 63;
  const std::uint32_t e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
  if (e == 0xffu) return sign | kDoubleExpMask | (std::uint64_t{m} << 29);
  if (e != 0) return sign | (std::uint64_t{e + (1023u - 127u)} << 52) | (std::uint64_t{m} << 29);
  if (m == 0) return sign;
  // A float subnormal m * 2^-149 with its top bit at p: 1.f * 2^(p - 149), a normal double.
  const int p = 63 - hd::clz64(m);
  return sign | (static_cast<std::uint64_t>(p - 149 + 1023) << 52) | ((std::uint64_t{m} << (52 - p)) & kDoubleManMask);
}

// Rounds the float with bits `b`: "subnormal inputs are zero" applies at the float level (float
// subnormals are normal doubles), and a NaN's payload is carried over by hand.
MPSIM_HD std::uint64_t round_float_bits(std::uint32_t b, const FormatSpec& f, const RoundingSpec& r,
                                        std::uint64_t index) {
  if (r.inputs_subnormal_to_zero && (b & 0x7f800000u) == 0) return zero_result(b >> 31, f);
  return round_double_bits(widen_float_bits(b), f, r, index);
}

// Classification of an encoding.
MPSIM_HD bool is_nan_enc(std::uint64_t bits, const FormatSpec& f) {
  bits &= f.storage_mask;
  const std::uint64_t mag = bits & ~f.sign_bit;
  switch (f.nan) {
    case kNanIeee: return mag > f.inf_bits;
    case kNanAllOnes: return mag == f.nan_bits;
    case kNanNegZero: return bits == f.nan_bits;
    default: return false;
  }
}
MPSIM_HD bool is_inf_enc(std::uint64_t bits, const FormatSpec& f) {
  return f.has_inf && (bits & f.storage_mask & ~f.sign_bit) == f.inf_bits;
}

// The value of an encoding as double bits, exactly (every format that fits a double decodes exactly: its
// quanta are at least 2^-1074). NaNs: IEEE encodings keep sign and payload (shifted up); the others give
// double's quiet NaN, negative for a negative all_ones NaN.
MPSIM_HD std::uint64_t decode_bits(std::uint64_t bits, const FormatSpec& f) {
  bits &= f.storage_mask;
  const bool neg = bits & f.sign_bit;
  const std::uint64_t mag = bits & ~f.sign_bit;
  const int m = f.man_bits;
  const std::uint64_t man_mask = (std::uint64_t{1} << m) - 1;
  if (is_nan_enc(bits, f)) {
    if (f.nan == kNanIeee) return (neg ? kDoubleSign : 0) | kDoubleExpMask | ((mag & man_mask) << (52 - m));
    return (neg && f.nan == kNanAllOnes ? kDoubleSign : 0) | kDoubleExpMask | (std::uint64_t{1} << 51);
  }
  if (is_inf_enc(bits, f)) return (neg ? kDoubleSign : 0) | kDoubleExpMask;
  const std::uint64_t field = mag >> m;
  const std::uint64_t frac = mag & man_mask;
  // value = significand * 2^exp2 (exponent field 0 holds subnormals only in a format with zero).
  const bool sub = field == 0 && f.has_zero;
  std::uint64_t significand = sub ? frac : (frac | (man_mask + 1));
  int exp2 = (sub ? f.emin : static_cast<int>(field) - f.bias) - m;
  if (significand == 0) return neg ? kDoubleSign : 0;
  const int lz = hd::clz64(significand) - 11;  // normalise to 53 bits
  significand <<= lz;
  exp2 -= lz;
  const int e = exp2 + 52;  // significand * 2^exp2 = 1.f * 2^e
  std::uint64_t d;
  if (e >= -1022) d = (std::uint64_t(e + 1023) << 52) | (significand & kDoubleManMask);
  else d = significand >> (-1022 - e);  // a double subnormal, exact (see above)
  return (neg ? kDoubleSign : 0) | d;
}

}  // namespace mpsim::spec
