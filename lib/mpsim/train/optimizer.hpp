// Optimisers on fp32 master weights: SGD with momentum and AdamW, written out with PyTorch's
// semantics (the algorithm boxes of torch.optim.SGD and torch.optim.AdamW, and the order of operations
// of their single-tensor implementations), plus global-norm gradient clipping.
//
// The optimiser knows tensors only as (value, grad) float spans in a fixed order; its state mirrors
// them (one buffer per tensor and kind), so a checkpoint writes it as flat arrays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::train {

struct OptimizerConfig {
  std::string name = "sgd";  // "sgd" or "adamw"
  double lr = 0.01;
  double weight_decay = 0.0;  // SGD: L2 term added to the gradient; AdamW: decoupled decay (param *= 1 - lr*wd)
  // SGD
  double momentum = 0.9;
  double dampening = 0.0;
  bool nesterov = false;
  // AdamW (torch.optim.AdamW defaults betas=(0.9, 0.999), eps=1e-8)
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
};

// Throws mpsim::Error naming the option (unknown name, lr <= 0 or not finite, betas outside [0, 1), ...).
void validate(const OptimizerConfig&);
nlohmann::json to_json(const OptimizerConfig&);

// What one step did to the stored weights: of the elements whose update was non-zero, how many the
// stored weight swallowed (it did not change, because the update was below half its spacing).
struct UpdateStats {
  std::uint64_t nonzero = 0, swallowed = 0;
};

class Optimizer {
 public:
  // sizes[i]: element count of tensor i.
  Optimizer(OptimizerConfig config, std::vector<std::size_t> sizes);

  const OptimizerConfig& config() const { return config_; }
  // No master copy ("pure" policies): the weights, the gradients, the momentum buffer and every operation
  // of the update are held in / rounded to `format` (nearest-even), as a run without fp32 master weights
  // does; the final theta - update is rounded with `update_rounding` (nearest-even, or stochastic as in
  // llm.c's update). SGD only (throws mpsim::Error for AdamW). Call before the first step.
  void set_no_master_copy(const Format& format, const Rounding& update_rounding);
  // One update of every tensor: values[i] -= f(grads[i], state). Sizes must match the constructor's.
  UpdateStats step(std::span<const std::span<float>> values, std::span<const std::span<float>> grads);
  // Steps taken so far (AdamW's t; SGD's "momentum buffer exists" test).
  std::int64_t steps() const { return steps_; }

  // State for checkpoints: names and sizes of the buffers (JSON) and the buffers themselves, in order.
  nlohmann::json state_layout() const;
  std::vector<std::vector<float>>& buffers() { return buffers_; }
  const std::vector<std::vector<float>>& buffers() const { return buffers_; }
  void set_steps(std::int64_t steps) { steps_ = steps; }

 private:
  OptimizerConfig config_;
  std::vector<std::size_t> sizes_;
  std::int64_t steps_ = 0;
  // SGD: momentum_buffer of each tensor (empty when momentum == 0).
  // AdamW: exp_avg of each tensor, then exp_avg_sq of each tensor.
  std::vector<std::vector<float>> buffers_;
  std::optional<Format> low_;  // set_no_master_copy
  Rounding update_rounding_;
  std::uint64_t elements_ = 0;  // sum of sizes_: stochastic-rounding indices are (step - 1) * elements_ + k

  UpdateStats step_sgd_low(std::span<const std::span<float>> values, std::span<const std::span<float>> grads);
};

// Global L2 norm of all gradients (accumulated in double, in tensor order: deterministic).
double global_grad_norm(std::span<const std::span<float>> grads);

// torch.nn.utils.clip_grad_norm_: if max_norm > 0, multiplies every gradient by
// min(1, max_norm / (total_norm + 1e-6)). Returns the norm before clipping.
double clip_grad_norm(std::span<const std::span<float>> grads, double max_norm);

}  // namespace mpsim::train
