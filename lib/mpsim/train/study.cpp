#include "mpsim/train/study.hpp"

#include <fmt/core.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <numeric>

#include "mpsim/error.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/parallel.hpp"
#include "mpsim/version.hpp"

namespace mpsim::train {

namespace {

// The verdict rule, stated once here and printed into summary.md.
constexpr double kSpreadMultiple = 2.0;   // how many of fp32's seed standard deviations count as noise
constexpr double kRelativeFloor = 0.01;   // plus 1% of |fp32 mean|, so zero-spread runs are not judged on bits
constexpr const char* kRule =
    "Each configuration is trained with the same seeds as fp32. Let m be the mean of the final metric over the "
    "seeds, m0 and s0 fp32's mean and sample standard deviation. A configuration is **diverged** if any seed "
    "ended with non-finite master weights, a non-finite final loss or a non-finite final metric. Otherwise it "
    "**matches fp32** if its mean is worse than fp32's by at most 2 x s0 + 0.01 x |m0| (fp32's seed spread, "
    "plus 1% of fp32's value so that runs that are bit-identical to fp32 are not judged on noise), and is "
    "**degraded** if it is worse by more. \"Worse\" follows the metric's direction (mAP: lower is worse; bits per "
    "token: higher is worse); a configuration better than fp32 matches it. The configuration's own spread does "
    "not widen the band: a scaler that makes some seeds fail is not excused by the failing seeds.";

std::string folder_name(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.') out += ch;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

// runs/<this>/seed<k>: policy, scaler and (when set) the clipping threshold.
std::string run_folder(const StudyEntry& e) {
  return folder_name(e.policy + "_" + e.scaler + (e.clip_norm > 0 ? fmt::format("_clip{}", e.clip_norm) : ""));
}

struct RunResult {
  TrainSummary summary;
  std::string error;
};

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double sample_std(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

// Two-sided 95 % quantile of Student's t with `dof` degrees of freedom (standard tables, e.g. NIST/SEMATECH
// e-Handbook 1.3.6.7.2), for the interval mean ± t * sd / sqrt(n).
double t_quantile_975(int dof) {
  static constexpr double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                     2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                     2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (dof < 1) return std::nan("");
  return dof <= 30 ? table[dof - 1] : 1.960;
}

std::string csv_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);
}

std::string csv_text(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char ch : s) out += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return out + "\"";
}

// A run counts as diverged if its master weights or loss went non-finite, or its final metric is.
bool run_diverged(const TrainSummary& s) {
  return s.diverged || !std::isfinite(s.final_metric.value) || !std::isfinite(s.final_loss);
}

nlohmann::json finite_or_string(double v) {
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

std::string pretty_scale(double s) {
  const int e = std::ilogb(s);
  if (s == std::ldexp(1.0, e) && e >= 4) return fmt::format("{} (2^{})", s, e);
  return fmt::format("{}", s);
}

}  // namespace

std::vector<double> study_static_scales(std::string_view model) {
  (void)model;
  // The sweep 2^2, 2^4, ..., 2^24 (with "no scaling" as 2^0): from where fp16 loses small gradients to
  // beyond where the largest gradients overflow fp16's 65504.
  std::vector<double> scales;
  for (int k = 2; k <= 24; k += 2) scales.push_back(std::ldexp(1.0, k));
  return scales;
}

int study_growth_interval(int steps) { return std::max(1, steps / 10); }

std::vector<StudyEntry> study_grid(const StudyConfig& config, int steps, const nn::TrainHints& hints) {
  const std::string interval = fmt::format(",growth_interval={}", study_growth_interval(steps));
  std::vector<StudyEntry> grid;
  grid.push_back({"fp32", "fp32", "none"});
  grid.push_back({"mixed-bf16, no scaling", "mixed-bf16", "none"});
  grid.push_back({"mixed-fp16, no scaling", "mixed-fp16", "none"});
  const auto scales = config.static_scales.empty() ? study_static_scales(config.model) : config.static_scales;
  for (double s : scales)
    grid.push_back({fmt::format("mixed-fp16, static {}", s), "mixed-fp16", fmt::format("static:{}", s), s});
  grid.push_back({"mixed-fp16, dynamic (GradScaler)", "mixed-fp16", "dynamic" + interval});
  grid.push_back({"mixed-fp16, hysteresis (Megatron-LM)", "mixed-fp16", "hysteresis:megatron" + interval});
  grid.push_back({"mixed-fp16, hysteresis (DeepSpeed)", "mixed-fp16", "hysteresis:deepspeed" + interval});
  if (hints.clip_norm > 0)
    grid.push_back({fmt::format("mixed-fp16, dynamic, clip-norm {}", hints.clip_norm), "mixed-fp16",
                     "dynamic" + interval, 0, hints.clip_norm});
  grid.push_back({"mixed-fp16, fp16 accumulation, dynamic", "mixed-fp16-acc16", "dynamic" + interval});
  grid.push_back({"pure-fp16 (no master copy), dynamic", "pure-fp16", "dynamic" + interval});
  grid.push_back({"pure-fp16-sr (no master copy, stochastic update), dynamic", "pure-fp16-sr", "dynamic" + interval});
  return grid;
}

nlohmann::json run_study(const StudyConfig& config, const ModelFactory& factory, const StudyProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  if (config.seeds < 1) throw Error(fmt::format("--seeds {}: must be >= 1", config.seeds));
  if (config.jobs < 1) throw Error(fmt::format("--jobs {}: must be >= 1", config.jobs));
  if (config.out.empty()) throw Error("--out: an output folder is required");
  for (double s : config.static_scales)
    if (!(std::isfinite(s) && s > 0)) throw Error(fmt::format("static scale {}: must be finite and > 0", s));
  if (config.steps < 0) throw Error(fmt::format("--steps {}: must be >= 1", config.steps));
  // The model is built once first: a bad name or corpus fails here, before anything is written, and
  // its hints give the default run length.
  const nn::TrainHints hints = factory(config.model, config.model_config, 1)->hints();
  const int steps = config.steps > 0 ? config.steps : hints.steps;
  const auto grid = study_grid(config, steps, hints);

  // Every run's config is checked, and the model built once, before anything is written.
  std::vector<TrainConfig> runs;
  for (std::size_t g = 0; g < grid.size(); ++g)
    for (int seed = 1; seed <= config.seeds; ++seed) {
      TrainConfig t;
      t.model = config.model;
      t.model_config = config.model_config;
      t.policy = grid[g].policy;
      t.scaler = grid[g].scaler;
      t.steps = steps;  // optimiser and learning rate: the model's (nn::TrainHints)
      t.eval_every = std::max(1, steps / 4);  // evaluations are the expensive part of a short run
      t.seed = static_cast<std::uint64_t>(seed);
      t.loss_divisor_log2 = config.loss_divisor_log2;
      t.clip_norm = grid[g].clip_norm;
      t.out = config.out / "runs" / run_folder(grid[g]) / fmt::format("seed{}", seed);
      validate(t);
      runs.push_back(t);
    }

  std::vector<RunResult> results(runs.size());
  std::atomic<std::size_t> next{0};
  std::atomic<int> done{0};
  std::mutex progress_mutex;
  // Runs are taken from a shared counter (their lengths differ); each writes its own results[i], so the
  // study does not depend on the number of jobs.
  auto worker = [&](int) {
    for (std::size_t i; (i = next.fetch_add(1)) < runs.size();) {
      try {
        results[i].summary = run_training(runs[i], factory);
      } catch (const std::exception& e) {
        results[i].error = e.what();
      }
      const int d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress(d, static_cast<int>(runs.size()), grid[i / config.seeds].label, static_cast<int>(i % config.seeds) + 1);
      }
    }
  };
  run_workers(std::min<int>(config.jobs, static_cast<int>(runs.size())), "study", worker);
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (!results[i].error.empty()) throw Error(fmt::format("study run {}: {}", runs[i].out.string(), results[i].error));

