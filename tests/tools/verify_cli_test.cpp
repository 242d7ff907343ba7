// Tests of `mpsim verify` (tools/mpsim/verify.cpp): runs the real binary ($MPSIM_BIN) on a quick subset of
// checks and checks the table, the JSON report and the exit status, including the failure path.
#include "catch_compat.hpp"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../io/test_files.hpp"

using mpsim::test::ScratchDir;

namespace {

struct RunResult {
  int status;
  std::string output;  // stdout and stderr together
};

RunResult run_verify(const ScratchDir& dir, const std::string& args) {
  const char* bin = std::getenv("MPSIM_BIN");
  REQUIRE(bin != nullptr);
  const auto log = dir / "output.log";
  const std::string cmd = "'" + std::string(bin) + "' verify " + args + " > '" + log.string() + "' 2>&1";
  const int raw = std::system(cmd.c_str());
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  std::filesystem::remove(log);
  INFO("command: " << cmd << "\noutput: " << ss.str());
  REQUIRE(WIFEXITED(raw));
  return {WEXITSTATUS(raw), ss.str()};
}

nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

}  // namespace

TEST_CASE("mpsim verify runs checks, prints the table and writes JSON", "[verify_cli]") {
  ScratchDir dir("verify-cli");
  const auto json_path = dir / "verify.json";
  const RunResult r = run_verify(dir, "--only round-fp8_e4m3 --json '" + json_path.string() + "'");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("first mismatch") != std::string::npos);  // the table header
  CHECK(r.output.find("fp8_e4m3") != std::string::npos);
  CHECK(r.output.find("sr(b=32)") != std::string::npos);
  CHECK(r.output.find("0 mismatches") != std::string::npos);
  CHECK(r.output.find("passed") != std::string::npos);
  const auto j = read_json(json_path);
  CHECK(j["passed"] == true);
  CHECK(j["mismatches"] == 0);
  REQUIRE(j["rows"].size() == 7);  // one per mode
  for (const auto& row : j["rows"]) {
    CHECK(row["format"] == "fp8_e4m3");
    CHECK(row["against"] == "grid table");
    CHECK(row["checked"].get<std::uint64_t>() == 2 * 8 * (std::uint64_t{1} << 17));  // 2 signs x 8 lows x 2^17
    CHECK(row["mismatches"] == 0);
    CHECK(row["first_mismatch"].is_null());
  }
}

TEST_CASE("mpsim verify reports a hardware row: compared or skipped with a reason", "[verify_cli]") {
  ScratchDir dir("verify-cli");
  const RunResult r = run_verify(dir, "--only round-bf16");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("AVX512-BF16 vcvtneps2bf16") != std::string::npos);
  // This CPU may or may not have the instruction: either the row was compared, or it says why not.
  const bool skipped = r.output.find("skipped: this CPU has no AVX512-BF16") != std::string::npos;
  const bool flushed_note = r.output.find("vcvtneps2bf16 flushes") != std::string::npos;
  CHECK(flushed_note);
  std::printf("bf16 hardware row %s\n", skipped ? "skipped (no AVX512-BF16 here)" : "compared");
}

TEST_CASE("mpsim verify exits 1 on a mismatch and names the first mismatching input", "[verify_cli]") {
  ScratchDir dir("verify-cli");
  const auto json_path = dir / "verify.json";
  const RunResult r = run_verify(dir, "--only round-fp8_e5m2 --inject-failure --json '" + json_path.string() + "'");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("FAILED") != std::string::npos);
  CHECK(r.output.find("1 + 3 * 2^-11 expected 0x3c01 got 0x3c02") != std::string::npos);
  const auto j = read_json(json_path);
  CHECK(j["passed"] == false);
  CHECK(j["mismatches"] == 1);
}

