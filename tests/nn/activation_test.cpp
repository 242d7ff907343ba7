// Tests of lib/mpsim/nn/activation.hpp (ReLU) and lib/mpsim/nn/pool.hpp (max pooling): forward by
// definition, backward against central differences in fp64 (inputs kept away from the kinks).
#include "catch_compat.hpp"

#include "grad_check.hpp"
#include "mpsim/nn/activation.hpp"
#include "mpsim/nn/pool.hpp"

using namespace mpsim::nn;

TEST_CASE("relu forward and backward", "[activation]") {
  std::mt19937_64 rng(4);
  auto x = gradcheck::random_vector(40, rng), r = gradcheck::random_vector(40, rng);
  for (auto& v : x)
    if (std::abs(v) < 1e-3) v = 0.5;  // away from the kink at 0
  std::vector<double> out(40);
  relu_forward(out.data(), x.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(out[i] == (x[i] > 0 ? x[i] : 0.0));
  auto f = [&] {
    std::vector<double> o(40);
    relu_forward(o.data(), x.data(), x.size());
    return gradcheck::dot(o, r);
  };
  std::vector<double> dx(40);
  relu_backward(dx.data(), r.data(), out.data(), x.size());
  CHECK(gradcheck::check("relu dinp", x, dx, f).worst < 1e-8);
}

TEST_CASE("maxpool forward picks the window maximum; backward matches central differences", "[pool]") {
  const int B = 2, C = 3, H = 6, W = 4, K = 2;
  std::mt19937_64 rng(5);
  auto x = gradcheck::random_vector(B * C * H * W, rng), r = gradcheck::random_vector(B * C * (H / K) * (W / K), rng);
  std::vector<double> out(r.size());
  std::vector<std::int32_t> arg(r.size());
  maxpool_forward(out.data(), arg.data(), x.data(), B, C, H, W, K);
  for (int bc = 0; bc < B * C; ++bc)
    for (int oy = 0; oy < H / K; ++oy)
      for (int ox = 0; ox < W / K; ++ox) {
        double m = -1e300;
        for (int ky = 0; ky < K; ++ky)
          for (int kx = 0; kx < K; ++kx) m = std::max(m, x[(bc * H + oy * K + ky) * W + ox * K + kx]);
        CHECK(out[(bc * (H / K) + oy) * (W / K) + ox] == m);
      }
  auto f = [&] {
    std::vector<double> o(r.size());
    std::vector<std::int32_t> a(r.size());
    maxpool_forward(o.data(), a.data(), x.data(), B, C, H, W, K);
    return gradcheck::dot(o, r);
  };
  std::vector<double> dx(x.size());
  maxpool_backward(dx.data(), r.data(), arg.data(), B, C, H, W, K);
  CHECK(gradcheck::check("maxpool dinp", x, dx, f).worst < 1e-8);
}
