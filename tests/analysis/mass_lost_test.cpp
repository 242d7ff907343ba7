// Tests of lib/mpsim/analysis/mass_lost.hpp: the shares of sum |g| and sum g^2 flushed and the cosine on a
// tensor whose values are written out here (expected values from the definitions, in long double), the
// undefined cases, merging, the checkpoint state, the scale invariance and the float / double paths of
// add_rounded. tests/python/test_mass_lost.py checks `mpsim underflow`'s figures against numpy.
#include "catch_compat.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "mpsim/analysis/mass_lost.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"

using namespace mpsim;
using namespace mpsim::analysis;

TEST_CASE("mass lost: fp16 flushes the tiny values of a written-out tensor", "[mass_lost]") {
  // fp16 nearest-even flushes |x| <= 2^-25 (half its smallest subnormal 2^-24; the tie goes to even, 0).
  const float tiny = std::ldexp(1.0f, -30), tie = std::ldexp(1.0f, -25), kept = std::ldexp(1.0f, -24);
  const std::vector<float> g = {
      1.0f, -2.0f, tiny, -tiny, tie, kept, 0.0f, std::nanf(""), std::numeric_limits<float>::infinity()};
  MassLost m;
  add_rounded(m, g, fp16(), Rounding{}, 0);
  const MassLostStats s = m.stats();
  const long double sum_abs = 3.0L + 2 * (long double)tiny + tie + kept;
  const long double sum_sq = 5.0L + 2.0L * tiny * tiny + (long double)tie * tie + (long double)kept * kept;
  const long double l1 = (2.0L * tiny + tie) / sum_abs;
  const long double l2 = (2.0L * tiny * tiny + (long double)tie * tie) / sum_sq;
  // q = {1, -2, 0, 0, 0, 2^-24}: <g, q> = 5 + 2^-48, |q|^2 = 5 + 2^-48
  const long double dot = 5.0L + (long double)kept * kept;
  const long double cosine = dot / (std::sqrt(sum_sq) * std::sqrt(dot));
  std::printf(
      "fp16 on 9 written-out values: nonzero %llu flushed %llu, |g| lost %.17g (want %.17Lg), g^2 lost %.17g "
      "(want %.17Lg), 1 - cosine %.17g (want %.17Lg)\n",
      (unsigned long long)s.nonzero_finite, (unsigned long long)s.flushed, s.l1_lost, l1, s.l2sq_lost, l2, 1 - s.cosine,
      1 - cosine);
  CHECK(s.nonzero_finite == 6);
  CHECK(s.flushed == 3);
  CHECK(s.l1_lost == Approx(double(l1)).epsilon(1e-15));
  CHECK(s.l2sq_lost == Approx(double(l2)).epsilon(1e-15));
  CHECK(s.cosine == Approx(double(cosine)).epsilon(1e-15));
  // The flushed values are tiny, -tiny and tie: their signed sum is tie, of a flushed sum |g| of 2 tiny + tie.
  const long double down = ((long double)tiny + tie) / (2.0L * tiny + tie), bias = (long double)tie / sum_abs;
  std::printf("  flushed mass pushing down %.17g (want %.17Lg), lost bias %.17g (want %.17Lg)\n", s.push_down, down,
              s.lost_bias, bias);
  CHECK(s.push_down == Approx(double(down)).epsilon(1e-15));
  CHECK(s.lost_bias == Approx(double(bias)).epsilon(1e-15));
}

