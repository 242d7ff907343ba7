// Correctly rounded element arithmetic: the format checks, names and array form around hd/arith.hpp (the
// exact result as a double rounded to odd, then round_bits(); written once for the host and the device).
// See arith.hpp for the method and its sources.
#include "mpsim/format/arith.hpp"

#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "mpsim/error.hpp"
#include "mpsim/format/hd/arith.hpp"
#include "mpsim/format/hd/nan_rules.hpp"

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
    return fmt::format(
        "{} mantissa bits: the exact result is carried as a double rounded to odd, which needs "
        "at most 50 (precision p + 2 <= 53)",
        f.man_bits);
  const int E = f.emax + 1;
  const int qmin = f.emin - f.man_bits;
  if (2 * E > 1020 || 2 * qmin < -1020 || E - qmin > 1020 || 2 * qmin - E - 53 < -1020)
    return fmt::format(
        "exponent range 2^{}..2^{}: products and quotients would leave double's normal range "
        "(supported: up to 9 exponent bits)",
        qmin, E);
  return {};
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

namespace {

// hd::Op follows ArithOp's order, so an ArithOp converts by value.
static_assert(int(hd::kAdd) == int(ArithOp::add) && int(hd::kSub) == int(ArithOp::sub) &&
              int(hd::kMul) == int(ArithOp::mul) && int(hd::kDiv) == int(ArithOp::div) &&
              int(hd::kFma) == int(ArithOp::fma) && int(hd::kSqrt) == int(ArithOp::sqrt));

// Each operation is hd::arith_values(), the host/device definition the CUDA emulation (kernels/emu.hpp)
// calls too, after the format check.
std::uint64_t values_op(hd::Op op, double a, double b, double c, const Format& f, const Rounding& r,
                        std::uint64_t index) {
  require_supported(f);
  return hd::arith_values(op, a, b, c, format_spec(f), rounding_spec(r), index).bits;
}

}  // namespace

std::uint64_t add_values(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  return values_op(hd::kAdd, a, b, 0, f, r, index);
}
std::uint64_t sub_values(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  return values_op(hd::kSub, a, b, 0, f, r, index);
}
std::uint64_t mul_values(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  return values_op(hd::kMul, a, b, 0, f, r, index);
}
std::uint64_t div_values(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  return values_op(hd::kDiv, a, b, 0, f, r, index);
}
std::uint64_t fma_values(double a, double b, double c, const Format& f, const Rounding& r, std::uint64_t index) {
  return values_op(hd::kFma, a, b, c, f, r, index);
}
std::uint64_t sqrt_values(double a, const Format& f, const Rounding& r, std::uint64_t index) {
  return values_op(hd::kSqrt, a, 0, 0, f, r, index);
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
  return hd::saturate_unit(bits, format_spec(f), negative_zero_to_positive);
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
      throw Error(
          fmt::format("{}: operand {} has {} elements but the output has {}", to_string(op), name, s.size(), count));
  };
  check(a, "a");
  if (n >= 2) check(b, "b");
  if (n == 3) check(c, "c");
  for (std::size_t i = 0; i < count; ++i)
    out[i] = arith_bits(op, a[i], n >= 2 ? b[i] : 0, n == 3 ? c[i] : 0, f, r, first_index + i);
}

}  // namespace mpsim
