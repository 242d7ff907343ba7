// Tests of lib/mpsim/analysis/rounding_error.hpp against a brute-force loop (scalar round(), errors
// computed here, percentiles from the sorted errors), and the bias that separates nearest-even from
// stochastic rounding.
#include "catch_compat.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "mpsim/analysis/rounding_error.hpp"

using namespace mpsim;
using mpsim::analysis::RoundingError;

namespace {

struct Brute {
  std::vector<double> rel, ulp;
  double rel_sum = 0, ulp_sum = 0, bias_rel = 0, bias_ulp = 0;
  std::uint64_t overflow = 0;
};

Brute brute(const std::vector<float>& v, const Format& f, const Rounding& r, int k) {
  Brute b;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double y = std::ldexp(double(v[i]), k);
    if (!std::isfinite(y) || y == 0) continue;
    const double q = round(y, f, r, i);
    if (!std::isfinite(q)) {
      ++b.overflow;
      continue;
    }
    int e = std::ilogb(y);
    const double ulp = std::ldexp(1.0, std::max(e, f.emin) - f.man_bits);
    b.rel.push_back(std::fabs(q - y) / std::fabs(y));
    b.ulp.push_back(std::fabs(q - y) / ulp);
    b.bias_rel += (q - y) / std::fabs(y);
    b.bias_ulp += (q - y) / ulp;
  }
  for (const double x : b.rel) b.rel_sum += x;
  for (const double x : b.ulp) b.ulp_sum += x;
  std::sort(b.rel.begin(), b.rel.end());
  std::sort(b.ulp.begin(), b.ulp.end());
  return b;
}

double pick(const std::vector<double>& sorted, double q) {
  const auto idx = static_cast<std::size_t>(std::max(1.0, std::ceil(q * double(sorted.size())))) - 1;
  return sorted[idx];
}

}  // namespace

TEST_CASE("means, maxima, percentiles and bias against brute force, per mode", "[rounding_error]") {
  std::mt19937_64 g(9);
  std::uniform_real_distribution<double> e(-30, 17);  // fp16: subnormals, normals and overflow
  std::vector<float> v(30000);
  for (auto& x : v) x = static_cast<float>((g() & 1 ? -1 : 1) * std::exp2(e(g)));
  v[0] = 0;
  v[1] = std::numeric_limits<float>::infinity();
  std::size_t checks = 0;
  for (const Format& f : {fp16(), bf16(), fp8_e4m3()}) {
    for (const Rounding& r :
         {Rounding::nearest_even(), Rounding::of(RoundingMode::toward_zero), Rounding::stochastic(5)}) {
      for (const int k : {0, 3}) {
        RoundingError a(f, r, k), part2(f, r, k);
        a.add(std::span<const float>(v).subspan(0, 10000), 0);
        part2.add(std::span<const float>(v).subspan(10000), 10000);
        a += part2;
        const Brute b = brute(v, f, r, k);
        INFO(f.name << " " << ieee_name(r.mode) << " scale 2^" << k);
        REQUIRE(a.count() == b.rel.size());
        CHECK(a.overflow() == b.overflow);
        CHECK(a.rel_mean() == Approx(b.rel_sum / double(b.rel.size())).epsilon(1e-12));
        CHECK(a.ulp_mean() == Approx(b.ulp_sum / double(b.ulp.size())).epsilon(1e-12));
        CHECK(a.rel_max() == b.rel.back());
        CHECK(a.ulp_max() == b.ulp.back());
        CHECK(a.bias_rel() == Approx(b.bias_rel / double(b.rel.size())).margin(1e-15));
        CHECK(a.bias_ulp() == Approx(b.bias_ulp / double(b.ulp.size())).margin(1e-12));
        for (const double q : {0.5, 0.9, 0.99, 0.999}) {
          const double pr = pick(b.rel, q), pu = pick(b.ulp, q);
          // Upper edge of the bin holding the percentile: never below it, at most one bin above.
          CHECK(a.rel_percentile(q) >= pr);
          CHECK(a.rel_percentile(q) <= std::max(pr * std::exp2(1.0 / RoundingError::kRelBinsPerBinade) * (1 + 1e-12),
                                                std::ldexp(1.0, RoundingError::kRelMinExp)));
          CHECK(a.ulp_percentile(q) >= pu);
          if (pu < 4) CHECK(a.ulp_percentile(q) <= pu + 1.0 / RoundingError::kUlpBins + 1e-15);
          else CHECK(a.ulp_percentile(q) == a.ulp_max());  // the open top bin
        }
        ++checks;
      }
    }
  }
  WARN("rounding report: " << checks << " (format, mode, scale) cases of 30000 values against brute force");
}

TEST_CASE("bias: nearest-even is biased on values just above a format number, stochastic rounding is not",
          "[rounding_error]") {
  // x = 1 + t·ulp with t uniform in [0, 0.25): nearest-even always rounds down (bias about -1/8 ulp),
  // stochastic rounding is unbiased in expectation.
  std::mt19937_64 g(1);
  std::uniform_real_distribution<double> t(0, 0.25);
  std::vector<float> v(200000);
  for (auto& x : v) x = static_cast<float>(1 + t(g) * std::ldexp(1.0, -10));
  RoundingError rne(fp16(), Rounding::nearest_even()), sr(fp16(), Rounding::stochastic(3));
  rne.add(v, 0);
  sr.add(v, 0);
  double mean_t = 0;
  for (const float x : v) mean_t += (double(x) - 1) / std::ldexp(1.0, -10);
  mean_t /= double(v.size());
  WARN("bias in ulps: nearest-even " << rne.bias_ulp() << " (expected " << -mean_t << "), stochastic "
                                     << sr.bias_ulp());
  CHECK(rne.bias_ulp() == Approx(-mean_t).epsilon(1e-9));
  // SR: each error is (1 - t) w.p. t, -t w.p. 1 - t: mean 0, variance t(1-t) <= 0.25; 5 sigma bound.
  CHECK(std::fabs(sr.bias_ulp()) < 5 * std::sqrt(0.25 / double(v.size())));
}