TEST_CASE("mass lost: the sign of the flushed mass, and states without it", "[mass_lost]") {
  // A logit gradient's shape: many small positive values (wrong words) and one large negative (the target).
  std::vector<float> g(1000, std::ldexp(1.0f, -30));
  g[0] = -0.5f;
  MassLost m;
  add_rounded(m, g, fp16(), Rounding{}, 0);
  const MassLostStats s = m.stats();
  const long double lost = 999.0L * std::ldexp(1.0L, -30), total = lost + 0.5L;
  std::printf(
      "999 x 2^-30 and one -0.5 in fp16: %llu flushed, pushing down %.17g (want 1), lost bias %.17g "
      "(want %.17Lg = l1_lost %.17g)\n",
      (unsigned long long)s.flushed, s.push_down, s.lost_bias, lost / total, s.l1_lost);
  CHECK(s.flushed == 999);
  CHECK(s.push_down == 1.0);
  CHECK(s.lost_bias == Approx(double(lost / total)).epsilon(1e-15));
  CHECK(s.lost_bias == s.l1_lost);
  // Nothing flushed: no share of nothing (NaN), no bias.
  MassLost none;
  none.add(std::vector<float>{1.0f, -1.0f}, std::vector<float>{1.0f, -1.0f});
  CHECK(std::isnan(none.stats().push_down));
  CHECK(none.stats().lost_bias == 0.0);
  // A state written before the signed sum existed (mpsim 0.2.0) gives NaN, also after a merge; the round trip
  // of a new state keeps it; a signed sum beyond the flushed sum |g| is refused.
  nlohmann::json old = m.state();
  old.erase("flushed_signed");
  MassLost merged = MassLost::from_state(old);
  merged += m;
  CHECK(std::isnan(MassLost::from_state(old).stats().push_down));
  CHECK(std::isnan(merged.stats().lost_bias));
  CHECK(MassLost::from_state(m.state()).stats().lost_bias == s.lost_bias);
  nlohmann::json bad = m.state();
  bad["flushed_signed"] = -2 * bad["flushed_abs"].get<double>();
  CHECK_THROWS_WITH(MassLost::from_state(bad), Catch::Contains("flushed_signed"));
}

TEST_CASE("mass lost: undefined cosine, empty tensors, overflow", "[mass_lost]") {
  MassLost empty;
  CHECK(empty.stats().l1_lost == 0);
  CHECK(std::isnan(empty.stats().cosine));
  MassLost all_flushed;
  add_rounded(all_flushed, std::vector<float>{1e-12f, -1e-13f}, fp16(), Rounding{}, 0);
  CHECK(all_flushed.stats().l1_lost == 1);
  CHECK(all_flushed.stats().l2sq_lost == 1);
  CHECK(std::isnan(all_flushed.stats().cosine));
  MassLost overflow;
  add_rounded(overflow, std::vector<float>{1.0f, 1e6f}, fp16(), Rounding{}, 0);
  CHECK(overflow.stats().l1_lost == 0);
  CHECK(std::isnan(overflow.stats().cosine));
  // Unchanged values (fp32 into fp32): nothing lost, cosine 1.
  MassLost same;
  const std::vector<float> v = {0.5f, -3.0f, 1e-30f};
  same.add(v, v);
  CHECK(same.stats().l1_lost == 0);
  CHECK(same.stats().cosine == Approx(1.0).epsilon(1e-15));  // a few ulps: the two square roots
  CHECK_THROWS(same.add(std::vector<float>{1.0f}, std::vector<float>{}));
}

