// Tests of lib/mpsim/nn/lstm.hpp: the forward pass against the LSTM equations written out here step by
// step, and backpropagation through time (T = 6) against central differences in fp64.
#include "catch_compat.hpp"

#include <map>
#include <string>

#include "grad_check.hpp"
#include "mpsim/nn/lstm.hpp"

using namespace mpsim::nn;

namespace {
double sig(double x) { return 1 / (1 + std::exp(-x)); }
}  // namespace

TEST_CASE("lstm forward follows the gate equations (i, f, g, o)", "[lstm]") {
  const LstmShape s{5, 2, 3, 4};
  const int G = 4 * s.H;
  std::mt19937_64 rng(7);
  auto x = gradcheck::random_vector(s.T * s.B * s.I, rng), wih = gradcheck::random_vector(G * s.I, rng),
       whh = gradcheck::random_vector(G * s.H, rng), b = gradcheck::random_vector(G, rng);
  std::vector<double> out(s.T * s.B * s.H);
  LstmCache<double> cache;
  lstm_forward(out.data(), cache, x.data(), wih.data(), whh.data(), b.data(), s);
  double worst = 0;
  for (int n = 0; n < s.B; ++n) {
    std::vector<double> h(s.H, 0.0), c(s.H, 0.0);
    for (int t = 0; t < s.T; ++t) {
      std::vector<double> a(G);
      for (int r = 0; r < G; ++r) {
        a[r] = b[r];
        for (int k = 0; k < s.I; ++k) a[r] += wih[r * s.I + k] * x[(t * s.B + n) * s.I + k];
        for (int k = 0; k < s.H; ++k) a[r] += whh[r * s.H + k] * h[k];
      }
      for (int j = 0; j < s.H; ++j) {
        const double i = sig(a[j]), f = sig(a[s.H + j]), g = std::tanh(a[2 * s.H + j]), o = sig(a[3 * s.H + j]);
        c[j] = f * c[j] + i * g;
        h[j] = o * std::tanh(c[j]);
      }
      for (int j = 0; j < s.H; ++j) worst = std::max(worst, std::abs(h[j] - out[(t * s.B + n) * s.H + j]));
    }
  }
  std::printf("lstm forward: %d outputs over %d steps, worst abs error %.3g\n", s.T * s.B * s.H, s.T, worst);
  CHECK(worst < 1e-13);
}

TEST_CASE("lstm backward through 6 time steps matches central differences", "[lstm]") {
  const LstmShape s{6, 2, 3, 4};
  const int G = 4 * s.H;
  std::mt19937_64 rng(8);
  auto x = gradcheck::random_vector(s.T * s.B * s.I, rng), wih = gradcheck::random_vector(G * s.I, rng),
       whh = gradcheck::random_vector(G * s.H, rng), b = gradcheck::random_vector(G, rng),
       r = gradcheck::random_vector(s.T * s.B * s.H, rng);
  auto f = [&] {
    std::vector<double> out(s.T * s.B * s.H);
    LstmCache<double> cache;
    lstm_forward(out.data(), cache, x.data(), wih.data(), whh.data(), b.data(), s);
    return gradcheck::dot(out, r);
  };
  std::vector<double> out(s.T * s.B * s.H);
  LstmCache<double> cache;
  lstm_forward(out.data(), cache, x.data(), wih.data(), whh.data(), b.data(), s);
  std::vector<double> dx(x.size()), dwih(wih.size()), dwhh(whh.size()), db(b.size());
  lstm_backward(dx.data(), dwih.data(), dwhh.data(), db.data(), r.data(), cache, x.data(), wih.data(), whh.data(), s);
  CHECK(gradcheck::check("lstm dx", x, dx, f).worst < 1e-7);
  CHECK(gradcheck::check("lstm dw_ih", wih, dwih, f).worst < 1e-7);
  CHECK(gradcheck::check("lstm dw_hh", whh, dwhh, f).worst < 1e-7);
  CHECK(gradcheck::check("lstm dbias", b, db, f).worst < 1e-7);
  // The gradient reaching the first input depends on the last output only through the recurrence.
  std::vector<double> r_last(r.size(), 0.0);
  for (int k = 0; k < s.B * s.H; ++k) r_last[(s.T - 1) * s.B * s.H + k] = r[(s.T - 1) * s.B * s.H + k];
  r = r_last;
  lstm_backward(dx.data(), dwih.data(), dwhh.data(), db.data(), r.data(), cache, x.data(), wih.data(), whh.data(), s);
  CHECK(gradcheck::check("lstm dx (loss at t=T only)", x, dx, f).worst < 1e-7);
  double first = 0;
  for (int k = 0; k < s.B * s.I; ++k) first = std::max(first, std::abs(dx[k]));
  CHECK(first > 0);
}

TEST_CASE("lstm calls the precision hook at its named sites", "[lstm]") {
  const LstmShape s{5, 2, 3, 4};
  const int G = 4 * s.H;
  std::mt19937_64 rng(9);
  auto x = gradcheck::random_vector(s.T * s.B * s.I, rng), wih = gradcheck::random_vector(G * s.I, rng),
       whh = gradcheck::random_vector(G * s.H, rng), b = gradcheck::random_vector(G, rng),
       r = gradcheck::random_vector(s.T * s.B * s.H, rng);
  std::map<std::string, std::int64_t> seen;
  auto hook = [&](const char* name, OpClass, double*, std::int64_t n) { seen[name] += n; };
  std::vector<double> out(s.T * s.B * s.H), dx(x.size()), dwih(wih.size()), dwhh(whh.size()), db(b.size());
  LstmCache<double> cache;
  lstm_forward(out.data(), cache, x.data(), wih.data(), whh.data(), b.data(), s, hook);
  lstm_backward(dx.data(), dwih.data(), dwhh.data(), db.data(), r.data(), cache, x.data(), wih.data(), whh.data(), s,
                hook);
  CHECK(seen["ih_out"] == s.T * s.B * G);
  CHECK(seen["h_in"] == s.T * s.B * s.H);
  CHECK(seen["hh_out"] == s.T * s.B * G);
  CHECK(seen["gates_grad"] == s.T * s.B * G);
  CHECK(seen["h_grad"] == s.T * s.B * s.H);
}
