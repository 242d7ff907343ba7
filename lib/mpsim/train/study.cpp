#include "mpsim/train/study.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <atomic>
#include <boost/math/distributions/students_t.hpp>
#include <chrono>
#include <cmath>
#include <exception>
#include <mutex>
#include <numeric>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/parallel.hpp"
#include "mpsim/version.hpp"

namespace mpsim::train {

namespace {

// The verdict rule, stated once here and printed into summary.md and summary.json.
constexpr double kFamilyLevel = 0.95;  // the simultaneous coverage of all rows' intervals (Bonferroni)
constexpr const char* kRule =
    "Every configuration is trained with the same seeds as fp32 (the same data and the same initial weights), "
    "so it is compared with fp32 seed by seed: d_s = metric_s - fp32 metric_s for s = 1..n. The interval is "
    "mean(d) +- t x sd(d) / sqrt(n), Student's t with n - 1 degrees of freedom on the paired differences "
    "(which assumes the differences are roughly normal; with 5 seeds nothing better is checkable). Each row's "
    "interval is at level 1 - 0.05 / m, m the number of rows compared with fp32 (Bonferroni), so that all m "
    "intervals hold together with probability at least 95 %: a table of m verdicts is then wrong anywhere "
    "with at most 5 % probability, at the price of wider intervals (the plain 95 % interval of each row is "
    "reported beside it). The tolerance is {} % of fp32's mean final metric, a practical margin chosen before "
    "the runs, not estimated from them. A configuration is **diverged** if any seed ended with non-finite "
    "master weights, a non-finite final loss or a non-finite final metric. Otherwise it **matches fp32** if the "
    "interval lies inside +-tolerance, is **degraded** if it lies entirely beyond the tolerance on the worse "
    "side, **better than fp32** if entirely beyond it on the better side, and **inconclusive** if it straddles "
    "+-tolerance (more seeds would decide). \"Worse\" follows the metric's direction (mAP: lower is worse; "
    "bits per token: higher is worse).";

std::string folder_name(const std::string& s) {
  std::string out;
  for (char ch : s) {
    if (std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '.') out += ch;
    else if (!out.empty() && out.back() != '_') out += '_';
  }
  while (!out.empty() && out.back() == '_') out.pop_back();
  return out;
}

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

double json_number(const nlohmann::json& v) {
  if (v.is_number()) return v.get<double>();
  const std::string s = v.get<std::string>();
  return s == "inf" ? INFINITY : s == "-inf" ? -INFINITY : std::nan("");
}

std::string pretty_scale(double s) {
  const int e = std::ilogb(s);
  if (s == std::ldexp(1.0, e) && e >= 4) return fmt::format("{} (2^{})", s, e);
  return fmt::format("{}", s);
}

}  // namespace

std::string study_run_folder(const StudyEntry& e) {
  return folder_name(e.policy + "_" + e.scaler + (e.clip_norm > 0 ? fmt::format("_clip{}", e.clip_norm) : ""));
}

double student_t_quantile(double p, int dof) {
  if (dof < 1 || !(p > 0 && p < 1)) return std::nan("");
  return boost::math::quantile(boost::math::students_t_distribution<double>(dof), p);
}

PairedDifference paired_difference(const std::vector<double>& row, const std::vector<double>& fp32, int comparisons) {
  if (row.size() != fp32.size())
    throw Error(fmt::format("paired_difference: {} seeds against fp32's {}", row.size(), fp32.size()));
  std::vector<double> d(row.size());
  for (std::size_t i = 0; i < d.size(); ++i) d[i] = row[i] - fp32[i];
  PairedDifference p;
  p.n = static_cast<int>(d.size());
  p.mean = mean(d);
  p.sd = p.n > 1 ? sample_std(d) : std::nan("");
  p.level = 1 - (1 - kFamilyLevel) / std::max(1, comparisons);
  const double se = p.sd / std::sqrt(static_cast<double>(p.n));
  const double h95 = student_t_quantile(0.975, p.n - 1) * se;
  const double h = student_t_quantile(1 - (1 - p.level) / 2, p.n - 1) * se;
  p.ci95_low = p.mean - h95;
  p.ci95_high = p.mean + h95;
  p.ci_low = p.mean - h;
  p.ci_high = p.mean + h;
  return p;
}

std::string paired_verdict(const PairedDifference& d, double tolerance, bool higher_is_better, int diverged_seeds) {
  if (diverged_seeds > 0) return "diverged";
  // The interval of "worse by" (positive = worse than fp32).
  const double lo = higher_is_better ? -d.ci_high : d.ci_low;
  const double hi = higher_is_better ? -d.ci_low : d.ci_high;
  if (!(std::isfinite(lo) && std::isfinite(hi))) return "inconclusive";
  if (lo >= -tolerance && hi <= tolerance) return "matches fp32";
  if (lo > tolerance) return "degraded";
  if (hi < -tolerance) return "better than fp32";
  return "inconclusive";
}

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
  if (config.grid == "recipes") {
    // Each recipe scales its own operands (docs/recipes.md); no loss scaler, as TE and torchao train fp8.
    // fp8-none is the same formats with every scale 1: what the scaling rescues.
    grid.push_back({"mixed-fp16, dynamic (GradScaler)", "mixed-fp16", "dynamic" + interval});
    for (const char* spec : {"fp8-none", "fp8-tensorwise-delayed", "fp8-tensorwise-current", "fp8-rowwise",
                             "fp8-rowwise-gw-hp", "fp8-blockwise", "mxfp8", "mxfp8:scaling_mode=rceil", "mxfp6_e3m2",
                             "mxfp4", "nvfp4", "nvfp4:rht=0,sr=0,2d=0"})
      grid.push_back({spec, spec, "none"});
    grid.push_back({"mixed-fp16 on H100's matrix unit, dynamic", "mixed-fp16:mma=h100", "dynamic" + interval});
    return grid;
  }
  if (config.grid != "loss-scaling")
    throw Error(fmt::format("study '{}': unknown (expected loss-scaling or recipes)", config.grid));
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

std::vector<StudyEntry> select_grid(const std::vector<StudyEntry>& grid, const std::vector<std::string>& only) {
  if (only.empty()) return grid;
  std::vector<std::string> unknown;
  for (const auto& name : only)
    if (std::none_of(grid.begin(), grid.end(), [&](const StudyEntry& e) { return study_run_folder(e) == name; }))
      unknown.push_back(name);
  if (!unknown.empty()) {
    std::string known;
    for (const auto& e : grid) known += (known.empty() ? "" : ", ") + study_run_folder(e);
    std::string names;
    for (const auto& u : unknown) names += (names.empty() ? "'" : ", '") + u + "'";
    throw FieldError("only", "", fmt::format("unknown configuration {}; the grid's are: {}", names, known));
  }
  std::vector<StudyEntry> out;
  for (const auto& e : grid)
    if (&e == &grid.front() || std::find(only.begin(), only.end(), study_run_folder(e)) != only.end()) out.push_back(e);
  return out;
}

StudyPlan plan_study(const StudyConfig& config, const ModelFactory& factory) {
  if (config.seeds < 1) throw FieldError("seeds", std::to_string(config.seeds), "must be >= 1");
  if (config.jobs < 1) throw FieldError("jobs", std::to_string(config.jobs), "must be >= 1");
  if (config.out.empty()) throw FieldError("out", "", "an output folder is required");
  if (std::filesystem::exists(config.out) && !std::filesystem::is_directory(config.out))
    throw FieldError("out", config.out.string(), "exists and is not a folder");
  if (!config.force) {
    // As `mpsim train --out` (trainer.cpp, validate): an earlier study's runs would mix with this one's.
    std::string found;
    for (const char* name : kPreviousStudyFiles)
      if (std::error_code ec; std::filesystem::exists(config.out / name, ec))
        found += (found.empty() ? "" : ", ") + std::string(name);
    if (!found.empty())
      throw FieldError("out", config.out.string(),
                       fmt::format("holds a previous study ({}); choose another folder, or replace that study's "
                                   "files ({{force}})",
                                   found),
                       {"force"});
  }
  for (double s : config.static_scales)
    if (!(std::isfinite(s) && s > 0))
      throw FieldError("static_scales", fmt::format("{}", s), "a static scale must be finite and > 0");
  if (config.steps < 0) throw FieldError("steps", std::to_string(config.steps), "must be >= 1");
  if (config.accumulate < 1) throw FieldError("accumulate", std::to_string(config.accumulate), "must be >= 1");
  if (!(std::isfinite(config.tolerance_pct) && config.tolerance_pct >= 0))
    throw FieldError("tolerance_pct", fmt::format("{}", config.tolerance_pct), "must be finite and >= 0");
  // The model is built once first: a bad name or corpus fails here, before anything is written, and
  // its hints give the default run length.
  const nn::TrainHints hints = factory(config.model, config.model_config, 1)->hints();
  StudyPlan plan;
  plan.steps = config.steps > 0 ? config.steps : hints.steps;
  plan.grid = select_grid(study_grid(config, plan.steps, hints), config.only);
  for (const auto& entry : plan.grid)
    for (int seed = 1; seed <= config.seeds; ++seed) {
      TrainConfig t;
      t.model = config.model;
      t.model_config = config.model_config;
      t.policy = entry.policy;
      t.scaler = entry.scaler;
      t.steps = plan.steps;                        // optimiser and learning rate: the model's (nn::TrainHints)
      t.eval_every = std::max(1, plan.steps / 4);  // evaluations are the expensive part of a short run
      t.seed = static_cast<std::uint64_t>(seed);
      t.accumulate = config.accumulate;
      t.loss_divisor_log2 = config.loss_divisor_log2;
      t.clip_norm = entry.clip_norm;
      t.out = config.out / "runs" / study_run_folder(entry) / fmt::format("seed{}", seed);
      validate(t);
      plan.runs.push_back(t);
    }
  return plan;
}

std::vector<TrainSummary> run_plan(const StudyConfig& config, const StudyPlan& plan, const ModelFactory& factory,
                                   const StudyProgress& progress) {
  if (config.force)
    for (const char* name : kPreviousStudyFiles)
      if (std::error_code ec; std::filesystem::remove_all(config.out / name, ec) == static_cast<std::uintmax_t>(-1))
        throw FieldError("out", config.out.string(),
                         fmt::format("cannot remove the previous study's {}: {}", name, ec.message()));
  const auto& runs = plan.runs;
  std::vector<TrainSummary> results(runs.size());
  std::vector<std::string> errors(runs.size());
  std::atomic<std::size_t> next{0};
  std::atomic<int> done{0};
  std::mutex progress_mutex;
  // Runs are taken from a shared counter (their lengths differ); each writes its own results[i], so the
  // study does not depend on the number of jobs.
  auto worker = [&](int) {
    for (std::size_t i; (i = next.fetch_add(1)) < runs.size();) {
      try {
        results[i] = run_training(runs[i], factory);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
      const int d = ++done;
      if (progress) {
        std::lock_guard<std::mutex> lock(progress_mutex);
        progress(d, static_cast<int>(runs.size()), plan.grid[i / config.seeds].label,
                 static_cast<int>(i % config.seeds) + 1);
      }
    }
  };
  run_workers(std::min<int>(config.jobs, static_cast<int>(runs.size())), "study", worker);
  for (std::size_t i = 0; i < runs.size(); ++i)
    if (!errors[i].empty()) throw Error(fmt::format("study run {}: {}", runs[i].out.string(), errors[i]));
  return results;
}

nlohmann::json summarise_study(const StudyConfig& config, const StudyPlan& plan,
                               const std::vector<TrainSummary>& results, double wall_seconds) {
  const auto& grid = plan.grid;
  struct Row {
    std::vector<double> metric, loss, lost_pct, l1_lost_pct, l2sq_lost_pct, cosine, push_down, lost_bias, skipped,
        swallowed_pct;
    int diverged = 0;
  };
  std::vector<Row> rows(grid.size());
  std::string metric_name;
  bool higher_is_better = true;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& s = results[i];
    Row& r = rows[i / config.seeds];
    r.metric.push_back(s.final_metric.value);
    r.loss.push_back(s.final_loss);
    r.lost_pct.push_back(100.0 * s.act_grad_lost_fraction());
    const auto mass = s.act_grad_mass.stats();
    r.l1_lost_pct.push_back(100.0 * mass.l1_lost);
    r.l2sq_lost_pct.push_back(100.0 * mass.l2sq_lost);
    r.cosine.push_back(mass.cosine);
    r.push_down.push_back(mass.push_down);
    r.lost_bias.push_back(mass.lost_bias);
    r.skipped.push_back(s.skipped_steps);
    r.swallowed_pct.push_back(100.0 * s.swallowed_fraction());
    if (run_diverged(s)) r.diverged += 1;
    metric_name = s.final_metric.name;
    higher_is_better = s.final_metric.higher_is_better;
  }
  const Row& fp32 = rows[0];
  const double fp32_mean = mean(fp32.metric);
  const double tolerance = config.tolerance_pct / 100.0 * std::abs(fp32_mean);
  const int comparisons = std::max<int>(1, static_cast<int>(grid.size()) - 1);

  nlohmann::json out_rows = nlohmann::json::array();
  for (std::size_t g = 0; g < grid.size(); ++g) {
    const Row& r = rows[g];
    const double m = mean(r.metric), sd = sample_std(r.metric);
    const double half = student_t_quantile(0.975, static_cast<int>(r.metric.size()) - 1) * sd /
                        std::sqrt(static_cast<double>(r.metric.size()));
    const PairedDifference d = paired_difference(r.metric, fp32.metric, comparisons);
    const std::string verdict =
        g == 0 ? std::string("reference") : paired_verdict(d, tolerance, higher_is_better, r.diverged);
    nlohmann::json per_seed = nlohmann::json::array(), cos = nlohmann::json::array();
    for (double v : r.metric) per_seed.push_back(finite_or_string(v));
    for (double v : r.cosine) cos.push_back(finite_or_string(v));
    out_rows.push_back({{"configuration", grid[g].label},
                        {"policy", grid[g].policy},
                        {"scaler", grid[g].scaler},
                        {"static_scale", grid[g].static_scale},
                        {"clip_norm", grid[g].clip_norm},
                        {"metric", metric_name},
                        {"higher_is_better", higher_is_better},
                        {"seeds", r.metric.size()},
                        {"metric_mean", finite_or_string(m)},
                        {"metric_sd", finite_or_string(sd)},
                        {"metric_ci95", {finite_or_string(m - half), finite_or_string(m + half)}},
                        {"metric_per_seed", per_seed},
                        {"delta_vs_fp32", finite_or_string(d.mean)},
                        {"paired_delta_sd", finite_or_string(d.sd)},
                        {"paired_ci95", {finite_or_string(d.ci95_low), finite_or_string(d.ci95_high)}},
                        {"paired_ci_level", d.level},
                        {"paired_ci", {finite_or_string(d.ci_low), finite_or_string(d.ci_high)}},
                        {"tolerance", finite_or_string(tolerance)},
                        {"final_loss_mean", finite_or_string(mean(r.loss))},
                        {"activation_grad_lost_pct_mean", mean(r.lost_pct)},
                        {"activation_grad_l1_lost_pct_mean", mean(r.l1_lost_pct)},
                        {"activation_grad_l2sq_lost_pct_mean", mean(r.l2sq_lost_pct)},
                        {"activation_grad_cosine_per_seed", cos},
                        {"activation_grad_push_down_mean", finite_or_string(mean(r.push_down))},
                        {"activation_grad_lost_bias_mean", finite_or_string(mean(r.lost_bias))},
                        {"skipped_steps_mean", mean(r.skipped)},
                        {"updates_swallowed_pct_mean", mean(r.swallowed_pct)},
                        {"skipped_steps_per_seed", r.skipped},
                        {"diverged_seeds", r.diverged},
                        {"verdict", verdict},
                        {"runs", study_run_folder(grid[g])}});
  }
  return {{"schema", "mpsim-study-2"},
          {"mpsim_version", kVersion},
          {"grid", config.grid},
          {"model", config.model},
          {"model_config",
           {{"batch", config.model_config.batch},
            {"size", config.model_config.size},
            {"vocab", config.model_config.vocab},
            {"zipf", finite_or_string(config.model_config.zipf)}}},
          {"steps", plan.steps},
          {"seeds", config.seeds},
          {"accumulate", config.accumulate},
          {"loss_divisor_log2", config.loss_divisor_log2},
          {"growth_interval", study_growth_interval(plan.steps)},
          {"only", config.only},
          {"metric", metric_name},
          {"higher_is_better", higher_is_better},
          {"tolerance_pct", config.tolerance_pct},
          {"comparisons", comparisons},
          {"family_level", kFamilyLevel},
          {"rule", fmt::format(fmt::runtime(kRule), config.tolerance_pct)},
          {"rows", out_rows},
          {"wall_seconds", wall_seconds}};
}

namespace {

std::string seeds_csv(const StudyConfig& config, const StudyPlan& plan, const std::vector<TrainSummary>& results) {
  std::string csv =
      "configuration,runs,seed,final_metric,final_loss,diverged,activation_grad_lost_pct,"
      "updates_swallowed_pct,skipped_steps,activation_grad_l1_lost_pct,activation_grad_l2sq_lost_pct,"
      "activation_grad_cosine,activation_grad_push_down,activation_grad_lost_bias\n";
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& s = results[i];
    const StudyEntry& e = plan.grid[i / config.seeds];
    const auto mass = s.act_grad_mass.stats();
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_text(e.label), study_run_folder(e),
                       plan.runs[i].seed, csv_number(s.final_metric.value), csv_number(s.final_loss),
                       run_diverged(s) ? 1 : 0, csv_number(100.0 * s.act_grad_lost_fraction()),
                       csv_number(100.0 * s.swallowed_fraction()), s.skipped_steps, csv_number(100.0 * mass.l1_lost),
                       csv_number(100.0 * mass.l2sq_lost), csv_number(mass.cosine), csv_number(mass.push_down),
                       csv_number(mass.lost_bias));
  }
  return csv;
}

