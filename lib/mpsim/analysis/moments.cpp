#include "mpsim/analysis/moments.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

#include <boost/multiprecision/cpp_bin_float.hpp>
#include <boost/multiprecision/cpp_int.hpp>

namespace mpsim::analysis {

namespace {

namespace bmp = boost::multiprecision;
using BigInt = bmp::cpp_int;
// 256 significand bits: the statistics are computed from the exact sums with a relative error near 2^-250
// before the one rounding to double, so that rounding is the correct one but in ties closer than that.
using Wide = bmp::number<bmp::cpp_bin_float<256, bmp::digit_base_2>>;

// A finite double is m * 2^(k - kLowExp) with m < 2^53, k in [0, kBinades).
constexpr int kLowExp = 1074;   // 2^-1074: the smallest double subnormal (IEEE 754 binary64)
constexpr int kBinades = 2046;  // biased exponents 1..2046 give k = 0..2045; subnormals share k = 0
// The per-binade 128-bit sums fold into the big integers after this many values: |m| < 2^53, m^2 < 2^106,
// so 2^20 values keep every sum below 2^126.
constexpr std::uint64_t kFoldEvery = std::uint64_t{1} << 20;

BigInt big(unsigned __int128 v) {
  BigInt b = static_cast<std::uint64_t>(v >> 64);
  b <<= 64;
  b += static_cast<std::uint64_t>(v);
  return b;
}
BigInt big(__int128 v) { return v < 0 ? BigInt(-big(static_cast<unsigned __int128>(-v))) : big(static_cast<unsigned __int128>(v)); }

double to_double(const Wide& w) { return w.convert_to<double>(); }

}  // namespace

struct Moments::Exact {
  std::array<__int128, kBinades> sum{};            // sum of the signed significands, per k
  std::array<unsigned __int128, kBinades> abs{};   // sum of |m|, per k
  std::array<unsigned __int128, kBinades> sq{};    // sum of m^2, per k (weight 2^(2k))
  int lo = kBinades, hi = -1;                      // the k touched since the last fold
  std::uint64_t pending = 0;                       // values since the last fold
  BigInt s1 = 0, sa = 0, s2 = 0;                   // sum x = s1 2^-1074, sum |x| = sa 2^-1074, sum x^2 = s2 2^-2148
};

Moments::Moments() : exact_(std::make_unique<Exact>()) {
  min_ = std::numeric_limits<double>::infinity();
  max_ = -std::numeric_limits<double>::infinity();
}
Moments::~Moments() = default;
Moments::Moments(const Moments& o) : exact_(std::make_unique<Exact>(*o.exact_)), count_(o.count_), min_(o.min_), max_(o.max_) {}
Moments& Moments::operator=(const Moments& o) {
  if (this != &o) *this = Moments(o);
  return *this;
}
Moments::Moments(Moments&&) noexcept = default;
Moments& Moments::operator=(Moments&&) noexcept = default;

inline void Moments::add_one(double x) {
  const std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
  const int e = static_cast<int>((bits >> 52) & 0x7ff);
  if (e == 0x7ff) return;  // inf, NaN
  ++count_;
  min_ = std::min(min_, x);
  max_ = std::max(max_, x);
  const std::uint64_t frac = bits & ((std::uint64_t{1} << 52) - 1);
  const std::uint64_t m = e == 0 ? frac : frac | (std::uint64_t{1} << 52);
  if (m == 0) return;
  const int k = e == 0 ? 0 : e - 1;
  Exact& s = *exact_;
  s.sum[k] += (bits >> 63) ? -static_cast<__int128>(m) : static_cast<__int128>(m);
  s.abs[k] += m;
  s.sq[k] += static_cast<unsigned __int128>(m) * m;
  s.lo = std::min(s.lo, k);
  s.hi = std::max(s.hi, k);
  if (++s.pending == kFoldEvery) fold();
}

void Moments::fold() const {
  Exact& s = *exact_;
  for (int k = s.lo; k <= s.hi; ++k) {
    if (s.abs[k] == 0) continue;
    s.s1 += big(s.sum[k]) << k;
    s.sa += big(s.abs[k]) << k;
    s.s2 += big(s.sq[k]) << (2 * k);
    s.sum[k] = 0;
    s.abs[k] = 0;
    s.sq[k] = 0;
  }
  s.lo = kBinades;
  s.hi = -1;
  s.pending = 0;
}

void Moments::add(std::span<const float> values) {
  for (float v : values) add_one(v);  // every float is a double exactly
}

void Moments::add(std::span<const double> values) {
  for (double v : values) add_one(v);
}

Moments& Moments::operator+=(const Moments& o) {
  fold();
  o.fold();
  exact_->s1 += o.exact_->s1;
  exact_->sa += o.exact_->sa;
  exact_->s2 += o.exact_->s2;
  count_ += o.count_;
  min_ = std::min(min_, o.min_);
  max_ = std::max(max_, o.max_);
  return *this;
}

MomentStats Moments::stats() const {
  fold();
  MomentStats r;
  r.count = count_;
  r.std = std::numeric_limits<double>::quiet_NaN();
  if (count_ == 0) return r;
  const Exact& s = *exact_;
  r.min = min_;
  r.max = max_;
  const Wide n = Wide(count_);
  r.mean = to_double(ldexp(Wide(s.s1) / n, -kLowExp));
  r.l1_norm = to_double(ldexp(Wide(s.sa), -kLowExp));
  r.l2_norm = to_double(sqrt(ldexp(Wide(s.s2), -2 * kLowExp)));
  if (count_ >= 2) {
    // sum (x - mean)^2 = (n sum x^2 - (sum x)^2) / n, an exact integer numerator (>= 0 by Cauchy-Schwarz).
    const BigInt numerator = BigInt(count_) * s.s2 - s.s1 * s.s1;
    const Wide var = Wide(numerator) / (n * Wide(count_ - 1));
    r.std = to_double(ldexp(sqrt(var), -kLowExp));
  }
  return r;
}

nlohmann::json moment_stats_json(const MomentStats& s) {
  auto value = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  if (s.count == 0)
    return {{"min", nullptr}, {"max", nullptr}, {"mean", nullptr}, {"std", nullptr}, {"l1_norm", nullptr}, {"l2_norm", nullptr}};
  return {{"min", s.min},           {"max", s.max},
          {"mean", value(s.mean)},  {"std", value(s.std)},
          {"l1_norm", value(s.l1_norm)}, {"l2_norm", value(s.l2_norm)}};
}

}  // namespace mpsim::analysis
