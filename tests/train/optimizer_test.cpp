// Tests of lib/mpsim/train/optimizer.hpp: SGD with momentum and AdamW against values worked by hand
// from the torch.optim algorithm boxes (in double, to ~1e-7), and gradient clipping.
#include "catch_compat.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/train/optimizer.hpp"

using namespace mpsim;
using namespace mpsim::train;

namespace {
// Prints one comparison, so that the log shows what was checked, and passes the value on to the CHECK.
double shown(const char* what, double got, double want) {
  std::printf("%-34s %.10g (worked by hand: %.10g)\n", what, got, want);
  return got;
}
}  // namespace

TEST_CASE("SGD with momentum and weight decay: two steps worked by hand", "[optimizer]") {
  OptimizerConfig c;
  c.name = "sgd";
  c.lr = 0.1;
  c.momentum = 0.9;
  c.weight_decay = 0.01;
  Optimizer opt(c, {2});
  std::vector<float> theta = {1.0f, -2.0f}, grad = {0.5f, 0.25f};
  std::vector<std::span<float>> values = {theta}, grads = {grad};
  opt.step(values, grads);
  // g' = g + 0.01 theta = (0.51, 0.23); b = g'; theta = theta - 0.1 b.
  CHECK(shown("sgd step 1 theta[0]", theta[0], 0.949) == Approx(0.949).epsilon(1e-7));
  CHECK(shown("sgd step 1 theta[1]", theta[1], -2.023) == Approx(-2.023).epsilon(1e-7));
  grad = {-1.0f, 0.5f};
  opt.step(values, grads);
  // g' = (-0.99051, 0.47977); b = 0.9 (0.51, 0.23) + g' = (-0.53151, 0.68677); theta -= 0.1 b.
  CHECK(shown("sgd step 2 theta[0]", theta[0], 1.002151) == Approx(1.002151).epsilon(1e-7));
  CHECK(shown("sgd step 2 theta[1]", theta[1], -2.091677) == Approx(-2.091677).epsilon(1e-7));
  CHECK(shown("sgd step 2 momentum buffer[0]", opt.buffers()[0][0], -0.53151) == Approx(-0.53151).epsilon(1e-6));
  INFO("theta after 2 steps: " << theta[0] << ", " << theta[1]);
}

TEST_CASE("SGD with Nesterov momentum and dampening-free first step", "[optimizer]") {
  OptimizerConfig c;
  c.lr = 0.5;
  c.momentum = 0.5;
  c.nesterov = true;
  Optimizer opt(c, {1});
  std::vector<float> theta = {0.0f}, grad = {1.0f};
  std::vector<std::span<float>> values = {theta}, grads = {grad};
  opt.step(values, grads);  // b = 1; g = 1 + 0.5*1 = 1.5; theta = -0.75
  CHECK(shown("nesterov step 1 theta[0]", theta[0], -0.75) == -0.75f);
  opt.step(values, grads);  // b = 0.5 + 1 = 1.5; g = 1 + 0.75 = 1.75; theta = -0.75 - 0.875
  CHECK(shown("nesterov step 2 theta[0]", theta[0], -1.625) == -1.625f);
}

TEST_CASE("AdamW: three steps worked by hand", "[optimizer]") {
  OptimizerConfig c;
  c.name = "adamw";
  c.lr = 0.1;
  c.weight_decay = 0.1;
  Optimizer opt(c, {1});
  std::vector<float> theta = {1.0f}, grad = {0.5f};
  std::vector<std::span<float>> values = {theta}, grads = {grad};
  // Step 1: theta = 0.99; m = 0.05; v = 0.00025; m^ = 0.5, v^ = 0.25; theta -= 0.1 * 0.5/(0.5 + 1e-8).
  opt.step(values, grads);
  CHECK(shown("adamw step 1 theta", theta[0], 0.890000002) == Approx(0.890000002).epsilon(1e-7));
  // Step 2 (g = -0.25): m = 0.02, v = 0.00031225, m^ = 0.02/0.19, v^ = 0.00031225/0.001999.
  grad[0] = -0.25f;
  opt.step(values, grads);
  CHECK(shown("adamw step 2 theta", theta[0], 0.8544662986878463) == Approx(0.8544662986878463).epsilon(1e-7));
  grad[0] = 0.125f;
  opt.step(values, grads);
  CHECK(shown("adamw step 3 theta", theta[0], 0.8118787219097756) == Approx(0.8118787219097756).epsilon(1e-7));
  CHECK(opt.steps() == 3);
  INFO("theta after 3 steps " << theta[0]);
}

TEST_CASE("global-norm clipping as torch.nn.utils.clip_grad_norm_", "[optimizer]") {
  std::vector<float> a = {3.0f}, b = {4.0f};
  std::vector<std::span<float>> grads = {a, b};
  CHECK(shown("global_grad_norm(3, 4)", global_grad_norm(grads), 5.0) == 5.0);
  CHECK(clip_grad_norm(grads, 10.0) == 5.0);  // below max_norm: unchanged
  CHECK(a[0] == 3.0f);
  CHECK(clip_grad_norm(grads, 1.0) == 5.0);
  CHECK(shown("clip to norm 1: a", a[0], 0.6) == Approx(0.6).epsilon(1e-6));
  CHECK(shown("clip to norm 1: b", b[0], 0.8) == Approx(0.8).epsilon(1e-6));
}

