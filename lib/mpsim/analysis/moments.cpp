#include "mpsim/analysis/moments.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "mpsim/error.hpp"

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
// The per-binade 128-bit sums fold into the big integers after this many values (checked after every
// chunk of at most 2^16): |m| < 2^53, m^2 < 2^106, so fewer than 2^20 + 2^16 values keep every sum below 2^127.
constexpr std::uint64_t kFoldEvery = std::uint64_t{1} << 20;
// Float input has its own first level: 64-bit sums per float binade in kBanks interleaved banks (so that
// consecutive values of one binade do not wait on each other's read-modify-write), flushed into the
// 128-bit sums every kFloatFlush values: |m| < 2^24 and m^2 < 2^48, so 2^15 values keep them below 2^63.
constexpr int kBanks = 4;           // add(float) below is unrolled by 4
constexpr int kFloatBinades = 254;  // float biased exponents 1..254 give k = 0..253; subnormals share k = 0
constexpr std::size_t kFloatFlush = std::size_t{1} << 15;
// A float m 2^(k - 149) is the double m 2^(k + kFloatToDouble - 1074).
constexpr int kFloatToDouble = 1074 - 149;

BigInt big(unsigned __int128 v) {
  BigInt b = static_cast<std::uint64_t>(v >> 64);
  b <<= 64;
  b += static_cast<std::uint64_t>(v);
  return b;
}
// v 2^k, shifting the magnitude only (left shifts of negative big integers are not defined the same way by
// every Boost version).
BigInt shifted(__int128 v, int k) {
  const BigInt magnitude = big(static_cast<unsigned __int128>(v < 0 ? -v : v)) << k;
  return v < 0 ? BigInt(-magnitude) : magnitude;
}

double to_double(const Wide& w) { return w.convert_to<double>(); }

// The non-negative v as n 32-bit limbs, least significant first.
void put_limbs(BigInt v, std::int64_t* out, std::size_t n) {
  const BigInt mask = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::int64_t>(BigInt(v & mask).convert_to<std::uint64_t>());
    v >>= 32;
  }
  if (v != 0) throw Error("Moments::words: a sum beyond its limbs (more than 2^64 values?)");
}
// sum w[i] 2^(32 i): the limbs of several streams added word by word carry here.
BigInt from_limbs(const std::int64_t* w, std::size_t n) {
  BigInt v = 0;
  for (std::size_t i = n; i-- > 0;) {
    v <<= 32;
    v += static_cast<std::uint64_t>(w[i]);
  }
  return v;
}

}  // namespace

struct Moments::Exact {
  struct FloatBank {
    std::array<std::int64_t, kFloatBinades> sum{};
    std::array<std::uint64_t, kFloatBinades> abs{}, sq{};
  };
  std::array<FloatBank, kBanks> fbank{};
  // The 128-bit sums per double binade k, in kBanks banks as well (add(double) spreads over them).
  struct Bank {
    std::array<__int128, kBinades> sum{};           // sum of the signed significands
    std::array<unsigned __int128, kBinades> abs{};  // sum of |m|
    std::array<unsigned __int128, kBinades> sq{};   // sum of m^2 (weight 2^(2k))
  };
  std::array<Bank, kBanks> bank{};
  std::uint64_t pending = 0;      // values since the last fold
  BigInt s1 = 0, sa = 0, s2 = 0;  // sum x = s1 2^-1074, sum |x| = sa 2^-1074, sum x^2 = s2 2^-2148
};

Moments::Moments() : exact_(std::make_unique<Exact>()) {
  min_ = std::numeric_limits<double>::infinity();
  max_ = -std::numeric_limits<double>::infinity();
}
Moments::~Moments() = default;
Moments::Moments(const Moments& o)
    : exact_(std::make_unique<Exact>(*o.exact_)), count_(o.count_), min_(o.min_), max_(o.max_) {}
Moments& Moments::operator=(const Moments& o) {
  if (this != &o) *this = Moments(o);
  return *this;
}
Moments::Moments(Moments&&) noexcept = default;
Moments& Moments::operator=(Moments&&) noexcept = default;

