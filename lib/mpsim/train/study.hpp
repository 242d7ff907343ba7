// The loss-scaling study: one model trained under a grid of precision policies and loss scalers (with
// the loss-scale sweep), five seeds each by default, summarised against fp32 (docs/design.md).
//
// Outputs under the study folder:
//   runs/<config>/seed<k>/   each run's run.json, steps.csv, hist/, checkpoint.safetensors
//   summary.json             one row per configuration (see StudyRow), the rule, the wall time
//   summary.md               the same as a table, with the verdict rule written out
//   summary.csv              one row per configuration: mean, sd and 95 % interval (Student's t) of the final
//                            metric over the seeds, log2 of the static scale (empty for other scalers), the
//                            paired difference to fp32 (seed by seed) with its 95 % and its Bonferroni
//                            (simultaneous) interval, the tolerance, the verdict
//   seeds.csv                one row per run: configuration, seed, final metric and loss, diverged, shares
//
// The work is split as plan (the grid and every run's config, checked before anything is written), run
// (the trainings, in parallel), summarise (the statistics and verdicts, from the runs' summaries) and
// write (the files).
#pragma once

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpsim/train/trainer.hpp"

namespace mpsim::train {

struct StudyConfig {
  // Which grid (study_grid): "loss-scaling" (fp16 loss scaling, the scale sweep, bf16, pure fp16) or "recipes"
  // (the fp8 / fp4 scaling recipes beside fp32, bf16 and fp16 with and without loss scaling).
  std::string grid = "loss-scaling";
  std::string model = "ssd";
  nn::ModelConfig model_config;
  int steps = 0;  // 0 = the model's default (nn::TrainHints::steps)
  int seeds = 5;
  int jobs = 2;                       // runs in parallel (each run single-threaded; results do not depend on it)
  std::vector<double> static_scales;  // empty = study_static_scales(model)
  int loss_divisor_log2 = 0;          // TrainConfig::loss_divisor_log2 for every run (an experiment knob)
  int accumulate = 1;                 // TrainConfig::accumulate for every run: micro-batches per step, loss / N each
  // Run only these configurations, by run-folder name (study_run_folder); empty = the whole grid. fp32 is
  // always run: every row is compared with it seed by seed.
  std::vector<std::string> only;
  // The verdict's tolerance: a configuration matches fp32 when its paired difference lies within
  // +-tolerance_pct % of fp32's mean final metric.
  double tolerance_pct = 1.0;
  std::filesystem::path out;
  // An `out` that holds an earlier study's files (kPreviousStudyFiles) is refused by plan_study unless
  // `force`; with it, run_plan removes those files before the first run (nothing else in `out` is touched).
  bool force = false;
};

// The files and folders of a study in its output folder (what `force` removes; nothing else is).
inline constexpr const char* kPreviousStudyFiles[] = {"summary.json", "summary.md", "summary.csv", "seeds.csv", "runs"};

struct StudyEntry {
  std::string label;  // "mixed-fp16 + static:128"
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
// The rows are added in one place (study.cpp, study_grid); a new policy is one more line there.
// With config.grid == "recipes": fp32, mixed-bf16, mixed-fp16 without scaling and dynamic, every recipe of
// recipe::recipe_names (mxfp6 as e3m2 only) with its default options, mxfp8 with RCEIL scales, nvfp4 without
// its three techniques, and mixed-fp16 on H100's matrix unit (mma=h100), dynamic.
std::vector<StudyEntry> study_grid(const StudyConfig& config, int steps, const nn::TrainHints& hints);
// runs/<this>/seed<k>: the configuration's folder name (policy, scaler, clipping), which --only takes.
std::string study_run_folder(const StudyEntry& entry);
// The grid narrowed to config.only (fp32 first, then the named rows in grid order); mpsim::Error naming
// every unknown name and listing the known ones.
std::vector<StudyEntry> select_grid(const std::vector<StudyEntry>& grid, const std::vector<std::string>& only);

struct StudyPlan {
  int steps = 0;
  std::vector<StudyEntry> grid;   // fp32 first
  std::vector<TrainConfig> runs;  // grid-major: runs[g * seeds + (seed - 1)]
};
// The grid (after --only) and every run's config, each validated; nothing is written.
StudyPlan plan_study(const StudyConfig& config, const ModelFactory& factory);

// Paired statistics of one configuration against fp32 over seeds 1..n: d_s = metric_s - fp32_metric_s.
struct PairedDifference {
  int n = 0;
  double mean = 0, sd = 0;             // of d_s (sd: sample, n - 1)
  double ci95_low = 0, ci95_high = 0;  // mean +- t(0.975, n - 1) sd / sqrt(n)
  double level = 0.95;                 // the simultaneous interval's per-row level, 1 - 0.05 / comparisons
  double ci_low = 0, ci_high = 0;      // mean +- t(1 - (1 - level) / 2, n - 1) sd / sqrt(n)
};
PairedDifference paired_difference(const std::vector<double>& row, const std::vector<double>& fp32, int comparisons);
// Two-sided quantile of Student's t: the t with P(T <= t) = p, `dof` degrees of freedom (Boost.Math).
double student_t_quantile(double p, int dof);
// "matches fp32" (the simultaneous interval inside +-tolerance), "degraded" (worse beyond the tolerance),
// "better than fp32" (better beyond it), "inconclusive" (the interval straddles +-tolerance), or
// "diverged" (a seed diverged). The interval is of metric - fp32 metric; worse follows higher_is_better.
std::string paired_verdict(const PairedDifference& d, double tolerance, bool higher_is_better, int diverged_seeds);

// Called when a run finishes: (runs finished, runs in all, the run's label and seed).
using StudyProgress = std::function<void(int done, int total, const std::string& label, int seed)>;

// Runs the plan's trainings (config.jobs at a time); throws mpsim::Error naming the first run that failed.
std::vector<TrainSummary> run_plan(const StudyConfig& config, const StudyPlan& plan, const ModelFactory& factory,
                                   const StudyProgress& progress = {});
// summary.json's content from the runs' summaries.
nlohmann::json summarise_study(const StudyConfig& config, const StudyPlan& plan,
                               const std::vector<TrainSummary>& results, double wall_seconds);
// Writes summary.json, summary.md, summary.csv and seeds.csv.
void write_study(const StudyConfig& config, const StudyPlan& plan, const std::vector<TrainSummary>& results,
                 const nlohmann::json& summary);

// plan, run, summarise, write; returns summary.json's content.
nlohmann::json run_study(const StudyConfig& config, const ModelFactory& factory, const StudyProgress& progress = {});

}  // namespace mpsim::train
