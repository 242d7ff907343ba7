// Tests of lib/mpsim/train/optimizer.hpp: SGD with momentum and AdamW against values worked by hand
// from the torch.optim algorithm boxes (in double, to ~1e-7), and gradient clipping.
#include "catch.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

#include "mpsim/error.hpp"
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
