// `mpsim study loss-scaling` (tools/mpsim/study.cpp, lib/mpsim/train/study.cpp) on a tiny grid: every configuration's
// paired difference to fp32, its Bonferroni interval and its verdict recomputed here from the runs' own
// steps.csv files by the rule summary.md states. With two seeds the interval's t has one degree of freedom,
// where Student's t is the Cauchy distribution: t(p, 1) = tan(pi (p - 1/2)), in closed form, so the check
// needs neither a table nor Boost.Math (which the library uses). Also: --only and --accumulate, and an
// unknown --only name refused before anything is written.
#include "catch_compat.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../io/test_files.hpp"
#include "run_mpsim.hpp"

using mpsim::test::quote;
using mpsim::test::run_mpsim;
using mpsim::test::ScratchDir;
namespace fs = std::filesystem;

namespace {

struct FinalRow {
  int step = 0;
  double loss = 0, metric = NAN;
};

// The last row of a steps.csv and the last metric in it (the metric column is empty between evaluations).
FinalRow final_row(const fs::path& csv) {
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);
  REQUIRE(line.rfind("step,loss,metric,", 0) == 0);
  FinalRow r;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string step, loss, metric;
    std::getline(ss, step, ',');
    std::getline(ss, loss, ',');
    std::getline(ss, metric, ',');
    r.step = std::stoi(step);
    r.loss = std::stod(loss);  // "nan" / "inf" read as such
    if (!metric.empty()) r.metric = std::stod(metric);
  }
  return r;
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

double sample_sd(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean(v);
  double ss = 0;
  for (double x : v) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

}  // namespace

TEST_CASE("mpsim study: the paired intervals and verdicts follow from the runs' steps.csv", "[study_cli]") {
  ScratchDir dir("study");
  const int steps = 6, seeds = 2;
  const auto r = run_mpsim(dir, "study loss-scaling --model lstm --size 8 --batch 2 --steps " + std::to_string(steps) +
                                    " --seeds " + std::to_string(seeds) + " --jobs 2 --static-scales 8 --out " +
                                    quote((dir / "study").string()));
  REQUIRE(r.status == 0);
  std::ifstream f(dir / "study" / "summary.json");
  const auto summary = nlohmann::json::parse(f);
  CHECK(summary["schema"] == "mpsim-study-2");
  const auto& rows = summary["rows"];
  REQUIRE(rows.size() >= 2);
  REQUIRE(rows[0]["policy"] == "fp32");
  const bool higher_is_better = summary["higher_is_better"].get<bool>();

  struct Config {
    std::vector<double> metric;
    bool diverged = false;
  };
  std::vector<Config> configs;
  for (const auto& row : rows) {
    Config c;
    for (int seed = 1; seed <= seeds; ++seed) {
      const FinalRow fr = final_row(dir / "study" / "runs" / row["runs"].get<std::string>() /
                                    ("seed" + std::to_string(seed)) / "steps.csv");
      c.metric.push_back(fr.metric);
      c.diverged = c.diverged || fr.step < steps || !std::isfinite(fr.loss) || !std::isfinite(fr.metric);
    }
    configs.push_back(c);
  }
  const double tol = summary["tolerance_pct"].get<double>() / 100 * std::abs(mean(configs[0].metric));
  const double level = 1 - 0.05 / static_cast<double>(rows.size() - 1);  // Bonferroni over the rows but fp32
  const double t = std::tan(M_PI * (1 - (1 - level) / 2 - 0.5));         // Student's t, 1 dof = Cauchy
  int disagreements = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::vector<double> d;
    for (int s = 0; s < seeds; ++s) d.push_back(configs[i].metric[s] - configs[0].metric[s]);
    const double dm = mean(d), half = t * sample_sd(d) / std::sqrt(static_cast<double>(seeds));
    const double lo = higher_is_better ? -(dm + half) : dm - half, hi = higher_is_better ? -(dm - half) : dm + half;
    const std::string want = i == 0                                      ? "reference"
                             : configs[i].diverged                       ? "diverged"
                             : !(std::isfinite(lo) && std::isfinite(hi)) ? "inconclusive"
                             : (lo >= -tol && hi <= tol)                 ? "matches fp32"
                             : lo > tol                                  ? "degraded"
                             : hi < -tol                                 ? "better than fp32"
                                                                         : "inconclusive";
    const std::string got = rows[i]["verdict"].get<std::string>();
    std::printf("%-40s vs fp32 %+-12.4g worse by [%+.4g, %+.4g] tolerance %-10.4g verdict %-13s recomputed %s\n",
                rows[i]["configuration"].get<std::string>().c_str(), dm, lo, hi, tol, got.c_str(), want.c_str());
    disagreements += got != want;
    if (!configs[i].diverged) {
      CHECK(rows[i]["metric_mean"].get<double>() == mean(configs[i].metric));
      CHECK(rows[i]["paired_ci_level"].get<double>() == Approx(level).epsilon(1e-15));
      // Boost.Math's quantile against the closed form, to a few ulps of the half-width
      CHECK(rows[i]["paired_ci"][0].get<double>() == Approx(dm - half).margin(1e-12 * (1 + std::abs(half))));
      CHECK(rows[i]["paired_ci"][1].get<double>() == Approx(dm + half).margin(1e-12 * (1 + std::abs(half))));
    }
  }
  std::printf("study: %zu configurations x %d seeds, %d verdicts differ from the recomputation\n", rows.size(), seeds,
              disagreements);
  CHECK(disagreements == 0);
}

