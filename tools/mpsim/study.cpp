// mpsim study loss-scaling: the grid of precision policies and loss scalers on one model, five seeds
// each, summarised against fp32 (lib/mpsim/train/study.hpp).
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>

#include "command.hpp"
#include "mpsim/error.hpp"
#include "mpsim/io/progress.hpp"
#include "mpsim/nn/model.hpp"
#include "mpsim/train/study.hpp"

namespace {

std::string metric_text(const nlohmann::json& v) {
  // Non-finite values are strings in summary.json ("nan": an interval from one seed); printed bare.
  return v.is_number() ? fmt::format("{:.5g}", v.get<double>()) : v.is_string() ? v.get<std::string>() : v.dump();
}

void add_study(CLI::App* cmd, const std::string& grid);

void setup(CLI::App& app) {
  auto* study = app.add_subcommand("study", "Studies that run many trainings and summarise them");
  study->require_subcommand(1);
  add_study(study->add_subcommand("loss-scaling",
                                  "fp32 vs mixed-fp16 (no scaling, static, dynamic, hysteresis), "
                                  "mixed-bf16, pure-fp16, over seeds"),
            "loss-scaling");
  add_study(study->add_subcommand("recipes",
                                  "the fp8 / fp4 scaling recipes (docs/recipes.md) beside fp32, mixed-bf16 "
                                  "and mixed-fp16 with and without loss scaling, over seeds"),
            "recipes");
}

void add_study(CLI::App* cmd, const std::string& grid) {
  auto c = std::make_shared<mpsim::train::StudyConfig>();
  c->grid = grid;
  auto out = std::make_shared<std::string>();
  auto scales = std::make_shared<std::string>();
  cmd->add_option("--model", c->model, "ssd | lstm")->required();
  cmd->add_option("--out", *out, "output folder")->required();
  cmd->add_flag("--force", c->force,
                "an --out that holds a previous study: remove its files (summary.json, summary.md, summary.csv, "
                "seeds.csv, runs/) instead of refusing");
  cmd->add_option("--steps", c->steps, "steps per run (default: the model's study default)");
  cmd->add_option("--seeds", c->seeds, "seeds per configuration")->capture_default_str();
  cmd->add_option("--jobs", c->jobs, "runs in parallel")->capture_default_str();
  cmd->add_option("--static-scales", *scales, "comma-separated static loss scales (default 8,128,1024)");
  cmd->add_option("--loss-divisor-log2", c->loss_divisor_log2,
                  "experiment: gradients inside the network 2^N times smaller, undone at unscaling (default 0; "
                  "see lib/mpsim/models/README.md)")
      ->capture_default_str();
  cmd->add_option("--accumulate", c->accumulate,
                  "micro-batches per optimiser step: each backward starts from loss / N (gradient accumulation)")
      ->capture_default_str();
  auto only = std::make_shared<std::string>();
  cmd->add_option("--only", *only,
                  "comma-separated run-folder names (fp32_none,mixed-fp16_none,...): run only these rows; fp32 "
                  "always runs (every row is compared with it)");
  cmd->add_option("--tolerance-pct", c->tolerance_pct,
                  "verdict tolerance: a row matches fp32 when its paired interval lies within +-this % of fp32's mean")
      ->capture_default_str();
  cmd->add_option("--corpus", c->model_config.corpus_path, "lstm: train on this UTF-8 text file");
  cmd->add_option("--vocab", c->model_config.vocab,
                  "lstm: tokens of the generated language, 20..262144 (default 32; other sizes: Zipf words)");
  cmd->add_option("--zipf", c->model_config.zipf, "lstm: Zipf exponent of a --vocab other than 32 (default 1)")
      ->check(CLI::Range(0.0, 1e6));
  cmd->add_option("--batch", c->model_config.batch, "batch size (0: the model's default)");
  cmd->add_option("--size", c->model_config.size, "model width (0: the model's default)");
  cmd->callback([c, out, scales, only] {
    mpsim::train::StudyConfig config = *c;
    config.out = *out;
    if (!scales->empty()) {
      std::stringstream ss(*scales);
      for (std::string item; std::getline(ss, item, ',');) {
        std::size_t used = 0;
        double v = 0;
        try {
          v = std::stod(item, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (item.empty() || used != item.size())
          throw mpsim::Error(fmt::format("--static-scales '{}': '{}' is not a number", *scales, item));
        config.static_scales.push_back(v);
      }
    }
    std::stringstream names(*only);
    for (std::string item; std::getline(names, item, ',');)
      if (!item.empty()) config.only.push_back(item);
    const auto t0 = std::chrono::steady_clock::now();
    // Everything is checked (model, grid, --only, every run's config) before anything is written.
    const auto plan = mpsim::train::plan_study(config, mpsim::nn::make_model);
    // Drawn only on a terminal (io/progress.hpp); runs finish on the worker threads.
    mpsim::io::ProgressBar bar("study " + config.model, plan.runs.size(), mpsim::io::ProgressBar::Unit::runs);
    const mpsim::train::StudyProgress progress = [&bar](int done, int, const std::string& label, int seed) {
      bar.set_note(fmt::format("{} seed {}", label, seed));
      bar.advance(static_cast<std::uint64_t>(done) - std::min<std::uint64_t>(bar.done(), done));
    };
    const auto results = mpsim::train::run_plan(config, plan, mpsim::nn::make_model, progress);
    bar.finish();
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const auto summary = mpsim::train::summarise_study(config, plan, results, wall);
    mpsim::train::write_study(config, plan, results, summary);
    fmt::print("{} study on {} ({} steps{}, {} seeds, {:.0f} s); vs fp32 seed by seed, tolerance {:.4g}:\n",
               config.grid, config.model, plan.steps,
               config.accumulate > 1 ? fmt::format(" of {} micro-batches", config.accumulate) : std::string(),
               config.seeds, wall, summary["rows"][0]["tolerance"].get<double>());
    for (const auto& row : summary["rows"])
      // Five significant digits: the seeds' spread is in the third or fourth (summary.md gives mean ± sd).
      fmt::print("  {:<40} {} {} ({:+.4g} [{}, {}]) -> {}\n", row["configuration"].get<std::string>(),
                 row["metric"].get<std::string>(), metric_text(row["metric_mean"]),
                 row["delta_vs_fp32"].is_number() ? row["delta_vs_fp32"].get<double>() : NAN,
                 metric_text(row["paired_ci"][0]), metric_text(row["paired_ci"][1]), row["verdict"].get<std::string>());
    fmt::print("wrote {}/summary.md, summary.json, runs/\n", config.out.string());
  });
}

const bool registered = mpsim::cli::register_command("study", setup);

}  // namespace