void Moments::fold() const {
  Exact& s = *exact_;
  for (auto& b : s.bank)
    for (int k = 0; k < kBinades; ++k) {
      if (b.abs[k] == 0) continue;
      s.s1 += shifted(b.sum[k], k);
      s.sa += big(b.abs[k]) << k;
      s.s2 += big(b.sq[k]) << (2 * k);
      b.sum[k] = 0;
      b.abs[k] = 0;
      b.sq[k] = 0;
    }
  s.pending = 0;
}

void Moments::add(std::span<const float> values) {
  Exact& s = *exact_;
  for (std::size_t at = 0; at < values.size();) {
    const std::size_t n = std::min(values.size() - at, kFloatFlush);
    const float* p = values.data() + at;
    float lo[kBanks], hi[kBanks];
    std::uint64_t finite[kBanks] = {};
    for (int b = 0; b < kBanks; ++b) {
      lo[b] = std::numeric_limits<float>::infinity();
      hi[b] = -std::numeric_limits<float>::infinity();
    }
    // One value into bank b: its binade's three sums, the bank's count and extremes.
    auto put = [&](int b, float x) {
      const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
      const std::uint32_t e = (bits >> 23) & 0xff;
      if (e == 0xff) return;  // inf, NaN
      ++finite[b];
      lo[b] = std::min(lo[b], x);
      hi[b] = std::max(hi[b], x);
      const std::uint32_t frac = bits & 0x7fffff;
      const std::int64_t m = e == 0 ? frac : frac | 0x800000;
      const std::uint32_t k = e == 0 ? 0 : e - 1;
      Exact::FloatBank& bank = s.fbank[static_cast<std::size_t>(b)];
      bank.sum[k] += (bits >> 31) ? -m : m;
      bank.abs[k] += static_cast<std::uint64_t>(m);
      bank.sq[k] += static_cast<std::uint64_t>(m * m);
    };
    std::size_t i = 0;
    for (; i + kBanks <= n; i += kBanks) {
      put(0, p[i]);
      put(1, p[i + 1]);
      put(2, p[i + 2]);
      put(3, p[i + 3]);
    }
    for (; i < n; ++i) put(static_cast<int>(i % kBanks), p[i]);
    for (int b = 0; b < kBanks; ++b) {
      count_ += finite[b];
      if (finite[b]) {
        min_ = std::min(min_, static_cast<double>(lo[b]));
        max_ = std::max(max_, static_cast<double>(hi[b]));
      }
      Exact::FloatBank& bank = s.fbank[static_cast<std::size_t>(b)];
      for (int k = 0; k < kFloatBinades; ++k) {
        if (bank.abs[k] == 0) continue;
        const int kd = k + kFloatToDouble;
        Exact::Bank& wide = s.bank[static_cast<std::size_t>(b)];
        wide.sum[kd] += bank.sum[k];
        wide.abs[kd] += bank.abs[k];
        wide.sq[kd] += bank.sq[k];
        bank.sum[k] = 0;
        bank.abs[k] = 0;
        bank.sq[k] = 0;
      }
    }
    s.pending += n;
    if (s.pending >= kFoldEvery) fold();
    at += n;
  }
}

