// The emulation, compiled for the host AND the device: the rounding specification of
// lib/mpsim/format/round_spec.hpp (which the library's round_bits() is too), a device profile's NaN
// rules around it, and correctly rounded fp16/bf16 arithmetic built on it. The GPU runs it next to the
// hardware intrinsics so that an exhaustive 2^32 comparison never leaves the device; the host tests
// (tests/kernels/emu_test.cpp) check its host build bit for bit against round_bits().
//
// Plain C++20 when not compiled by nvcc: no CUDA header, and no library dependency beyond the
// header-only specification, so host code and the CPU-side digest recomputation use the very same
// functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "mpsim/format/host_device.hpp"
#include "mpsim/format/round_spec.hpp"

namespace mpsim::emu {

// What round_bits needs from a Format (spec::FormatSpec, a kernel parameter), plus the NaN rule of a
// device profile (lib/mpsim/format/profile.hpp): where `canonical_nan` is set, every NaN result is
// `canonical_nan_bits` instead of the IEEE payload-keeping NaN.
struct DevFormat : spec::FormatSpec {
  bool canonical_nan = false;       // NaN inputs (and invalid operations) give canonical_nan_bits
  bool canonical_made_nan = false;  // ... and so do NaNs made by overflow / inf into a format without inf
  bool truncate_nan = false;        // NanRule::truncate_payload: NaN inputs cut to the format, not quieted
  bool truncate_nan_minus_one = false;  // ... then lowered by one unit (ProfileRule::truncated_nan_minus_one)
  bool sat_zero_positive = false;   // the .sat forms write +0 for a -0 result
  std::uint64_t canonical_nan_bits = 0;
};

// The rounding mode, DAZ, the stochastic bits and the Philox key (spec::RoundingSpec).
using DevRounding = spec::RoundingSpec;

using spec::Mode;
using spec::kNearestEven;
using spec::kTowardZero;
using spec::kUp;
using spec::kDown;
using spec::kNearestAway;
using spec::kToOdd;
using spec::kStochastic;
using hd::bits_of;
using hd::double_of;
using hd::float_of;
using spec::is_nan_enc;

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

// The device's result for a NaN input (double bits `xbits`): the profile's canonical NaN, the payload
// cut without quieting (spec::truncated_nan(), as the library's profile), or the specification's payload-keeping NaN.
MPSIM_HD std::uint64_t nan_result(std::uint64_t xbits, const DevFormat& f) {
  if (f.canonical_nan) return f.canonical_nan_bits;
  if (f.truncate_nan && f.nan == spec::kNanIeee) return spec::truncated_nan(xbits, f, f.truncate_nan_minus_one);
  return spec::nan_result(xbits, f);
}

// A NaN the rounding made itself (overflow, or ±inf into a format without inf): the profile's canonical
// NaN applies to it too where the device writes one pattern whatever made the NaN.
MPSIM_HD std::uint64_t made_nan_rule(std::uint64_t bits, const DevFormat& f) {
  return f.canonical_made_nan && spec::is_nan_enc(bits, f) ? f.canonical_nan_bits : bits;
}

// round_bits(double, ...) of the library under the device's profile (round_bits_like).
MPSIM_HD std::uint64_t round_double(double x, const DevFormat& f, const DevRounding& r, std::uint64_t index = 0) {
  const std::uint64_t xbits = bits_of(x);
  if ((xbits & ~spec::kDoubleSign) > spec::kDoubleExpMask) return nan_result(xbits, f);
  return made_nan_rule(spec::round_double_bits(xbits, f, r, index), f);
}

// round_bits(float, ...) of the library under the device's profile.
MPSIM_HD std::uint64_t round_float(std::uint32_t b, const DevFormat& f, const DevRounding& r, std::uint64_t index = 0) {
  if ((b & 0x7fffffffu) > 0x7f800000u) return nan_result(spec::widen_float_bits(b), f);
  return made_nan_rule(spec::round_float_bits(b, f, r, index), f);
}

// decode() of the library: the exact value as a double.
MPSIM_HD double decode(std::uint64_t bits, const DevFormat& f) { return double_of(spec::decode_bits(bits, f)); }

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
  if (f.nan == spec::kNanIeee) return f.sign_bit | f.nan_bits;
  if (f.canonical_made_nan) return f.canonical_nan_bits;
  return f.nan == spec::kNanNegZero ? f.nan_bits : (f.sign_bit | f.nan_bits);
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