std::string summary_csv(const StudyPlan& plan, const nlohmann::json& summary) {
  std::string csv =
      "configuration,policy,scaler,log2_static_scale,metric,higher_is_better,seeds,metric_mean,metric_sd,ci95_low,"
      "ci95_high,delta_vs_fp32,paired_delta_sd,paired_ci95_low,paired_ci95_high,paired_ci_level,paired_ci_low,"
      "paired_ci_high,tolerance,diverged_seeds,activation_grad_lost_pct,activation_grad_l1_lost_pct,"
      "activation_grad_l2sq_lost_pct,updates_swallowed_pct,skipped_steps_mean,verdict,runs,activation_grad_push_down,"
      "activation_grad_lost_bias\n";
  for (std::size_t g = 0; g < plan.grid.size(); ++g) {
    const auto& r = summary["rows"][g];
    auto n = [&](const nlohmann::json& v) { return csv_number(json_number(v)); };
    const std::string log2_scale =
        plan.grid[g].static_scale > 0 ? csv_number(std::log2(plan.grid[g].static_scale)) : std::string();
    csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n",
                       csv_text(plan.grid[g].label), csv_text(plan.grid[g].policy), csv_text(plan.grid[g].scaler),
                       log2_scale, r["metric"].get<std::string>(), r["higher_is_better"].get<bool>() ? 1 : 0,
                       r["seeds"].get<int>(), n(r["metric_mean"]), n(r["metric_sd"]), n(r["metric_ci95"][0]),
                       n(r["metric_ci95"][1]), n(r["delta_vs_fp32"]), n(r["paired_delta_sd"]), n(r["paired_ci95"][0]),
                       n(r["paired_ci95"][1]), n(r["paired_ci_level"]), n(r["paired_ci"][0]), n(r["paired_ci"][1]),
                       n(r["tolerance"]), r["diverged_seeds"].get<int>(), n(r["activation_grad_lost_pct_mean"]),
                       n(r["activation_grad_l1_lost_pct_mean"]), n(r["activation_grad_l2sq_lost_pct_mean"]),
                       n(r["updates_swallowed_pct_mean"]), n(r["skipped_steps_mean"]), r["verdict"].get<std::string>(),
                       r["runs"].get<std::string>(), n(r["activation_grad_push_down_mean"]),
                       n(r["activation_grad_lost_bias_mean"]));
  }
  return csv;
}

