// The Boost.Multiprecision reference (see reference.hpp for the algorithm). Written for obviousness,
// not speed: the exhaustive sweeps use the table method of grid_table.hpp, cross-checked against this.
#include "mpsim/reference/reference.hpp"

#include <bit>
#include <cmath>

#include "mpsim/error.hpp"

namespace mpsim {

namespace {

namespace mp = boost::multiprecision;

// The format's layout, re-derived from its defining fields (exp_bits, man_bits, bias, NaN encoding),
// not from the derived constants that round.cpp uses.
struct Layout {
  int m = 0;  // mantissa bits
  int bias = 0;
  std::uint64_t sign = 0;       // the sign bit
  std::uint64_t top_field = 0;  // all-ones exponent field
  std::uint64_t max_enc = 0;    // encoding of the largest finite positive value
  NanEncoding nan = NanEncoding::ieee;
  bool has_zero = true;  // false: exponent field 0 is the normal 2^-bias (e8m0)

  explicit Layout(const Format& f) : m(f.man_bits), bias(f.bias), nan(f.nan), has_zero(f.has_zero) {
    sign = f.has_sign ? std::uint64_t{1} << (f.exp_bits + f.man_bits) : 0;
    top_field = (std::uint64_t{1} << f.exp_bits) - 1;
    const std::uint64_t all_man = (std::uint64_t{1} << m) - 1;
    switch (nan) {
      case NanEncoding::ieee: max_enc = ((top_field - 1) << m) | all_man; break;      // below inf
      case NanEncoding::all_ones: max_enc = ((top_field << m) | all_man) - 1; break;  // below S.1..1
      case NanEncoding::neg_zero:                                                     // all positive
      case NanEncoding::none: max_enc = (top_field << m) | all_man; break;
    }
  }
  // The first point of the unbounded grid past max_finite, as the encoding formula continues.
  std::uint64_t beyond() const { return max_enc + 1; }

  // value(enc) = K * 2^X, read off the fields (exponent field 0: subnormal, no implicit bit).
  void split(std::uint64_t enc, BigInt& K, int& X) const {
    const std::uint64_t field = enc >> m;
    const std::uint64_t mant = enc & ((std::uint64_t{1} << m) - 1);
    if (field == 0 && has_zero) {
      K = mant;
      X = 1 - bias - m;
    } else {
      K = (std::uint64_t{1} << m) | mant;
      X = static_cast<int>(field) - bias - m;
    }
  }
  Rational value(std::uint64_t enc) const {
    BigInt K;
    int X;
    split(enc, K, X);
    if (X >= 0) return Rational(BigInt(K << X));
    return Rational(K, BigInt(BigInt(1) << -X));
  }
  // Sign of value(enc) - n/d for n, d > 0, in integers: compare K * 2^X * d with n.
  int compare(std::uint64_t enc, const BigInt& n, const BigInt& d) const {
    BigInt K;
    int X;
    split(enc, K, X);
    BigInt lhs = K * d, rhs = n;
    if (X >= 0) lhs <<= X;
    else rhs <<= -X;
    return lhs < rhs ? -1 : lhs > rhs ? 1 : 0;
  }

