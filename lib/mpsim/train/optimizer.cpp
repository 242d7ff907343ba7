#include "mpsim/train/optimizer.hpp"

#include <fmt/core.h>

#include <cmath>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"

namespace mpsim::train {

void validate(const OptimizerConfig& c) {
  if (c.name != "sgd" && c.name != "adamw")
    throw FieldError("optimizer", "'" + c.name + "'", "unknown optimiser (expected sgd or adamw)");
  if (!(std::isfinite(c.lr) && c.lr > 0)) throw FieldError("lr", fmt::format("{}", c.lr), "must be finite and > 0");
  if (!(std::isfinite(c.weight_decay) && c.weight_decay >= 0))
    throw FieldError("weight_decay", fmt::format("{}", c.weight_decay), "must be finite and >= 0");
  if (!(c.momentum >= 0 && c.momentum < 1))
    throw FieldError("momentum", fmt::format("{}", c.momentum), "must lie in [0, 1)");
  if (!(c.dampening >= 0 && c.dampening <= 1))
    throw Error(fmt::format("dampening {}: must lie in [0, 1]", c.dampening));
  if (c.nesterov && (c.momentum <= 0 || c.dampening != 0))
    throw Error("nesterov momentum requires momentum > 0 and dampening 0 (as torch.optim.SGD)");
  if (!(c.beta1 >= 0 && c.beta1 < 1) || !(c.beta2 >= 0 && c.beta2 < 1))
    throw Error(fmt::format("AdamW betas ({}, {}): must lie in [0, 1)", c.beta1, c.beta2));
  if (!(std::isfinite(c.eps) && c.eps > 0)) throw Error(fmt::format("AdamW eps {}: must be finite and > 0", c.eps));
}

nlohmann::json to_json(const OptimizerConfig& c) {
  nlohmann::json j = {{"name", c.name}, {"lr", c.lr}, {"weight_decay", c.weight_decay}};
  if (c.name == "sgd") {
    j["momentum"] = c.momentum;
    j["dampening"] = c.dampening;
    j["nesterov"] = c.nesterov;
  } else {
    j["betas"] = {c.beta1, c.beta2};
    j["eps"] = c.eps;
  }
  return j;
}

Optimizer::Optimizer(OptimizerConfig config, std::vector<std::size_t> sizes)
    : config_(std::move(config)), sizes_(std::move(sizes)) {
  validate(config_);
  for (std::size_t n : sizes_) elements_ += n;
  if (config_.name == "sgd") {
    if (config_.momentum != 0)
      for (std::size_t n : sizes_) buffers_.emplace_back(n, 0.0f);
  } else {
    for (int kind = 0; kind < 2; ++kind)
      for (std::size_t n : sizes_) buffers_.emplace_back(n, 0.0f);
  }
}

nlohmann::json Optimizer::state_layout() const {
  nlohmann::json buffers = nlohmann::json::array();
  const std::size_t n = sizes_.size();
  for (std::size_t b = 0; b < buffers_.size(); ++b) {
    const char* kind = config_.name == "sgd" ? "momentum_buffer" : (b < n ? "exp_avg" : "exp_avg_sq");
    buffers.push_back({{"kind", kind}, {"tensor", b % n}, {"size", buffers_[b].size()}});
  }
  return {{"name", config_.name}, {"steps", steps_}, {"buffers", buffers}};
}

void Optimizer::set_no_master_copy(const Format& format, const Rounding& update_rounding) {
  if (config_.name != "sgd")
    throw Error(
        fmt::format("optimiser {}: training without fp32 master weights is implemented for SGD only", config_.name));
  validate(update_rounding);
  low_ = format;
  update_rounding_ = update_rounding;
}

// SGD with every value in the low format and every operation rounded to it (nearest-even): the gradient
// as a pure low-precision run holds it after unscaling, the weight-decay term, the momentum buffer, the
// learning-rate product, and theta - update (update_rounding_). Each operation is computed exactly in
// double (products and sums of two fp16/bf16 values fit in 53 bits) and rounded once by mpsim::round.
UpdateStats Optimizer::step_sgd_low(std::span<const std::span<float>> values, std::span<const std::span<float>> grads) {
  const OptimizerConfig& c = config_;
  const Format& f = *low_;
  auto r = [&](double x) { return static_cast<double>(mpsim::round(x, f)); };
  const double wd = r(c.weight_decay), mu = r(c.momentum), keep = r(1.0 - c.dampening), lr = r(c.lr);
  UpdateStats stats;
  std::uint64_t index = static_cast<std::uint64_t>(steps_ - 1) * elements_;
  for (std::size_t i = 0; i < sizes_.size(); ++i) {
    float* theta = values[i].data();
    const float* grad = grads[i].data();
    float* buf = c.momentum != 0 ? buffers_[i].data() : nullptr;
    for (std::size_t k = 0; k < sizes_[i]; ++k, ++index) {
      double g = r(grad[k]);
      if (c.weight_decay != 0) g = r(g + r(wd * theta[k]));
      if (buf) {
        buf[k] = static_cast<float>(steps_ == 1 ? g : r(r(mu * buf[k]) + r(keep * g)));
        g = c.nesterov ? r(g + r(mu * buf[k])) : buf[k];
      }
      const double update = r(lr * g);
      const float before = theta[k];
      theta[k] = static_cast<float>(mpsim::round(static_cast<double>(before) - update, f, update_rounding_, index));
      if (update != 0) {
        stats.nonzero += 1;
        stats.swallowed += theta[k] == before;
      }
    }
  }
  return stats;
}

UpdateStats Optimizer::step(std::span<const std::span<float>> values, std::span<const std::span<float>> grads) {
  if (values.size() != sizes_.size() || grads.size() != sizes_.size())
    throw Error(fmt::format("optimiser: {} tensors given, {} expected", values.size(), sizes_.size()));
  for (std::size_t i = 0; i < sizes_.size(); ++i)
    if (values[i].size() != sizes_[i] || grads[i].size() != sizes_[i])
      throw Error(fmt::format("optimiser: tensor {} has {} values / {} gradients, {} expected", i, values[i].size(),
                              grads[i].size(), sizes_[i]));
  steps_ += 1;
  const OptimizerConfig& c = config_;
  if (low_) return step_sgd_low(values, grads);
  UpdateStats stats;
  // An fp32 master weight swallows an update too when it is below half the weight's spacing (2^-24
  // relative): counted the same way as in the low format.
  auto count = [&stats](float before, float after, float update) {
    if (update != 0) {
      stats.nonzero += 1;
      stats.swallowed += after == before;
    }
  };

  if (c.name == "sgd") {
    // torch.optim.SGD (docs algorithm box; _single_tensor_sgd):
    //   g <- g + wd*theta;  b <- g at the first step, else b <- mu*b + (1 - dampening)*g;
    //   g <- g + mu*b (nesterov) or g <- b;  theta <- theta - lr*g.
    // The scalars are Python floats there, applied to float tensors: we round them to float once.
    const float wd = static_cast<float>(c.weight_decay), mu = static_cast<float>(c.momentum);
    const float keep = static_cast<float>(1.0 - c.dampening), neg_lr = static_cast<float>(-c.lr);
    for (std::size_t i = 0; i < sizes_.size(); ++i) {
      float* theta = values[i].data();
      const float* grad = grads[i].data();
      float* buf = c.momentum != 0 ? buffers_[i].data() : nullptr;
      for (std::size_t k = 0; k < sizes_[i]; ++k) {
        float g = grad[k];
        if (c.weight_decay != 0) g = g + wd * theta[k];
        if (buf) {
          buf[k] = steps_ == 1 ? g : mu * buf[k] + keep * g;
          g = c.nesterov ? g + mu * buf[k] : buf[k];
        }
        const float before = theta[k], update = neg_lr * g;
        theta[k] = before + update;
        count(before, theta[k], update);
      }
    }
    return stats;
  }

  // torch.optim.AdamW (docs algorithm box; _single_tensor_adam with decoupled weight decay):
  //   theta <- theta*(1 - lr*wd);  m <- m + (1 - beta1)*(g - m)  (lerp);  v <- beta2*v + (1 - beta2)*g*g;
  //   step_size = lr / (1 - beta1^t);  denom = sqrt(v) / sqrt(1 - beta2^t) + eps;
  //   theta <- theta - step_size * m / denom.
  // The bias corrections are computed in double (Python floats), then used as float scalars.
  const double t = static_cast<double>(steps_);
  const float decay = static_cast<float>(1.0 - c.lr * c.weight_decay);
  const float one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
  const float beta2 = static_cast<float>(c.beta2), one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
  const double bias_correction1 = 1.0 - std::pow(c.beta1, t);
  const double bias_correction2 = 1.0 - std::pow(c.beta2, t);
  const float neg_step_size = static_cast<float>(-(c.lr / bias_correction1));
  const float bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2));
  const float eps = static_cast<float>(c.eps);
  const std::size_t n = sizes_.size();
  for (std::size_t i = 0; i < n; ++i) {
    float* theta = values[i].data();
    const float* grad = grads[i].data();
    float* m = buffers_[i].data();
    float* v = buffers_[n + i].data();
    for (std::size_t k = 0; k < sizes_[i]; ++k) {
      const float g = grad[k];
      if (c.weight_decay != 0) theta[k] = theta[k] * decay;
      m[k] = m[k] + one_minus_beta1 * (g - m[k]);
      v[k] = v[k] * beta2 + one_minus_beta2 * (g * g);
      const float denom = std::sqrt(v[k]) / bias_correction2_sqrt + eps;
      const float before = theta[k], update = neg_step_size * (m[k] / denom);
      theta[k] = before + update;
      count(before, theta[k], update);
    }
  }
  return stats;
}

double global_grad_norm(std::span<const std::span<float>> grads) {
  double sum = 0;
  for (const auto& g : grads)
    for (float x : g) sum += static_cast<double>(x) * x;
  return std::sqrt(sum);
}

double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm) {
  const double norm = global_grad_norm(grads);
  if (max_norm > 0) {
    // torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to at most 1.
    const double coef = max_norm / (norm + 1e-6);
    if (coef < 1) {
      const float f = static_cast<float>(coef);
      for (const auto& g : grads)
        for (float& x : g) x *= f;
    }
  }
  return norm;
}

}  // namespace mpsim::train
