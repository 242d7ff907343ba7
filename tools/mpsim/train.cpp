// mpsim train: one training run (model x policy x scaler x optimiser x seed) with its outputs
// (run.json, steps.csv, hist/, checkpoint.safetensors; see lib/mpsim/train/trainer.hpp).
#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "command.hpp"
#include "mpsim/error.hpp"
#include "mpsim/io/progress.hpp"
#include "mpsim/nn/model.hpp"
#include "mpsim/train/trainer.hpp"

namespace {

std::vector<int> parse_steps_list(const std::string& text) {
  std::vector<int> steps;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    std::size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size() || v < 1)
      throw mpsim::Error(fmt::format("--hist-steps '{}': '{}' is not a step number >= 1", text, item));
    steps.push_back(v);
  }
  return steps;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw mpsim::Error(fmt::format("{}: cannot open", path));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded()) throw mpsim::Error(fmt::format("{}: not valid JSON", path));
  return j;
}

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model under a precision policy and a loss scaler");
  auto c = std::make_shared<mpsim::train::TrainConfig>();
  auto out = std::make_shared<std::string>(), resume = std::make_shared<std::string>();
  auto hist = std::make_shared<std::string>(), scaler_state = std::make_shared<std::string>();
  // Parsed once, here (TrainConfig holds the parsed policy and scaler).
  auto policy = std::make_shared<std::string>("fp32"), scaler = std::make_shared<std::string>("none");
  c->optimizer.lr = 0;
  cmd->add_option("--model", c->model, "ssd | lstm")->required();
  cmd->add_option("--policy", *policy,
                  "fp32 | mixed-fp16 | mixed-bf16 | pure-fp16 | custom:KEY=FMT,... | a scaling recipe "
                  "RECIPE[:KEY=VALUE,...] (docs/recipes.md: fp8-tensorwise-delayed, mxfp8, nvfp4, ...)")
      ->capture_default_str();
  cmd->add_option("--scaler", *scaler,
                  "none | static:S | dynamic | hysteresis[:megatron|:deepspeed], optionally ,key=value "
                  "(init_scale, growth_factor, backoff_factor, growth_interval, hysteresis, min_scale)")
      ->capture_default_str();
  cmd->add_option("--scaler-state", *scaler_state,
                  "start the dynamic scaler from a torch.amp.GradScaler.state_dict() saved as JSON "
                  "(json.dump(scaler.state_dict(), f)); replaces --scaler");
  cmd->add_option("--optimizer", c->optimizer.name, "sgd | adamw (default: the model's)");
  cmd->add_option("--lr", c->optimizer.lr, "learning rate (default: the model's)");
  cmd->add_option("--momentum", c->optimizer.momentum, "SGD momentum (default: the model's)");
  cmd->add_option("--weight-decay", c->optimizer.weight_decay, "weight decay, AdamW: decoupled (default: the model's)");
  cmd->add_option("--steps", c->steps, "optimiser steps, in all also when resuming (default: the model's)");
  cmd->add_option("--loss-divisor-log2", c->loss_divisor_log2,
                  "experiment: gradients inside the network 2^N times smaller, undone at unscaling (default 0; "
                  "see lib/mpsim/models/README.md)")
      ->capture_default_str();
  cmd->add_option("--seed", c->seed, "seed of the weights and the data")->capture_default_str();
  cmd->add_option("--accumulate", c->accumulate, "micro-batches per step (gradient accumulation)")
      ->capture_default_str();
  cmd->add_option("--clip-norm", c->clip_norm, "clip the global gradient norm after unscaling (0: off)")
      ->capture_default_str();
  cmd->add_option("--eval-every", c->eval_every, "evaluate the metric every N steps (0: steps/10)");
  cmd->add_option("--out", *out, "output folder")->required();
  auto force = std::make_shared<bool>(false);
  cmd->add_flag("--force", *force,
                "an --out that holds a previous run: remove that run's files (run.json, steps.csv, "
                "checkpoint.safetensors, hist/, grads/) instead of refusing");
  cmd->add_option("--resume", *resume, "continue from this checkpoint (same model, policy, scaler, optimiser)");
  cmd->add_option("--checkpoint-every", c->checkpoint_every,
                  "write checkpoint.safetensors every N steps (0: at the end)");
  cmd->add_option("--threads", c->threads, "threads (results do not depend on it)")->capture_default_str();
  cmd->add_option("--hist-steps", *hist, "steps that write gradient histograms, e.g. 1,100,500 (default: first, last)");
  cmd->add_flag("--dump-grads", c->dump_grads,
                "at the histogram steps also write the unscaled gradients, grads/step_NNNNNN.safetensors");
  cmd->add_option("--corpus", c->model_config.corpus_path, "lstm: train on this UTF-8 text file");
  cmd->add_option("--vocab", c->model_config.vocab,
                  "lstm: tokens of the generated language, 20..262144 (default 32; other sizes: Zipf words)");
  cmd->add_option("--zipf", c->model_config.zipf, "lstm: Zipf exponent of a --vocab other than 32 (default 1)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--batch", c->model_config.batch, "batch size (0: the model's default)");
  cmd->add_option("--size", c->model_config.size, "model width (0: the model's default)");
  cmd->callback([cmd, c, out, resume, hist, scaler_state, force, policy, scaler] {
    mpsim::train::TrainConfig config = *c;
    config.policy = *policy;
    // NaN stands for "the model's" inside TrainConfig; a number given on the command line must be finite.
    for (const auto& [opt, value] : {std::pair<const char*, double>{"--lr", config.optimizer.lr},
                                     {"--momentum", config.optimizer.momentum},
                                     {"--weight-decay", config.optimizer.weight_decay}})
      if (cmd->count(opt) > 0 && !std::isfinite(value))
        throw mpsim::Error(fmt::format("{} {}: must be a finite number", opt, value));
    if (!scaler_state->empty()) {
      if (cmd->count("--scaler") > 0)
        throw mpsim::Error("--scaler-state gives the scaler (dynamic, with the state's parameters): drop --scaler");
      config.scaler =
          mpsim::train::ParsedScaler(mpsim::train::scaler_from_torch_state(read_json(*scaler_state), *scaler_state));
    } else {
      config.scaler = *scaler;
    }
    config.out = *out;
    config.resume = *resume;
    config.previous_run =
        *force ? mpsim::train::TrainConfig::PreviousRun::replace : mpsim::train::TrainConfig::PreviousRun::refuse;
    if (!hist->empty()) config.hist_steps = parse_steps_list(*hist);
    // Drawn only on a terminal (io/progress.hpp); the step count is known once the run has started.
    std::optional<mpsim::io::ProgressBar> bar;
    const mpsim::train::Progress progress = [&bar, &config](int step, int total, double loss, double scale) {
      if (!bar)
        bar.emplace("train " + config.model, static_cast<std::uint64_t>(total), mpsim::io::ProgressBar::Unit::steps);
      bar->set_note(fmt::format("loss {:.4g} scale {:g}", loss, scale));
      bar->advance(static_cast<std::uint64_t>(step) - std::min<std::uint64_t>(bar->done(), step));
    };
    const auto s = mpsim::train::run_training(config, mpsim::nn::make_model, progress);
    if (bar) bar->finish();
    fmt::print(
        "{} {} {}: {} steps, final loss {:.6g}, {} {:.6g}, skipped {}, activation gradients lost "
        "{:.3g}%{}\n",
        config.model, config.policy.spec, config.scaler.spec, s.steps_done, s.final_loss, s.final_metric.name,
        s.final_metric.value, s.skipped_steps, 100 * s.act_grad_lost_fraction(), s.diverged ? ", DIVERGED" : "");
    fmt::print("wrote {}/run.json, steps.csv, hist/, {}checkpoint.safetensors\n", config.out.string(),
               config.dump_grads ? "grads/, " : "");
  });
}

const bool registered = mpsim::cli::register_command("train", setup);

}  // namespace
