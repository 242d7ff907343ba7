// Tests of lib/mpsim/analysis/moments.hpp against an independent exact computation: the sums in
// Boost.Multiprecision rationals (each value's exact rational, added one by one), and each statistic
// checked to be the double nearest the exact value by bracketing: the exact value lies between the
// midpoints to the result's two neighbours (squared, for the square roots, so no root is taken here).
#include "catch_compat.hpp"

#include <boost/multiprecision/cpp_int.hpp>

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "mpsim/analysis/moments.hpp"

using namespace mpsim::analysis;
using Rational = boost::multiprecision::cpp_rational;
using BigInt = boost::multiprecision::cpp_int;

namespace {

Rational exact(double x) {
  int e = 0;
  const double m = std::frexp(x, &e);  // x = m 2^e, m has 53 bits at most: m 2^53 is an integer
  Rational r = Rational(BigInt(static_cast<long long>(std::ldexp(m, 53))));
  e -= 53;
  if (e >= 0) r *= Rational(BigInt(1) << e);
  else r /= Rational(BigInt(1) << -e);
  return r;
}

// The midpoints between y and its neighbours, exactly.
std::pair<Rational, Rational> bracket(double y) {
  const double below = std::nextafter(y, -std::numeric_limits<double>::infinity());
  const double above = std::nextafter(y, std::numeric_limits<double>::infinity());
  return {(exact(below) + exact(y)) / 2, (exact(y) + exact(above)) / 2};
}

// y is the double nearest v (v >= 0 when `squared`: y nearest sqrt(v), checked as lo^2 <= v <= hi^2).
// Round to nearest gives +inf from 2^1024 - 2^970 on (half an ulp of the largest double above it).
bool nearest(double y, const Rational& v, bool squared = false) {
  if (std::isinf(y)) {
    const Rational limit = Rational((BigInt(1) << 1024) - (BigInt(1) << 970));
    return y > 0 && v >= (squared ? Rational(limit * limit) : limit);
  }
  auto [lo, hi] = bracket(y);
  if (squared) return (lo <= 0 || lo * lo <= v) && v <= hi * hi;
  return lo <= v && v <= hi;
}

struct Case {
  const char* name;
  std::vector<double> values;
  bool as_float;
};

}  // namespace

