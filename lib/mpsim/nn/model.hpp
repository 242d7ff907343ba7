// The interface between the models (lib/mpsim/models) and the training loop (lib/mpsim/train).
// A model owns its fp32 master weights and gradient buffers; the loop owns the optimizer, the loss
// scaler and the step count. Data are generated from (seed, batch_index), so a checkpoint needs no
// data-RNG state.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/nn/policy.hpp"

namespace mpsim::nn {

struct Param {
  std::string name;        // "conv1/weight", "lstm0/w_hh", ... (stable: checkpoints and reports use it)
  std::span<float> value;  // fp32 master weights
  std::span<float> grad;   // gradient buffer, same size
};

struct Metric {
  std::string name;  // "mAP@0.5" or "bits_per_token"
  double value = 0;
  bool higher_is_better = true;
};

struct ModelConfig {
  int batch = 0;            // 0 = the model's default
  int size = 0;             // width/scale knob, 0 = the model's default
  std::string corpus_path;  // lstm: a UTF-8 text file instead of the generated corpus (empty = generated)
  int vocab = 0;            // lstm: tokens of the generated language (0 = its default 32; models/corpus.hpp)
  double zipf = std::numeric_limits<double>::quiet_NaN();  // lstm: its Zipf exponent (NaN = unset: 1)
};

// What the model suggests to the training loop (the study uses it; a user may override it).
struct TrainHints {
  std::string optimizer = "adamw";  // "sgd" or "adamw"
  double lr = 1e-3;
  double momentum = 0.9;  // sgd
  double weight_decay = 0.0;
  int steps = 400;  // default length of a run
  // A global-norm clipping threshold (model units) that clips some of the steps of a run of the model:
  // the study's clipping row uses it (0 = the model suggests none).
  double clip_norm = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  // fp32 master weights and their gradient buffers, in a fixed order.
  virtual std::vector<Param> params() = 0;
  // One forward + backward on training batch `batch_index` (data generated from (seed, batch_index)).
  // The loss is multiplied by loss_scale before backward; the scaled gradients are ADDED to the params'
  // grad buffers (the caller zeroes them, which allows gradient accumulation). Returns the unscaled fp32
  // loss of the batch. Every rounding goes through prec.round(...) at the policy's sites.
  virtual double forward_backward(std::uint64_t batch_index, float loss_scale, Precision& prec) = 0;
  // The model's metric on its held-out set (generated, or the corpus' validation split), with the
  // forward pass rounded as prec's policy says. Does not add to prec's site statistics.
  virtual Metric evaluate(Precision& prec) = 0;
  virtual TrainHints hints() const { return {}; }
};

// "ssd" (alias "ssd_lite") or "lstm" (alias "lstm_lm"); throws mpsim::Error naming an unknown model or a
// bad corpus. Defined in lib/mpsim/models (link mpsim_models_dep).
std::unique_ptr<Model> make_model(std::string_view name, const ModelConfig& config, std::uint64_t seed);
const std::vector<std::string>& model_names();

}  // namespace mpsim::nn