void Moments::add(std::span<const double> values) {
  Exact& s = *exact_;
  for (std::size_t at = 0; at < values.size();) {
    // At most 2^16 values between folds (fold checks after each chunk): |m| < 2^53 and m^2 < 2^106
    // keep the 128-bit sums below 2^122 until the fold.
    const std::size_t n = std::min<std::size_t>(values.size() - at, std::size_t{1} << 16);
    const double* p = values.data() + at;
    double lo[kBanks], hi[kBanks];
    std::uint64_t finite[kBanks] = {};
    for (int b = 0; b < kBanks; ++b) {
      lo[b] = std::numeric_limits<double>::infinity();
      hi[b] = -std::numeric_limits<double>::infinity();
    }
    auto put = [&](int b, double x) {
      const std::uint64_t bits = std::bit_cast<std::uint64_t>(x);
      const int e = static_cast<int>((bits >> 52) & 0x7ff);
      if (e == 0x7ff) return;  // inf, NaN
      ++finite[b];
      lo[b] = std::min(lo[b], x);
      hi[b] = std::max(hi[b], x);
      const std::uint64_t frac = bits & ((std::uint64_t{1} << 52) - 1);
      const std::uint64_t m = e == 0 ? frac : frac | (std::uint64_t{1} << 52);
      const int k = e == 0 ? 0 : e - 1;
      Exact::Bank& bank = s.bank[static_cast<std::size_t>(b)];
      bank.sum[k] += (bits >> 63) ? -static_cast<__int128>(m) : static_cast<__int128>(m);
      bank.abs[k] += m;
      bank.sq[k] += static_cast<unsigned __int128>(m) * m;
    };
    std::size_t i = 0;
    for (; i + kBanks <= n; i += kBanks) {
      put(0, p[i]);
      put(1, p[i + 1]);
      put(2, p[i + 2]);
      put(3, p[i + 3]);
    }
    for (; i < n; ++i) put(static_cast<int>(i % kBanks), p[i]);
    for (int b = 0; b < kBanks; ++b) {
      count_ += finite[b];
      if (finite[b]) {
        min_ = std::min(min_, lo[b]);
        max_ = std::max(max_, hi[b]);
      }
    }
    s.pending += n;
    if (s.pending >= kFoldEvery) fold();
    at += n;
  }
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

std::vector<std::int64_t> Moments::words() const {
  fold();
  const Exact& s = *exact_;
  std::vector<std::int64_t> w(kWords, 0);
  if (count_ > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    throw Error("Moments::words: more than 2^63 values");
  w[0] = static_cast<std::int64_t>(count_);
  std::int64_t* p = w.data() + 1;
  put_limbs(s.s1 > 0 ? s.s1 : BigInt(0), p, kSumLimbs);
  put_limbs(s.s1 < 0 ? BigInt(-s.s1) : BigInt(0), p + kSumLimbs, kSumLimbs);
  put_limbs(s.sa, p + 2 * kSumLimbs, kSumLimbs);
  put_limbs(s.s2, p + 3 * kSumLimbs, kSquareLimbs);
  return w;
}

Moments Moments::from_words(std::span<const std::int64_t> w, double min, double max) {
  if (w.size() != kWords)
    throw Error("moment words: " + std::to_string(w.size()) + " values, expected " + std::to_string(kWords));
  for (std::size_t i = 0; i < w.size(); ++i)
    if (w[i] < 0)
      throw Error("moment words: word " + std::to_string(i) + " is negative (" + std::to_string(w[i]) + ")");
  Moments m;
  m.count_ = static_cast<std::uint64_t>(w[0]);
  const std::int64_t* p = w.data() + 1;
  Exact& s = *m.exact_;
  s.s1 = from_limbs(p, kSumLimbs) - from_limbs(p + kSumLimbs, kSumLimbs);
  s.sa = from_limbs(p + 2 * kSumLimbs, kSumLimbs);
  s.s2 = from_limbs(p + 3 * kSumLimbs, kSquareLimbs);
  if (m.count_ > 0) {
    m.min_ = min;
    m.max_ = max;
  }
  return m;
}

nlohmann::json moment_stats_json(const MomentStats& s) {
  auto value = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  if (s.count == 0)
    return {{"min", nullptr}, {"max", nullptr},     {"mean", nullptr},
            {"std", nullptr}, {"l1_norm", nullptr}, {"l2_norm", nullptr}};
  return {{"min", s.min},
          {"max", s.max},
          {"mean", value(s.mean)},
          {"std", value(s.std)},
          {"l1_norm", value(s.l1_norm)},
          {"l2_norm", value(s.l2_norm)}};
}

}  // namespace mpsim::analysis
