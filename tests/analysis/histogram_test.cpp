// Tests of lib/mpsim/analysis/histogram.hpp against a brute-force binade computed per element by
// comparison with exact powers of two (independent of the bit tricks in the library).
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "mpsim/analysis/histogram.hpp"

using mpsim::analysis::Log2Histogram;
using mpsim::analysis::make_float_histogram;

namespace {

// The binade by definition: the n with 2^n <= |x| < 2^(n+1), found by walking powers of two.
int brute_binade(double x) {
  const double a = std::fabs(x);
  int n = std::ilogb(a);
  while (std::ldexp(1.0, n) > a) --n;
  while (std::ldexp(1.0, n + 1) <= a) ++n;
  return n;
}

struct Brute {
  std::map<int, std::uint64_t> bins;
  std::uint64_t zero = 0, nan = 0, neg_inf = 0, pos_inf = 0;
  template <class T>
  explicit Brute(const std::vector<T>& v) {
    for (const T x : v) {
      if (std::isnan(x)) ++nan;
      else if (x == 0) ++zero;
      else if (std::isinf(x)) ++(x > 0 ? pos_inf : neg_inf);
      else ++bins[brute_binade(static_cast<double>(x))];
    }
  }
};

// Compares every bucket; returns the number of mismatching buckets (printed).
std::size_t compare(const Log2Histogram& h, const Brute& b) {
  std::size_t bad = 0;
  if (h.zero != b.zero || h.nan != b.nan || h.neg_inf != b.neg_inf || h.pos_inf != b.pos_inf) ++bad;
  std::uint64_t brute_total = b.zero + b.nan + b.neg_inf + b.pos_inf;
  for (int n = h.min_exp; n <= h.max_exp; ++n) {
    const auto it = b.bins.find(n);
    const std::uint64_t want = it == b.bins.end() ? 0 : it->second;
    if (h.count(n) != want) {
      if (bad < 5) UNSCOPED_INFO("bin " << n << ": histogram " << h.count(n) << ", brute force " << want);
      ++bad;
    }
  }
  for (const auto& [n, c] : b.bins) {
    brute_total += c;
    if (n < h.min_exp || n > h.max_exp) ++bad;
  }
  if (h.total() != brute_total) ++bad;
  return bad;
}

std::vector<float> random_floats(std::size_t n, std::uint64_t seed) {
  // Uniform random bit patterns: every binade, subnormals, NaNs and infinities all occur.
  std::mt19937_64 g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = std::bit_cast<float>(static_cast<std::uint32_t>(g()));
  return v;
}

}  // namespace

TEST_CASE("exact powers of two land in their own bin, not the one frexp's exponent names", "[histogram]") {
  std::size_t checked = 0, bad = 0;
  for (int n = -149; n <= 127; ++n) {
    const float p = std::ldexp(1.0f, n);
    Log2Histogram h = make_float_histogram();
    const std::vector<float> v{p, -p, std::nextafter(p, 0.0f)};
    h.add(v);
    int fe = 0;
    std::frexp(p, &fe);
    // 2^n and -2^n in bin n (frexp says n+1); the float just below 2^n in bin n-1 (empty for 2^-149).
    const bool ok = h.count(n) == 2 && fe == n + 1 && (n == -149 ? h.zero == 1 : h.count(n - 1) == 1);
    bad += !ok;
    ++checked;
    if (!ok) UNSCOPED_INFO("2^" << n << ": bin count " << h.count(n) << ", below " << h.count(n - 1));
  }
  INFO("powers of two checked: " << checked << ", wrong: " << bad);
  CHECK(bad == 0);
  WARN("histogram: " << checked << " powers of two 2^-149..2^127 (and their neighbours below) in the right bins");
}

TEST_CASE("random float bit patterns against the brute-force binade", "[histogram]") {
  const auto v = random_floats(200000, 1);
  Log2Histogram h = make_float_histogram();
  h.add(v);
  const Brute b(v);
  const std::size_t bad = compare(h, b);
  WARN("histogram of 200000 random float bit patterns: " << b.bins.size() << " binades, " << b.nan << " NaN, " << b.zero
                                                         << " zero, mismatching buckets: " << bad);
  CHECK(bad == 0);
  CHECK(h.min_exp == -149);
  CHECK(h.max_exp == 127);
}

