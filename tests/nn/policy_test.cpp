// Tests of lib/mpsim/nn/policy.hpp: policy names and custom specs, error messages, and Precision::round's
// per-site counts against counts computed here with the compiler's _Float16 conversion (an independent
// round-to-nearest-even binary16 implementation).
#include "catch_compat.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/nn/policy.hpp"

using namespace mpsim;
using namespace mpsim::nn;

TEST_CASE("named policies", "[policy]") {
  const auto fp32p = parse_policy("fp32");
  CHECK(fp32p.name == "fp32");
  CHECK(!fp32p.matmul_input);
  CHECK(!fp32p.activation_grad);
  CHECK(!fp32p.weight);
  const auto m16 = parse_policy("mixed-fp16");
  CHECK(m16.matmul_input->name == "fp16");
  CHECK(m16.matmul_output->name == "fp16");
  CHECK(m16.activation_grad->name == "fp16");
  CHECK(m16.weight_grad->name == "fp16");
  CHECK(!m16.weight);  // fp32 master weights
  CHECK(m16.rounding.mode == RoundingMode::nearest_even);
  const auto mb = parse_policy("mixed-bf16");
  CHECK(mb.activation_grad->name == "bf16");
  CHECK(!mb.weight);
  const auto p16 = parse_policy("pure-fp16");
  CHECK(p16.weight->name == "fp16");
  CHECK(p16.activation_grad->name == "fp16");
}

TEST_CASE("custom policies", "[policy]") {
  const auto p = parse_policy("custom:matmul=fp16,act_grad=bf16,weight=fp16");
  CHECK(p.name == "custom");
  CHECK(p.matmul_input->name == "fp16");
  CHECK(p.matmul_output->name == "fp16");
  CHECK(p.activation_grad->name == "bf16");
  CHECK(!p.weight_grad);
  CHECK(p.weight->name == "fp16");
  const auto q =
      parse_policy("custom: matmul_in=fp8_e4m3 , w_grad=fp8_e5m2, act_grad=e5m2, rounding=sr, sr_seed=7, sr_bits=8");
  CHECK(q.matmul_input->name == "fp8_e4m3");
  CHECK(!q.matmul_output);
  CHECK(q.weight_grad->name == "fp8_e5m2");
  CHECK(q.activation_grad->exp_bits == 5);
  CHECK(q.rounding.mode == RoundingMode::stochastic);
  CHECK(q.rounding.seed == 7);
  CHECK(q.rounding.sr_bits == 8);
  const auto r = parse_policy("custom:matmul=fp16,matmul_out=none");
  CHECK(r.matmul_input);
  CHECK(!r.matmul_output);
}

TEST_CASE("bad policies name the spec", "[policy]") {
  for (const char* bad : {"fp17", "mixed", "", "custom:", "custom:matmul", "custom:matmul=fp99", "custom:colour=fp16",
                          "custom:matmul=fp64", "custom:rounding=sideways", "custom:sr_bits=x", "custom:sr_bits=0"}) {
    INFO("spec '" << bad << "'");
    try {
      parse_policy(bad);
      FAIL("accepted");
    } catch (const Error& e) {
      const std::string msg = e.what();
      std::printf("rejected '%s': %s\n", bad, msg.c_str());
      CHECK(msg.find(std::string("'") + bad) != std::string::npos);
    }
  }
}

TEST_CASE("Precision::round counts per site match an independent fp16 conversion", "[policy]") {
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> e(-30, 18), u(0, 1);
  std::vector<float> a(5000);
  for (auto& x : a) x = static_cast<float>((u(rng) < 0.5 ? -1 : 1) * std::exp2(e(rng)));
  a[0] = 0.0f;
  a[1] = -0.0f;
  a[2] = 1e6f;   // overflows fp16
  a[3] = 3e-8f;  // below 2^-25: flushes
  std::uint64_t underflow = 0, subnormal = 0, overflow = 0, zero = 0, exact = 0;
  std::vector<float> expect(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float r = static_cast<float>(static_cast<_Float16>(a[i]));
    expect[i] = r;
    if (a[i] == 0) {
      ++zero;
      continue;
    }
    underflow += r == 0;
    subnormal += r != 0 && std::abs(r) < std::ldexp(1.0f, -14);
    overflow += std::isinf(r);
    exact += r == a[i];
  }
  Precision prec(parse_policy("mixed-fp16"));
  std::vector<float> b = a;
  prec.round("layer/act_grad", OpClass::activation_grad, b);
  std::vector<float> c(a.begin(), a.begin() + 100);
  prec.round("layer/act_grad", OpClass::activation_grad, c);  // a second call adds to the same site
  std::vector<float> w = a;
  prec.round("layer/weight", OpClass::weight, w);  // mixed: weights stay fp32, no site recorded
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < a.size(); ++i) mismatches += std::memcmp(&b[i], &expect[i], 4) != 0;
  CHECK(mismatches == 0);
  CHECK(w == a);
  REQUIRE(prec.site_stats().size() == 1);
  const Stats& s = prec.site_stats().at("layer/act_grad");
  std::uint64_t u100 = 0, s100 = 0, o100 = 0, z100 = 0;
  for (std::size_t i = 0; i < 100; ++i) {
    if (a[i] == 0) {
      ++z100;
      continue;
    }
    u100 += expect[i] == 0;
    s100 += expect[i] != 0 && std::abs(expect[i]) < std::ldexp(1.0f, -14);
    o100 += std::isinf(expect[i]);
  }
  std::printf(
      "round: %zu values, underflow %llu, subnormal %llu, overflow %llu, zero %llu; site counts %llu %llu %llu\n",
      a.size(), (unsigned long long)underflow, (unsigned long long)subnormal, (unsigned long long)overflow,
      (unsigned long long)zero, (unsigned long long)s.underflow, (unsigned long long)s.subnormal,
      (unsigned long long)s.overflow);
  CHECK(s.count == a.size() + 100);
  CHECK(s.underflow == underflow + u100);
  CHECK(s.subnormal == subnormal + s100);
  CHECK(s.overflow == overflow + o100);
  CHECK(s.zero_in == zero + z100);
  CHECK(underflow > 100);  // the test data reach the cases it claims to check
  CHECK(subnormal > 100);
  CHECK(overflow > 10);
  prec.reset_stats();
  CHECK(prec.site_stats().empty());
}

