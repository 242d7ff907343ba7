// Tests of lib/mpsim/nn/linear.hpp: forward against the defining sum, backward against central
// differences in fp64.
#include "catch_compat.hpp"

#include "grad_check.hpp"
#include "mpsim/nn/linear.hpp"

using namespace mpsim::nn;

TEST_CASE("linear forward is x W^T + b", "[linear]") {
  std::mt19937_64 rng(1);
  const int N = 3, C = 4, OC = 5;
  auto x = gradcheck::random_vector(N * C, rng), w = gradcheck::random_vector(OC * C, rng),
       b = gradcheck::random_vector(OC, rng);
  std::vector<double> out(N * OC);
  linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
  double worst = 0;
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      long double s = b[o];
      for (int c = 0; c < C; ++c) s += static_cast<long double>(x[n * C + c]) * w[o * C + c];
      worst = std::max(worst, std::abs(static_cast<double>(s) - out[n * OC + o]));
    }
  std::printf("linear forward: %d outputs, worst abs error %.3g\n", N * OC, worst);
  CHECK(worst < 1e-14);
}

TEST_CASE("linear backward matches central differences", "[linear]") {
  std::mt19937_64 rng(2);
  const int N = 3, C = 4, OC = 5;
  auto x = gradcheck::random_vector(N * C, rng), w = gradcheck::random_vector(OC * C, rng),
       b = gradcheck::random_vector(OC, rng), r = gradcheck::random_vector(N * OC, rng);
  auto f = [&] {
    std::vector<double> out(N * OC);
    linear_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return gradcheck::dot(out, r);
  };
  std::vector<double> dx(N * C), dw(OC * C), db(OC);
  linear_backward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), N, C, OC);
  CHECK(gradcheck::check("linear dinp", x, dx, f).worst < 1e-7);
  CHECK(gradcheck::check("linear dweight", w, dw, f).worst < 1e-7);
  CHECK(gradcheck::check("linear dbias", b, db, f).worst < 1e-7);
}
