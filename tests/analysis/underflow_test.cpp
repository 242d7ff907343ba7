// Tests of lib/mpsim/analysis/underflow.hpp: the recommended scale, the rescued count and the sweep's
// largest safe scale and best window against brute force (round_bits of x·2^k per element, all k).
#include "catch_compat.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mpsim/analysis/underflow.hpp"

using namespace mpsim;
using namespace mpsim::analysis;

namespace {

struct Counts {
  std::uint64_t underflow = 0, overflow = 0, nonzero = 0;
};

Counts brute(const std::vector<float>& v, const Format& f, int k) {
  Counts c;
  for (const float x : v) {
    if (!std::isfinite(x) || x == 0) continue;
    ++c.nonzero;
    const double y = decode(round_bits(std::ldexp(double(x), k), f), f);
    if (y == 0) ++c.underflow;
    if (!std::isfinite(y)) ++c.overflow;
  }
  return c;
}

std::vector<float> gradients(std::size_t n, std::uint64_t seed, double center, double spread) {
  // Log-normal magnitudes, random signs, some exact zeros: the shape of real gradient tensors.
  std::mt19937_64 g(seed);
  std::normal_distribution<double> e(center, spread);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = i % 17 == 0 ? 0.0f : static_cast<float>((g() & 1 ? -1 : 1) * std::exp2(e(g)));
  return v;
}

}  // namespace

TEST_CASE("recommended scale, rescued values, largest safe scale and best window match brute force", "[underflow]") {
  std::size_t cases = 0;
  for (const Format& f : {fp16(), bf16(), fp8_e5m2(), fp8_e4m3()}) {
    for (const auto& [center, spread] : {std::pair{-20.0, 4.0}, std::pair{-30.0, 6.0}, std::pair{5.0, 3.0}}) {
      const auto v = gradients(20000, 42 + cases, center, spread);
      RangeCounter c(f);
      c.add(v);
      UnderflowOptions o;
      o.log2_scale = 0;
      o.margin = 2;
      // Brute force: amax, then the largest k with amax·2^k·2 <= max_finite.
      double amax = 0;
      for (const float x : v) amax = std::max(amax, double(std::fabs(x)));
      int want_k = -1000;
      for (int k = -300; k <= 300; ++k)
        if (std::ldexp(amax * 2, k) <= f.max_finite) want_k = k;
      const ScaleRecommendation rec = recommend_scale(c, o);
      REQUIRE(rec.found);
      CHECK(rec.log2_scale == want_k);
      const Counts at0 = brute(v, f, 0), atk = brute(v, f, want_k);
      CHECK(rec.rescued == std::int64_t(at0.underflow) - std::int64_t(atk.underflow));
      CHECK(atk.overflow == 0);
      // Sweep: largest k in -8..32 without overflow; window of least underflow without overflow.
      const Sweep s = sweep(c, o);
      int largest = -1000, lo = -1000, hi = -1000;
      std::uint64_t least = std::numeric_limits<std::uint64_t>::max();
      for (int k = -8; k <= 32; ++k) {
        const Counts b = brute(v, f, k);
        CHECK(s.rows[std::size_t(k + 8)].underflow == b.underflow);
        CHECK(s.rows[std::size_t(k + 8)].overflow == b.overflow);
        if (b.overflow) continue;
        largest = k;
        if (b.underflow < least) least = b.underflow, lo = k;
        if (b.underflow == least) hi = k;
      }
      CHECK(s.largest_safe.value_or(-1000) == largest);
      CHECK(s.best_lo.value_or(-1000) == lo);
      CHECK(s.best_hi.value_or(-1000) == hi);
      // The JSON names and percentages.
      const auto j = underflow_report_json("t", c, o, true);
      CHECK(j["underflows_num"].get<std::uint64_t>() == at0.underflow);
      CHECK(j["underflows%"].get<double>() == Approx(100.0 * double(at0.underflow) / double(at0.nonzero)));
      CHECK(j["overflows_num"].get<std::uint64_t>() == at0.overflow);
      CHECK(j["cur_amax"].get<double>() == amax);
      CHECK(j["sweep"]["rows"].size() == 41);
      UNSCOPED_INFO(f.name << " center 2^" << center << ": recommended 2^" << rec.log2_scale << ", rescued "
                           << rec.rescued << ", largest safe 2^" << largest << ", window 2^" << lo << "..2^" << hi);
      ++cases;
    }
  }
  WARN("underflow report: " << cases << " (format, distribution) cases checked against brute force over 41 scales");
}

