// A tiny nn::Model for the training-loop tests: linear regression y = w.x + b on data generated from
// (seed, batch index), with rounding sites like a real layer (matmul input/output, activation gradient,
// weight gradient), so the loop's scaling, skipping, rounding statistics and checkpoints are exercised
// without the real models.
#pragma once

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/nn/model.hpp"

namespace tiny {

class LinearRegression : public mpsim::nn::Model {
 public:
  // `grad_scale` multiplies the loss: small values push the activation gradients below fp16's range.
  // `exact`: sample n of batch `index` is the global sample index * batch + n (so batch size B with
  // accumulation A sees the same samples as one batch of A*B), and data and initial weights lie on a
  // coarse binary grid (x and y multiples of 2^-4 and 2^-6, weights of 2^-6), so that the first step's
  // sums over samples are exact in float whatever their order.
  LinearRegression(std::string name, int dim, int batch, std::uint64_t seed, double grad_scale = 1.0,
                   bool exact = false)
      : name_(std::move(name)),
        dim_(dim),
        batch_(batch),
        seed_(seed),
        grad_scale_(grad_scale),
        exact_(exact),
        w_(dim),
        dw_(dim),
        b_(1),
        db_(1) {
    for (int i = 0; i < dim; ++i) w_[i] = grid(0.1f * uniform(seed, 1000 + i), 6);
  }
  std::string name() const override { return name_; }
  std::vector<mpsim::nn::Param> params() override { return {{"lin/weight", w_, dw_}, {"lin/bias", b_, db_}}; }
  double forward_backward(std::uint64_t batch_index, float loss_scale, mpsim::nn::Precision& prec) override {
    std::vector<float> x(static_cast<std::size_t>(batch_) * dim_), y(batch_), pred(batch_), wcopy(w_);
    make_batch(batch_index, x, y);
    prec.round("lin/x", mpsim::nn::OpClass::matmul_input, x);
    prec.round("lin/w", mpsim::nn::OpClass::matmul_input, wcopy);
    for (int n = 0; n < batch_; ++n) {
      float acc = b_[0];
      for (int i = 0; i < dim_; ++i) acc += wcopy[i] * x[static_cast<std::size_t>(n) * dim_ + i];
      pred[n] = acc;
    }
    prec.round("lin/out", mpsim::nn::OpClass::matmul_output, pred);
    double loss = 0;
    std::vector<float> dpred(batch_);
    for (int n = 0; n < batch_; ++n) {
      const double e = static_cast<double>(pred[n]) - y[n];
      loss += 0.5 * e * e * grad_scale_ / batch_;
      dpred[n] = static_cast<float>(e * grad_scale_ / batch_ * loss_scale);
    }
    prec.round("lin/act_grad", mpsim::nn::OpClass::activation_grad, dpred);
    std::vector<float> gw(dim_, 0.0f);
    float gb = 0;
    for (int n = 0; n < batch_; ++n) {
      gb += dpred[n];
      for (int i = 0; i < dim_; ++i) gw[i] += dpred[n] * x[static_cast<std::size_t>(n) * dim_ + i];
    }
    prec.round("lin/w_grad", mpsim::nn::OpClass::weight_grad, gw);
    for (int i = 0; i < dim_; ++i) dw_[i] += gw[i];
    db_[0] += gb;
    return loss;
  }
  mpsim::nn::Metric evaluate(mpsim::nn::Precision&) override {
    // exact_: a held-out set of 64 samples whatever the batch size (runs with accumulation compare)
    const int count = exact_ ? 64 : batch_;
    std::vector<float> x(static_cast<std::size_t>(count) * dim_), y(count);
    make_batch(1u << 30, x, y, count);
    double se = 0;
    for (int n = 0; n < count; ++n) {
      double p = b_[0];
      for (int i = 0; i < dim_; ++i) p += static_cast<double>(w_[i]) * x[static_cast<std::size_t>(n) * dim_ + i];
      se += (p - y[n]) * (p - y[n]);
    }
    return {"mse", se / count, false};
  }

 private:
  static float uniform(std::uint64_t seed, std::uint64_t i) {
    const std::uint64_t r = mpsim::splitmix64(seed * 0x9E3779B97F4A7C15ull + i);
    return static_cast<float>(static_cast<double>(r >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  }
  // x on multiples of 2^-bits when exact_, else x itself.
  float grid(float x, int bits) const { return exact_ ? std::ldexp(std::nearbyint(std::ldexp(x, bits)), -bits) : x; }
  void make_batch(std::uint64_t index, std::vector<float>& x, std::vector<float>& y, int count = 0) const {
    if (count == 0) count = batch_;
    for (int n = 0; n < count; ++n) {
      // exact_: one global sample stream (index * batch + n), so that accumulation sees one big batch's samples
      // (the held-out set, index 2^30, starts at sample 2^40 of that stream)
      const std::uint64_t first = index == (1u << 30) ? std::uint64_t{1} << 40 : index * batch_;
      const std::uint64_t row = exact_ ? 0 : index, col = exact_ ? first + n : static_cast<std::uint64_t>(n);
      double t = 0.25;
      for (int i = 0; i < dim_; ++i) {
        const float v = grid(uniform(seed_ ^ 0xABCDEFull, row * 1000003ull + col * dim_ + i), 4);
        x[static_cast<std::size_t>(n) * dim_ + i] = v;
        t += (i % 3 - 1) * 0.5 * v;
      }
      y[n] = grid(static_cast<float>(t + 0.01 * uniform(seed_, row * 7919ull + col)), 6);
    }
  }
  std::string name_;
  int dim_, batch_;
  std::uint64_t seed_;
  double grad_scale_;
  bool exact_;
  std::vector<float> w_, dw_, b_, db_;
};

// A factory as run_training takes: "tiny" (dim from config.size, default 8), "tiny_small_grads"
// (the loss times 2^-20, so unscaled fp16 activation gradients underflow) and "tiny_exact" (see exact).
inline std::unique_ptr<mpsim::nn::Model> make(std::string_view name, const mpsim::nn::ModelConfig& c,
                                              std::uint64_t seed) {
  const int dim = c.size > 0 ? c.size : 8, batch = c.batch > 0 ? c.batch : 16;
  if (name == "tiny") return std::make_unique<LinearRegression>("tiny", dim, batch, seed);
  if (name == "tiny_small_grads")
    return std::make_unique<LinearRegression>("tiny_small_grads", dim, batch, seed, std::ldexp(1.0, -20));
  if (name == "tiny_exact") return std::make_unique<LinearRegression>("tiny_exact", dim, batch, seed, 1.0, true);
  throw mpsim::Error("unknown model '" + std::string(name) + "'");
}

}  // namespace tiny
