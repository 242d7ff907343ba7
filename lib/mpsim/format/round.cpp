// The scalar specification of rounding. Written for clarity over speed: the bulk engine is the fast
// path and is tested bit for bit against this file. It works on the integer significand of the double
// input, so no floating-point rounding mode or flag of the machine affects it.
#include "mpsim/format/round.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "mpsim/error.hpp"

namespace mpsim {

void validate(const Rounding& r) {
  if (r.sr_bits < 1 || r.sr_bits > 32)
    throw Error("stochastic rounding: the number of random bits must be 1..32, got " + std::to_string(r.sr_bits));
}

std::string_view short_name(RoundingMode m) {
  switch (m) {
    case RoundingMode::nearest_even: return "rne";
    case RoundingMode::toward_zero: return "rtz";
    case RoundingMode::up: return "ru";
    case RoundingMode::down: return "rd";
    case RoundingMode::nearest_away: return "rna";
    case RoundingMode::to_odd: return "rto";
    case RoundingMode::stochastic: return "sr";
  }
  return "?";
}

std::string_view ieee_name(RoundingMode m) {
  switch (m) {
    case RoundingMode::nearest_even: return "roundTiesToEven";
    case RoundingMode::toward_zero: return "roundTowardZero";
    case RoundingMode::up: return "roundTowardPositive";
    case RoundingMode::down: return "roundTowardNegative";
    case RoundingMode::nearest_away: return "roundTiesToAway";
    case RoundingMode::to_odd: return "roundToOdd";
    case RoundingMode::stochastic: return "roundStochastic";
  }
  return "?";
}

RoundingMode parse_rounding_mode(std::string_view s) {
  static constexpr RoundingMode all[] = {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up,
                                         RoundingMode::down,         RoundingMode::nearest_away, RoundingMode::to_odd,
                                         RoundingMode::stochastic};
  static constexpr std::string_view long_names[] = {"nearest-even", "toward-zero", "up", "down",
                                                    "nearest-away", "to-odd", "stochastic"};
  for (int i = 0; i < 7; ++i)
    if (s == short_name(all[i]) || s == ieee_name(all[i]) || s == long_names[i]) return all[i];
  throw Error("unknown rounding mode '" + std::string(s) + "' (known: rne rtz ru rd rna rto sr)");
}

namespace {

constexpr std::uint64_t kDoubleSign = std::uint64_t{1} << 63;
constexpr std::uint64_t kDoubleExpMask = 0x7ff0000000000000ull;
constexpr std::uint64_t kDoubleManMask = 0x000fffffffffffffull;

std::uint64_t nan_result(std::uint64_t xbits, const Format& f) {
  const bool neg = xbits & kDoubleSign;
  switch (f.nan) {
    case NanEncoding::ieee: {
      // Keep the sign and the top mantissa bits of the payload, set the quiet bit: what F16C's
      // vcvtps2ph and AVX512-BF16's vcvtneps2bf16 do.
      const std::uint64_t payload = (xbits & kDoubleManMask) >> (52 - f.man_bits);
      return (neg ? f.sign_bit() : 0) | f.inf_bits | payload | (std::uint64_t{1} << (f.man_bits - 1));
    }
    case NanEncoding::all_ones: return (neg ? f.sign_bit() : 0) | f.nan_bits;
    case NanEncoding::neg_zero: return f.nan_bits;
    case NanEncoding::none:
      // No NaN to give: ml_dtypes 0.6 returns its sign-bit pattern (-0) XOR the NaN's sign, so +NaN
      // becomes -0 and -NaN becomes +0 (measured; docs/formats.md).
      return neg ? 0 : f.sign_bit();
  }
  return f.nan_bits;
}

// The encoding of an overflowed result of sign `neg` in mode `m`.
std::uint64_t overflow_result(bool neg, const Format& f, RoundingMode m) {
  const std::uint64_t sign = neg ? f.sign_bit() : 0;
  bool to_inf = false;
  if (f.overflow == Overflow::to_inf) {
    switch (m) {
      case RoundingMode::nearest_even:
      case RoundingMode::nearest_away:
      case RoundingMode::stochastic: to_inf = true; break;
      case RoundingMode::toward_zero:
      case RoundingMode::to_odd: to_inf = false; break;
      case RoundingMode::up: to_inf = !neg; break;
      case RoundingMode::down: to_inf = neg; break;
    }
  }
  if (!to_inf || f.nan == NanEncoding::none) return sign | f.max_finite_bits;
  if (f.has_inf) return sign | f.inf_bits;
  return f.nan == NanEncoding::neg_zero ? f.nan_bits : (sign | f.nan_bits);
}

// A zero input (or a DAZ-zeroed subnormal): ±0, +0 without -0, NaN in a format without zero (ml_dtypes'
// float8_e8m0fnu).
std::uint64_t zero_result(bool neg, const Format& f) {
  if (!f.has_zero) return f.nan_bits;
  return (neg && f.has_negative_zero()) ? f.sign_bit() : 0;
}

// A non-zero input whose rounded magnitude is 0: ±0, or the smallest value (encoding 0) in a format
// without zero, as ml_dtypes' float8_e8m0fnu rounds every positive float below 2^-127.
std::uint64_t underflow_result(bool neg, const Format& f) {
  if (!f.has_zero) return 0;
  return (neg && f.has_negative_zero()) ? f.sign_bit() : 0;
}

}  // namespace

std::uint64_t round_bits(double x, const Format& f, const Rounding& r, std::uint64_t index) {
  const std::uint64_t xbits = std::bit_cast<std::uint64_t>(x);
  const bool neg = xbits & kDoubleSign;
  const std::uint64_t ax = xbits & ~kDoubleSign;

  if (ax >= kDoubleExpMask) {
    if (ax > kDoubleExpMask) return nan_result(xbits, f);
    if (neg && !f.has_sign) return f.nan_bits;
    if (f.overflow == Overflow::saturate || f.nan == NanEncoding::none)
      return (neg ? f.sign_bit() : 0) | f.max_finite_bits;
    if (f.has_inf) return (neg ? f.sign_bit() : 0) | f.inf_bits;
    return f.nan == NanEncoding::neg_zero ? f.nan_bits : ((neg ? f.sign_bit() : 0) | f.nan_bits);
  }
  if (ax == 0) return zero_result(neg, f);
  // An unsigned format has no negative numbers: ml_dtypes gives NaN (float8_e8m0fnu).
  if (neg && !f.has_sign) return f.nan_bits;
  const int biased = static_cast<int>(ax >> 52);
  if (biased == 0 && r.input_subnormals == InputSubnormals::zero) return zero_result(neg, f);

  // x = sig * 2^(e - 52) with sig in [2^52, 2^53): normalise double subnormals.
  std::uint64_t sig;
  int e;
  if (biased == 0) {
    const int lz = std::countl_zero(ax) - 11;
    sig = ax << lz;
    e = -1022 - lz;
  } else {
    sig = (ax & kDoubleManMask) | (std::uint64_t{1} << 52);
    e = biased - 1023;
  }

  // The quantum of the result is 2^qe: the format's ulp at x's binade, never finer than its smallest
  // subnormal. `shift` is how many low bits of sig fall below it.
  const int m = f.man_bits;
  int qe = std::max(e, f.emin) - m;
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
    frac32 = shift <= 32 ? static_cast<std::uint32_t>(rem << (32 - shift))
                         : static_cast<std::uint32_t>(rem >> (shift - 32));
  } else {
    // sig < 2^53 <= 2^(shift - 11): far below half a quantum.
    kept = 0;
    inexact = true;
    above_half = at_half = false;
    frac32 = shift - 32 < 64 ? static_cast<std::uint32_t>(sig >> (shift - 32)) : 0;
  }

