// `mpsim study loss-scaling` (tools/mpsim/study.cpp, lib/mpsim/train/study.cpp) on a tiny grid: every configuration's
// verdict, mean and spread recomputed here from the runs' own steps.csv files by the rule summary.md
// states (diverged: a seed stopped early or ended with a non-finite loss or metric; otherwise it matches
// fp32 if its mean metric is worse than fp32's by at most 2 x fp32's sample sd + 1% of |fp32's mean|).
#include "catch_compat.hpp"

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

TEST_CASE("mpsim study: the verdicts follow from the runs' steps.csv", "[study_cli]") {
  ScratchDir dir("study");
  const int steps = 6, seeds = 2;
  const auto r = run_mpsim(dir, "study loss-scaling --model lstm --size 8 --batch 2 --steps " + std::to_string(steps) + " --seeds " +
                                    std::to_string(seeds) + " --jobs 2 --static-scales 8 --out " +
                                    quote((dir / "study").string()));
  REQUIRE(r.status == 0);
  std::ifstream f(dir / "study" / "summary.json");
  const auto summary = nlohmann::json::parse(f);
  CHECK(summary["schema"] == "mpsim-study-1");
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
      const FinalRow fr = final_row(dir / "study" / "runs" / row["runs"].get<std::string>() / ("seed" + std::to_string(seed)) / "steps.csv");
      c.metric.push_back(fr.metric);
      c.diverged = c.diverged || fr.step < steps || !std::isfinite(fr.loss) || !std::isfinite(fr.metric);
    }
    configs.push_back(c);
  }
  const double m0 = mean(configs[0].metric), s0 = sample_sd(configs[0].metric);
  const double band = 2 * s0 + 0.01 * std::abs(m0);
  int disagreements = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double m = mean(configs[i].metric);
    const double worse_by = higher_is_better ? m0 - m : m - m0;
    const std::string want = configs[i].diverged                                  ? "diverged"
                             : (std::isfinite(worse_by) && worse_by <= band) ? "matches fp32"
                                                                              : "degraded";
    const std::string got = rows[i]["verdict"].get<std::string>();
    std::printf("%-40s mean %-12.6g worse by %-12.4g band %-10.4g verdict %-13s recomputed %s\n",
                rows[i]["configuration"].get<std::string>().c_str(), m, worse_by, band, got.c_str(), want.c_str());
    disagreements += got != want;
    if (!configs[i].diverged) CHECK(rows[i]["metric_mean"].get<double>() == m);
  }
  std::printf("study: %zu configurations x %d seeds, %d verdicts differ from the recomputation\n", rows.size(), seeds,
              disagreements);
  CHECK(disagreements == 0);
  CHECK(rows[0]["verdict"] == "matches fp32");
}