TEST_CASE("min, max, mean, std, l1_norm, l2_norm are the doubles nearest the exact values", "[moments]") {
  std::mt19937_64 rng(27);
  std::vector<Case> cases;
  {  // log-uniform floats over the whole float range, both signs, with subnormals, zeros and specials
    std::vector<double> v;
    std::uniform_real_distribution<double> e(-149, 127);
    for (int i = 0; i < 5000; ++i) {
      const float x = static_cast<float>(std::exp2(e(rng)));
      v.push_back((rng() & 1) ? -x : x);
    }
    for (double s : {0.0, -0.0, 1e-45, -1e-45, std::numeric_limits<double>::quiet_NaN(),
                     std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()})
      v.push_back(static_cast<float>(s));
    cases.push_back({"floats, log-uniform 2^-149..2^127", v, true});
  }
  {  // gradients-like: normal around a small mean, where sum of squares minus n mean^2 cancels
    std::vector<double> v;
    std::normal_distribution<double> g(1e-3, 1e-6);
    for (int i = 0; i < 5000; ++i) v.push_back(static_cast<float>(g(rng)));
    cases.push_back({"floats, mean 1e-3, std 1e-6", v, true});
  }
  {  // doubles with every bit pattern's exponent (random bits; NaN and inf kept out of the sums)
    std::vector<double> v;
    for (int i = 0; i < 1500; ++i) v.push_back(std::bit_cast<double>(rng() & ~(std::uint64_t{1} << 62)));  // |x| < 2
    for (int i = 0; i < 1500; ++i) v.push_back(std::bit_cast<double>(rng()));
    v.push_back(std::numeric_limits<double>::denorm_min());
    cases.push_back({"doubles, random bits", v, false});
  }
  cases.push_back({"one value", {-2.5}, false});
  std::size_t checked = 0, wrong = 0;
  for (const Case& c : cases) {
    Moments m;
    if (c.as_float) {
      std::vector<float> f(c.values.begin(), c.values.end());
      // In three calls, and the last third through operator+=: the result may not depend on how it was fed.
      const std::size_t third = f.size() / 3;
      m.add(std::span<const float>(f.data(), third));
      m.add(std::span<const float>(f.data() + third, third));
      Moments rest;
      rest.add(std::span<const float>(f.data() + 2 * third, f.size() - 2 * third));
      m += rest;
    } else {
      m.add(std::span<const double>(c.values));
    }
    const MomentStats s = m.stats();
    // The independent computation.
    Rational sum = 0, sum_abs = 0, sum_sq = 0;
    std::uint64_t n = 0;
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (double x : c.values) {
      if (!std::isfinite(x)) continue;
      const Rational r = exact(x);
      sum += r;
      sum_abs += r < 0 ? Rational(-r) : r;
      sum_sq += r * r;
      lo = std::min(lo, x);
      hi = std::max(hi, x);
      ++n;
    }
    const Rational mean = sum / n;
    INFO(c.name);
    bool ok = s.count == n && s.min == lo && s.max == hi;
    ok &= nearest(s.mean, mean);
    ok &= nearest(s.l1_norm, sum_abs);
    ok &= nearest(s.l2_norm, sum_sq, true);
    if (n >= 2) {
      const Rational var = (sum_sq - sum * sum / n) / (n - 1);
      ok &= nearest(s.std, var, true);
    } else {
      ok &= std::isnan(s.std);
    }
    std::printf("moments, %s: %llu finite values; min %.17g max %.17g mean %.17g std %.17g l1 %.17g l2 %.17g: %s\n",
                c.name, static_cast<unsigned long long>(n), s.min, s.max, s.mean, s.std, s.l1_norm, s.l2_norm,
                ok ? "all nearest the exact values" : "MISMATCH");
    checked += 6;
    wrong += !ok;
    CHECK(ok);
  }
  std::printf("moments: %zu cases x 6 statistics, %zu cases with a mismatch\n", cases.size(), wrong);
  CHECK(checked == cases.size() * 6);
}

TEST_CASE("2^21 + 5 floats, then as doubles: every flush and big-integer fold on the way, sums exact", "[moments]") {
  // x_i = +-j_i 2^-8 with j_i < 2^20: the sums are integers in units of 2^-8 (squares: 2^-16), kept here in
  // 128-bit integers; 2^21 + 5 values go through many of the float flushes (2^15) and two folds (2^20).
  const std::size_t n = (std::size_t{1} << 21) + 5;
  std::mt19937_64 rng(5);
  std::vector<float> v(n);
  __int128 sum = 0, sum_abs = 0, sum_sq = 0;
  for (auto& x : v) {
    const std::int64_t j = static_cast<std::int64_t>(rng() % (1u << 20)) * ((rng() & 1) ? -1 : 1);
    x = std::ldexp(static_cast<float>(j), -8);
    sum += j;
    sum_abs += j < 0 ? -j : j;
    sum_sq += static_cast<__int128>(j) * j;
  }
  auto rational = [](__int128 v) {
    const bool neg = v < 0;
    const unsigned __int128 u = neg ? static_cast<unsigned __int128>(-v) : static_cast<unsigned __int128>(v);
    BigInt b = static_cast<std::uint64_t>(u >> 64);
    b <<= 64;
    b += static_cast<std::uint64_t>(u);
    return Rational(neg ? BigInt(-b) : b);
  };
  Moments m;
  m.add(std::span<const float>(v));
  const MomentStats s = m.stats();
  const Rational S = rational(sum) / 256, A = rational(sum_abs) / 256, Q = rational(sum_sq) / 65536;
  const Rational var = (Q - S * S / n) / (n - 1);
  const bool ok = s.count == n && nearest(s.mean, S / n) && nearest(s.l1_norm, A) && nearest(s.l2_norm, Q, true) &&
                  nearest(s.std, var, true);
  std::printf("moments, %zu floats on a 2^-8 grid: mean %.17g std %.17g l1 %.17g l2 %.17g: %s\n", n, s.mean, s.std,
              s.l1_norm, s.l2_norm, ok ? "all nearest the exact values" : "MISMATCH");
  CHECK(ok);
  // The same values as doubles (the double path, its chunks and folds): the same statistics.
  const std::vector<double> d(v.begin(), v.end());
  Moments md;
  md.add(std::span<const double>(d));
  const MomentStats sd = md.stats();
  std::printf("the same as doubles: mean %.17g std %.17g l1 %.17g l2 %.17g\n", sd.mean, sd.std, sd.l1_norm, sd.l2_norm);
  CHECK((sd.count == s.count && sd.mean == s.mean && sd.std == s.std && sd.l1_norm == s.l1_norm &&
         sd.l2_norm == s.l2_norm && sd.min == s.min && sd.max == s.max));
}

