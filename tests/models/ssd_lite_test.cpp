// Tests of lib/mpsim/models/ssd_lite.hpp (through make_model): parameters, bit-for-bit determinism,
// the exactness of the power-of-two loss scale and divisor, the policy's sites, and evaluation.
#include "catch_compat.hpp"

#include <cmath>
#include <cstdio>

#include "models_test_util.hpp"
#include "mpsim/error.hpp"
#include "mpsim/nn/model.hpp"

using namespace mpsim;

TEST_CASE("ssd: parameters have stable names and sizes", "[ssd]") {
  auto m = nn::make_model("ssd", {}, 1);
  CHECK(m->name() == "ssd");
  const auto ps = m->params();
  REQUIRE(ps.size() == 10);
  CHECK(ps[0].name == "conv1/weight");
  CHECK(ps[0].value.size() == 16 * 1 * 9);
  CHECK(ps[9].name == "head2/bias");
  CHECK(ps[9].value.size() == 3 * (4 + 4));  // 3 anchors x (4 offsets + background + 3 classes)
  for (const auto& p : ps) CHECK(p.grad.size() == p.value.size());
  CHECK(nn::make_model("ssd_lite", {}, 1)->name() == "ssd");
}

TEST_CASE("ssd: same seed, same bits; another seed, other bits", "[ssd]") {
  nn::Precision p1(nn::parse_policy("mixed-fp16")), p2(nn::parse_policy("mixed-fp16")),
      p3(nn::parse_policy("mixed-fp16"));
  auto a = nn::make_model("ssd", {}, 7), b = nn::make_model("ssd", {}, 7), c = nn::make_model("ssd", {}, 8);
  CHECK(modeltest::bits_of(a->params(), false) == modeltest::bits_of(b->params(), false));
  CHECK(modeltest::bits_of(a->params(), false) != modeltest::bits_of(c->params(), false));
  const double la = modeltest::sgd_steps(*a, p1, 3, 0.01, 1024.0f);
  const double lb = modeltest::sgd_steps(*b, p2, 3, 0.01, 1024.0f);
  const double lc = modeltest::sgd_steps(*c, p3, 3, 0.01, 1024.0f);
  std::printf("ssd: loss after 3 steps, seed 7 twice: %.17g %.17g, seed 8: %.17g\n", la, lb, lc);
  CHECK(std::memcmp(&la, &lb, sizeof la) == 0);
  CHECK(la != lc);
  CHECK(modeltest::bits_of(a->params(), true) == modeltest::bits_of(b->params(), true));
  CHECK(modeltest::bits_of(a->params(), false) == modeltest::bits_of(b->params(), false));
  CHECK(p1.site_stats() == p2.site_stats());
  const auto ma = a->evaluate(p1), mb = b->evaluate(p2);
  CHECK(ma.name == "mAP@0.5");
  CHECK(ma.higher_is_better);
  CHECK(ma.value == mb.value);
  const auto before = p1.site_stats();
  a->evaluate(p1);
  CHECK(p1.site_stats() == before);  // evaluation does not add to the training statistics
}

TEST_CASE("ssd: gradients scale exactly with a power-of-two loss scale under fp32", "[ssd]") {
  nn::Precision prec(nn::parse_policy("fp32"));
  auto a = nn::make_model("ssd", {}, 3);
  auto b = nn::make_model("ssd", {}, 3);
  const double la = a->forward_backward(5, 0x1p-6f, prec);
  const double lb = b->forward_backward(5, 1.0f, prec);
  CHECK(la == lb);  // the returned loss does not carry the scale
  // scale 2^-6 (what the trainer's loss divisor 2^6 passes): a's gradients are b's times 2^-6, exactly
  const auto ga = a->params(), gb = b->params();
  std::size_t n = 0, mismatches = 0;
  for (std::size_t k = 0; k < ga.size(); ++k)
    for (std::size_t i = 0; i < ga[k].grad.size(); ++i, ++n)
      mismatches += ga[k].grad[i] != std::ldexp(gb[k].grad[i], -6);
  std::printf("ssd: %zu gradients compared (scale 2^-6 vs 1), %zu mismatches\n", n, mismatches);
  CHECK(mismatches == 0);
  CHECK(prec.site_stats().empty());  // fp32 rounds nothing
}

TEST_CASE("ssd: mixed-fp16 rounds at the named sites; gradients accumulate", "[ssd]") {
  nn::Precision prec(nn::parse_policy("mixed-fp16"));
  auto m = nn::make_model("ssd", {}, 1);
  auto ps = m->params();
  modeltest::zero_grads(ps);
  m->forward_backward(0, 0x1p-16f, prec);
  for (const char* site : {"conv1/in", "conv1/w", "conv1/out", "head1/out_grad", "head2/out_grad", "head2/in_grad",
                           "conv3/in_grad", "f1/grad", "conv2/in_grad", "conv1/w_grad", "head2/b_grad"}) {
    INFO(site);
    CHECK(prec.site_stats().count(site) == 1);
  }
  // With the loss times 2^-16 (the trainer's --loss-divisor-log2 16), activation gradients underflow in fp16.
  const auto& s = prec.site_stats().at("conv2/in_grad");
  std::printf("ssd mixed-fp16, no scaling: conv2/in_grad %llu values, %llu flushed to zero\n",
              (unsigned long long)s.count, (unsigned long long)s.underflow);
  CHECK(s.underflow > s.nonzero_finite() / 10);
  // A second forward_backward adds to the gradients (the caller zeroes them).
  const auto once = modeltest::bits_of(ps, true);
  nn::Precision p32(nn::parse_policy("fp32"));
  modeltest::zero_grads(ps);
  m->forward_backward(1, 1.0f, p32);
  std::vector<float> g1;
  for (const auto& p : ps) g1.insert(g1.end(), p.grad.begin(), p.grad.end());
  m->forward_backward(2, 1.0f, p32);
  std::vector<float> g2;
  for (const auto& p : ps) g2.insert(g2.end(), p.grad.begin(), p.grad.end());
  modeltest::zero_grads(ps);
  m->forward_backward(2, 1.0f, p32);
  std::size_t bad = 0;
  std::size_t i = 0;
  for (const auto& p : ps)
    for (float g : p.grad) bad += g2[i] != g1[i] + g, ++i;
  CHECK(bad == 0);
  CHECK(!once.empty());
}

TEST_CASE("ssd: bad configurations are rejected", "[ssd]") {
  nn::ModelConfig c;
  c.corpus_path = "x.txt";
  CHECK_THROWS_AS(nn::make_model("ssd", c, 1), Error);
  CHECK_THROWS_WITH(nn::make_model("resnet", {}, 1), Catch::Contains("resnet"));
}
