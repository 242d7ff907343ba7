// Correctly rounded arithmetic (+ - * / fma sqrt) of values of a format, for the host and the CUDA device
// alike: the library (format/arith.cpp, which adds argument checks and the Format / Rounding types) and
// the device emulation (kernels/emu.hpp, which adds a device profile's NaN rules) both call arith_values().
//
// Method: the exact result is carried as a double rounded to odd (RO53), then rounded once to the format
// by spec::round_double_bits. Rounding to odd at p + 2 bits or more, then to p bits in any mode, equals one
// correct rounding (Boldo & Melquiond, "When double rounding is odd", 2005); the format has at most 50
// mantissa bits (format/arith.cpp: arith_supported) and an exponent range that keeps every product,
// quotient and residual a normal double, so the error-free transformations below are exact.
// They assume the default floating-point environment (round to nearest, no flush-to-zero) and no
// -ffast-math (x != x is the NaN test).
#pragma once

#include <cmath>
#include <cstdint>

#include "mpsim/format/hd/host_device.hpp"
#include "mpsim/format/hd/round_spec.hpp"

namespace mpsim::hd {

// The operations (format/arith.hpp's ArithOp has the same order: static_asserted in arith.cpp).
enum Op : std::uint8_t { kAdd, kSub, kMul, kDiv, kFma, kSqrt };

MPSIM_HD int arity(Op op) { return op == kSqrt ? 1 : op == kFma ? 3 : 2; }

// ---- bit-level helpers on doubles (device code has no std::signbit / std::fma in every CUDA version) ----

MPSIM_HD bool is_nan(double x) { return x != x; }
MPSIM_HD bool is_inf(double x) { return (bits_of(x) & ~spec::kDoubleSign) == spec::kDoubleExpMask; }
MPSIM_HD bool is_finite(double x) { return (bits_of(x) & ~spec::kDoubleSign) < spec::kDoubleExpMask; }
MPSIM_HD bool sign_of(double x) { return (bits_of(x) & spec::kDoubleSign) != 0; }
MPSIM_HD double fma_rn(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
MPSIM_HD double sqrt_rn(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

// The x86 default NaN ("QNaN floating-point indefinite", Intel SDM vol. 1, 4.8.3.7): sign set, quiet bit.
// The NaN of an invalid operation (inf - inf, 0 * inf, 0/0, sqrt(-1)) before the format's NaN rule.
inline constexpr std::uint64_t kDefaultNanBits = 0xfff8000000000000ull;

// Knuth's TwoSum: the exact error of s = RN(a + b), so that a + b = s + e exactly (no overflow here).
MPSIM_HD double two_sum_error(double a, double b, double s) {
  const double bb = s - a;
  return (a - (s - bb)) + (b - bb);
}

// RO53(x) from s = a double next to x (s = RN(x), or s = x when residual == 0) and the sign of x - s
// (given by `residual`, which need only have that sign). Rounding to odd = truncate, and set the last
// bit if anything was lost: when s is odd it is the answer; when s is even and x != s, the odd
// neighbour of s on x's side is (x lies strictly between s and that neighbour).
MPSIM_HD double round_to_odd(double s, double residual) {
  if (residual == 0) return s;
  const std::uint64_t b = bits_of(s);
  if (b & 1) return s;
  return double_of(sign_of(residual) == sign_of(s) ? b + 1 : b - 1);
}

// An exactly zero sum: +0, or -0 when rounding down (IEEE 754-2019 6.3), unless both terms are zeros
// of the same sign.
MPSIM_HD double zero_sum(double a, double b, std::uint8_t mode) {
  if (a == 0 && b == 0 && sign_of(a) == sign_of(b)) return a;
  return mode == spec::kDown ? -0.0 : 0.0;
}

// ---- RO53 of the exact result of non-NaN operands (a NaN result: the operation is invalid) ----------

MPSIM_HD double add_ro53(double a, double b, std::uint8_t mode) {
  const double s = a + b;
  if (is_nan(s)) return double_of(kDefaultNanBits);  // inf - inf
  if (s == 0) return zero_sum(a, b, mode);           // sums of format numbers are exact when they vanish
  if (is_inf(s)) return s;                           // an inf operand (no finite sum overflows in range)
  return round_to_odd(s, two_sum_error(a, b, s));
}

MPSIM_HD double mul_ro53(double a, double b, int man_bits) {
  const double p = a * b;
  if (is_nan(p)) return double_of(kDefaultNanBits);  // 0 * inf
  if (p == 0 || is_inf(p)) return p;                 // a zero or an inf operand: exact, sign by xor
  if (man_bits <= 25) return p;                      // two p <= 26 significands: the product fits in 53 bits
  return round_to_odd(p, fma_rn(a, b, -p));
}

MPSIM_HD double div_ro53(double a, double b) {
  const double q = a / b;
  if (is_nan(q)) return double_of(kDefaultNanBits);  // 0/0, inf/inf
  if (q == 0 || is_inf(q)) return q;                 // zero or inf operands: exact
  // The remainder a - q*b of a rounded-to-nearest quotient is a double, computed exactly by fma
  // (Boldo & Daumas 2003); x - q has the sign of remainder / b.
  const double rem = fma_rn(-q, b, a);
  return round_to_odd(q, sign_of(b) ? -rem : rem);
}

MPSIM_HD double sqrt_ro53(double a) {
  if (a == 0 || (is_inf(a) && a > 0)) return a;  // sqrt(±0) = ±0, sqrt(+inf) = +inf
  if (a < 0) return double_of(kDefaultNanBits);
  const double s = sqrt_rn(a);
  // a - s^2 is a double for s = RN(sqrt(a)) (Markstein), exactly computed by fma.
  return round_to_odd(s, fma_rn(-s, s, a));
}

MPSIM_HD double fma_ro53(double a, double b, double c, int man_bits, std::uint8_t mode) {
  if (man_bits <= 25) {
    const double p = a * b;  // exact
    if (is_nan(p)) return double_of(kDefaultNanBits);
    return add_ro53(p, c, mode);
  }
  const double ph = a * b;
  if (!is_finite(ph) || !is_finite(c)) {
    const double z = fma_rn(a, b, c);  // exact special cases: inf or NaN
    return is_nan(z) ? double_of(kDefaultNanBits) : z;
  }
  if (ph == 0) return add_ro53(ph, c, mode);  // a zero operand: the product is an exact signed zero
  // a*b + c = ph + pl + c exactly; sh + sl = ph + c; then RO53(sh + RO53(sl + pl)) = RO53(a*b + c)
  // (the emulated FMA of Boldo & Melquiond 2008, with the last addition rounded to odd too: sl + pl is
  // at most 2^-51 |sh| unless ph + c is exact, so its rounding to odd cannot move the final one).
  const double pl = fma_rn(a, b, -ph);
  const double sh = ph + c;
  const double sl = two_sum_error(ph, c, sh);
  const double wh = sl + pl;
  const double v = round_to_odd(wh, two_sum_error(sl, pl, wh));
  const double zh = sh + v;
  if (zh == 0) return zero_sum(1.0, -1.0, mode);  // exactly zero (see above), from a non-zero product
  return round_to_odd(zh, two_sum_error(sh, v, zh));
}

// DAZ on an operand: a value below the format's smallest normal 2^emin reads as a zero of its sign.
MPSIM_HD double daz(double x, const spec::FormatSpec& f, const spec::RoundingSpec& r) {
  if (!r.inputs_subnormal_to_zero || x == 0) return x;
  const double min_normal = double_of(std::uint64_t(f.emin + 1023) << 52);  // emin >= -1022 (arith_supported)
  const double ax = double_of(bits_of(x) & ~spec::kDoubleSign);
  return ax < min_normal ? double_of(bits_of(x) & spec::kDoubleSign) : x;
}

// What arith_values() found, for a device profile's NaN rule (hd/nan_rules.hpp: arith_nan_result).
struct ArithOutcome {
  std::uint64_t bits = 0;
  bool nan_operand = false;  // some operand was NaN: the result is that NaN's (the first NaN operand's)
};

// a op b (op c) on values of format `f` (unused operands ignored), rounded once in `r`'s mode; `index`
// selects the stochastic-rounding stream element. A NaN operand gives the first NaN operand as
// round_bits() converts it (payload kept, quieted: x86 SSE's rule; for sub the operand as it is, not
// negated); an invalid operation x86's default NaN so converted.
MPSIM_HD ArithOutcome arith_values(Op op, double a, double b, double c, const spec::FormatSpec& f,
                                   const spec::RoundingSpec& r, std::uint64_t index = 0) {
  const int n = arity(op);
  double nan = 0;
  bool nan_operand = true;
  if (is_nan(a)) nan = a;
  else if (n >= 2 && is_nan(b)) nan = b;
  else if (n == 3 && is_nan(c)) nan = c;
  else nan_operand = false;
  if (nan_operand) return {spec::round_double_bits(bits_of(nan), f, r, index), true};
  a = daz(a, f, r);
  b = daz(b, f, r);
  c = daz(c, f, r);
  double x = 0;
  switch (op) {
    case kAdd: x = add_ro53(a, b, r.mode); break;
    case kSub: x = add_ro53(a, -b, r.mode); break;
    case kMul: x = mul_ro53(a, b, f.man_bits); break;
    case kDiv: x = div_ro53(a, b); break;
    case kFma: x = fma_ro53(a, b, c, f.man_bits, r.mode); break;
    case kSqrt: x = sqrt_ro53(a); break;
  }
  return {spec::round_double_bits(bits_of(x), f, r, index), false};
}

}  // namespace mpsim::hd
