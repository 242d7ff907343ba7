// Tests of lib/mpsim/format/block.hpp. The elements against round_bits() on the exactly scaled value in every
// rounding mode (stochastic included: element i is generator index i), the scales against OCP MX v1.0's rule
// computed here with frexp, and the telemetry counters against a count by definition. gfloat and torchao are
// compared through the command line (tests/format/block_check.py).
#include "catch_compat.hpp"

#if defined(__x86_64__)
#include <immintrin.h>  // _mm_getcsr / _mm_setcsr
#endif

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "mpsim/error.hpp"
#include "mpsim/format/block.hpp"
#include "sanitized.hpp"

using namespace mpsim;

namespace {

// Under AddressSanitizer (-O0, tests/sanitized.hpp) the thread-count test takes fewer modes and thread counts.

std::vector<float> sample(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  std::uniform_int_distribution<int> e(-40, 40);
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(d(g), e(g));
  for (std::size_t i = 64; i < 96 && i < n; ++i) x[i] = 0;  // an all-zero block
  if (n > 100) x[100] = 5e4f;                               // an outlier
  return x;
}

}  // namespace

TEST_CASE("MX elements are round_bits of V / 2^k in every mode, scales follow OCP MX", "[block]") {
  const std::size_t row = 100;  // three blocks of 32 and a short one of 4 per row
  const auto x = sample(row * 5, 3);
  std::uint64_t checked = 0, bad = 0;
  for (const auto& name : block_format_names()) {
    if (name == "nvfp4") continue;
    const BlockFormat f = parse_block_format(name);
    for (const RoundingMode m :
         {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up, RoundingMode::down,
          RoundingMode::nearest_away, RoundingMode::to_odd, RoundingMode::stochastic}) {
      Rounding r = Rounding::of(m);
      r.seed = 11;
      const BlockQuantized q = quantize_blocks(x, row, f, r);
      REQUIRE(q.scales.size() == 5 * 4);
      std::size_t blk = 0;
      for (std::size_t r0 = 0; r0 < x.size(); r0 += row) {
        for (std::size_t b = r0; b < r0 + row; b += 32, ++blk) {
          const std::size_t end = std::min(b + 32, r0 + row);
          double amax = 0;
          for (std::size_t i = b; i < end; ++i) amax = std::max(amax, std::fabs(double(x[i])));
          int e2 = 0;
          std::frexp(amax, &e2);  // amax = f * 2^e2, 0.5 <= f < 1: floor(log2 amax) = e2 - 1
          const int k = amax == 0 ? -127 : std::clamp(e2 - 1 - f.element.emax, -127, 127);
          CHECK(q.scales[blk] == k + 127);
          for (std::size_t i = b; i < end; ++i) {
            ++checked;
            if (q.elements[i] != round_bits(std::ldexp(double(x[i]), -k), f.element, r, i)) ++bad;
          }
        }
      }
    }
  }
  std::printf("MX block elements vs round_bits(V / 2^k): %llu (format, mode, element) cases, %llu mismatches\n",
              static_cast<unsigned long long>(checked), static_cast<unsigned long long>(bad));
  CHECK(bad == 0);
}

TEST_CASE("block telemetry counts what quantizing did, by definition", "[block]") {
  const auto x = sample(320, 5);
  const BlockFormat f = parse_block_format("mxfp8_e4m3");
  BlockStats s;
  const BlockQuantized q = quantize_blocks(x, 0, f, {}, &s);
  std::uint64_t nonzero = 0, flushed = 0, subnormal = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (x[i] == 0) continue;
    ++nonzero;
    const double v = decode(q.elements[i], f.element);
    if (v == 0) ++flushed;
    else if (std::fabs(v) < f.element.min_normal) ++subnormal;
  }
  CHECK(s.nonzero == nonzero);
  CHECK(s.flushed == flushed);
  CHECK(s.subnormal == subnormal);
  CHECK(s.blocks == 10);
  std::uint64_t scales = 0;
  for (const auto& [k, c] : s.scale_log2) scales += c;
  CHECK(scales == 10);
  std::printf("telemetry: %llu nonzero, %llu flushed inside their block, %llu subnormal, %llu saturated\n",
              static_cast<unsigned long long>(nonzero), static_cast<unsigned long long>(flushed),
              static_cast<unsigned long long>(subnormal), static_cast<unsigned long long>(s.saturated));
}

