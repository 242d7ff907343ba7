// Tests of lib/mpsim/nn/loss.hpp: softmax cross-entropy against log-sum-exp in long double, smooth L1
// against its definition, both backwards against central differences in fp64.
#include "catch_compat.hpp"

#include "grad_check.hpp"
#include "mpsim/nn/loss.hpp"

using namespace mpsim::nn;

TEST_CASE("softmax cross-entropy: value and gradient", "[loss]") {
  const int N = 4, V = 6;
  std::mt19937_64 rng(10);
  auto z = gradcheck::random_vector(N * V, rng, -3, 3);
  z[5] = 80;  // a large logit: exp would overflow float without the max shift
  const std::vector<std::int32_t> t{2, 0, 5, 3};
  const std::vector<double> w{1.0, 0.5, 2.0, 0.0};  // per-row loss weights (0 skips a row)
  std::vector<double> losses(N), probs(N * V);
  softmax_cross_entropy_forward(losses.data(), probs.data(), z.data(), t.data(), N, V);
  for (int n = 0; n < N; ++n) {
    long double s = 0;
    for (int v = 0; v < V; ++v) s += std::exp(static_cast<long double>(z[n * V + v]));
    const double expect = static_cast<double>(std::log(s) - z[n * V + t[n]]);
    INFO("row " << n);
    CHECK(losses[n] == Approx(expect).epsilon(1e-13));
  }
  auto f = [&] {
    std::vector<double> l(N), p(N * V);
    softmax_cross_entropy_forward(l.data(), p.data(), z.data(), t.data(), N, V);
    return gradcheck::dot(l, w);
  };
  std::vector<double> dz(N * V);
  softmax_cross_entropy_backward(dz.data(), probs.data(), t.data(), w.data(), N, V);
  CHECK(gradcheck::check("softmax CE dlogits", z, dz, f).worst < 1e-7);
}

TEST_CASE("smooth L1: value and gradient", "[loss]") {
  const std::vector<double> target{0.0, 1.0, -2.0, 0.5, 3.0};
  std::vector<double> pred{0.3, -0.5, -2.2, 2.0, 0.0};  // |d| = 0.3, 1.5, 0.2, 1.5, 3
  const double expect = 0.5 * 0.09 + (1.5 - 0.5) + 0.5 * 0.04 + (1.5 - 0.5) + (3 - 0.5);
  CHECK(smooth_l1_forward(pred.data(), target.data(), pred.size()) == Approx(expect).epsilon(1e-15));
  auto f = [&] { return smooth_l1_forward(pred.data(), target.data(), pred.size()); };
  std::vector<double> d(pred.size());
  smooth_l1_backward(d.data(), pred.data(), target.data(), 1.0, pred.size());
  CHECK(gradcheck::check("smooth L1 dpred", pred, d, f).worst < 1e-8);
}