  std::uint64_t up = 0;
  switch (r.mode) {
    case RoundingMode::nearest_even: up = above_half || (at_half && (kept & 1)); break;
    case RoundingMode::nearest_away: up = above_half || at_half; break;
    case RoundingMode::toward_zero: break;
    case RoundingMode::up: up = inexact && !neg; break;
    case RoundingMode::down: up = inexact && neg; break;
    case RoundingMode::to_odd: kept |= inexact ? 1 : 0; break;
    case RoundingMode::stochastic: {
      // Round up when the truncated fraction plus a uniform random number carries out of sr_bits bits:
      // probability frac/2^sr_bits.
      const int b = r.sr_bits;
      const std::uint64_t frac = frac32 >> (32 - b);
      const std::uint64_t rnd = sr_random(r.seed, index) >> (32 - b);
      up = (frac + rnd) >> b;
      break;
    }
  }
  std::uint64_t mag = kept + up;  // the rounded magnitude is mag * 2^qe, mag <= 2^(m+1)
  if (mag == 0) return underflow_result(neg, f);
  if (mag >> (m + 1)) {  // carried into the next binade
    mag >>= 1;
    ++qe;
  }
  const std::uint64_t sign = neg ? f.sign_bit() : 0;
  const bool is_normal = mag >> m;
  if (!is_normal) {
    // Subnormal result (qe == emin - m).
    if (f.subnormals == Subnormals::flush) return zero_result(neg, f);
    return sign | mag;
  }
  const int exponent = qe + m;  // of the leading bit
  if (exponent > f.emax) return overflow_result(neg, f, r.mode);
  const std::uint64_t enc = (std::uint64_t(exponent + f.bias) << m) | (mag & ((std::uint64_t{1} << m) - 1));
  if (enc > f.max_finite_bits) return overflow_result(neg, f, r.mode);
  return sign | enc;
}

