// mpsim verify [--exhaustive] [--json FILE] [--only NAME] [--threads N] [--list]: runs the named checks
// of lib/mpsim/reference/verify.hpp (production rounding against the independent references and, where
// the CPU has them, hardware conversions) and prints the table; exit status 1 on any mismatch.
// With --against DIR it compares with recorded hardware results instead (verify_against.cpp).
#include <fmt/core.h>

#include <chrono>
#include <cstdio>
#include <memory>

#include "command.hpp"
#include "mpsim/error.hpp"
#include "mpsim/reference/verify.hpp"
#include "mpsim/version.hpp"
#include "verify.hpp"

namespace {

using mpsim::cli::VerifyArgs;
namespace v = mpsim::verify;

// --list: the checks by name.
void list_checks() {
  for (const auto& c : v::checks()) fmt::print("{:<16} {}\n", c.name, c.description);
}

// A check that must fail: fp16 nearest-even compared with toward-zero on the tie 1 + 3 * 2^-11, where they
// differ. Only for testing that a mismatch reaches the table, the JSON and the exit status.
std::vector<v::Row> deliberate_failure() {
  const float x = 1.0f + 3 * 0x1p-11f;
  v::Row row;
  row.check = "injected";
  row.format = "fp16";
  row.mode = "rne";
  row.against = "rtz (deliberately wrong)";
  row.checked = 1;
  const std::uint64_t want = mpsim::round_bits(x, mpsim::fp16(), mpsim::Rounding::of(mpsim::RoundingMode::toward_zero));
  const std::uint64_t got = mpsim::round_bits(x, mpsim::fp16());
  if (want != got) {
    row.mismatches = 1;
    row.first = v::Mismatch{"1 + 3 * 2^-11", want, got};
  }
  return {row};
}

// The rows as JSON (--json), the table and the closing line; exit status 1 on any mismatch.
void report(const VerifyArgs& a, const std::vector<v::Row>& rows, double secs) {
  auto json = v::to_json(rows);
  json["exhaustive"] = a.exhaustive;
  json["seconds"] = secs;
  json["schema"] = "mpsim-verify-1";
  json["mpsim_version"] = mpsim::kVersion;
  if (!a.json_path.empty()) mpsim::cli::write_report(a.json_path, json.dump(2) + "\n");
  fmt::print("{}", v::format_table(rows));
  std::uint64_t checked = 0, mismatches = 0;
  for (const auto& r : rows) {
    checked += r.checked;
    mismatches += r.mismatches;
  }
  fmt::print("verify: {} rows, {} inputs checked, {} mismatches, {:.1f} s: {}\n", rows.size(), checked, mismatches,
             secs, mismatches ? "FAILED" : "passed");
  if (v::any_mismatch(rows)) mpsim::cli::exit_status() = 1;
}

// The reference checks (--only filters them by name), then the report.
void run_reference_checks(const VerifyArgs& a) {
  v::Options o;
  o.exhaustive = a.exhaustive;
  o.threads = a.threads;
  o.progress = [](const std::string& line) {
    fmt::print(stderr, "verify: {}\n", line);
    std::fflush(stderr);
  };
  const auto t0 = std::chrono::steady_clock::now();
  auto rows = v::run_checks(o, a.only);
  if (a.inject_failure) {
    const auto bad = deliberate_failure();
    rows.insert(rows.end(), bad.begin(), bad.end());
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rows.empty()) throw mpsim::Error("verify: no check matches --only '" + a.only + "'");
  report(a, rows, secs);
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
  cmd->add_flag("--inject-failure", args->inject_failure, "Add a check that fails (tests the failure path)")->group("");
  cmd->callback([args] {
    if (!args->against.empty()) return mpsim::cli::verify_against(*args);
    if (args->blocks != "all") throw mpsim::Error("--blocks applies only with --against");
    if (args->list) return list_checks();
    run_reference_checks(*args);
  });
}

const bool registered = mpsim::cli::register_command("verify", setup);

}  // namespace
