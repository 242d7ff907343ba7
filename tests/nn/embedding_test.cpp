// Tests of lib/mpsim/nn/embedding.hpp: lookup, and the table gradient (repeated tokens add up) against
// central differences in fp64.
#include "catch_compat.hpp"

#include "grad_check.hpp"
#include "mpsim/nn/embedding.hpp"

using namespace mpsim::nn;

TEST_CASE("embedding lookup and backward", "[embedding]") {
  const int V = 5, C = 3, N = 7;
  const std::vector<std::int32_t> tokens{0, 3, 3, 4, 1, 3, 0};  // token 2 never appears: zero gradient
  std::mt19937_64 rng(6);
  auto table = gradcheck::random_vector(V * C, rng), r = gradcheck::random_vector(N * C, rng);
  std::vector<double> out(N * C);
  embedding_forward(out.data(), tokens.data(), table.data(), N, C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) CHECK(out[n * C + c] == table[tokens[n] * C + c]);
  auto f = [&] {
    std::vector<double> o(N * C);
    embedding_forward(o.data(), tokens.data(), table.data(), N, C);
    return gradcheck::dot(o, r);
  };
  std::vector<double> dt(V * C);
  embedding_backward(dt.data(), r.data(), tokens.data(), N, V, C);
  for (int c = 0; c < C; ++c) CHECK(dt[2 * C + c] == 0.0);
  CHECK(gradcheck::check("embedding dtable", table, dt, f).worst < 1e-8);
}
