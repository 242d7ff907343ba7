// Tests of lib/mpsim/nn/multibox.hpp: IoU, matching and hard negative mining on hand-worked cases, the
// loss value on a hand-worked case, and its gradient against central differences in fp64.
#include "catch_compat.hpp"

#include "grad_check.hpp"
#include "mpsim/nn/multibox.hpp"

using namespace mpsim::nn;

TEST_CASE("iou of hand-worked boxes", "[multibox]") {
  // [0,0.5]^2 and [0.05,0.55]x[0,0.5]: intersection 0.45*0.5, union 0.25+0.25-0.225
  CHECK(iou({0.25, 0.25, 0.5, 0.5}, {0.3, 0.25, 0.5, 0.5}) == Approx(0.225 / 0.275));
  CHECK(iou({0.5, 0.5, 0.2, 0.2}, {0.5, 0.5, 0.1, 0.1}) == Approx(0.25));
  CHECK(iou({0.25, 0.25, 0.5, 0.5}, {0.75, 0.75, 0.5, 0.5}) == 0.0);
  CHECK(iou({0.4, 0.4, 0.2, 0.2}, {0.4, 0.4, 0.2, 0.2}) == Approx(1.0));
}

TEST_CASE("default boxes: count, centres and sizes", "[multibox]") {
  const auto d = make_default_boxes({{2, 0.5, {1.0, 4.0}}, {1, 0.8, {1.0}}});
  REQUIRE(d.size() == 2 * 2 * 2 + 1);
  // map 0, cell (y=0, x=1), ratio 4: centre (0.75, 0.25), w = 0.5*2, h = 0.5/2
  CHECK(d[3].cx == 0.75);
  CHECK(d[3].cy == 0.25);
  CHECK(d[3].w == Approx(1.0));
  CHECK(d[3].h == Approx(0.25));
  CHECK(d[8].cx == 0.5);
  CHECK(d[8].w == Approx(0.8));
}

TEST_CASE("matching: best default box per truth, then IoU >= 0.5", "[multibox]") {
  const std::vector<Box> defaults{
      {0.25, 0.25, 0.5, 0.5},  // d0: IoU 0.818 with A (its best)
      {0.75, 0.25, 0.5, 0.5},  // d1: IoU 0.053 with A: background
      {0.25, 0.75, 0.5, 0.5},  // d2: equal to D
      {0.75, 0.75, 0.5, 0.5},  // d3: IoU 0.9 with C
      {0.5, 0.5, 0.2, 0.2},    // d4: IoU 0.25 with B, but B's best: matched by rule 1
      {0.3, 0.32, 0.5, 0.5},   // d5: IoU 0.754 with A, not A's best: matched by rule 2
  };
  const std::vector<GroundTruth> truths{
      {{0.3, 0.25, 0.5, 0.5}, 1},    // A
      {{0.5, 0.5, 0.1, 0.1}, 2},     // B: small, no default box reaches 0.5
      {{0.75, 0.75, 0.5, 0.45}, 3},  // C
      {{0.25, 0.75, 0.5, 0.5}, 1},   // D
  };
  const auto m = match_default_boxes(defaults, truths, 0.5);
  const std::vector<int> expect{0, -1, 3, 2, 1, 0};
  CHECK(m == expect);
  // With a threshold of 0.95 only the rule-1 matches and exact d2 remain.
  const std::vector<int> strict{0, -1, 3, 2, 1, -1};
  CHECK(match_default_boxes(defaults, truths, 0.95) == strict);
  CHECK(match_default_boxes(defaults, {}, 0.5) == std::vector<int>(6, -1));
}

TEST_CASE("hard negative mining keeps the 3 x positives hardest negatives", "[multibox]") {
  const std::vector<int> match{0, -1, -1, 1, -1, -1, -1, -1, -1, -1};  // 2 positives -> 6 negatives
  const std::vector<double> loss{5, 0.1, 0.9, 7, 0.3, 0.9, 0.2, 0.8, 0.05, 0.7};
  const auto mask = hard_negative_mask(loss, match, 3);
  // negatives by loss: 2 (0.9), 5 (0.9), 7 (0.8), 9 (0.7), 4 (0.3), 6 (0.2) | 1 (0.1), 8 (0.05)
  const std::vector<std::uint8_t> expect{0, 0, 1, 0, 1, 1, 1, 1, 0, 1};
  CHECK(mask == expect);
  // fewer negatives than 3 x positives: all of them
  const std::vector<std::uint8_t> all{0, 1, 1};
  CHECK(hard_negative_mask({1, 2, 3}, {0, -1, -1}, 3) == all);
  // no positives: no negatives
  CHECK(hard_negative_mask({1, 2}, {-1, -1}, 3) == std::vector<std::uint8_t>{0, 0});
}