  // A zero input: ±0 (+0 where there is no -0), NaN in a format without zero (ml_dtypes' e8m0).
  std::uint64_t zero(bool negative) const {
    if (!has_zero) return nan_canonical(false);
    return negative && nan != NanEncoding::neg_zero ? sign : 0;
  }
  // A NaN input. In a format without NaN (OCP fp6/fp4): the zero of the opposite sign, as ml_dtypes 0.6.
  std::uint64_t nan_canonical(bool negative) const {
    switch (nan) {
      case NanEncoding::ieee: return (negative ? sign : 0) | (top_field << m) | (std::uint64_t{1} << (m - 1));
      case NanEncoding::all_ones: return (negative ? sign : 0) | (top_field << m) | ((std::uint64_t{1} << m) - 1);
      case NanEncoding::neg_zero: return sign;
      case NanEncoding::none: return negative ? 0 : sign;
    }
    return 0;
  }
  // An infinite result: ±inf where the format has it, its NaN where it has one (round.hpp: "in a format
  // without inf, an inf result becomes NaN", as OCP e4m3fn conversion does), else ±max_finite.
  std::uint64_t inf(bool negative) const {
    if (nan == NanEncoding::ieee) return (negative ? sign : 0) | (top_field << m);
    if (nan == NanEncoding::none) return max_finite(negative);
    return nan_canonical(negative);
  }
  // Whether the significand (implicit bit included) of encoding `enc` is odd: the tie-break of nearest-even
  // and the target of to-odd. With no mantissa bits every number's significand is 1, odd.
  bool significand_odd(std::uint64_t enc) const {
    if (m > 0) return enc & 1;
    return enc != 0 || !has_zero;
  }
  std::uint64_t max_finite(bool negative) const { return (negative ? sign : 0) | max_enc; }
};

// round.hpp: overflow gives ±max_finite with saturation, else what IEEE 754 §7.4 gives for the mode.
std::uint64_t overflow_bits(const Layout& L, const Format& f, bool negative, RoundingMode mode) {
  if (f.overflow == Overflow::saturate) return L.max_finite(negative);
  bool infinite = true;
  switch (mode) {
    case RoundingMode::nearest_even:
    case RoundingMode::nearest_away:
    case RoundingMode::stochastic: infinite = true; break;
    case RoundingMode::toward_zero:
    case RoundingMode::to_odd: infinite = false; break;
    case RoundingMode::up: infinite = !negative; break;
    case RoundingMode::down: infinite = negative; break;
  }
  return infinite ? L.inf(negative) : L.max_finite(negative);
}

Rational pow2(int e) {
  if (e >= 0) return Rational(BigInt(BigInt(1) << e));
  return Rational(BigInt(1), BigInt(BigInt(1) << -e));
}

}  // namespace

std::uint64_t reference_inf_bits(bool negative, const Format& f) { return Layout(f).inf(negative); }
std::uint64_t reference_nan_bits(bool negative, const Format& f) { return Layout(f).nan_canonical(negative); }
std::uint64_t reference_overflow_bits(bool negative, const Format& f, RoundingMode mode) {
  return overflow_bits(Layout(f), f, negative, mode);
}

std::uint64_t reference_round(const Rational& x, bool negative_zero, const Format& f, const Rounding& r,
                              std::uint64_t index) {
  const Layout L(f);
  if (x == 0) return L.zero(negative_zero);
  const bool negative = x < 0;
  if (negative && L.sign == 0) return L.nan_canonical(false);  // unsigned: no negative numbers (ml_dtypes: NaN)
  const Rational a = negative ? Rational(-x) : x;
  const BigInt n = mp::numerator(a), d = mp::denominator(a);
  // Without a zero, every magnitude up to the smallest value (encoding 0) rounds to it.
  if (!L.has_zero && L.compare(0, n, d) >= 0) return 0;

  // Past the first grid point beyond max_finite every mode gives a result beyond max_finite.
  if (L.compare(L.beyond(), n, d) <= 0) return overflow_bits(L, f, negative, r.mode);

  // Binary search for the neighbours: value(lo) <= a < value(hi), hi = lo + 1 (value(0) = 0 < a).
  std::uint64_t lo = 0, hi = L.beyond();
  while (hi - lo > 1) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (L.compare(mid, n, d) <= 0) lo = mid;
    else hi = mid;
  }
  const Rational vlo = L.value(lo), vhi = L.value(hi);
  const Rational below = a - vlo;  // distance to the neighbour of smaller magnitude
  const Rational above = vhi - a;  // distance to the one of larger magnitude
  const bool exact = below == 0;

  bool take_hi = false;  // the larger magnitude
  if (!exact) {
    switch (r.mode) {
      case RoundingMode::nearest_even: take_hi = above < below || (above == below && L.significand_odd(lo)); break;
      case RoundingMode::nearest_away: take_hi = above <= below; break;
      case RoundingMode::toward_zero: take_hi = false; break;
      case RoundingMode::up: take_hi = !negative; break;
      case RoundingMode::down: take_hi = negative; break;
      case RoundingMode::to_odd: take_hi = !L.significand_odd(lo); break;
      case RoundingMode::stochastic: {
        const int b = r.sr_bits;
        const Rational scaled = below / (vhi - vlo) * pow2(b);
        const BigInt frac_bits = mp::numerator(scaled) / mp::denominator(scaled);  // floor(frac * 2^b)
        const std::uint64_t rnd = philox::sr_word(r.seed, index, b) >> (32 - b);
        take_hi = frac_bits + rnd >= (BigInt(1) << b);
        break;
      }
    }
  }
  const std::uint64_t chosen = take_hi ? hi : lo;
  if (chosen == L.beyond()) return overflow_bits(L, f, negative, r.mode);
  if (chosen == 0 && L.has_zero) return L.zero(negative);
  // Subnormals::flush: a non-zero result below the smallest normal (exponent field 0) becomes ±0.
  if (f.subnormals == Subnormals::flush && L.has_zero && (chosen >> L.m) == 0) return L.zero(negative);
  return (negative ? L.sign : 0) | chosen;
}

