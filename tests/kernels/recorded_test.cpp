// Recorded hardware results (data/hardware/<device>/*.json, written by `mpsim hw convert|arith --record`)
// checked against the emulation on the CPU: for each recorded run, the per-block digests are recomputed
// from the emulation under the run's device profile. They must equal the digests of the device's own
// emulation (same code on both sides), and, for runs the device reproduced without a mismatch, the
// digests of the hardware's outputs: the emulation is then checked against real hardware on every run
// of this test, not only when a GPU is lent. The unit suite recomputes a few blocks of each run (the
// blocks holding zeros/subnormals, NaNs and a middle one); [exhaustive] recomputes all of them.
#include "catch.hpp"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "digest.hpp"
#include "runs_host.hpp"

using namespace mpsim;
namespace fs = std::filesystem;

namespace {

std::vector<fs::path> recorded_files() {
  const char* root = std::getenv("MPSIM_SOURCE_ROOT");
  const fs::path dir = fs::path(root ? root : ".") / "data" / "hardware";
  std::vector<fs::path> out;
  if (!fs::is_directory(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

struct Tally {
  int runs = 0, blocks = 0, emu_mismatch = 0, hw_mismatch = 0, hw_skipped = 0;
};

void check_file(const fs::path& path, bool all_blocks, Tally& t) {
  std::ifstream in(path);
  const nlohmann::json doc = nlohmann::json::parse(in);
  const std::string kind = doc.value("kind", "");
  if (kind != "convert" && kind != "arith") return;  // other reports (gemm, hist, bench) hold no digests
  REQUIRE(doc.at("block_elements").get<std::uint64_t>() == hw::kDigestBlock);
  const Profile& profile = find_profile(doc.at("profile").get<std::string>());
  for (const auto& run : doc.at("runs")) {
    const std::string name = run.at("name");
    emu::DevFormat f;
    emu::DevRounding r;
    hw::ArithOp op = hw::kAdd;
    if (kind == "convert") {
      hw::dev_params(hw::find_convert_run(name), profile, f, r);
    } else {
      const auto& ar = hw::find_arith_run(name);
      hw::dev_params(ar, profile, f, r);
      op = ar.op;
    }
    const auto& emu_d = run.at("emu_digests");
    const auto& hw_d = run.at("hw_digests");
    const bool hw_reproduced = run.at("mismatches").get<std::uint64_t>() == 0;
    ++t.runs;
    std::vector<std::size_t> blocks;
    if (all_blocks) {
      for (std::size_t b = 0; b < emu_d.size(); ++b) blocks.push_back(b);
    } else {
      for (std::size_t b : {std::size_t{0}, std::size_t{127}, std::size_t{200}})
        if (b < emu_d.size()) blocks.push_back(b);
    }
    for (std::size_t b : blocks) {
      const std::uint64_t d = hw::block_digest(b, [&](std::uint64_t i) {
        return kind == "convert" ? hw::emulate_convert(i, f, r) : hw::emulate_arith(op, i, f, r);
      });
      ++t.blocks;
      const std::string where = path.string() + " run " + name + " block " + std::to_string(b);
      if (d != hw::parse_digest_hex(emu_d.at(b), where)) {
        ++t.emu_mismatch;
        UNSCOPED_INFO(where << ": CPU emulation digest differs from the device emulation's");
      }
      if (!hw_reproduced) {
        ++t.hw_skipped;
      } else if (d != hw::parse_digest_hex(hw_d.at(b), where)) {
        ++t.hw_mismatch;
        UNSCOPED_INFO(where << ": CPU emulation digest differs from the hardware's");
      }
    }
  }
}

void check_all(bool all_blocks) {
  const auto files = recorded_files();
  if (files.empty()) {
    std::printf("no recorded hardware results under data/hardware/: nothing to recompute\n");
    return;
  }
  Tally t;
  for (const auto& p : files) check_file(p, all_blocks, t);
  std::printf("recorded hardware results: %zu files, %d runs, %d blocks recomputed; %d differ from the device "
              "emulation, %d from the hardware (%d blocks of runs with recorded mismatches not compared to hardware)\n",
              files.size(), t.runs, t.blocks, t.emu_mismatch, t.hw_mismatch, t.hw_skipped);
  CHECK(t.emu_mismatch == 0);
  CHECK(t.hw_mismatch == 0);
}

}  // namespace

TEST_CASE("recorded hardware digests are reproduced by the emulation (sample blocks)", "[recorded]") {
  check_all(false);
}

TEST_CASE("recorded hardware digests are reproduced by the emulation (all blocks)", "[recorded][exhaustive]") {
  check_all(true);
}