TEST_CASE("mpsim study: --only runs fp32 and the named rows, --accumulate reaches every run", "[study_cli]") {
  ScratchDir dir("study-only");
  const auto r = run_mpsim(dir,
                           "study loss-scaling --model lstm --size 8 --batch 2 --steps 3 --seeds 1 --jobs 2 "
                           "--accumulate 2 --only mixed-fp16_none,mixed-bf16_none --out " +
                               quote((dir / "study").string()));
  REQUIRE(r.status == 0);
  std::ifstream f(dir / "study" / "summary.json");
  const auto summary = nlohmann::json::parse(f);
  std::vector<std::string> runs;
  for (const auto& row : summary["rows"]) runs.push_back(row["runs"].get<std::string>());
  // fp32 first (the reference), then the named rows in the grid's order
  CHECK(runs == std::vector<std::string>{"fp32_none", "mixed-bf16_none", "mixed-fp16_none"});
  CHECK(summary["accumulate"] == 2);
  for (const auto& name : runs) {
    std::ifstream rj(dir / "study" / "runs" / name / "seed1" / "run.json");
    const auto run = nlohmann::json::parse(rj);
    CHECK(run["config"]["accumulate"] == 2);
  }
  CHECK(fs::is_directory(dir / "study" / "runs"));
  std::size_t folders = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir / "study" / "runs")) ++folders;
  std::printf("--only: %zu run folders for %zu rows\n", folders, runs.size());
  CHECK(folders == runs.size());
}

TEST_CASE("mpsim study: an unknown --only name is refused, naming it and the known ones", "[study_cli]") {
  ScratchDir dir("study-only-bad");
  const auto r =
      run_mpsim(dir, "study loss-scaling --model lstm --steps 2 --seeds 1 --only fp32_none,mixed-fp17_none --out " +
                         quote((dir / "study").string()));
  CHECK(r.status == 2);
  CHECK(r.output.find("'mixed-fp17_none'") != std::string::npos);
  CHECK(r.output.find("mixed-fp16_dynamic_growth_interval_") != std::string::npos);
  CHECK(!fs::exists(dir / "study"));
}