TEST_CASE("moment_stats_json: nulls where a statistic does not exist", "[moments]") {
  Moments none;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  none.add(std::span<const float>(&nan, 1));
  const auto j = moment_stats_json(none.stats());
  std::printf("only NaN: %s\n", j.dump().c_str());
  for (const char* k : {"min", "max", "mean", "std", "l1_norm", "l2_norm"}) CHECK(j[k].is_null());
  Moments one;
  const float x = 3.0f;
  one.add(std::span<const float>(&x, 1));
  const auto j1 = moment_stats_json(one.stats());
  std::printf("one value: %s\n", j1.dump().c_str());
  CHECK(j1["std"].is_null());
  CHECK(j1["mean"] == 3.0);
  CHECK(j1["l2_norm"] == 3.0);
}

TEST_CASE("words: three streams added word by word are the union's moments; the round trip is exact", "[moments]") {
  // Streams over many binades, negative and positive (both parts of sum x), doubles near the extremes included,
  // so the limbs carry when the words are summed.
  std::mt19937_64 rng(11);
  std::vector<std::vector<double>> streams(3);
  for (std::size_t s = 0; s < streams.size(); ++s)
    for (int i = 0; i < 4000; ++i) {
      const double m = std::ldexp(static_cast<double>(rng() >> 11), -53) * ((rng() & 1) ? -1 : 1);
      streams[s].push_back(std::ldexp(m, static_cast<int>(rng() % 2000) - 1000));
    }
  streams[1].push_back(std::numeric_limits<double>::max());
  streams[2].push_back(std::numeric_limits<double>::denorm_min());
  Moments all;
  std::vector<std::int64_t> summed(Moments::kWords, 0);
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& v : streams) {
    all.add(std::span<const double>(v));
    Moments one;
    one.add(std::span<const double>(v));
    const auto w = one.words();
    for (std::size_t i = 0; i < w.size(); ++i) summed[i] += w[i];
    lo = std::min(lo, one.stats().min);
    hi = std::max(hi, one.stats().max);
  }
  const MomentStats want = all.stats(), got = Moments::from_words(summed, lo, hi).stats();
  const MomentStats back = Moments::from_words(all.words(), want.min, want.max).stats();
  auto same = [](const MomentStats& a, const MomentStats& b) {
    auto eq = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
    return a.count == b.count && eq(a.min, b.min) && eq(a.max, b.max) && eq(a.mean, b.mean) && eq(a.std, b.std) &&
           eq(a.l1_norm, b.l1_norm) && eq(a.l2_norm, b.l2_norm);
  };
  std::printf(
      "moment words: 3 streams, %llu values; one pass mean %.17g std %.17g l1 %.17g l2 %.17g; summed words: %s; "
      "round trip: %s\n",
      static_cast<unsigned long long>(want.count), want.mean, want.std, want.l1_norm, want.l2_norm,
      same(want, got) ? "identical" : "MISMATCH", same(want, back) ? "identical" : "MISMATCH");
  CHECK(same(want, got));
  CHECK(same(want, back));
  std::vector<std::int64_t> bad(Moments::kWords, 0);
  bad[3] = -1;
  CHECK_THROWS(Moments::from_words(bad, 0, 0));
  CHECK_THROWS(Moments::from_words(std::span<const std::int64_t>(bad.data(), 5), 0, 0));
}