TEST_CASE("mpsim verify: bad arguments exit 2 with a message", "[verify_cli]") {
  ScratchDir dir("verify-cli");
  const RunResult none = run_verify(dir, "--only no-such-check");
  CHECK(none.status == 2);
  CHECK(none.output.find("no check matches --only 'no-such-check'") != std::string::npos);
  CHECK(run_verify(dir, "--threads -3").status == 2);
  const RunResult list = run_verify(dir, "--list");
  CHECK(list.status == 0);
  for (const char* name : {"round-fp16", "round-bf16", "round-fp8_e4m3", "round-fp8_e5m2", "round-variants",
                           "round-double", "boost", "grid-vs-boost"})
    CHECK(list.output.find(name) != std::string::npos);
}

// --against: the recorded H100 runs (data/hardware/nvidia-h100-80gb-hbm3/) recomputed block by block.
namespace {
std::filesystem::path h100_dir() {
  const char* root = std::getenv("MPSIM_SOURCE_ROOT");
  return std::filesystem::path(root ? root : ".") / "data" / "hardware" / "nvidia-h100-80gb-hbm3";
}
}  // namespace

TEST_CASE("mpsim verify --against recomputes recorded blocks and reports them equal", "[verify_cli]") {
  ScratchDir dir("verify-against");
  const auto json_path = dir / "against.json";
  const RunResult r = run_verify(dir, "--against '" + h100_dir().string() +
                                          "' --only fp16_mul_sat --blocks 128 "
                                          "--json '" +
                                          json_path.string() + "'");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.output.find("fp16_mul_sat") != std::string::npos);
  CHECK(r.output.find("1 blocks compared, 1 equal to the hardware: passed") != std::string::npos);
  const auto j = read_json(json_path);
  REQUIRE(j["runs"].size() == 1);
  CHECK(j["runs"][0]["compared"] == 1);
  CHECK(j["runs"][0]["equal"] == 1);
  CHECK(j["runs"][0]["differing"].empty());
}

TEST_CASE("mpsim verify --against names the differing block and its inputs", "[verify_cli]") {
  // A copy of the recording whose fp8_e4m3_nosat digest of block 255 (the negative NaNs) is off by one:
  // the emulation must then differ there, and the report must name the block, the inputs where the
  // profile and IEEE disagree (negative NaNs: 0x7F on the H100, 0xFF by IEEE) and the recorded outputs.
  ScratchDir dir("verify-against-bad");
  const auto dev = dir / "device";
  std::filesystem::create_directories(dev);
  nlohmann::json doc = read_json(h100_dir() / "convert.json");
  nlohmann::json kept = nlohmann::json::array();
  for (auto& run : doc["runs"])
    if (run["name"] == "fp8_e4m3_nosat") {
      std::string d = run["hw_digests"][255];
      d.back() = d.back() == '0' ? '1' : '0';
      run["hw_digests"][255] = d;
      kept.push_back(run);
    }
  REQUIRE(kept.size() == 1);
  doc["runs"] = kept;
  std::ofstream(dev / "convert.json") << doc.dump();
  const RunResult r = run_verify(dir, "--against '" + dev.string() + "' --blocks 254,255");
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find("1 blocks differ from the hardware: 255") != std::string::npos);
  CHECK(r.output.find("0xff800001 (-nan) -> profile 0x7f, ieee 0xff") != std::string::npos);
  CHECK(r.output.find("0xff800001 (-nan) -> hardware 0x7f, emulation 0x7f") != std::string::npos);
  CHECK(r.output.find("2 blocks compared, 1 equal to the hardware: FAILED") != std::string::npos);
}

TEST_CASE("mpsim verify --against rejects a missing directory and bad block lists", "[verify_cli]") {
  ScratchDir dir("verify-against-errors");
  RunResult r = run_verify(dir, "--against '" + (dir / "nope").string() + "'");
  CHECK(r.status == 2);
  CHECK(r.output.find("no such directory") != std::string::npos);
  r = run_verify(dir, "--against '" + h100_dir().string() + "' --blocks 1,x");
  CHECK(r.status == 2);
  CHECK(r.output.find("--blocks '1,x'") != std::string::npos);
  r = run_verify(dir, "--blocks 3");
  CHECK(r.status == 2);
  CHECK(r.output.find("only with --against") != std::string::npos);
}
