// The loss-scaling study: one model trained under a grid of precision policies and loss scalers, three
// seeds each, summarised against fp32 (DESIGN.md; issue 6 "the study shows the phenomenon honestly").
//
// Outputs under the study folder:
//   runs/<config>/seed<k>/   each run's run.json, steps.csv, hist/, checkpoint.safetensors
//   summary.json             one row per configuration (see StudyRow), the rule, the wall time
//   summary.md               the same as a table, with the verdict rule written out
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
  int seeds = 3;
  int jobs = 2;                   // runs in parallel (each run single-threaded; results do not depend on it)
  std::vector<double> static_scales;  // empty = study_static_scales(model)
  std::filesystem::path out;
};

struct StudyEntry {
  std::string label;   // "mixed-fp16 + static:128"
  std::string policy;
  std::string scaler;
};

std::vector<double> study_static_scales(std::string_view model);
// The grid: fp32, mixed-fp16 without scaling, static scales, dynamic, hysteresis (Megatron-LM variant),
// mixed-bf16, pure-fp16 (with the dynamic scaler).
std::vector<StudyEntry> study_grid(const StudyConfig& config);

// Called when a run finishes: (runs finished, runs in all, the run's label and seed).
using StudyProgress = std::function<void(int done, int total, const std::string& label, int seed)>;

// Runs the grid and writes the outputs; returns summary.json's content.
nlohmann::json run_study(const StudyConfig& config, const ModelFactory& factory, const StudyProgress& progress = {});

}  // namespace mpsim::train
