// The training loop (docs/design.md, "Training simulator"): model x precision policy x loss scaler x
// optimiser x seed, with fp32 master weights, and its outputs:
//   run.json     config + summary (final loss, metric, skipped steps, % of activation gradients lost)
//   steps.csv    one row per step: step, loss, metric (at eval steps), scale, skipped, grad_norm (unscaled,
//                the model's units), swallowed (of the weights whose update was non-zero, the share that did
//                not change: the update fell below half the stored weight's spacing; empty when skipped), and for
//                every activation-gradient rounding site S (under a scaling recipe also its GEMMs' gradient
//                operands, <layer>/dgrad_dy and <layer>/wgrad_dy) three columns S:zero, S:subnormal, S:overflow,
//                the fractions of that step's non-zero finite gradients at S flushed to zero / left
//                subnormal / overflowed (0 where the policy does not round S); then the gradient mass lost
//                (analysis/mass_lost.hpp) per site, S:l1_lost, S:l2sq_lost, S:cosine, S:push_down,
//                S:lost_bias, and the same for the whole step (every site's gradients concatenated) step:...
//   hist/step_NNNNNN.json   log2 histograms (analysis::Log2Histogram) of activation gradients and weight
//                gradients at the rounding sites (values before rounding, loss scale included) and of the
//                unscaled fp32 master gradients, at the chosen steps
//   checkpoint.safetensors  every --checkpoint-every steps and at the end (train/checkpoint.hpp)
// Everything is written atomically; a run with the same config gives the same bytes in steps.csv
// whatever the thread count, and a resumed run continues bit for bit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/analysis/mass_lost.hpp"
#include "mpsim/nn/model.hpp"
#include "mpsim/nn/policy.hpp"
#include "mpsim/train/optimizer.hpp"
#include "mpsim/train/scaler.hpp"