std::string summary_md(const StudyConfig& config, const StudyPlan& plan, const nlohmann::json& summary) {
  const bool higher = summary["higher_is_better"].get<bool>();
  std::string md =
      fmt::format("# {} study: {}\n\n", config.grid == "recipes" ? "Scaling-recipe" : "Loss-scaling", config.model);
  md += fmt::format(
      "{} steps per run{}, seeds 1..{}, default optimiser and learning rate of the model; metric: {} ({} is "
      "better); {}{}. Tolerance: {} % of fp32's mean = {:.4g}. Wall time {:.0f} s.\n\n",
      plan.steps,
      config.accumulate > 1 ? fmt::format(" of {} micro-batches each (loss / {} before each backward)",
                                          config.accumulate, config.accumulate)
                            : std::string(),
      config.seeds, summary["metric"].get<std::string>(), higher ? "higher" : "lower",
      config.loss_divisor_log2 == 0 ? std::string("the model's own loss (no divisor)")
                                    : fmt::format("EXPERIMENT: every gradient inside the network 2^{} times smaller "
                                                  "(--loss-divisor-log2 {}, undone at unscaling)",
                                                  config.loss_divisor_log2, config.loss_divisor_log2),
      config.only.empty() ? std::string() : "; a subset of the grid (--only)", config.tolerance_pct,
      json_number(summary["rows"][0]["tolerance"]), summary["wall_seconds"].get<double>());
  const double level = json_number(summary["rows"][0]["paired_ci_level"]);
  md += fmt::format(
      "| configuration | policy | scaler | final metric (mean ± sd) | vs fp32, seed by seed: mean [95% interval] | "
      "[{:.4g}% interval] | activation grads lost | Σ\\|g\\| lost | Σg² lost | lost pushing down | skipped steps | "
      "updates swallowed | verdict |\n",
      100 * level);
  md += "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (std::size_t g = 0; g < plan.grid.size(); ++g) {
    const auto& r = summary["rows"][g];
    const auto& e = plan.grid[g];
    auto v = [&](const char* key) { return json_number(r[key]); };
    md += fmt::format(
        "| {} | {} | {}{} | {:.4f} ± {:.4f} | {:+.4f} [{:+.4f}, {:+.4f}] | [{:+.4f}, {:+.4f}] | {:.3g}% | {:.3g}% | "
        "{:.3g}% | {} | {:.1f} | {:.3g}% | {} |\n",
        e.label, e.policy, e.scaler, e.clip_norm > 0 ? fmt::format(", clip {}", e.clip_norm) : "", v("metric_mean"),
        v("metric_sd"), v("delta_vs_fp32"), json_number(r["paired_ci95"][0]), json_number(r["paired_ci95"][1]),
        json_number(r["paired_ci"][0]), json_number(r["paired_ci"][1]), v("activation_grad_lost_pct_mean"),
        v("activation_grad_l1_lost_pct_mean"), v("activation_grad_l2sq_lost_pct_mean"),
        std::isnan(v("activation_grad_push_down_mean"))
            ? std::string("–")
            : fmt::format("{:.3g}%", 100 * v("activation_grad_push_down_mean")),
        v("skipped_steps_mean"), v("updates_swallowed_pct_mean"), r["verdict"].get<std::string>());
  }
  md += "\n## Verdict rule\n\n";
  md += summary["rule"].get<std::string>();
  md += fmt::format(
      "\n\nHere m = {} rows are compared with fp32, so each interval the verdict uses is at level "
      "1 - 0.05 / {} = {:.4g}.\n",
      summary["comparisons"].get<int>(), summary["comparisons"].get<int>(), level);
  md +=
      "\n## Columns\n\n"
      "- *activation grads lost*: of the non-zero finite activation gradients that reached a rounding site, the "
      "share the policy's format flushed to zero, over all steps and seeds (0 where the policy does not round "
      "them, as fp32).\n"
      "- *Σ\\|g\\| lost*, *Σg² lost*: the share of the activation gradients' sum of magnitudes and of their sum of "
      "squares that the format flushed to zero, over all steps and sites (lib/mpsim/analysis/mass_lost.hpp), "
      "mean over seeds; each run's steps.csv has them per step and site, with the cosine between the gradients "
      "before and after rounding. Under a scaling recipe the gradients between layers stay fp32 and these "
      "columns count the GEMMs' gradient operands (<layer>/dgrad_dy, <layer>/wgrad_dy) instead.\n"
      "- *lost pushing down*: of the flushed Σ\\|g\\|, the share whose gradient was positive, i.e. would have "
      "pushed its value (a logit, an activation) down; 50 % is a flush without bias, 100 % a one-sided one "
      "(mean over seeds; – where nothing was flushed).\n"
      "- *skipped steps*: optimiser steps skipped because the unscaled gradients held inf/NaN (mean over seeds).\n"
      "- *vs fp32, seed by seed*: the mean of metric - fp32 metric over the seeds, with the 95 % interval of that "
      "mean (Student's t on the paired differences), then the wider Bonferroni interval the verdict uses.\n"
      "- *updates swallowed*: of the weight elements whose update was non-zero, the share the stored weight did "
      "not take (below half its spacing), over all steps, mean over seeds; the fp32 master weights' own "
      "share for the mixed policies, the fp16 weights' for pure-fp16.\n"
      "- Static scales: ";
  {
    const auto scales = config.static_scales.empty() ? study_static_scales(config.model) : config.static_scales;
    for (std::size_t i = 0; i < scales.size(); ++i) md += (i ? ", " : "") + pretty_scale(scales[i]);
  }
  md += fmt::format(
      ". The dynamic scalers start at 2^16 (GradScaler's default), back off on overflow and grow "
      "after {} clean steps (a tenth of the run; GradScaler's default 2000 is longer than the run).\n",
      study_growth_interval(plan.steps));
  md += "\nEach run's steps.csv, run.json and gradient histograms are under runs/<policy>_<scaler>/seed<k>/.\n";
  return md;
}

}  // namespace

void write_study(const StudyConfig& config, const StudyPlan& plan, const std::vector<TrainSummary>& results,
                 const nlohmann::json& summary) {
  io::write_text_file(config.out / "summary.json", summary.dump(2) + "\n");
  io::write_text_file(config.out / "summary.md", summary_md(config, plan, summary));
  io::write_text_file(config.out / "summary.csv", summary_csv(plan, summary));
  io::write_text_file(config.out / "seeds.csv", seeds_csv(config, plan, results));
}

nlohmann::json run_study(const StudyConfig& config, const ModelFactory& factory, const StudyProgress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const StudyPlan plan = plan_study(config, factory);
  const auto results = run_plan(config, plan, factory, progress);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const nlohmann::json summary = summarise_study(config, plan, results, wall);
  write_study(config, plan, results, summary);
  return summary;
}

}  // namespace mpsim::train
