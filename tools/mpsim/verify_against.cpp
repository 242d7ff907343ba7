// mpsim verify --against data/hardware/<device> [--blocks all|B,B,...] [--only RUN]: recomputes the
// recorded runs' block digests from the emulation (kernels/recording.hpp) and prints, per run, blocks
// compared and equal, and for a differing block its first inputs where the profile and IEEE differ.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "command.hpp"
#include "mpsim/error.hpp"
#include "recording.hpp"
#include "verify.hpp"

namespace mpsim::cli {

namespace {

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

}  // namespace

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
    rows.push_back({{"file", r.file},
                    {"run", r.name},
                    {"intrinsic", r.intrinsic},
                    {"blocks", r.blocks_total},
                    {"compared", r.blocks_compared},
                    {"equal", r.blocks_equal},
                    {"differing", r.differing},
                    {"seconds", r.seconds}});
  }
  if (!a.json_path.empty())
    write_report(
        a.json_path,
        nlohmann::json{{"against", a.against}, {"runs", rows}, {"compared", compared}, {"equal", equal}}.dump(2) +
            "\n");
  fmt::print("{}", mpsim::hw::format_comparison(runs));
  fmt::print("verify --against {}: {} runs, {} blocks compared, {} equal to the hardware: {}\n", a.against, runs.size(),
             compared, equal, compared == equal ? "passed" : "FAILED");
  if (compared != equal) exit_status() = 1;
}

}  // namespace mpsim::cli