namespace mpsim::train {

// Builds a model (the CLI passes nn::make_model; tests pass their own).
using ModelFactory =
    std::function<std::unique_ptr<nn::Model>(std::string_view name, const nn::ModelConfig&, std::uint64_t seed)>;

OptimizerConfig model_default_optimizer();

// The precision policy and the loss scaler of a run, parsed once where they are given (the command line's
// --policy / --scaler, a study's grid, a test) and kept with the spelling they were given in, which run.json and
// the checkpoint record. A spelling converts implicitly, by parsing it (an mpsim::Error names what is wrong).
struct ParsedPolicy {
  ParsedPolicy(std::string_view spec) : spec(spec), policy(nn::parse_policy(spec)) {}  // NOLINT: implicit
  ParsedPolicy(const std::string& spec) : ParsedPolicy(std::string_view(spec)) {}      // NOLINT: implicit
  ParsedPolicy(const char* spec) : ParsedPolicy(std::string_view(spec)) {}             // NOLINT: implicit
  std::string spec;                                                                    // nn::parse_policy spelling
  nn::PrecisionPolicy policy;
};
struct ParsedScaler {
  ParsedScaler(std::string_view spec) : spec(spec), config(parse_scaler(spec)) {}  // NOLINT: implicit
  ParsedScaler(const std::string& spec) : ParsedScaler(std::string_view(spec)) {}  // NOLINT: implicit
  ParsedScaler(const char* spec) : ParsedScaler(std::string_view(spec)) {}         // NOLINT: implicit
  // A config made otherwise (--scaler-state: from a GradScaler state_dict), spelled canonically (to_spec).
  explicit ParsedScaler(const ScalerConfig& c) : spec(to_spec(c)), config(c) {}
  std::string spec;  // parse_scaler spelling
  ScalerConfig config;
};

struct TrainConfig {
  std::string model = "ssd";
  nn::ModelConfig model_config;
  ParsedPolicy policy = ParsedPolicy("fp32");
  ParsedScaler scaler = ParsedScaler("none");
  // Unset fields follow the model's nn::TrainHints: name "" (the model's optimiser), lr 0 (the model's lr
  // when its optimiser is used, else default_lr), momentum / weight_decay NaN (the model's).
  OptimizerConfig optimizer = model_default_optimizer();
  int steps = 0;  // total optimiser steps (a resumed run continues up to it); 0 = the model's
  std::uint64_t seed = 0;
  int accumulate = 1;    // micro-batches per step: each backward starts from loss / accumulate
  double clip_norm = 0;  // global-norm clipping of the unscaled gradients, in the model's units; 0 = off
  // An experiment knob, not a default: the loss is multiplied by 2^-loss_divisor_log2 before backward (on
  // top of the loss scale) and the gradients by 2^loss_divisor_log2 when they are unscaled, so every
  // gradient inside the network is that many binades smaller while the optimiser, grad_norm and
  // --clip-norm see the model's own units. It stands for what smaller gradients (a larger network, a
  // loss normalised by a larger count) would do; see lib/mpsim/models/README.md.
  int loss_divisor_log2 = 0;
  int eval_every = 0;        // metric every N steps (and at the last step); 0 = steps / 10
  int checkpoint_every = 0;  // 0 = only at the end
  int threads = 1;           // threads for the optimiser update and mma::gemm under mma= (results do not depend on it)
  std::vector<int> hist_steps;  // steps that write histogram snapshots
  // At the histogram steps, also write the unscaled fp32 gradients of every parameter (what the optimiser
  // receives, before clipping) as grads/step_NNNNNN.safetensors: tensors for `mpsim underflow` and `hist`.
  bool dump_grads = false;
  std::filesystem::path out;     // output folder (created)
  std::filesystem::path resume;  // checkpoint to resume from (empty = fresh start)
  // What to do with an `out` that already holds a run's files (kPreviousRunFiles): write over them, leaving
  // the old run's other histograms and gradients beside the new ones (what a study's runs do); refuse before
  // anything runs (`mpsim train`); or remove them once the checkpoint to resume from is read (`train --force`).
  enum class PreviousRun { overwrite, refuse, replace };
  PreviousRun previous_run = PreviousRun::overwrite;
};

// The files and folders of a run in its output folder (what PreviousRun::replace removes; nothing else is).
inline constexpr const char* kPreviousRunFiles[] = {"run.json", "steps.csv", "checkpoint.safetensors", "hist", "grads"};

struct TrainSummary {
  int steps_done = 0;  // last step run
  double final_loss = 0;
  nn::Metric final_metric;
  int skipped_steps = 0;
  bool diverged = false;  // master weights or loss became non-finite
  int diverged_at = 0;    // first step with a non-finite loss or weights (0 = never; a dynamic
                          // scaler may recover from it: `diverged` says whether the run did)
  double final_scale = 1;
  // Over all steps: non-zero finite activation gradients, and how many were flushed to zero / left
  // subnormal / overflowed by the rounding.
  std::uint64_t act_grad_nonzero = 0, act_grad_underflow = 0, act_grad_subnormal = 0, act_grad_overflow = 0;
  double act_grad_lost_fraction() const {
    return act_grad_nonzero ? static_cast<double>(act_grad_underflow) / act_grad_nonzero : 0.0;
  }
  // Over all steps and activation-gradient sites: the gradient mass the rounding flushed, and the cosine
  // between the gradients before and after rounding (every site's values concatenated).
  analysis::MassLost act_grad_mass;
  // Over all optimiser steps: weight elements with a non-zero update, and how many of those the stored
  // weight swallowed (fp32 master weights, or the fp16 weights themselves in a pure policy).
  std::uint64_t updates_nonzero = 0, updates_swallowed = 0;
  double swallowed_fraction() const {
    return updates_nonzero ? static_cast<double>(updates_swallowed) / updates_nonzero : 0.0;
  }
  double wall_seconds = 0;
  nlohmann::json to_json() const;
};

// Called after every step (step, total) for a progress bar.
using Progress = std::function<void(int step, int total, double loss, double scale)>;

// An OptimizerConfig whose fields all say "the model's".
OptimizerConfig model_default_optimizer();
// The learning rate used when an optimiser other than the model's suggestion is chosen without --lr.
double default_lr(std::string_view optimizer);
// The optimiser a run uses: config's fields where set, the model's hints elsewhere.
OptimizerConfig resolve_optimizer(const OptimizerConfig& config, const nn::TrainHints& hints);

// Checks the config (policy, scaler, optimiser, step counts, the checkpoint to resume from) without
// writing anything; throws mpsim::Error naming the bad input. run_training calls it first.
void validate(const TrainConfig& config);

// Runs the training and writes the outputs into config.out. Throws mpsim::Error on bad input before
// anything is written (a mismatched or corrupt checkpoint, an unknown model, ...).
TrainSummary run_training(const TrainConfig& config, const ModelFactory& factory, const Progress& progress = {});

// The JSON of a config (run.json "config").
nlohmann::json to_json(const TrainConfig& config);

}  // namespace mpsim::train
