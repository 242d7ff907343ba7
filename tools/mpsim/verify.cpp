// mpsim verify [--exhaustive] [--json FILE] [--only NAME] [--threads N] [--list]: runs the named checks
// of lib/mpsim/reference/verify.hpp (production rounding against the independent references and, where
// the CPU has them, hardware conversions) and prints the table; exit status 1 on any mismatch.
// mpsim verify --against data/hardware/<device> [--blocks all|B,B,...] [--only RUN]: recomputes the
// recorded runs' block digests from the emulation (kernels/recording.hpp) and prints, per run, blocks
// compared and equal, and for a differing block its first inputs where the profile and IEEE differ.
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "command.hpp"
#include "mpsim/error.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/reference/verify.hpp"
#include "mpsim/version.hpp"
#include "recording.hpp"

namespace {

struct VerifyArgs {
  bool exhaustive = false;
  bool list = false;
  int threads = 0;
  std::string json_path;
  std::string only;
  bool inject_failure = false;
  std::string against, blocks = "all";
};

// --blocks: "all" or a comma-separated list of block numbers.
std::vector<std::uint64_t> parse_blocks(const std::string& s) {
  std::vector<std::uint64_t> v;
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t comma = std::min(s.find(',', pos), s.size());
    const std::string item = s.substr(pos, comma - pos);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 6)
      throw mpsim::Error("--blocks '" + s + "': expected 'all' or block numbers separated by commas, e.g. 0,127,255");
    v.push_back(std::stoull(item));
    pos = comma + 1;
  }
  return v;
}

void verify_against(const VerifyArgs& a) {
  mpsim::hw::RecordingOptions o;
  o.threads = a.threads;
  if (!a.only.empty()) o.runs = {a.only};
  if (a.blocks != "all") {
    const auto list = parse_blocks(a.blocks);
    o.blocks = [list](const std::string&, const std::string&, std::uint64_t) { return list; };
  }
  o.progress = [](const std::string& line) {
    fmt::print(stderr, "verify: {}\n", line);
    std::fflush(stderr);
  };
  const auto runs = mpsim::hw::compare_recording(a.against, o);
  if (runs.empty()) throw mpsim::Error("verify --against: no recorded run matches --only '" + a.only + "'");
  std::uint64_t compared = 0, equal = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : runs) {
    compared += r.blocks_compared;
    equal += r.blocks_equal;
    rows.push_back({{"file", r.file}, {"run", r.name}, {"intrinsic", r.intrinsic}, {"blocks", r.blocks_total},
                    {"compared", r.blocks_compared}, {"equal", r.blocks_equal}, {"differing", r.differing},
                    {"seconds", r.seconds}});
  }
  if (!a.json_path.empty())
    mpsim::io::write_text_file(a.json_path, nlohmann::json{{"against", a.against}, {"runs", rows},
                                                           {"compared", compared}, {"equal", equal}}.dump(2) + "\n");
  fmt::print("{}", mpsim::hw::format_comparison(runs));
  fmt::print("verify --against {}: {} runs, {} blocks compared, {} equal to the hardware: {}\n", a.against, runs.size(),
             compared, equal, compared == equal ? "passed" : "FAILED");
  if (compared != equal) mpsim::cli::exit_status() = 1;
}

// A check that must fail: fp16 nearest-even compared with toward-zero on the tie 1 + 3 * 2^-11, where they
// differ. Only for testing that a mismatch reaches the table, the JSON and the exit status.
std::vector<mpsim::verify::Row> deliberate_failure(const mpsim::verify::Options&) {
  const float x = 1.0f + 3 * 0x1p-11f;
  mpsim::verify::Row row;
  row.check = "injected";
  row.format = "fp16";
  row.mode = "rne";
  row.against = "rtz (deliberately wrong)";
  row.checked = 1;
  const std::uint64_t want = mpsim::round_bits(x, mpsim::fp16(), mpsim::Rounding::of(mpsim::RoundingMode::toward_zero));
  const std::uint64_t got = mpsim::round_bits(x, mpsim::fp16());
  if (want != got) {
    row.mismatches = 1;
    row.first = mpsim::verify::Mismatch{"1 + 3 * 2^-11", want, got};
  }
  return {row};
}

void setup(CLI::App& app) {
  auto args = std::make_shared<VerifyArgs>();
  auto* cmd = app.add_subcommand("verify", "Check rounding against the independent references and hardware");
  cmd->add_flag("--exhaustive", args->exhaustive, "Every float input (2^32) in every mode instead of the sampled set");
  cmd->add_option("--json", args->json_path, "Also write the rows as JSON to this file (-: standard output)");
  cmd->add_option("--only", args->only, "Run only the checks whose name contains this text");
  cmd->add_option("--threads", args->threads, "Worker threads (0: all cores)")->check(CLI::NonNegativeNumber);
  cmd->add_flag("--list", args->list, "List the checks and exit");
  cmd->add_option("--against", args->against,
                  "Compare with recorded hardware results: a data/hardware/<device> directory (convert.json, "
                  "arith.json); --only then names one run");
  cmd->add_option("--blocks", args->blocks, "With --against: 'all' (default) or block numbers, e.g. 0,127,255");
  cmd->add_flag("--inject-failure", args->inject_failure, "Add a check that fails (tests the failure path)")
      ->group("");
  cmd->callback([args] {
    namespace v = mpsim::verify;
    if (!args->against.empty()) return verify_against(*args);
    if (args->blocks != "all") throw mpsim::Error("--blocks applies only with --against");
    if (args->list) {
      for (const auto& c : v::checks()) fmt::print("{:<16} {}\n", c.name, c.description);
      return;
    }
    v::Options o;
    o.exhaustive = args->exhaustive;
    o.threads = args->threads;
    o.progress = [](const std::string& line) {
      fmt::print(stderr, "verify: {}\n", line);
      std::fflush(stderr);
    };
    const auto t0 = std::chrono::steady_clock::now();
    auto rows = v::run_checks(o, args->only);
    if (args->inject_failure) {
      const auto bad = deliberate_failure(o);
      rows.insert(rows.end(), bad.begin(), bad.end());
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rows.empty()) throw mpsim::Error("verify: no check matches --only '" + args->only + "'");
    auto json = v::to_json(rows);
    json["exhaustive"] = args->exhaustive;
    json["seconds"] = secs;
    json["schema"] = "mpsim-verify-1";
    json["mpsim_version"] = mpsim::kVersion;
    if (!args->json_path.empty()) mpsim::cli::write_report(args->json_path, json.dump(2) + "\n");
    fmt::print("{}", v::format_table(rows));
    std::uint64_t checked = 0, mismatches = 0;
    for (const auto& r : rows) {
      checked += r.checked;
      mismatches += r.mismatches;
    }
    fmt::print("verify: {} rows, {} inputs checked, {} mismatches, {:.1f} s: {}\n", rows.size(), checked, mismatches,
               secs, mismatches ? "FAILED" : "passed");
    if (v::any_mismatch(rows)) mpsim::cli::exit_status() = 1;
  });
}

const bool registered = mpsim::cli::register_command("verify", setup);

}  // namespace