TEST_CASE("fp32 policy leaves data alone; histograms capture gradients before rounding", "[policy]") {
  std::vector<float> g{1.0f, 0.5f, 0.0f, std::ldexp(1.0f, -30), -std::ldexp(1.0f, -30), 3.0f};
  const std::vector<float> orig = g;
  Precision p32(parse_policy("fp32"));
  p32.capture_histograms(true);
  p32.round("fc/out_grad", OpClass::activation_grad, g);
  p32.round("fc/out", OpClass::matmul_output, g);  // forward sites are not histogrammed
  CHECK(g == orig);
  CHECK(p32.site_stats().empty());
  REQUIRE(p32.histograms().size() == 1);
  const auto& h = p32.histograms().at("fc/out_grad");
  CHECK(h.total() == 6);
  CHECK(h.zero == 1);
  CHECK(h.count(-30) == 2);
  CHECK(h.count(0) == 1);
  CHECK(h.count(-1) == 1);
  CHECK(h.count(1) == 1);
  Precision p16(parse_policy("mixed-fp16"));
  p16.capture_histograms(true);
  p16.round("fc/out_grad", OpClass::activation_grad, g);
  CHECK(p16.histograms().at("fc/out_grad").count(-30) == 2);  // counted before they were flushed
  CHECK(g[3] == 0.0f);
  CHECK(p16.site_stats().at("fc/out_grad").underflow == 2);
}

TEST_CASE("stochastic rounding advances its generator offset per call", "[policy]") {
  Precision p(parse_policy("custom:act_grad=fp16,rounding=sr,sr_seed=3"));
  std::vector<float> a(1000, 1.0f + std::ldexp(1.0f, -12)), b = a;
  p.round("x", OpClass::activation_grad, a);
  CHECK(p.sr_offset() == 1000);
  p.round("x", OpClass::activation_grad, b);
  CHECK(p.sr_offset() == 2000);
  CHECK(a != b);  // different generator indices: different roundings
  Precision q(parse_policy("custom:act_grad=fp16,rounding=sr,sr_seed=3"));
  q.set_sr_offset(1000);
  std::vector<float> c(1000, 1.0f + std::ldexp(1.0f, -12));
  q.round("x", OpClass::activation_grad, c);
  CHECK(c == b);  // resumable from the offset
}

TEST_CASE("an observer sees every site's values before and after rounding", "[policy]") {
  // Values across fp16's classes: normal, subnormal, flushed, overflowing, zero.
  const std::vector<float> values{1.0f, 1.0001f, 3e-6f, 1e-9f, 70000.0f, 0.0f, -2.5e-5f};
  struct Seen {
    std::string site;
    OpClass cls;
    std::vector<float> before, after;
  };
  for (const std::string spec : {"mixed-fp16", "fp32"}) {
    Precision prec(parse_policy(spec));
    CHECK_FALSE(prec.observing());
    std::vector<Seen> seen;
    prec.observe([&](std::string_view site, OpClass cls, std::span<const float> before, std::span<const float> after) {
      seen.push_back({std::string(site), cls, {before.begin(), before.end()}, {after.begin(), after.end()}});
    });
    CHECK(prec.observing());
    std::vector<float> a = values, g = values;
    prec.round("fc/out", OpClass::matmul_output, a);
    prec.round("fc/w_grad", OpClass::weight_grad, g);
    REQUIRE(seen.size() == 2);
    std::size_t compared = 0, mismatches = 0;
    for (const auto& s : seen) {
      CHECK(s.before == values);
      for (std::size_t i = 0; i < values.size(); ++i, ++compared) {
        // _Float16: the compiler's round-to-nearest-even binary16 conversion, independent of the bulk engine.
        const float want = spec == "fp32" ? values[i] : static_cast<float>(static_cast<_Float16>(values[i]));
        mismatches += std::memcmp(&s.after[i], &want, sizeof want) != 0;
      }
    }
    std::printf("observer under %s: sites %s, %s; %zu values after rounding compared with _Float16, %zu mismatches\n",
                spec.c_str(), seen[0].site.c_str(), seen[1].site.c_str(), compared, mismatches);
    CHECK(seen[0].site == "fc/out");
    CHECK(seen[1].cls == OpClass::weight_grad);
    CHECK(mismatches == 0);
    CHECK(a == seen[0].after);  // what the caller holds is what the observer saw
    prec.observe({});
    CHECK_FALSE(prec.observing());
    prec.round("fc/out", OpClass::matmul_output, a);
    CHECK(seen.size() == 2);
  }
}
