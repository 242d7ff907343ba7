#include "mpsim/reference/grid_table.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "mpsim/error.hpp"

namespace mpsim {

GridTable::GridTable(const Format& fmt) : fmt_(fmt) {
  const int m = fmt.man_bits;
  const int width = 1 + fmt.exp_bits + m;
  if (width > 16)
    throw Error("GridTable: format '" + fmt.name + "' has " + std::to_string(width) +
                " bits; the table method takes at most 16");
  sign_ = std::uint64_t{1} << (fmt.exp_bits + m);
  min_normal_enc_ = 1u << m;
  const std::uint32_t top_field = (1u << fmt.exp_bits) - 1;
  const std::uint32_t all_man = (1u << m) - 1;
  // The encodings past the last finite one, by the NaN encoding (format.hpp).
  std::uint32_t first_nonfinite = 0;
  switch (fmt.nan) {
    case NanEncoding::ieee:
      first_nonfinite = top_field << m;  // +inf
      inf_enc_ = first_nonfinite;
      nan_enc_ = inf_enc_ | (1u << (m - 1));
      break;
    case NanEncoding::all_ones:
      first_nonfinite = (top_field << m) | all_man;  // the NaN S.1..1.1..1
      nan_enc_ = first_nonfinite;
      break;
    case NanEncoding::neg_zero:
      first_nonfinite = static_cast<std::uint32_t>(sign_);  // 1.0..0: every positive pattern is finite
      nan_enc_ = sign_;
      break;
    case NanEncoding::none:
      throw Error("GridTable: format '" + fmt.name + "' has no NaN; the table method covers formats with one");
  }
  if (!fmt.has_sign || !fmt.has_zero)
    throw Error("GridTable: format '" + fmt.name +
                "' is unsigned or has no zero; the table method covers signed formats with zero");
  values_.resize(first_nonfinite + 1);
  for (std::uint32_t e = 0; e <= first_nonfinite; ++e) {
    const std::uint32_t field = e >> m, mant = e & all_man;
    values_[e] = field == 0 ? std::ldexp(double(mant), 1 - fmt.bias - m)
                            : std::ldexp(double(mant | (1u << m)), int(field) - fmt.bias - m);
    if (e > 0 && !(values_[e] > values_[e - 1]))
      throw Error("GridTable: encodings of format '" + fmt.name + "' are not ordered by value");
  }
}

GridTable::Position GridTable::finish(double a, std::uint32_t lo) const {
  Position p;
  p.lo = lo;
  if (lo == beyond()) return p;
  const double vlo = values_[lo], vhi = values_[lo + 1];
  p.exact = a == vlo;
  const double mid = 0.5 * (vlo + vhi);
  p.vs_mid = a < mid ? -1 : a > mid ? 1 : 0;
  p.frac = (a - vlo) / (vhi - vlo);
  return p;
}

GridTable::Position GridTable::locate(double a) const {
  // The last entry <= a (entry 0 is 0 < a).
  const auto it = std::upper_bound(values_.begin(), values_.end(), a);
  return finish(a, static_cast<std::uint32_t>(it - values_.begin() - 1));
}

GridTable::Position GridTable::locate_from(double a, std::uint32_t& cursor) const {
  const std::uint32_t last = beyond();
  while (cursor < last && values_[cursor + 1] <= a) ++cursor;
  return finish(a, cursor);
}

std::uint64_t GridTable::infinite_result(bool negative) const {
  // round.hpp: in a format without inf an inf result becomes NaN (fnuz: its single NaN).
  if (fmt_.nan == NanEncoding::ieee) return (negative ? sign_ : 0) | inf_enc_;
  if (fmt_.nan == NanEncoding::neg_zero) return nan_enc_;
  return (negative ? sign_ : 0) | nan_enc_;
}

std::uint64_t GridTable::overflow(bool negative, RoundingMode mode) const {
  const std::uint64_t max_finite = (negative ? sign_ : 0) | (beyond() - 1);
  if (fmt_.overflow == Overflow::saturate) return max_finite;
  // IEEE 754 §7.4: directed modes that round toward zero give max_finite, the others infinity.
  const bool toward_zero = mode == RoundingMode::toward_zero || mode == RoundingMode::to_odd ||
                           (mode == RoundingMode::up && negative) || (mode == RoundingMode::down && !negative);
  return toward_zero ? max_finite : infinite_result(negative);
}

std::uint64_t GridTable::decide(bool negative, const Position& p, const Rounding& r, std::uint64_t index) const {
  if (p.lo == beyond()) return overflow(negative, r.mode);
  const std::uint32_t hi = p.lo + 1;
  bool away = false;  // take hi, the neighbour of larger magnitude
  if (!p.exact) {
    switch (r.mode) {
      case RoundingMode::nearest_even: away = p.vs_mid > 0 || (p.vs_mid == 0 && (hi & 1) == 0); break;
      case RoundingMode::nearest_away: away = p.vs_mid >= 0; break;
      case RoundingMode::toward_zero: away = false; break;
      case RoundingMode::up: away = !negative; break;
      case RoundingMode::down: away = negative; break;
      case RoundingMode::to_odd: away = (hi & 1) == 1; break;
      case RoundingMode::stochastic: {
        const int b = r.sr_bits;
        const auto frac_bits = static_cast<std::uint64_t>(std::floor(std::ldexp(p.frac, b)));
        const std::uint64_t rnd = philox::sr_word(r.seed, index, b) >> (32 - b);
        away = frac_bits + rnd >= (std::uint64_t{1} << b);
        break;
      }
    }
  }
  const std::uint32_t chosen = away ? hi : p.lo;
  if (chosen == beyond()) return overflow(negative, r.mode);
  if (chosen == 0) return zero(negative);
  if (fmt_.subnormals == Subnormals::flush && chosen < min_normal_enc_) return zero(negative);
  return (negative ? sign_ : 0) | chosen;
}

std::uint64_t GridTable::nan_from_float(std::uint32_t fb) const {
  const bool negative = fb >> 31;
  if (fmt_.nan == NanEncoding::neg_zero) return nan_enc_;
  if (fmt_.nan == NanEncoding::all_ones) return (negative ? sign_ : 0) | nan_enc_;
  // Quiet bit set, top man_bits of the 23-bit payload kept (F16C vcvtps2ph, AVX512-BF16).
  const int m = fmt_.man_bits;
  return (negative ? sign_ : 0) | nan_enc_ | ((fb & 0x7fffffu) >> (23 - m));
}

std::uint64_t GridTable::from_infinity(bool negative) const {
  if (fmt_.overflow == Overflow::saturate) return (negative ? sign_ : 0) | (beyond() - 1);
  return infinite_result(negative);
}

std::uint64_t GridTable::round(double x, const Rounding& r, std::uint64_t index) const {
  const bool negative = std::signbit(x);
  if (std::isnan(x)) {
    const std::uint64_t db = std::bit_cast<std::uint64_t>(x);
    // The double's top 23 payload bits play the float's role (m <= 15 here).
    return nan_from_float(static_cast<std::uint32_t>(((db >> 63) << 31) | ((db >> 29) & 0x7fffffu)));
  }
  if (std::isinf(x)) return from_infinity(negative);
  if (x == 0 || (r.input_subnormals == InputSubnormals::zero && std::fpclassify(x) == FP_SUBNORMAL))
    return zero(negative);
  return decide(negative, locate(std::fabs(x)), r, index);
}

std::uint64_t GridTable::round(float x, const Rounding& r, std::uint64_t index) const {
  const std::uint32_t fb = std::bit_cast<std::uint32_t>(x);
  if (std::isnan(x)) return nan_from_float(fb);
  if (r.input_subnormals == InputSubnormals::zero && std::fpclassify(x) == FP_SUBNORMAL) return zero(fb >> 31);
  Rounding keep = r;
  keep.input_subnormals = InputSubnormals::keep;
  return round(static_cast<double>(x), keep, index);
}

}  // namespace mpsim