namespace {

// float -> double by the bits (see round.hpp: not cvtss2sd, which DAZ would make read subnormals as 0).
double widen_exact(std::uint32_t b) {
  const std::uint64_t sign = std::uint64_t{b >> 31} << 63;
  const std::uint32_t e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
  if (e == 0xffu) return std::bit_cast<double>(sign | kDoubleExpMask | (std::uint64_t{m} << 29));
  if (e != 0) return std::bit_cast<double>(sign | (std::uint64_t{e + (1023u - 127u)} << 52) | (std::uint64_t{m} << 29));
  if (m == 0) return std::bit_cast<double>(sign);
  // A float subnormal m * 2^-149 with its top bit at p: 1.f * 2^(p - 149), a normal double.
  const int p = 31 - std::countl_zero(m);
  return std::bit_cast<double>(sign | (static_cast<std::uint64_t>(p - 149 + 1023) << 52) |
                               ((std::uint64_t{m} << (52 - p)) & kDoubleManMask));
}

// double -> float for a value float holds exactly, by the bits below float's normal range (not
// cvtsd2ss, which FTZ would make flush a float subnormal result).
float narrow_exact(double d) {
  const double a = std::fabs(d);
  if (a != 0 && a < 0x1p-126) {
    const auto k = static_cast<std::uint32_t>(a * 0x1p149);  // a normal double times 2^149: exact
    return std::bit_cast<float>((std::signbit(d) ? 0x80000000u : 0u) | k);
  }
  return static_cast<float>(d);
}

}  // namespace

std::uint64_t round_bits(float x, const Format& f, const Rounding& r, std::uint64_t index) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(x);
  if (r.input_subnormals == InputSubnormals::zero && (b & 0x7f800000u) == 0) {
    // Float subnormals are normal doubles: apply "subnormal inputs are zero" at the float level.
    return zero_result(b >> 31, f);
  }
  if ((b & 0x7fffffffu) > 0x7f800000u) {
    // Build the double NaN by hand so the payload survives regardless of how the compiler converts
    // signalling NaNs.
    const std::uint64_t xb = (std::uint64_t(b >> 31) << 63) | kDoubleExpMask | (std::uint64_t(b & 0x7fffffu) << 29);
    return nan_result(xb, f);
  }
  return round_bits(widen_exact(b), f, r, index);
}

