// Tests of lib/mpsim/analysis/updates.hpp: swallowed updates against a brute force written from the
// gap to the neighbouring format number (round-to-nearest-even keeps w when |u| is below half the gap
// on u's side, or equal to it with w even), and stochastic rounding's swallow rate.
#include "catch_compat.hpp"

#include <cmath>
#include <random>
#include <vector>

#include "mpsim/analysis/updates.hpp"

using namespace mpsim;
using mpsim::analysis::SwallowedUpdates;

namespace {

// True if round-to-nearest-even of wf + u gives wf (wf a finite value of f below max_finite, u != 0).
bool brute_swallowed(double wf, double u, const Format& f) {
  const double s = wf < 0 || (wf == 0 && std::signbit(wf)) ? -1.0 : 1.0;
  const double w = s * wf, d = s * u;  // now w >= 0
  const std::uint64_t bits = round_bits(w, f);
  double gap;
  if (d > 0) gap = decode(bits + 1, f) - w;
  else gap = w == 0 ? f.min_subnormal : w - decode(bits - 1, f);
  const bool even = (bits & 1) == 0;
  return std::fabs(d) < gap / 2 || (std::fabs(d) == gap / 2 && even);
}

int brute_binade(double x) {
  int n = std::ilogb(x);
  while (std::ldexp(1.0, n) > x) --n;
  while (std::ldexp(1.0, n + 1) <= x) ++n;
  return n;
}

}  // namespace

TEST_CASE("swallowed fraction and the log2(|w|/|u|) distribution against brute force", "[updates]") {
  std::mt19937_64 g(4);
  std::uniform_real_distribution<double> we(-8, 4), ue(-30, 0);
  std::size_t checks = 0;
  for (const Format& f : {fp16(), bf16()}) {
    std::vector<float> w(20000), u(20000);
    for (std::size_t i = 0; i < w.size(); ++i) {
      w[i] = static_cast<float>((g() & 1 ? -1 : 1) * std::exp2(we(g)));
      u[i] = static_cast<float>((g() & 1 ? -1 : 1) * std::exp2(ue(g)));
    }
    // Exact ties and edge cases: half an ulp of 1 (a tie, 1 is even), of 1 + ulp (odd), zero updates,
    // zero weights, NaN.
    const double ulp1 = std::ldexp(1.0, -f.man_bits);
    w[0] = 1, u[0] = float(ulp1 / 2);
    w[1] = float(1 + ulp1), u[1] = float(ulp1 / 2);
    w[2] = 1, u[2] = float(-ulp1 / 4);  // below 1 the gap is half: a quarter ulp is a tie, 1 is even
    w[3] = 1, u[3] = 0;
    w[4] = 0, u[4] = 1e-30f;
    w[5] = std::nanf(""), u[5] = 1;
    SwallowedUpdates s(f, Rounding::nearest_even());
    s.add(w, u, 0);
    std::uint64_t measured = 0, swallowed = 0, u_zero = 0, nonfinite = 0;
    mpsim::analysis::Log2Histogram ratio = mpsim::analysis::make_histogram(-64, 64);
    for (std::size_t i = 0; i < w.size(); ++i) {
      if (!std::isfinite(w[i]) || !std::isfinite(u[i])) {
        ++nonfinite;
        continue;
      }
      if (u[i] == 0) {
        ++u_zero;
        continue;
      }
      ++measured;
      const double wf = round(double(w[i]), f);
      swallowed += brute_swallowed(wf, u[i], f);
      if (wf != 0) {
        const int n = brute_binade(std::fabs(wf) / std::fabs(double(u[i])));
        ratio.widen(n, n);
        ratio.bins[std::size_t(n - ratio.min_exp)] += 1;
      }
    }
    CHECK(s.measured() == measured);
    CHECK(s.swallowed() == swallowed);
    CHECK(s.u_zero() == u_zero);
    CHECK(s.nonfinite() == nonfinite);
    for (int n = -64; n <= 64; ++n) CHECK(s.ratio().count(n) == ratio.count(n));
    // The hand-worked cases: the tie at 1 is swallowed, the one at 1 + ulp is not.
    SwallowedUpdates one(f, Rounding::nearest_even());
    const std::vector<double> w1{1.0}, u1{ulp1 / 2}, w2{1 + ulp1}, w3{1.0}, u3{-ulp1 / 4};
    one.add(std::span<const double>(w1), std::span<const double>(u1), 0);
    CHECK(one.swallowed() == 1);
    one.add(std::span<const double>(w2), std::span<const double>(u1), 0);
    CHECK(one.swallowed() == 1);
    one.add(std::span<const double>(w3), std::span<const double>(u3), 0);
    CHECK(one.swallowed() == 2);
    WARN(f.name << ": " << s.swallowed() << " of " << s.measured() << " updates swallowed (brute force " << swallowed
                << "), threshold 2^" << s.threshold_log2());
    ++checks;
  }
  CHECK(SwallowedUpdates(fp16(), {}).threshold_log2() == 11);
  CHECK(SwallowedUpdates(bf16(), {}).threshold_log2() == 8);
}

TEST_CASE("stochastic rounding swallows a quarter-ulp update three times in four", "[updates]") {
  const std::size_t n = 100000;
  const std::vector<double> w(n, 1.0), u(n, std::ldexp(1.0, -12));  // fp16: ulp(1) = 2^-10
  SwallowedUpdates s(fp16(), Rounding::stochastic(7));
  s.add(std::span<const double>(w), std::span<const double>(u), 0);
  const double p = double(s.swallowed()) / double(n);
  WARN("stochastic rounding: swallowed fraction " << p << " (expected 0.75)");
  CHECK(std::fabs(p - 0.75) < 5 * std::sqrt(0.75 * 0.25 / double(n)));
  SwallowedUpdates rne(fp16(), Rounding::nearest_even());
  rne.add(std::span<const double>(w), std::span<const double>(u), 0);
  CHECK(rne.swallowed() == n);
}