TEST_CASE("optimiser configs are validated", "[optimizer]") {
  OptimizerConfig c;
  c.name = "adam";
  CHECK_THROWS_AS(validate(c), Error);
  c.name = "sgd";
  c.lr = 0;
  CHECK_THROWS_AS(validate(c), Error);
  c.lr = std::nan("");
  CHECK_THROWS_AS(validate(c), Error);
  c.lr = 0.1;
  Optimizer opt(c, {3});
  std::vector<float> v(2), g(2);
  std::vector<std::span<float>> values = {v}, grads = {g};
  CHECK_THROWS_AS(opt.step(values, grads), Error);
}

TEST_CASE("no master copy: fp16 weights swallow updates that fp32 master weights keep (counted)", "[optimizer]") {
  // 4096 weights at 1.0, each with gradient 2^-9 and lr 2^-4: every update is 2^-13. fp16's spacing
  // at 1.0 is 2^-10, so nearest-even swallows an update below 2^-11: all of them; fp32's spacing is
  // 2^-23 and it keeps all of them. Stochastic rounding moves a weight to 1 - 2^-11 (the next fp16 value
  // below 1, spacing 2^-11 there) with probability 2^-13 / 2^-11 = 1/4: the expected value is kept.
  OptimizerConfig c;
  c.name = "sgd";
  c.lr = 0x1p-4;
  c.momentum = 0;
  const std::size_t n = 4096;
  std::vector<float> grad(n, 0x1p-9f);
  std::vector<std::span<float>> grads = {grad};
  auto run = [&](Optimizer& opt, std::vector<float>& theta) {
    std::vector<std::span<float>> values = {theta};
    return opt.step(values, grads);
  };
  std::vector<float> master(n, 1.0f), pure(n, 1.0f), sr(n, 1.0f);
  Optimizer o_master(c, {n}), o_pure(c, {n}), o_sr(c, {n});
  o_pure.set_no_master_copy(fp16(), Rounding{});
  Rounding stochastic;
  stochastic.mode = RoundingMode::stochastic;
  o_sr.set_no_master_copy(fp16(), stochastic);
  const UpdateStats s_master = run(o_master, master), s_pure = run(o_pure, pure), s_sr = run(o_sr, sr);
  std::size_t moved_sr = 0, master_exact = 0;
  for (std::size_t i = 0; i < n; ++i) {
    moved_sr += sr[i] != 1.0f;
    master_exact += master[i] == static_cast<float>(1.0 - 0x1p-13);
  }
  std::printf(
      "no master copy, %zu updates of 2^-13 at 1.0: fp32 master swallowed %llu (kept exactly %zu), fp16 "
      "nearest swallowed %llu, fp16 stochastic swallowed %llu (moved %zu, expected %zu +- %.0f)\n",
      n, (unsigned long long)s_master.swallowed, master_exact, (unsigned long long)s_pure.swallowed,
      (unsigned long long)s_sr.swallowed, moved_sr, n / 4, std::sqrt(n * 0.25 * 0.75));
  CHECK(s_master.nonzero == n);
  CHECK(s_master.swallowed == 0);
  CHECK(master_exact == n);
  CHECK(s_pure.nonzero == n);
  CHECK(s_pure.swallowed == n);
  CHECK(std::all_of(pure.begin(), pure.end(), [](float v) { return v == 1.0f; }));
  CHECK(s_sr.swallowed == n - moved_sr);
  // Binomial(4096, 1/4): mean 1024, sd 27.7; five sd either side.
  CHECK(std::abs(static_cast<double>(moved_sr) - 1024.0) < 5 * 27.7);
  for (float v : sr) CHECK((v == 1.0f || v == static_cast<float>(1.0 - 0x1p-11)));

  // Momentum and weight decay in fp16 too: the buffer holds fp16 values, and a step worked by hand.
  OptimizerConfig m = c;
  m.momentum = 0.9;
  m.lr = 0.1;
  Optimizer o_m(m, {2});
  o_m.set_no_master_copy(fp16(), Rounding{});
  std::vector<float> theta = {1.0f, -2.0f}, g2 = {0.5f, 0.3f};
  std::vector<std::span<float>> values = {theta}, grads2 = {g2};
  o_m.step(values, grads2);
  o_m.step(values, grads2);
  // By hand with f = round to fp16: g = f(0.3) = 0.2999267578125; step 1: b = g, theta1 = f(-2 - f(f(0.1) b));
  // step 2: b = f(f(f(0.9) b) + g), theta2 = f(theta1 - f(f(0.1) b)).
  auto f = [](double x) { return static_cast<double>(mpsim::round(x, fp16())); };
  const double g = f(0.3), lr = f(0.1), mu = f(0.9);
  const double t1 = f(-2.0 - f(lr * g)), b2 = f(f(mu * g) + g), t2 = f(t1 - f(lr * b2));
  std::printf("no master copy with momentum: theta[1] %.10g (by hand %.10g), buffer %.10g (by hand %.10g)\n", theta[1],
              t2, o_m.buffers()[0][1], b2);
  CHECK(theta[1] == t2);
  CHECK(o_m.buffers()[0][1] == b2);
  CHECK(mpsim::round(theta[0], fp16()) == theta[0]);

  OptimizerConfig adam;
  adam.name = "adamw";
  Optimizer o_adam(adam, {2});
  CHECK_THROWS_AS(o_adam.set_no_master_copy(fp16(), Rounding{}), Error);
}