TEST_CASE("no finite non-zero value: no recommendation; everything overflowing: no safe scale", "[underflow]") {
  RangeCounter c(fp16());
  const std::vector<float> v{0.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()};
  c.add(v);
  CHECK_FALSE(recommend_scale(c, {}).found);
  const auto j = underflow_report_json("t", c, {}, true);
  CHECK(j["recommended"].is_null());
  CHECK(j["underflows%"].get<double>() == 0);
  RangeCounter big(fp16());
  const std::vector<float> b{1e30f, -3e38f};
  big.add(b);
  const Sweep s = sweep(big, {});
  CHECK_FALSE(s.largest_safe.has_value());
  CHECK_FALSE(s.best_lo.has_value());
  // 3e38·2^k·2 <= 65504 needs k <= -113.
  CHECK(recommend_scale(big, {}).log2_scale == -113);
}

TEST_CASE("best_window equals the sweep's best window on random count vectors", "[underflow]") {
  // The search (a few at_scale calls) against sweep() (every scale): random counts in random cells of the
  // layout, sparse and dense, every rounding mode that has one outcome per value, named formats of every
  // width, ranges wide and narrow, at the edges of the formats and beyond.
  std::mt19937_64 g(32);
  const std::vector<Format> formats = {fp16(),
                                       bf16(),
                                       fp8_e4m3(),
                                       fp8_e5m2(),
                                       fp32(),
                                       tf32(),
                                       parse_format("float4_e2m1fn"),
                                       parse_format("float6_e3m2fn")};
  const RoundingMode modes[] = {RoundingMode::nearest_even, RoundingMode::toward_zero,  RoundingMode::up,
                                RoundingMode::down,         RoundingMode::nearest_away, RoundingMode::to_odd};
  const std::pair<int, int> ranges[] = {{-128, 128}, {-8, 32}, {-20, -10}, {30, 60}, {5, 5}, {-200, -150}};
  int cases = 0, windows = 0, none = 0, mismatches = 0;
  for (int trial = 0; trial < 16; ++trial) {
    const Format& f = formats[static_cast<std::size_t>(trial) % formats.size()];
    const Rounding r = Rounding::of(modes[static_cast<std::size_t>(trial) % std::size(modes)]);
    const std::size_t size = RangeCounter(f, r).counts_size();
    std::vector<std::int64_t> counts(size, 0);
    // Cells in a random stretch of the layout (a narrow one: a few binades of data, as a tensor has).
    const std::size_t from = g() % size, span = 1 + g() % (trial % 3 == 0 ? size : 64);
    const int filled = 1 + static_cast<int>(g() % 40);
    for (int i = 0; i < filled; ++i) counts[(from + g() % span) % size] += static_cast<std::int64_t>(1 + g() % 1000);
    const RangeCounter c = RangeCounter::from_counts(f, r, counts, 1.0, 1.0);
    for (const auto& [lo, hi] : ranges) {
      UnderflowOptions o;
      o.sweep_lo = lo;
      o.sweep_hi = hi;
      const Sweep s = sweep(c, o);
      const auto w = best_window(c, lo, hi);
      const bool same = s.best_lo ? (w && w->lo == *s.best_lo && w->hi == *s.best_hi) : !w;
      if (!same) {
        ++mismatches;
        UNSCOPED_INFO(f.name << " " << short_name(r.mode) << " trial " << trial << " range " << lo << ".." << hi
                             << ": sweep "
                             << (s.best_lo ? std::to_string(*s.best_lo) + ".." + std::to_string(*s.best_hi) : "none")
                             << ", search " << (w ? std::to_string(w->lo) + ".." + std::to_string(w->hi) : "none"));
      }
      ++cases;
      (w ? windows : none) += 1;
    }
  }
  WARN("best_window: " << cases << " (counts, format, mode, range) cases, " << windows << " with a window, " << none
                       << " where every scale overflows; " << mismatches << " differ from the sweep's");
  CHECK(mismatches == 0);
  CHECK(windows > 0);
  CHECK(none > 0);
  CHECK_THROWS_WITH(best_window(RangeCounter(fp16()), 3, 2), Catch::Contains("lo 3 exceeds hi 2"));
}