TEST_CASE("stochastic block rounding is unbiased over seeds and reproducible", "[block]") {
  // One block: 0.3 * 2^k lies between e2m1 neighbours; the mean over seeds approaches the input.
  std::vector<float> x = {6.0f, 0.3f, 1.3f, -2.6f};
  const BlockFormat f = parse_block_format("mxfp4_e2m1");
  const int seeds = 20000;
  std::vector<double> mean(x.size(), 0);
  std::vector<float> y(x.size());
  for (int s = 0; s < seeds; ++s) {
    round_blocks(x, y, 0, f, Rounding::stochastic(static_cast<std::uint64_t>(s)));
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += y[i] / seeds;
  }
  // Hoeffding: the neighbours are at most 1 apart here, so |mean - x| < sqrt(ln(2/1e-9) / (2 n)) with
  // probability 1 - 1e-9.
  const double t = std::sqrt(std::log(2 / 1e-9) / (2.0 * seeds));
  for (std::size_t i = 0; i < x.size(); ++i) {
    INFO(x[i] << " mean " << mean[i]);
    CHECK(std::fabs(mean[i] - x[i]) < t);
  }
  std::vector<float> a(x.size()), b(x.size());
  round_blocks(x, a, 0, f, Rounding::stochastic(7));
  round_blocks(x, b, 0, f, Rounding::stochastic(7));
  CHECK(a == b);
  std::printf("stochastic mxfp4: %d seeds, worst |mean - x| %.4f (bound %.4f)\n", seeds,
              std::max({std::fabs(mean[1] - x[1]), std::fabs(mean[2] - x[2]), std::fabs(mean[3] - x[3])}), t);
}

TEST_CASE("block format names, options and errors", "[block]") {
  CHECK(parse_block_format("nvfp4").block == 16);
  CHECK(parse_block_format("mxfp8_e5m2", 64).block == 64);
  CHECK_THROWS_AS(parse_block_format("mxfp9"), Error);
  CHECK_THROWS_AS(parse_block_format("nvfp4", 0, BlockScaleRule::rceil), Error);
  CHECK_THROWS_AS(parse_block_scale_rule("ceil"), Error);
  const std::vector<float> x(10, 1.0f);
  CHECK_THROWS_AS(quantize_blocks(x, 3, parse_block_format("mxfp8_e4m3")), Error);  // 10 is not rows of 3
}

TEST_CASE("block quantize gives the same bits and counts whatever the thread count", "[block]") {
  // 2^18 elements in rows of 1000 (31 blocks of 32 and a short one of 8 per row; nvfp4: 62 of 16 and
  // one of 8): enough for four workers of 2^16 elements, with NaN, inf and all-zero blocks.
  const std::size_t row = 1000, n = row * 262;
  auto x = sample(n, 9);
  x[5000] = std::numeric_limits<float>::quiet_NaN();
  x[70001] = -std::numeric_limits<float>::infinity();
  std::uint64_t compared = 0, bad = 0;
  for (const auto& name : block_format_names()) {
    const BlockFormat f = parse_block_format(name);
    const std::vector<Rounding> modes =
        kSanitized ? std::vector<Rounding>{Rounding::stochastic(3)}
                   : std::vector<Rounding>{Rounding{}, Rounding::of(RoundingMode::up), Rounding::stochastic(3)};
    for (const Rounding& r : modes) {
      BulkOptions one;
      one.threads = 1;
      BlockStats s1;
      const BlockQuantized q1 = quantize_blocks(x, row, f, r, &s1, one);
      std::vector<float> y1(n);
      round_blocks(x, y1, row, f, r, nullptr, one);
      for (const int threads : kSanitized ? std::vector<int>{3} : std::vector<int>{2, 3, 4}) {
        BulkOptions opt;
        opt.threads = threads;
        BlockStats s;
        const BlockQuantized q = quantize_blocks(x, row, f, r, &s, opt);
        std::vector<float> y(n), d(n);
        BlockStats sr;
        round_blocks(x, y, row, f, r, &sr, opt);
        dequantize_blocks(q1, row, f, d, opt);
        compared += n;
        const bool same =
            q.elements == q1.elements && q.scales == q1.scales &&
            std::bit_cast<std::uint32_t>(q.tensor_scale) == std::bit_cast<std::uint32_t>(q1.tensor_scale) &&
            std::memcmp(y.data(), y1.data(), n * sizeof(float)) == 0 &&
            std::memcmp(d.data(), y1.data(), n * sizeof(float)) == 0;
        const bool same_stats = s.flushed == s1.flushed && s.subnormal == s1.subnormal && s.saturated == s1.saturated &&
                                s.nonzero == s1.nonzero && s.blocks == s1.blocks && s.nan_blocks == s1.nan_blocks &&
                                s.scale_log2 == s1.scale_log2 && sr.flushed == s1.flushed && sr.count == n;
        INFO(name << " mode " << short_name(r.mode) << " threads " << threads);
        CHECK(same);
        CHECK(same_stats);
        bad += !same || !same_stats;
      }
    }
  }
  std::printf(
      "block quantize with %s threads vs 1: %llu elements compared (6 formats x %s), %llu differing "
      "cases\n",
      kSanitized ? "3" : "2, 3, 4", static_cast<unsigned long long>(compared),
      kSanitized ? "stochastic rounding" : "rne, ru, sr", static_cast<unsigned long long>(bad));
}