TEST_CASE("box encoding round-trips and follows SSD's variances", "[multibox]") {
  const Box d{0.5, 0.5, 0.2, 0.4}, t{0.52, 0.46, 0.3, 0.2};
  const auto e = encode_box(t, d);
  CHECK(e[0] == Approx(0.02 / (0.1 * 0.2)));
  CHECK(e[1] == Approx(-0.04 / (0.1 * 0.4)));
  CHECK(e[2] == Approx(std::log(1.5) / 0.2));
  CHECK(e[3] == Approx(std::log(0.5) / 0.2));
  const Box back = decode_box(e, d);
  CHECK(back.cx == Approx(t.cx));
  CHECK(back.h == Approx(t.h));
}

TEST_CASE("multibox loss on a hand-worked case", "[multibox]") {
  // Two default boxes, one truth matching d0 exactly (zero offsets), 2 classes (background + 1).
  const std::vector<Box> defaults{{0.25, 0.25, 0.5, 0.5}, {0.75, 0.75, 0.5, 0.5}};
  const std::vector<std::vector<GroundTruth>> truths{{{{0.25, 0.25, 0.5, 0.5}, 1}}};
  const std::vector<double> loc{0.5, -2.0, 0.0, 0.0, 9, 9, 9, 9};  // d1's offsets take no part
  const std::vector<double> conf{0.0, 1.0, 2.0, 0.0};              // d0 logits (bg, cls1), d1 logits
  std::vector<double> dloc(8), dconf(4);
  const auto r = multibox_loss(dloc.data(), dconf.data(), loc.data(), conf.data(), truths, defaults, 2, 1.0);
  // loc: smooth L1 of (0.5, -2, 0, 0) = 0.125 + 1.5; conf: d0 -log(e/(1+e)), d1 (the one negative,
  // 1 <= 3 x 1) -log(e^2/(e^2+1)); divided by 1 matched box.
  const double conf_expect = std::log(1 + std::exp(-1.0)) + std::log(1 + std::exp(-2.0));
  CHECK(r.matched == 1);
  CHECK(r.negatives == 1);
  CHECK(r.loc_loss == Approx(1.625));
  CHECK(r.conf_loss == Approx(conf_expect));
  CHECK(r.loss == Approx(1.625 + conf_expect));
  CHECK(dloc[0] == 0.5);
  CHECK(dloc[1] == -1.0);
  CHECK(dloc[4] == 0.0);
  // d(-log softmax_1)/dz_0 = p_0 = 1/(1+e)
  CHECK(dconf[0] == Approx(1 / (1 + std::exp(1.0))));
}

TEST_CASE("multibox loss gradient matches central differences", "[multibox]") {
  const auto defaults = make_default_boxes({{3, 0.4, {1.0, 2.0}}, {2, 0.6, {1.0}}});
  const int D = static_cast<int>(defaults.size()), NC = 3, B = 2;
  const std::vector<std::vector<GroundTruth>> truths{{{{0.3, 0.35, 0.4, 0.35}, 1}, {{0.7, 0.7, 0.5, 0.5}, 2}},
                                                     {{{0.5, 0.5, 0.6, 0.55}, 2}}};
  std::mt19937_64 rng(11);
  auto loc = gradcheck::random_vector(B * D * 4, rng, -0.9, 0.9);
  auto conf = gradcheck::random_vector(B * D * NC, rng, -2, 2);
  std::vector<double> dloc(loc.size()), dconf(conf.size());
  const auto r0 = multibox_loss(dloc.data(), dconf.data(), loc.data(), conf.data(), truths, defaults, NC, 1.0);
  std::printf("multibox: %d default boxes x %d images, %d matched, %d mined negatives, loss %.6f\n", D, B, r0.matched,
              r0.negatives, r0.loss);
  CHECK(r0.matched >= 3);
  CHECK(r0.negatives == std::min(3 * r0.matched, B * D - r0.matched));
  auto f = [&] {
    std::vector<double> a(loc.size()), b(conf.size());
    return multibox_loss(a.data(), b.data(), loc.data(), conf.data(), truths, defaults, NC, 1.0).loss;
  };
  CHECK(gradcheck::check("multibox dloc", loc, dloc, f).worst < 1e-7);
  CHECK(gradcheck::check("multibox dconf", conf, dconf, f).worst < 1e-7);
  // grad_scale multiplies every gradient
  std::vector<double> dloc8(loc.size()), dconf8(conf.size());
  multibox_loss(dloc8.data(), dconf8.data(), loc.data(), conf.data(), truths, defaults, NC, 8.0);
  for (std::size_t i = 0; i < dconf.size(); ++i) CHECK(dconf8[i] == Approx(8 * dconf[i]));
}
