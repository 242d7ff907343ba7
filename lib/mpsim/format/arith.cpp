// Correctly rounded element arithmetic: the exact result as a double rounded to odd, then round_bits().
// See arith.hpp for the method and its sources. Everything here assumes the default floating-point
// environment (round to nearest, no flush-to-zero) and no -ffast-math: the error-free transformations
// below are exact only then.
#include "mpsim/format/arith.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "mpsim/error.hpp"

namespace mpsim {

std::string_view to_string(ArithOp op) {
  switch (op) {
    case ArithOp::add: return "add";
    case ArithOp::sub: return "sub";
    case ArithOp::mul: return "mul";
    case ArithOp::div: return "div";
    case ArithOp::fma: return "fma";
    case ArithOp::sqrt: return "sqrt";
  }
  return "?";
}

ArithOp parse_arith_op(std::string_view s) {
  for (ArithOp op : {ArithOp::add, ArithOp::sub, ArithOp::mul, ArithOp::div, ArithOp::fma, ArithOp::sqrt})
    if (s == to_string(op)) return op;
  throw Error("unknown operation '" + std::string(s) + "' (known: add sub mul div fma sqrt)");
}

int arity(ArithOp op) { return op == ArithOp::sqrt ? 1 : op == ArithOp::fma ? 3 : 2; }

namespace {

// Why a format is not supported, or empty. E: every finite |x| < 2^E; qmin: the exponent of the
// smallest subnormal (every value is a multiple of 2^qmin). The bounds keep every product, quotient
// and residual of two format numbers a normal double (margin of a few binades), so the error-free
// transformations are exact and the rounded-to-odd double carries 53 bits.
std::string unsupported_reason(const Format& f) {
  if (f.man_bits > 50)
    return fmt::format("{} mantissa bits: the exact result is carried as a double rounded to odd, which needs "
                       "at most 50 (precision p + 2 <= 53)", f.man_bits);
  const int E = f.emax + 1;
  const int qmin = f.emin - f.man_bits;
  if (2 * E > 1020 || 2 * qmin < -1020 || E - qmin > 1020 || 2 * qmin - E - 53 < -1020)
    return fmt::format("exponent range 2^{}..2^{}: products and quotients would leave double's normal range "
                       "(supported: up to 9 exponent bits)", qmin, E);
  return {};
}

// The x86 default NaN ("QNaN floating-point indefinite", Intel SDM vol. 1, 4.8.3.7): sign set, quiet bit.
const double kDefaultNaN = std::bit_cast<double>(0xfff8000000000000ull);

// Knuth's TwoSum: the exact error of s = RN(a + b), so that a + b = s + e exactly (no overflow here).
inline double two_sum_error(double a, double b, double s) {
  const double bb = s - a;
  return (a - (s - bb)) + (b - bb);
}

// RO53(x) from s = a double next to x (s = RN(x), or s = x when residual == 0) and the sign of x - s
// (given by `residual`, which need only have that sign). Rounding to odd = truncate, and set the last
// bit if anything was lost: when s is odd it is the answer; when s is even and x != s, the odd
// neighbour of s on x's side is (x lies strictly between s and that neighbour).
inline double round_to_odd(double s, double residual) {
  if (residual == 0) return s;
  const std::uint64_t b = std::bit_cast<std::uint64_t>(s);
  if (b & 1) return s;
  return std::bit_cast<double>(std::signbit(residual) == std::signbit(s) ? b + 1 : b - 1);
}

inline double daz(double x, const Format& f, const Rounding& r) {
  if (r.input_subnormals == InputSubnormals::zero && x != 0 && std::fabs(x) < f.min_normal)
    return std::copysign(0.0, x);
  return x;
}

// An exactly zero sum: +0, or -0 when rounding down (IEEE 754-2019 6.3), unless both terms are zeros
// of the same sign.
inline double zero_sum(double a, double b, RoundingMode m) {
  if (a == 0 && b == 0 && std::signbit(a) == std::signbit(b)) return a;
  return m == RoundingMode::down ? -0.0 : 0.0;
}

// The exact sum (or RO53 of it) of two non-NaN doubles, which may be infinite.
inline double add_core(double a, double b, RoundingMode m) {
  const double s = a + b;
  if (std::isnan(s)) return kDefaultNaN;  // inf - inf
  if (s == 0) return zero_sum(a, b, m);    // sums of format numbers are exact when they vanish
  if (std::isinf(s)) return s;             // an inf operand (no finite sum overflows in range)
  return round_to_odd(s, two_sum_error(a, b, s));
}

inline double mul_core(double a, double b, const Format& f) {
  const double p = a * b;
  if (std::isnan(p)) return kDefaultNaN;  // 0 * inf
  if (p == 0 || std::isinf(p)) return p;  // a zero or an inf operand: exact, sign by xor
  if (f.man_bits <= 25) return p;         // two p <= 26 significands: the product fits in 53 bits
  return round_to_odd(p, std::fma(a, b, -p));
}

inline double div_core(double a, double b) {
  const double q = a / b;
  if (std::isnan(q)) return kDefaultNaN;  // 0/0, inf/inf
  if (q == 0 || std::isinf(q)) return q;  // zero or inf operands: exact
  // The remainder a - q*b of a rounded-to-nearest quotient is a double, computed exactly by fma
  // (Boldo & Daumas 2003); x - q has the sign of remainder / b.
  const double rem = std::fma(-q, b, a);
  return round_to_odd(q, std::signbit(b) ? -rem : rem);
}

inline double sqrt_core(double a) {
  if (a == 0 || (std::isinf(a) && a > 0)) return a;  // sqrt(±0) = ±0, sqrt(+inf) = +inf
  if (a < 0) return kDefaultNaN;
  const double s = std::sqrt(a);
  // a - s^2 is a double for s = RN(sqrt(a)) (Markstein), exactly computed by fma.
  return round_to_odd(s, std::fma(-s, s, a));
}

inline double fma_core(double a, double b, double c, const Format& f, RoundingMode m) {
  if (f.man_bits <= 25) {
    const double p = a * b;  // exact
    if (std::isnan(p)) return kDefaultNaN;
    return add_core(p, c, m);
  }
  const double ph = a * b;
  if (!std::isfinite(ph) || !std::isfinite(c)) {
    const double z = std::fma(a, b, c);  // exact special cases: inf or NaN
    return std::isnan(z) ? kDefaultNaN : z;
  }
  if (ph == 0) return add_core(ph, c, m);  // a zero operand: the product is an exact signed zero
  // a*b + c = ph + pl + c exactly; sh + sl = ph + c; then RO53(sh + RO53(sl + pl)) = RO53(a*b + c)
  // (the emulated FMA of Boldo & Melquiond 2008, with the last addition rounded to odd too: sl + pl is
  // at most 2^-51 |sh| unless ph + c is exact, so its rounding to odd cannot move the final one).
  const double pl = std::fma(a, b, -ph);
  const double sh = ph + c;
  const double sl = two_sum_error(ph, c, sh);
  const double wh = sl + pl;
  const double v = round_to_odd(wh, two_sum_error(sl, pl, wh));
  const double zh = sh + v;
  if (zh == 0) return zero_sum(1.0, -1.0, m);  // exactly zero (see above), from a non-zero product
  return round_to_odd(zh, two_sum_error(sh, v, zh));
}

inline void require_supported(const Format& f) {
  // Cheap enough per call; the array form checks once and then calls the values functions.
  if (!arith_supported(f)) check_arith_format(f);
}

}  // namespace

bool arith_supported(const Format& f) {
  const int E = f.emax + 1;
  const int qmin = f.emin - f.man_bits;
  return f.man_bits <= 50 && 2 * E <= 1020 && 2 * qmin >= -1020 && E - qmin <= 1020 && 2 * qmin - E - 53 >= -1020;
}

void check_arith_format(const Format& f) {
  const std::string why = unsupported_reason(f);
  if (!why.empty()) throw Error("arithmetic in format '" + f.name + "' is not supported: " + why);
}

// ---- on values ---------------------------------------------------------------------------------------

std::uint64_t add_values(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  require_supported(f);
  if (std::isnan(a)) return round_bits(a, f, r, index);
  if (std::isnan(b)) return round_bits(b, f, r, index);
  return round_bits(add_core(daz(a, f, r), daz(b, f, r), r.mode), f, r, index);
}

std::uint64_t sub_values(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  require_supported(f);
  if (std::isnan(a)) return round_bits(a, f, r, index);
  if (std::isnan(b)) return round_bits(b, f, r, index);  // the NaN operand as it is, not negated (as x86)
  return round_bits(add_core(daz(a, f, r), -daz(b, f, r), r.mode), f, r, index);
}

std::uint64_t mul_values(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  require_supported(f);
  if (std::isnan(a)) return round_bits(a, f, r, index);
  if (std::isnan(b)) return round_bits(b, f, r, index);
  return round_bits(mul_core(daz(a, f, r), daz(b, f, r), f), f, r, index);
}

std::uint64_t div_values(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  require_supported(f);
  if (std::isnan(a)) return round_bits(a, f, r, index);
  if (std::isnan(b)) return round_bits(b, f, r, index);
  return round_bits(div_core(daz(a, f, r), daz(b, f, r)), f, r, index);
}

std::uint64_t fma_values(double a, double b, double c, const Format& f, const Rounding& r, std::uint64_t index) {
  require_supported(f);
  if (std::isnan(a)) return round_bits(a, f, r, index);
  if (std::isnan(b)) return round_bits(b, f, r, index);
  if (std::isnan(c)) return round_bits(c, f, r, index);
  return round_bits(fma_core(daz(a, f, r), daz(b, f, r), daz(c, f, r), f, r.mode), f, r, index);
}

std::uint64_t sqrt_values(double a, const Format& f, const Rounding& r, std::uint64_t index) {
  require_supported(f);
  if (std::isnan(a)) return round_bits(a, f, r, index);
  return round_bits(sqrt_core(daz(a, f, r)), f, r, index);
}

// ---- on encodings ------------------------------------------------------------------------------------

std::uint64_t add_bits(std::uint64_t a, std::uint64_t b, const Format& f, const Rounding& r, std::uint64_t index) {
  return add_values(decode(a, f), decode(b, f), f, r, index);
}
std::uint64_t sub_bits(std::uint64_t a, std::uint64_t b, const Format& f, const Rounding& r, std::uint64_t index) {
  return sub_values(decode(a, f), decode(b, f), f, r, index);
}
std::uint64_t mul_bits(std::uint64_t a, std::uint64_t b, const Format& f, const Rounding& r, std::uint64_t index) {
  return mul_values(decode(a, f), decode(b, f), f, r, index);
}
std::uint64_t div_bits(std::uint64_t a, std::uint64_t b, const Format& f, const Rounding& r, std::uint64_t index) {
  return div_values(decode(a, f), decode(b, f), f, r, index);
}
std::uint64_t fma_bits(std::uint64_t a, std::uint64_t b, std::uint64_t c, const Format& f, const Rounding& r,
                       std::uint64_t index) {
  return fma_values(decode(a, f), decode(b, f), decode(c, f), f, r, index);
}
std::uint64_t sqrt_bits(std::uint64_t a, const Format& f, const Rounding& r, std::uint64_t index) {
  return sqrt_values(decode(a, f), f, r, index);
}

std::uint64_t arith_bits(ArithOp op, std::uint64_t a, std::uint64_t b, std::uint64_t c, const Format& f,
                         const Rounding& r, std::uint64_t index) {
  switch (op) {
    case ArithOp::add: return add_bits(a, b, f, r, index);
    case ArithOp::sub: return sub_bits(a, b, f, r, index);
    case ArithOp::mul: return mul_bits(a, b, f, r, index);
    case ArithOp::div: return div_bits(a, b, f, r, index);
    case ArithOp::fma: return fma_bits(a, b, c, f, r, index);
    case ArithOp::sqrt: return sqrt_bits(a, f, r, index);
  }
  return 0;
}

std::uint64_t saturate_unit_bits(std::uint64_t bits, const Format& f, bool negative_zero_to_positive) {
  if (is_nan_bits(bits, f)) return 0;
  const bool negative = (bits & f.sign_bit()) != 0;
  if (negative) {
    const bool minus_zero = (bits & ~f.sign_bit()) == 0;
    return minus_zero && !negative_zero_to_positive ? bits : 0;
  }
  if (decode(bits, f) > 1.0) return encode_exact(1.0, f);
  return bits;
}

// ---- on arrays ---------------------------------------------------------------------------------------

void arith_array(ArithOp op, std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                 std::span<const std::uint64_t> c, std::span<std::uint64_t> out, const Format& f, const Rounding& r,
                 std::uint64_t first_index) {
  check_arith_format(f);
  validate(r);
  const int n = arity(op);
  const std::size_t count = out.size();
  const auto check = [&](std::span<const std::uint64_t> s, const char* name) {
    if (s.size() != count)
      throw Error(fmt::format("{}: operand {} has {} elements but the output has {}", to_string(op), name, s.size(),
                              count));
  };
  check(a, "a");
  if (n >= 2) check(b, "b");
  if (n == 3) check(c, "c");
  for (std::size_t i = 0; i < count; ++i)
    out[i] = arith_bits(op, a[i], n >= 2 ? b[i] : 0, n == 3 ? c[i] : 0, f, r, first_index + i);
}

}  // namespace mpsim