TEST_CASE("block quantize of a slice with index0 is that slice of the whole (stochastic)", "[block]") {
  const std::size_t row = 96, n = row * 40;
  const auto x = sample(n, 13);
  const BlockFormat f = parse_block_format("mxfp6_e3m2");
  const Rounding r = Rounding::stochastic(21);
  const BlockQuantized whole = quantize_blocks(x, row, f, r);
  BulkOptions opt;
  opt.index0 = row * 17;
  const BlockQuantized tail = quantize_blocks(std::span<const float>(x).subspan(row * 17), row, f, r, nullptr, opt);
  CHECK(std::equal(tail.elements.begin(), tail.elements.end(), whole.elements.begin() + row * 17));
  std::printf("stochastic mxfp6 tail of %zu elements from index0 %zu vs the whole tensor's\n", tail.elements.size(),
              row * 17);
}

#if defined(__x86_64__)
// A caller running with DAZ and FTZ (a program linked with -ffast-math) and rounding up: the block pass runs
// under the library's default environment on every worker (mpsim::parallel_for), so blocks of float32
// subnormals (whose scale 2^-127 and scaled values depend on subnormal arithmetic) and nvfp4's tensor scale
// come out as under the default environment, and the caller's MXCSR is given back.
TEST_CASE("block quantize ignores the caller's MXCSR (DAZ, FTZ, rounding up) and restores it", "[block]") {
  const std::size_t row = 96, n = row * 700;  // 67200 values: two workers where there are two cores
  auto x = sample(n, 17);
  std::mt19937_64 g(3);
  for (std::size_t i = 0; i < n; i += 5) x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(g() % 0x7fffffu + 1));
  for (std::size_t i = 0; i < 3 * row; ++i)
    x[i] = std::bit_cast<float>(static_cast<std::uint32_t>(g() % 0x7fffffu + 1));
  const unsigned caller = 0x1f80u | (2u << 13) | 0x8000u | 0x0040u;  // RC up, FTZ, DAZ
  std::size_t compared = 0, differ = 0;
  for (const auto& name : block_format_names()) {
    const BlockFormat f = parse_block_format(name);
    std::vector<float> want(n), got(n);
    round_blocks(x, want, row, f);
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(caller);
    round_blocks(x, got, row, f);
    const unsigned after = _mm_getcsr();
    _mm_setcsr(saved);
    CHECK((after & 0xffc0u) == (caller & 0xffc0u));  // control bits given back (flags are sticky)
    compared += n;
    differ += static_cast<std::size_t>(std::memcmp(got.data(), want.data(), n * sizeof(float)) != 0);
  }
  std::printf(
      "block round_blocks under MXCSR = up + DAZ + FTZ: %zu values (6 formats, float32 subnormals "
      "included), %zu formats differ from the default environment's\n",
      compared, differ);
  CHECK(differ == 0);
}
#endif