TEST_CASE("mass lost: merging, state, scale invariance, float and double paths", "[mass_lost]") {
  std::mt19937_64 rng(20261128);
  std::lognormal_distribution<double> mag(-17.0, 3.0);
  std::vector<float> g(3 * MassLost::kBlock + 17);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>((i % 3 ? 1 : -1) * mag(rng));
  g[5] = std::ldexp(1.0f, -140);  // a float subnormal: the scaled float path cannot take its chunk exactly

  MassLost whole, first, second;
  add_rounded(whole, g, fp16(), Rounding{}, 10);
  const std::size_t half = MassLost::kBlock;
  add_rounded(first, std::span<const float>(g).first(half), fp16(), Rounding{}, 10);     // holds the subnormal
  add_rounded(second, std::span<const float>(g).subspan(half), fp16(), Rounding{}, 10);  // the float path
  const auto f = second.stats();
  first += second;
  const auto a = whole.stats(), b = first.stats();
  CHECK(a.flushed == b.flushed);
  CHECK(a.l1_lost == Approx(b.l1_lost).epsilon(1e-14));  // the block sums added in another order
  CHECK(a.cosine == Approx(b.cosine).epsilon(1e-15));
  const auto c = MassLost::from_state(whole.state()).stats();
  CHECK(c.l1_lost == a.l1_lost);
  CHECK(c.l2sq_lost == a.l2sq_lost);
  CHECK(c.cosine == a.cosine);

  // The float path (second half, scaled in float) against the double path on the same values pre-scaled in
  // double: the same bits.
  std::vector<double> scaled;
  for (std::size_t i = half; i < g.size(); ++i) scaled.push_back(std::ldexp(double(g[i]), 10));
  MassLost from_double;
  add_rounded(from_double, scaled, fp16(), Rounding{}, 0);
  const auto d = from_double.stats();
  std::printf(
      "%zu log-normal values at scale 2^10: fp16 flushes %llu, |g| lost %.6g, g^2 lost %.6g, cosine %.12f; "
      "split+merged, state round trip, float and double paths agree\n",
      g.size(), (unsigned long long)a.flushed, a.l1_lost, a.l2sq_lost, a.cosine);
  CHECK(d.flushed == f.flushed);
  CHECK(d.l1_lost == f.l1_lost);
  CHECK(d.l2sq_lost == f.l2sq_lost);
  CHECK(d.cosine == f.cosine);
  CHECK(a.flushed > 0);
  CHECK(a.l1_lost > 0);
  CHECK(a.l1_lost < 1);
  CHECK_THROWS(MassLost::from_state(nlohmann::json{{"nonzero", 1}}));
  // States add() cannot produce are refused, naming the field (a negative count would wrap to 2^64 - k).
  const nlohmann::json good = MassLost().state();
  int refused = 0;
  for (const auto& [key, bad] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"nonzero", -5},
                                                           {"flushed", 2.5},
                                                           {"flushed", 3},
                                                           {"overflowed", 1},
                                                           {"sum_abs", -1.5},
                                                           {"dot", -2.0},
                                                           {"sum_sq_q", std::numeric_limits<double>::infinity()}}) {
    nlohmann::json j = good;
    j[key] = bad;
    CHECK_THROWS_AS(MassLost::from_state(j), mpsim::Error);
    refused += 1;
  }
  CHECK_NOTHROW(MassLost::from_state(good));
  std::printf("MassLost::from_state: %d malformed states refused by name\n", refused);
}

TEST_CASE("mass lost: the AVX2 and AVX-512 loops (two, four blocks at a time) give the SSE2 loop's bits",
          "[mass_lost]") {
  if (!path_available(Path::avx2)) {
    std::printf("mass lost: this CPU lacks AVX2, only the SSE2 loop runs here: nothing to compare\n");
    return;
  }
  // Every edge of the sums' masks among normally distributed gradients (sigma 1e-3): +-0, float subnormals, fp16's
  // flush boundary (2^-25, the tie to 0, and its neighbours), its subnormals, its largest finite and the first
  // value that rounds to inf (65520, IEEE 754 binary16), float's largest, +-inf and NaN; rounded into fp16 (flushes
  // and infs), into fp8 e4m3 (OCP FP8 v1.0: NaN beyond 464, many flushes) and a hand-made q that keeps every value
  // times 1.5 but zeroes every fifth.
  std::mt19937_64 rng(35);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  const float inf = std::numeric_limits<float>::infinity();
  const float tie = std::ldexp(1.0f, -25);
  const std::vector<float> edges = {0.0f,
                                    -0.0f,
                                    std::ldexp(1.0f, -140),
                                    -std::ldexp(1.0f, -149),
                                    tie,
                                    -tie,
                                    std::nextafter(tie, 1.0f),
                                    std::nextafter(tie, 0.0f),
                                    std::ldexp(3.0f, -24),
                                    65504.0f,
                                    65520.0f,
                                    std::nextafter(65520.0f, 0.0f),
                                    -65520.0f,
                                    std::numeric_limits<float>::max(),
                                    inf,
                                    -inf,
                                    std::nanf("")};
  std::size_t compared = 0, tensors = 0;
  std::uint64_t flushed = 0, nonzero = 0;
  // AVX-512 where this CPU and build have it (lib/mpsim/analysis/mass_lost_avx512.cpp).
  bool wide = true;
  try {
    MassLost probe;
    probe.add(std::span<const float>(), std::span<const float>(), Path::avx512);
  } catch (const Error&) {
    wide = false;
    std::printf("mass lost: no AVX-512 in this CPU or build, the four-block loop is not compared here\n");
  }
  std::size_t wide_compared = 0;
  // Lengths with four-block steps, then a pair, a single block and a partial one left (7 * kBlock + 17).
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, MassLost::kBlock, 2 * MassLost::kBlock, 4 * MassLost::kBlock,
        5 * MassLost::kBlock + 17, 7 * MassLost::kBlock + 17, 8 * MassLost::kBlock}) {
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = i % 7 == 3 ? edges[(i / 7) % edges.size()] : normal(rng);
    std::vector<std::vector<float>> qs(3, std::vector<float>(n));
    round_array(g, std::span<float>(qs[0]), fp16());
    round_array(g, std::span<float>(qs[1]), fp8_e4m3());
    for (std::size_t i = 0; i < n; ++i) qs[2][i] = i % 5 == 0 ? 0.0f : 1.5f * g[i];
    for (const auto& q : qs) {
      MassLost scalar, avx2, automatic;
      scalar.add(g, q, Path::scalar);
      avx2.add(g, q, Path::avx2);
      automatic.add(g, q);
      INFO("n = " << n);
      CHECK(avx2.state() == scalar.state());  // every count and sum, bit for bit (JSON numbers compare as doubles)
      if (wide) {
        MassLost avx512;
        avx512.add(g, q, Path::avx512);
        CHECK(avx512.state() == scalar.state());
        CHECK(automatic.state() == avx512.state());
        wide_compared += n;
      } else {
        CHECK(automatic.state() == avx2.state());
      }
      const MassLostStats s = scalar.stats();
      flushed += s.flushed;
      nonzero += s.nonzero_finite;
      compared += n;
      ++tensors;
    }
  }
  std::printf(
      "mass lost, AVX2 and AVX-512 (%zu values) against SSE2: %zu tensors (%zu values, %llu non-zero finite, %llu "
      "flushed): every count and sum equal\n",
      wide_compared, tensors, compared, (unsigned long long)nonzero, (unsigned long long)flushed);
  CHECK(flushed > 0);
}

