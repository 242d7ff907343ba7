// The arithmetic rows of `mpsim verify`: add, sub, mul, div, fma and sqrt of lib/mpsim/format/arith.hpp
// against the Boost.Multiprecision reference (lib/mpsim/reference/reference.hpp): the exact result as a
// rational (square roots: an integer square root carried 200 bits past the binary point, with a sticky
// half-unit when inexact, which no grid point, midpoint or stochastic threshold can separate from the
// true root), rounded by reference_round() in every mode. Operands are finite (zeros included); NaN and
// inf operands, x / 0 and sqrt of negatives are covered by tests/format/arith_test.cpp.
// fp8 formats: every operand pair in nearest-even; sampled pairs/triples otherwise.
#include <fmt/core.h>

#include <chrono>
#include <optional>
#include <random>

#include <boost/multiprecision/cpp_int.hpp>

#include "mpsim/format/arith.hpp"
#include "mpsim/reference/reference.hpp"
#include "mpsim/reference/verify.hpp"

namespace {

using mpsim::Rational;
using mpsim::RoundingMode;

bool finite_bits(std::uint64_t b, const mpsim::Format& f) {
  return !mpsim::is_nan_bits(b, f) && !mpsim::is_inf_bits(b, f);
}

// sqrt(a) for a finite a > 0: exact when a is a square of a dyadic, else the floor at 2^-200 relative
// plus half a unit (see above).
Rational sqrt_for_rounding(const Rational& a) {
  using boost::multiprecision::cpp_int;
  const cpp_int num = boost::multiprecision::numerator(a), den = boost::multiprecision::denominator(a);
  // a = num / 2^d: sqrt(a) = sqrt(num * 4^k [* 2 when d is odd]) / 2^(k + ceil(d / 2)), the integer root
  // carrying k = 200 bits more than the significand needs.
  const unsigned d = static_cast<unsigned>(boost::multiprecision::msb(den));  // den = 2^d
  const unsigned k = 200;
  cpp_int n = num << (2 * k);
  unsigned shift = d;
  if (shift % 2) {
    n <<= 1;
    ++shift;
  }
  cpp_int rem;
  const cpp_int root = boost::multiprecision::sqrt(n, rem);
  Rational r(root);
  if (rem != 0) r += Rational(1, 2);
  return r / Rational(cpp_int(1) << (k + shift / 2));
}

struct Case {
  mpsim::ArithOp op;
  std::uint64_t a, b, c;
};

// The reference encoding for a case with finite operands (returns false when the case is skipped).
std::optional<std::uint64_t> reference_result(const Case& cs, const mpsim::Format& f, const mpsim::Rounding& r,
                                              std::uint64_t index) {
  const auto A = mpsim::reference_decode(cs.a, f), B = mpsim::reference_decode(cs.b, f),
             C = mpsim::reference_decode(cs.c, f);
  const bool down = r.mode == RoundingMode::down;
  // The sign of an exactly zero sum x + y of terms with signs sx, sy (IEEE 754 6.3).
  auto zero_sum_negative = [&](bool sx, bool sy, bool x_zero, bool y_zero) {
    if (x_zero && y_zero && sx == sy) return sx;
    return down;
  };
  switch (cs.op) {
    case mpsim::ArithOp::add:
    case mpsim::ArithOp::sub: {
      const bool bneg = cs.op == mpsim::ArithOp::sub ? !B.negative : B.negative;
      const Rational x = cs.op == mpsim::ArithOp::sub ? Rational(A.value - B.value) : Rational(A.value + B.value);
      return mpsim::reference_round(x, zero_sum_negative(A.negative, bneg, A.value == 0, B.value == 0), f, r, index);
    }
    case mpsim::ArithOp::mul: return mpsim::reference_round(A.value * B.value, A.negative != B.negative, f, r, index);
    case mpsim::ArithOp::div:
      if (B.value == 0) return std::nullopt;
      return mpsim::reference_round(A.value / B.value, A.negative != B.negative, f, r, index);
    case mpsim::ArithOp::fma: {
      const Rational p = A.value * B.value;
      const bool pneg = A.negative != B.negative;
      return mpsim::reference_round(p + C.value, zero_sum_negative(pneg, C.negative, p == 0, C.value == 0), f, r,
                                    index);
    }
    case mpsim::ArithOp::sqrt:
      if (A.value < 0) return std::nullopt;
      if (A.value == 0) return cs.a;  // sqrt(±0) = ±0
      return mpsim::reference_round(sqrt_for_rounding(A.value), false, f, r, index);
  }
  return std::nullopt;
}

std::uint64_t production(const Case& cs, const mpsim::Format& f, const mpsim::Rounding& r, std::uint64_t index) {
  switch (cs.op) {
    case mpsim::ArithOp::add: return mpsim::add_bits(cs.a, cs.b, f, r, index);
    case mpsim::ArithOp::sub: return mpsim::sub_bits(cs.a, cs.b, f, r, index);
    case mpsim::ArithOp::mul: return mpsim::mul_bits(cs.a, cs.b, f, r, index);
    case mpsim::ArithOp::div: return mpsim::div_bits(cs.a, cs.b, f, r, index);
    case mpsim::ArithOp::fma: return mpsim::fma_bits(cs.a, cs.b, cs.c, f, r, index);
    case mpsim::ArithOp::sqrt: return mpsim::sqrt_bits(cs.a, f, r, index);
  }
  return 0;
}

std::vector<mpsim::verify::Row> run_arith_checks(const mpsim::verify::Options& o) {
  std::vector<mpsim::verify::Row> rows;
  const std::uint64_t samples = o.exhaustive ? 20000 : 2000;  // per op, format and mode
  const mpsim::ArithOp ops[] = {mpsim::ArithOp::add, mpsim::ArithOp::sub, mpsim::ArithOp::mul,
                                mpsim::ArithOp::div, mpsim::ArithOp::fma, mpsim::ArithOp::sqrt};
  for (const mpsim::Format* f : {&mpsim::fp16(), &mpsim::bf16(), &mpsim::fp8_e4m3(), &mpsim::fp8_e5m2()}) {
    for (const mpsim::Rounding& r : mpsim::verify::all_modes(o.seed)) {
      const auto t0 = std::chrono::steady_clock::now();
      if (o.progress) o.progress(fmt::format("arith {} {}", f->name, mpsim::verify::rounding_label(r)));
      mpsim::verify::Row row;
      row.check = "arith";
      row.format = mpsim::verify::format_label(*f);
      row.mode = mpsim::verify::rounding_label(r);
      row.against = "boost reference (exact rational)";
      const bool all_pairs = f->storage_bits == 8 && r.mode == RoundingMode::nearest_even;
      std::mt19937_64 rng(o.seed ^ (std::uint64_t(f->storage_bits) << 40) ^ (std::uint64_t(r.mode) << 48));
      const std::uint64_t mask = f->storage_mask();
      std::uint64_t index = 0;
      for (mpsim::ArithOp op : ops) {
        const std::uint64_t n = all_pairs ? (std::uint64_t{1} << (2 * f->storage_bits)) : samples;
        for (std::uint64_t i = 0; i < n; ++i, ++index) {
          Case cs{op, 0, 0, 0};
          if (all_pairs) {
            cs.a = i & mask;
            cs.b = (i >> f->storage_bits) & mask;
            cs.c = rng() & mask;
          } else {
            cs.a = rng() & mask, cs.b = rng() & mask, cs.c = rng() & mask;
          }
          if (!finite_bits(cs.a, *f) || !finite_bits(cs.b, *f) || !finite_bits(cs.c, *f)) continue;
          const std::optional<std::uint64_t> reference = reference_result(cs, *f, r, index);
          if (!reference) continue;
          const std::uint64_t want = *reference;
          const std::uint64_t got = production(cs, *f, r, index);
          ++row.checked;
          if (got != want && row.mismatches++ == 0)
            row.first = mpsim::verify::Mismatch{
                fmt::format("{}(0x{:x}, 0x{:x}, 0x{:x}) index {}", mpsim::to_string(op), cs.a, cs.b, cs.c, index), want,
                got};
        }
      }
      row.note = all_pairs ? "every finite operand pair (fma: random c)" : "sampled finite operands";
      row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

const bool registered = mpsim::verify::register_check(
    {"arith", "add sub mul div fma sqrt against the Boost reference (exact rationals), every mode", run_arith_checks});

}  // namespace