  // Summaries per configuration.
  struct Row {
    std::vector<double> metric, loss, lost_pct, skipped, swallowed_pct;
    int diverged = 0;
    double m = 0, s = 0;
  };
  std::vector<Row> rows(grid.size());
  std::string metric_name;
  bool higher_is_better = true;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& s = results[i].summary;
    Row& r = rows[i / config.seeds];
    r.metric.push_back(s.final_metric.value);
    r.loss.push_back(s.final_loss);
    r.lost_pct.push_back(100.0 * s.act_grad_lost_fraction());
    r.skipped.push_back(s.skipped_steps);
    r.swallowed_pct.push_back(100.0 * s.swallowed_fraction());
    if (run_diverged(s)) r.diverged += 1;
    metric_name = s.final_metric.name;
    higher_is_better = s.final_metric.higher_is_better;
  }
  for (auto& r : rows) {
    r.m = mean(r.metric);
    r.s = sample_std(r.metric);
  }
  const Row& fp32 = rows[0];

  nlohmann::json out_rows = nlohmann::json::array();
  std::string csv =
      "configuration,policy,scaler,log2_static_scale,metric,higher_is_better,seeds,metric_mean,metric_sd,ci95_low,"
      "ci95_high,delta_vs_fp32,tolerance,diverged_seeds,activation_grad_lost_pct,updates_swallowed_pct,"
      "skipped_steps_mean,verdict,runs\n";
  std::string seeds_csv = "configuration,runs,seed,final_metric,final_loss,diverged,activation_grad_lost_pct,"
                          "updates_swallowed_pct,skipped_steps\n";
  for (std::size_t i = 0; i < runs.size(); ++i) {
    const auto& s = results[i].summary;
    const StudyEntry& e = grid[i / config.seeds];
    seeds_csv += fmt::format("{},{},{},{},{},{},{},{},{}\n", csv_text(e.label),
                             run_folder(e), runs[i].seed, csv_number(s.final_metric.value),
                             csv_number(s.final_loss), run_diverged(s) ? 1 : 0,
                             csv_number(100.0 * s.act_grad_lost_fraction()), csv_number(100.0 * s.swallowed_fraction()),
                             s.skipped_steps);
  }
  std::string md;
  md += fmt::format("# Loss-scaling study: {}\n\n", config.model);
  md += fmt::format("{} steps per run, seeds 1..{}, default optimiser and learning rate of the model; metric: {} "
                    "({} is better); {}. Wall time {:.0f} s.\n\n",
                    steps, config.seeds, metric_name, higher_is_better ? "higher" : "lower",
                    config.loss_divisor_log2 == 0
                        ? std::string("the model's own loss (no divisor)")
                        : fmt::format("EXPERIMENT: every gradient inside the network 2^{} times smaller "
                                      "(--loss-divisor-log2 {}, undone at unscaling)",
                                      config.loss_divisor_log2, config.loss_divisor_log2),
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  md += "| configuration | policy | scaler | final metric (mean ± sd) | 95% interval | vs fp32 | activation grads "
        "lost | skipped steps | updates swallowed | verdict |\n";
  md += "|---|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t g = 0; g < grid.size(); ++g) {
    const Row& r = rows[g];
    const double delta = r.m - fp32.m;
    const double worse_by = higher_is_better ? -delta : delta;
    const double band = kSpreadMultiple * fp32.s + kRelativeFloor * std::abs(fp32.m);
    std::string verdict;
    if (r.diverged > 0) verdict = "diverged";
    else if (std::isfinite(worse_by) && worse_by <= band) verdict = "matches fp32";
    else verdict = "degraded";
    nlohmann::json per_seed = nlohmann::json::array();
    for (double v : r.metric) per_seed.push_back(finite_or_string(v));
    const double half_width = t_quantile_975(static_cast<int>(r.metric.size()) - 1) * r.s /
                              std::sqrt(static_cast<double>(r.metric.size()));
    const std::string log2_scale =
        grid[g].static_scale > 0 ? csv_number(std::log2(grid[g].static_scale)) : std::string();
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_text(grid[g].label),
                       grid[g].policy, csv_text(grid[g].scaler), log2_scale, metric_name, higher_is_better ? 1 : 0,
                       r.metric.size(), csv_number(r.m), csv_number(r.s), csv_number(r.m - half_width),
                       csv_number(r.m + half_width), csv_number(delta), csv_number(band), r.diverged,
                       csv_number(mean(r.lost_pct)), csv_number(mean(r.swallowed_pct)), csv_number(mean(r.skipped)),
                       verdict, run_folder(grid[g]));
    out_rows.push_back({{"configuration", grid[g].label},
                        {"policy", grid[g].policy},
                        {"scaler", grid[g].scaler},
                        {"metric", metric_name},
                        {"higher_is_better", higher_is_better},
                        {"metric_mean", finite_or_string(r.m)},
                        {"metric_sd", finite_or_string(r.s)},
                        {"metric_ci95", {finite_or_string(r.m - half_width), finite_or_string(r.m + half_width)}},
                        {"metric_per_seed", per_seed},
                        {"delta_vs_fp32", finite_or_string(delta)},
                        {"tolerance", finite_or_string(band)},
                        {"final_loss_mean", finite_or_string(mean(r.loss))},
                        {"activation_grad_lost_pct_mean", mean(r.lost_pct)},
                        {"skipped_steps_mean", mean(r.skipped)},
                        {"updates_swallowed_pct_mean", mean(r.swallowed_pct)},
                        {"skipped_steps_per_seed", r.skipped},
                        {"diverged_seeds", r.diverged},
                        {"verdict", verdict},
                        {"runs", run_folder(grid[g])}});
    md += fmt::format("| {} | {} | {}{} | {:.4f} ± {:.4f} | [{:.4f}, {:.4f}] | {:+.4f} | {:.3g}% | {:.1f} | {:.3g}% | {} |\n",
                      grid[g].label, grid[g].policy, grid[g].scaler,
                      grid[g].clip_norm > 0 ? fmt::format(", clip {}", grid[g].clip_norm) : "", r.m, r.s,
                      r.m - half_width, r.m + half_width, delta, mean(r.lost_pct), mean(r.skipped),
                      mean(r.swallowed_pct), verdict);
  }
  md += "\n## Verdict rule\n\n";
  md += kRule;
  md += "\n\n## Columns\n\n"
        "- *activation grads lost*: of the non-zero finite activation gradients that reached a rounding site, the "
        "share the policy's format flushed to zero, over all steps and seeds (0 where the policy does not round "
        "them, as fp32).\n"
        "- *skipped steps*: optimiser steps skipped because the unscaled gradients held inf/NaN (mean over seeds).\n"
        "- *95% interval*: mean ± t(0.975, seeds - 1) x sd / sqrt(seeds), Student's t.\n"
        "- *updates swallowed*: of the weight elements whose update was non-zero, the share the stored weight did "
        "not take (below half its spacing), over all steps, mean over seeds; the fp32 master weights' own "
        "share for the mixed policies, the fp16 weights' for pure-fp16.\n"
        "- Static scales: " ;
  {
    const auto scales = config.static_scales.empty() ? study_static_scales(config.model) : config.static_scales;
    for (std::size_t i = 0; i < scales.size(); ++i) md += (i ? ", " : "") + pretty_scale(scales[i]);
  }
  md += fmt::format(". The dynamic scalers start at 2^16 (GradScaler's default), back off on overflow and grow "
                    "after {} clean steps (a tenth of the run; GradScaler's default 2000 is longer than the run).\n",
                    study_growth_interval(steps));
  md += "\nEach run's steps.csv, run.json and gradient histograms are under runs/<policy>_<scaler>/seed<k>/.\n";

  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json summary = {{"schema", "mpsim-study-1"},
                            {"mpsim_version", kVersion},
                            {"model", config.model},
                            {"steps", steps},
                            {"seeds", config.seeds},
                            {"loss_divisor_log2", config.loss_divisor_log2},
                            {"growth_interval", study_growth_interval(steps)},
                            {"metric", metric_name},
                            {"higher_is_better", higher_is_better},
                            {"rule", kRule},
                            {"rows", out_rows},
                            {"wall_seconds", wall}};
  io::write_text_file(config.out / "summary.json", summary.dump(2) + "\n");
  io::write_text_file(config.out / "summary.md", md);
  io::write_text_file(config.out / "summary.csv", csv);
  io::write_text_file(config.out / "seeds.csv", seeds_csv);
  return summary;
}

}  // namespace mpsim::train
