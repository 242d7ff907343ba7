// The loss-scaling study: one model trained under a grid of precision policies and loss scalers (with
// the loss-scale sweep), five seeds each by default, summarised against fp32 (DESIGN.md).
//
// Outputs under the study folder:
//   runs/<config>/seed<k>/   each run's run.json, steps.csv, hist/, checkpoint.safetensors
//   summary.json             one row per configuration (see StudyRow), the rule, the wall time
//   summary.md               the same as a table, with the verdict rule written out
//   summary.csv              one row per configuration: mean, sd and 95 % interval (Student's t) of the final
//                            metric over the seeds, log2 of the static scale (empty for other scalers), the
//                            tolerance, the verdict
//   seeds.csv                one row per run: configuration, seed, final metric and loss, diverged, shares
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpsim/train/trainer.hpp"

namespace mpsim::train {

struct StudyConfig {
  std::string model = "ssd";
  nn::ModelConfig model_config;
  int steps = 0;                  // 0 = the model's default (nn::TrainHints::steps)
  int seeds = 5;
  int jobs = 2;                   // runs in parallel (each run single-threaded; results do not depend on it)
  std::vector<double> static_scales;  // empty = study_static_scales(model)
  int loss_divisor_log2 = 0;      // TrainConfig::loss_divisor_log2 for every run (an experiment knob)
  std::filesystem::path out;
};

struct StudyEntry {
  std::string label;   // "mixed-fp16 + static:128"
  std::string policy;
  std::string scaler;
  double static_scale = 0;  // the scale of a static row (0 for the others)
  double clip_norm = 0;     // TrainConfig::clip_norm of the row's runs
};

std::vector<double> study_static_scales(std::string_view model);
// The growth interval of the dynamic scalers in a study of `steps` steps: steps / 10 (at least 1), so
// that a scaler that backed off can grow again some ten times within a run. GradScaler's default 2000
// is longer than the whole run and would leave the scale where its first overflows put it.
int study_growth_interval(int steps);
// The grid: fp32, mixed-bf16, mixed-fp16 without scaling, the static scales, dynamic (GradScaler),
// hysteresis (Megatron-LM and DeepSpeed variants), dynamic with the model's clip_norm (when it has one),
// mixed-fp16-acc16 (fp16 accumulation), pure-fp16 and pure-fp16-sr (no master copy), these three with
// the dynamic scaler; the dynamic kinds with
// study_growth_interval(steps).
std::vector<StudyEntry> study_grid(const StudyConfig& config, int steps, const nn::TrainHints& hints);

// Called when a run finishes: (runs finished, runs in all, the run's label and seed).
using StudyProgress = std::function<void(int done, int total, const std::string& label, int seed)>;

// Runs the grid and writes the outputs; returns summary.json's content.
nlohmann::json run_study(const StudyConfig& config, const ModelFactory& factory, const StudyProgress& progress = {});

}  // namespace mpsim::train