Rational exact_value(double x) {
  if (!std::isfinite(x)) throw Error("exact_value: the input is not finite");
  if (x == 0) return Rational(0);
  int e = 0;
  const double f = std::frexp(x, &e);  // x = f * 2^e, 0.5 <= |f| < 1, so f * 2^53 is an integer
  const auto M = static_cast<std::int64_t>(std::ldexp(f, 53));
  return Rational(BigInt(M)) * pow2(e - 53);
}

std::uint64_t reference_round(double x, const Format& f, const Rounding& r, std::uint64_t index) {
  const Layout L(f);
  const bool negative = std::signbit(x);
  if (std::isnan(x)) {
    if (f.nan != NanEncoding::ieee) return L.nan_canonical(negative);
    // round.hpp: keep the sign and the top mantissa bits of the payload, set the quiet bit.
    const std::uint64_t fraction = std::bit_cast<std::uint64_t>(x) & ((std::uint64_t{1} << 52) - 1);
    return L.nan_canonical(negative) | (fraction >> (52 - L.m));
  }
  if (std::isinf(x)) {
    if (negative && L.sign == 0) return L.nan_canonical(false);
    return f.overflow == Overflow::saturate ? L.max_finite(negative) : L.inf(negative);
  }
  if (x == 0) return L.zero(negative);
  if (r.input_subnormals == InputSubnormals::zero && std::fpclassify(x) == FP_SUBNORMAL) return L.zero(negative);
  return reference_round(exact_value(x), negative, f, r, index);
}

std::uint64_t reference_round(float x, const Format& f, const Rounding& r, std::uint64_t index) {
  const Layout L(f);
  const bool negative = std::signbit(x);
  if (std::isnan(x)) {
    if (f.nan != NanEncoding::ieee) return L.nan_canonical(negative);
    const std::uint64_t fraction = std::bit_cast<std::uint32_t>(x) & 0x7fffffu;  // 23 bits
    const std::uint64_t payload = L.m <= 23 ? fraction >> (23 - L.m) : fraction << (L.m - 23);
    return L.nan_canonical(negative) | payload;
  }
  if (r.input_subnormals == InputSubnormals::zero && std::fpclassify(x) == FP_SUBNORMAL) return L.zero(negative);
  Rounding keep = r;
  keep.input_subnormals = InputSubnormals::keep;  // a float is never a subnormal double
  return reference_round(static_cast<double>(x), f, keep, index);
}

ReferenceValue reference_decode(std::uint64_t bits, const Format& f) {
  const Layout L(f);
  bits &= f.storage_mask();
  ReferenceValue v;
  v.negative = (bits & L.sign) != 0;
  const std::uint64_t mag = bits & ~L.sign;
  switch (f.nan) {
    case NanEncoding::ieee:
      if ((mag >> L.m) == L.top_field) {
        v.kind = (mag & ((std::uint64_t{1} << L.m) - 1)) ? ReferenceValue::Kind::nan : ReferenceValue::Kind::inf;
        return v;
      }
      break;
    case NanEncoding::all_ones:
      if (mag > L.max_enc) {
        v.kind = ReferenceValue::Kind::nan;
        return v;
      }
      break;
    case NanEncoding::neg_zero:
      if (bits == L.sign) {
        v.kind = ReferenceValue::Kind::nan;
        v.negative = false;
        return v;
      }
      break;
    case NanEncoding::none: break;
  }
  v.value = L.value(mag);
  if (v.negative) v.value = -v.value;
  return v;
}

}  // namespace mpsim