TEST_CASE("adversarial inputs: subnormal-only, one exponent, NaN-only, zeros, infinities, alternating signs",
          "[histogram]") {
  std::mt19937 g(7);
  std::vector<std::vector<float>> cases;
  {
    std::vector<float> v;  // every float subnormal magnitude range, both signs
    for (std::uint32_t m = 1; m < (1u << 23); m += 4099)
      v.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(m | (m & 1u) << 31)));
    cases.push_back(v);
  }
  {
    std::vector<float> v(10000);  // all in [1, 2)
    for (auto& x : v) x = std::bit_cast<float>(static_cast<std::uint32_t>(0x3f800000u | (g() & 0x7fffffu)));
    cases.push_back(v);
  }
  {
    std::vector<float> v(1000);  // NaN-only, both signs and payloads
    for (std::size_t i = 0; i < v.size(); ++i)
      v[i] = std::bit_cast<float>(static_cast<std::uint32_t>(0x7f800001u | (g() & 0x7fffffu) | (i & 1u) << 31));
    cases.push_back(v);
  }
  cases.push_back(std::vector<float>(777, -0.0f));
  cases.push_back({std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                   std::numeric_limits<float>::max(), -std::numeric_limits<float>::denorm_min(), 0.0f});
  {
    std::vector<float> v(5001);  // alternating signs, one value
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = i % 2 ? -0.375f : 0.375f;
    cases.push_back(v);
  }
  std::size_t bad = 0, elements = 0;
  for (const auto& v : cases) {
    Log2Histogram h = make_float_histogram();
    h.add(v);
    bad += compare(h, Brute(v));
    elements += v.size();
    // The same values as doubles give the same histogram.
    Log2Histogram hd = make_float_histogram();
    hd.add(std::vector<double>(v.begin(), v.end()));
    CHECK(hd == h);
  }
  WARN("histogram adversarial: " << cases.size() << " inputs, " << elements << " values, mismatches " << bad);
  CHECK(bad == 0);
}

TEST_CASE("doubles outside float's range widen the histogram", "[histogram]") {
  const std::vector<double> v{std::ldexp(1.0, -1074), std::ldexp(1.0, 1023) * 1.5, 1e-300, 1e300, -3.0, 0.0};
  Log2Histogram h = make_float_histogram();
  h.add(v);
  CHECK(compare(h, Brute(v)) == 0);
  CHECK(h.min_exp == -1074);
  CHECK(h.max_exp == 1023);
  CHECK(h.count(1023) == 1);
  CHECK(h.count(-1074) == 1);
  CHECK(h.count(1) == 1);
}

TEST_CASE("merging gives the histogram of the union; JSON round-trips", "[histogram]") {
  const auto a = random_floats(30000, 2);
  const auto b = random_floats(20000, 3);
  Log2Histogram ha = make_float_histogram(), hb = mpsim::analysis::make_histogram(-3, 3), hu = make_float_histogram();
  ha.add(a);
  hb.add(b);  // narrower range, widens itself
  std::vector<float> u = a;
  u.insert(u.end(), b.begin(), b.end());
  hu.add(u);
  Log2Histogram m = ha;
  m += hb;
  CHECK(m == hu);
  Log2Histogram m2 = mpsim::analysis::make_histogram(0, -1);  // empty
  m2 += hb;
  m2 += ha;
  CHECK(compare(m2, Brute(u)) == 0);
  CHECK(Log2Histogram::from_json(hu.to_json()) == hu);
  const auto j = hu.to_json();
  CHECK(j.at("total").get<std::uint64_t>() == u.size());
}

TEST_CASE("counts(): the flat int64 layout sums like the histograms and rebuilds them", "[histogram]") {
  // Two streams, one of floats and one of doubles beyond float's range, as two processes would hold them.
  std::mt19937 g(11);
  std::vector<float> a(20000);
  for (auto& x : a) x = std::bit_cast<float>(static_cast<std::uint32_t>(g()));
  std::vector<double> b = {1e-300, -1e300, 0.0, std::numeric_limits<double>::infinity(), 3.0, 1e-320};
  Log2Histogram ha = make_float_histogram(), hb = make_float_histogram(), whole = make_float_histogram();
  ha.add(a);
  hb.add(b);
  whole.add(a);
  whole.add(b);
  const auto ca = ha.counts(), cb = hb.counts();
  REQUIRE(ca.size() == Log2Histogram::kCountsSize);
  std::vector<std::int64_t> sum(ca.size());
  for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = ca[i] + cb[i];
  const Log2Histogram rebuilt = Log2Histogram::from_counts(sum);
  // The element-wise sum is the merged histogram, range included (float range widened to 2^-1064 .. 2^996).
  CHECK(rebuilt == whole);
  CHECK(Log2Histogram::from_counts(ca) == ha);
  CHECK(rebuilt.total() == a.size() + b.size());
  CHECK(rebuilt.min_exp == -1064);
  CHECK_THROWS(Log2Histogram::from_counts(std::vector<std::int64_t>(5, 0)));
  sum[7] = -1;
  CHECK_THROWS(Log2Histogram::from_counts(sum));
}