TEST_CASE("mpsim study recipes: the recipe rows, their dy operands' mass and sign in steps.csv", "[study_cli]") {
  ScratchDir dir("study-recipes");
  const auto r = run_mpsim(dir,
                           "study recipes --model lstm --vocab 4096 --size 8 --batch 2 --steps 2 --seeds 1 "
                           "--jobs 2 --only fp8-none_none --out " +
                               quote((dir / "study").string()));
  REQUIRE(r.status == 0);
  std::ifstream f(dir / "study" / "summary.json");
  const auto summary = nlohmann::json::parse(f);
  CHECK(summary["grid"] == "recipes");
  CHECK(summary["model_config"]["vocab"] == 4096);
  REQUIRE(summary["rows"].size() == 2);
  CHECK(summary["rows"][1]["policy"] == "fp8-none");
  // fp8-none: every scale 1. The output layer's dy, (p - y) / 64 over 4,096 words, has its wrong words'
  // gradients near 2^-18, below e5m2's flush threshold 2^-17, and its targets' near -2^-6: steps.csv's columns
  // of that operand show a flush that is almost all push-down.
  const auto& fp8 = summary["rows"][1];
  const double down = fp8["activation_grad_push_down_mean"].get<double>();
  std::ifstream steps(dir / "study" / "runs" / "fp8-none_none" / "seed1" / "steps.csv");
  std::string header, row;
  std::getline(steps, header);
  std::vector<std::string> names, values;
  for (std::stringstream hs(header); std::getline(hs, row, ',');) names.push_back(row);
  std::size_t rows_read = 0, with_flush = 0, one_sided = 0;
  for (std::string line; std::getline(steps, line); ++rows_read) {
    values.clear();
    for (std::stringstream ls(line); std::getline(ls, row, ',');) values.push_back(row);
    if (!line.empty() && line.back() == ',') values.push_back("");
    REQUIRE(values.size() == names.size());
    for (std::size_t i = 0; i < names.size(); ++i)
      if (names[i] == "fc/wgrad_dy:zero" && std::stod(values[i]) > 0.5) ++with_flush;
      else if (names[i] == "fc/wgrad_dy:push_down" && std::stod(values[i]) > 0.9) ++one_sided;
  }
  const bool has_columns = std::find(names.begin(), names.end(), "fc/wgrad_dy:push_down") != names.end() &&
                           std::find(names.begin(), names.end(), "step:lost_bias") != names.end();
  std::printf(
      "study recipes: %zu rows; fp8-none: %zu of %zu steps flushed most of fc/wgrad_dy, %zu of them with "
      "over 90 %% of it pushing down; over all sites push_down %.4g, l1 lost %.4g%%\n",
      summary["rows"].size(), with_flush, rows_read, one_sided, down,
      fp8["activation_grad_l1_lost_pct_mean"].get<double>());
  CHECK(has_columns);
  CHECK(rows_read == 2);
  CHECK(with_flush == rows_read);
  CHECK(one_sided == rows_read);
  CHECK(fp8["activation_grad_lost_pct_mean"].get<double>() > 0);
  CHECK((down >= 0 && down <= 1));
  CHECK(summary["rows"][0]["activation_grad_push_down_mean"] == "nan");  // fp32 flushes nothing
}

TEST_CASE("mpsim study --out: an earlier study is refused unless --force, which removes its files", "[study_cli]") {
  ScratchDir dir("study-force");
  const std::string args =
      "study loss-scaling --model lstm --size 8 --batch 2 --steps 1 --seeds 1 --jobs 1 "
      "--only mixed-bf16_none --out " +
      quote((dir / "study").string());
  REQUIRE(run_mpsim(dir, args).status == 0);
  // An old run folder this study would not write, and a file of the user's.
  fs::create_directories(dir / "study" / "runs" / "old_row" / "seed1");
  { std::ofstream(dir / "study" / "runs" / "old_row" / "seed1" / "steps.csv") << "step\n"; }
  { std::ofstream(dir / "study" / "notes.txt") << "mine\n"; }
  const auto refused = run_mpsim(dir, args);
  CHECK(refused.status == 2);
  CHECK(refused.output.find("holds a previous study") != std::string::npos);
  CHECK(refused.output.find("--force") != std::string::npos);
  CHECK(fs::exists(dir / "study" / "runs" / "old_row"));
  const auto forced = run_mpsim(dir, args + " --force");
  CHECK(forced.status == 0);
  std::size_t folders = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir / "study" / "runs")) ++folders;
  std::printf("--force: refused with status %d; after --force %zu run folders, old row %s, notes.txt %s\n",
              refused.status, folders, fs::exists(dir / "study" / "runs" / "old_row") ? "kept" : "removed",
              fs::exists(dir / "study" / "notes.txt") ? "kept" : "removed");
  CHECK(!fs::exists(dir / "study" / "runs" / "old_row"));
  CHECK(folders == 2);
  CHECK(fs::exists(dir / "study" / "notes.txt"));
  CHECK(fs::exists(dir / "study" / "summary.json"));
}