bool is_nan_bits(std::uint64_t bits, const Format& f) {
  bits &= f.storage_mask();
  const std::uint64_t mag = bits & ~f.sign_bit();
  switch (f.nan) {
    case NanEncoding::ieee: return mag > f.inf_bits;
    case NanEncoding::all_ones: return mag == f.nan_bits;
    case NanEncoding::neg_zero: return bits == f.nan_bits;
    case NanEncoding::none: return false;
  }
  return false;
}

bool is_inf_bits(std::uint64_t bits, const Format& f) {
  return f.has_inf && (bits & f.storage_mask() & ~f.sign_bit()) == f.inf_bits;
}

double decode(std::uint64_t bits, const Format& f) {
  bits &= f.storage_mask();
  const bool neg = bits & f.sign_bit();
  const std::uint64_t mag = bits & ~f.sign_bit();
  const int m = f.man_bits;
  const std::uint64_t man_mask = (std::uint64_t{1} << m) - 1;
  if (is_nan_bits(bits, f)) {
    if (f.nan == NanEncoding::ieee) {
      const std::uint64_t d = (neg ? kDoubleSign : 0) | kDoubleExpMask | ((mag & man_mask) << (52 - m));
      return std::bit_cast<double>(d);
    }
    const std::uint64_t d = (neg && f.nan == NanEncoding::all_ones ? kDoubleSign : 0) | kDoubleExpMask |
                            (std::uint64_t{1} << 51);
    return std::bit_cast<double>(d);
  }
  if (is_inf_bits(bits, f)) return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  const int field = static_cast<int>(mag >> m);
  const std::uint64_t frac = mag & man_mask;
  double v;
  if (field == 0 && f.has_zero)
    v = std::ldexp(static_cast<double>(frac), f.emin - m);
  else
    v = std::ldexp(static_cast<double>(frac | (man_mask + 1)), field - f.bias - m);
  return neg ? -v : v;
}

double round(double x, const Format& f, const Rounding& r, std::uint64_t index) {
  return decode(round_bits(x, f, r, index), f);
}

float decode_float(std::uint64_t bits, const Format& f) {
  if (is_nan_bits(bits, f) && f.nan == NanEncoding::ieee && f.man_bits <= 23) {
    // Keep the payload exactly in float (a double->float conversion would too, but say it here).
    const std::uint32_t man = static_cast<std::uint32_t>(bits & ((std::uint64_t{1} << f.man_bits) - 1));
    const std::uint32_t sign = (bits & f.sign_bit()) ? 0x80000000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | (man << (23 - f.man_bits)));
  }
  return narrow_exact(decode(bits, f));
}

float round(float x, const Format& f, const Rounding& r, std::uint64_t index) {
  return decode_float(round_bits(x, f, r, index), f);
}

bool is_representable(double x, const Format& f) {
  if (std::isnan(x)) return true;
  Rounding r;
  r.mode = RoundingMode::toward_zero;
  Format g = f;
  g.overflow = Overflow::to_inf;
  // Exact iff rounding toward zero and away from zero agree, and nothing overflowed or flushed.
  const std::uint64_t lo = round_bits(x, g, r);
  r.mode = x < 0 ? RoundingMode::down : RoundingMode::up;
  const std::uint64_t hi = round_bits(x, g, r);
  if (lo != hi) return false;
  const double back = decode(lo, f);
  return back == x && (std::signbit(back) == std::signbit(x) || !f.has_negative_zero());
}

std::uint64_t encode_exact(double x, const Format& f) {
  if (!is_representable(x, f))
    throw Error(fmt::format("value {} is not exactly representable in {}", x, f.name));
  return round_bits(x, f);
}

}  // namespace mpsim
