// Checkpoints and scaler states at the command line (tools/mpsim/train.cpp): `mpsim hist` reads a
// training checkpoint (safetensors) and counts every value in it; `mpsim train --scaler-state` starts from
// a torch.amp.GradScaler.state_dict() saved as JSON; a bad state or a cut checkpoint exits 2 with one
// message naming the file and leaves no output folder. (tests/train/checkpoint_safetensors.py opens the
// checkpoint with the safetensors package.)
#include "catch_compat.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "../io/test_files.hpp"
#include "run_mpsim.hpp"

using mpsim::test::quote;
using mpsim::test::run_mpsim;
using mpsim::test::ScratchDir;
namespace fs = std::filesystem;

namespace {

// The smallest lstm run the model allows, a few steps: the CLI is what is tested here.
const std::string kTrain = "train --model lstm --policy mixed-fp16 --steps 3 --size 8 --batch 2 ";

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a training checkpoint opens in mpsim hist; every value counted", "[checkpoint_cli]") {
  ScratchDir dir("ck-hist");
  const fs::path run = dir / "run";
  REQUIRE(run_mpsim(dir, kTrain + "--scaler dynamic --out " + quote(run.string())).status == 0);
  const auto r = run_mpsim(dir, "hist " + quote((run / "checkpoint.safetensors").string()) + " --json " +
                                    quote((dir / "hist.json").string()));
  REQUIRE(r.status == 0);
  // The run's own JSON files carry their schema tags.
  CHECK(read_json(run / "run.json")["schema"] == "mpsim-train-run-1");
  CHECK(read_json(run / "hist" / "step_000003.json")["schema"] == "mpsim-train-hist-1");
  const auto report = read_json(dir / "hist.json");
  // The values the checkpoint holds, from its own header (the 8-byte length, the JSON, F32 = 4 bytes).
  const std::string bytes = slurp(run / "checkpoint.safetensors");
  std::uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | static_cast<unsigned char>(bytes[i]);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  std::uint64_t values = 0;
  std::size_t tensors = 0;
  for (const auto& [name, v] : header.items())
    if (name != "__metadata__") {
      values += (v["data_offsets"][1].get<std::uint64_t>() - v["data_offsets"][0].get<std::uint64_t>()) / 4;
      ++tensors;
    }
  std::uint64_t counted = 0;
  for (const auto& t : report["tensors"]) counted += t["numel"].get<std::uint64_t>();
  std::printf("hist of the checkpoint: %zu tensors, %llu values counted, %llu in the file\n", report["tensors"].size(),
              static_cast<unsigned long long>(counted), static_cast<unsigned long long>(values));
  CHECK(report["tensors"].size() == tensors);
  CHECK(counted == values);
}

TEST_CASE("--scaler-state: a GradScaler state_dict seeds the run; a bad one exits 2, nothing written",
          "[checkpoint_cli]") {
  ScratchDir dir("ck-scaler-state");
  // GradScaler.state_dict()'s five entries (torch/amp/grad_scaler.py), as json.dump writes them.
  write_text(
      dir / "state.json",
      R"({"scale": 1024.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 7, "_growth_tracker": 2})");
  const fs::path run = dir / "run";
  const auto ok = run_mpsim(
      dir, kTrain + "--scaler-state " + quote((dir / "state.json").string()) + " --out " + quote(run.string()));
  REQUIRE(ok.status == 0);
  const auto cfg = read_json(run / "run.json");
  const std::string spec = cfg["config"]["scaler_spec"].get<std::string>();
  std::printf("scaler of the seeded run: %s\n", spec.c_str());
  CHECK(spec == "dynamic,init_scale=1024,growth_factor=4,backoff_factor=0.25,growth_interval=7,init_growth_tracker=2");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"scale": 1024.0, "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 7})",
       "has no \"_growth_tracker\""},
      {R"({"scale": "1024", "growth_factor": 4.0, "backoff_factor": 0.25, "growth_interval": 7, "_growth_tracker": 2})",
       "\"scale\" is string"},
      {R"({})", "empty"},
      {R"({"scale": 1024.0,)", "not valid JSON"},
  };
  for (const auto& [text, want] : bad) {
    write_text(dir / "bad.json", text);
    const fs::path out = dir / "bad_run";
    const auto r = run_mpsim(
        dir, kTrain + "--scaler-state " + quote((dir / "bad.json").string()) + " --out " + quote(out.string()));
    std::printf("%s -> exit %d: %s", text.c_str(), r.status, r.output.c_str());
    CHECK(r.status == 2);
    CHECK(r.output.find("bad.json") != std::string::npos);
    CHECK(r.output.find(want) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }
}

TEST_CASE("resuming from a cut checkpoint exits 2 naming it, nothing written", "[checkpoint_cli]") {
  ScratchDir dir("ck-cut");
  const fs::path run = dir / "run";
  REQUIRE(run_mpsim(dir, kTrain + "--scaler dynamic --out " + quote(run.string())).status == 0);
  const std::string bytes = slurp(run / "checkpoint.safetensors");
  write_text(dir / "cut.safetensors", bytes.substr(0, bytes.size() - 100));
  const fs::path out = dir / "resumed";
  const auto r = run_mpsim(dir,
                           "train --model lstm --policy mixed-fp16 --steps 6 --size 8 --batch 2 --scaler dynamic "
                           "--resume " +
                               quote((dir / "cut.safetensors").string()) + " --out " + quote(out.string()));
  std::printf("cut checkpoint -> exit %d: %s", r.status, r.output.c_str());
  CHECK(r.status == 2);
  CHECK(r.output.find("cut.safetensors: truncated checkpoint") != std::string::npos);
  CHECK_FALSE(fs::exists(out));
}