TEST_CASE("mass lost: add_rounded in fp16 nearest-even gives the rounding pass's and SSE2 sums' bits", "[mass_lost]") {
  // add_rounded (its chunks of 2^16 rounded by round_array, summed two blocks at a time on AVX2) against the
  // bulk engine's rounding of the whole tensor into a buffer and the SSE2 sums, on tensors crossing its 2^16
  // chunks, with fp16's edges (the flush tie 2^-25 and its neighbours, subnormals, 65504, 65520 which rounds
  // to inf, float subnormals, +-0, inf, NaN) among normally distributed values.
  std::mt19937_64 rng(3535);
  std::normal_distribution<float> normal(0.0f, 1e-4f);
  const float tie = std::ldexp(1.0f, -25), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> edges = {0.0f,
                                    -0.0f,
                                    tie,
                                    -tie,
                                    std::nextafter(tie, 1.0f),
                                    std::nextafter(tie, 0.0f),
                                    std::ldexp(5.0f, -24),
                                    65504.0f,
                                    65520.0f,
                                    std::nextafter(65520.0f, 0.0f),
                                    -65520.0f,
                                    std::ldexp(1.0f, -140),
                                    inf,
                                    -inf,
                                    std::nanf("")};
  std::size_t compared = 0;
  std::uint64_t flushed = 0;
  for (const std::size_t n : {2 * MassLost::kBlock, 5 * MassLost::kBlock + 17, 20 * MassLost::kBlock + 3}) {
    std::vector<float> g(n);
    for (std::size_t i = 0; i < n; ++i) g[i] = i % 5 == 2 ? edges[(i / 5) % edges.size()] : normal(rng);
    std::vector<float> q(n);
    round_array(g, std::span<float>(q), fp16());
    MassLost reference, fused;
    reference.add(g, q, Path::scalar);
    add_rounded(fused, g, fp16(), Rounding{}, 0);
    INFO("n = " << n);
    CHECK(fused.state() == reference.state());
    flushed += reference.stats().flushed;
    compared += n;
  }
  std::printf(
      "mass lost, add_rounded in fp16 against round_array + SSE2 sums: %zu values (%llu flushed), every count and sum "
      "equal\n",
      compared, (unsigned long long)flushed);
  CHECK(flushed > 0);
}
