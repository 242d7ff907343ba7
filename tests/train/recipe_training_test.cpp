// Training under the scaling recipes (lib/mpsim/recipe as precision policies, lib/mpsim/train/trainer.cpp):
// a short lstm run per recipe family learns next to fp32 (the loss falls; printed beside fp32's), the
// per-role Stats are recorded, an ssd run under a block recipe stays finite, and a run under delayed
// scaling (amax history in the checkpoint) or nvfp4 (stochastic rounding offset) resumes bit for bit.
#include "catch_compat.hpp"

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mpsim/nn/model.hpp"
#include "mpsim/train/checkpoint.hpp"
#include "mpsim/train/trainer.hpp"

using namespace mpsim;
using namespace mpsim::train;
namespace fs = std::filesystem;

namespace {

fs::path scratch(const std::string& name) {
  static int n = 0;
  const fs::path p = fs::temp_directory_path() /
                     ("mpsim_recipe_train_" + std::to_string(::getpid()) + "_" + std::to_string(n++) + "_" + name);
  fs::remove_all(p);
  return p;
}

// The lines of a text file (steps.csv).
std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

TrainConfig config(const std::string& model, const std::string& policy, int steps) {
  TrainConfig c;
  c.model = model;
  c.policy = policy;
  c.scaler = "none";
  c.steps = steps;
  c.seed = 11;
  c.eval_every = steps;
  c.out = scratch("run");
  return c;
}

// The first step's loss from steps.csv (column 2).
double first_loss(const fs::path& out) {
  const auto rows = read_lines(out / "steps.csv");
  REQUIRE(rows.size() > 1);
  return std::stod(rows[1].substr(rows[1].find(',') + 1));
}

}  // namespace

TEST_CASE("the lstm learns under every recipe family, next to fp32", "[recipe_training]") {
  const int steps = 8;
  auto ref = config("lstm", "fp32", steps);
  const TrainSummary fp32 = run_training(ref, nn::make_model);
  const double start = first_loss(ref.out);
  std::printf("fp32: loss %.5f -> %.5f in %d steps, %.2f s\n", start, fp32.final_loss, steps, fp32.wall_seconds);
  for (const char* policy :
       {"fp8-none", "fp8-tensorwise-delayed", "fp8-tensorwise-current:power_2_scales=1", "fp8-rowwise",
        "fp8-rowwise-gw-hp", "fp8-blockwise", "mxfp8:scaling_mode=rceil", "mxfp6_e2m3", "mxfp4", "nvfp4"}) {
    auto c = config("lstm", policy, steps);
    const TrainSummary s = run_training(c, nn::make_model);
    const nlohmann::json ck = read_checkpoint(c.out / "checkpoint.safetensors").header;
    std::printf("%-40s loss %.5f -> %.5f (fp32 %+.5f), %.2f s\n", policy, first_loss(c.out), s.final_loss,
                s.final_loss - fp32.final_loss, s.wall_seconds);
    CHECK(std::isfinite(s.final_loss));
    CHECK(s.final_loss < start);
    CHECK(ck.contains("recipe_state"));
    fs::remove_all(c.out);
  }
  fs::remove_all(ref.out);
}

TEST_CASE("the ssd trains under a block recipe with its convolutions' operands quantized", "[recipe_training]") {
  auto c = config("ssd", "mxfp8", 2);
  const TrainSummary s = run_training(c, nn::make_model);
  std::printf("ssd under mxfp8: loss %.5f after 2 steps, %.2f s\n", s.final_loss, s.wall_seconds);
  CHECK(std::isfinite(s.final_loss));
  CHECK(!s.diverged);
  fs::remove_all(c.out);
}

TEST_CASE("resume under delayed scaling and nvfp4 equals the straight run bit for bit", "[recipe_training]") {
  for (const char* policy : {"fp8-tensorwise-delayed:amax_history_len=4", "nvfp4:seed=3"}) {
    INFO("policy " << policy);
    auto straight = config("lstm", policy, 6);
    straight.eval_every = 3;  // step 3, where the first run stops and evaluates, is an eval step of both
    auto first = straight;
    first.out = scratch("first");
    first.steps = 3;
    auto second = straight;
    second.out = scratch("second");
    second.resume = first.out / "checkpoint.safetensors";
    run_training(straight, nn::make_model);
    run_training(first, nn::make_model);
    run_training(second, nn::make_model);
    const auto all = read_lines(straight.out / "steps.csv");
    const auto head = read_lines(first.out / "steps.csv");
    const auto tail = read_lines(second.out / "steps.csv");
    REQUIRE(all.size() == 7);
    REQUIRE(head.size() == 4);
    REQUIRE(tail.size() == 4);
    int mismatches = 0;
    for (int i = 1; i <= 3; ++i) {
      mismatches += head[i] != all[i];
      mismatches += tail[i] != all[3 + i];
    }
    const auto a = read_checkpoint(straight.out / "checkpoint.safetensors");
    const auto b = read_checkpoint(second.out / "checkpoint.safetensors");
    REQUIRE(a.tensors.size() == b.tensors.size());
    std::size_t tensor_mismatches = 0;
    for (std::size_t t = 0; t < a.tensors.size(); ++t)
      tensor_mismatches +=
          std::memcmp(a.tensors[t].values.data(), b.tensors[t].values.data(), a.tensors[t].values.size() * 4) != 0;
    const nlohmann::json& ra = a.header.at("recipe_state");
    std::printf(
        "resume %s: 6 rows compared, %d differ; %zu tensors, %zu differ; %zu delayed-scaling states, sr offset %s\n",
        policy, mismatches, a.tensors.size(), tensor_mismatches, ra.at("delayed").size(),
        ra.at("sr_offset").dump().c_str());
    CHECK(mismatches == 0);
    CHECK(tensor_mismatches == 0);
    CHECK(ra == b.header.at("recipe_state"));
    if (std::string(policy).starts_with("fp8")) CHECK(ra.at("delayed").size() > 0);
    else CHECK(ra.at("sr_offset").get<std::uint64_t>() > 0);
    for (const auto& d : {straight.out, first.out, second.out}) fs::remove_all(d);
  }
}

TEST_CASE("an lstm run under mixed-fp16:mma=h100 is finite and the same bits with 1 and 2 threads",
          "[recipe_training]") {
  // The GEMMs add as H100's fp16 tensor core does (nn/matmul.hpp mma_matmul); --threads reaches mma::gemm
  // (trainer.cpp), whose outputs are each computed by one thread in one order (mma/dot.hpp).
  auto one = config("lstm", "mixed-fp16:mma=h100", 2);
  auto two = one;
  two.out = scratch("two");
  two.threads = 2;
  auto plain = config("lstm", "mixed-fp16", 2);
  const TrainSummary s1 = run_training(one, nn::make_model);
  const TrainSummary s2 = run_training(two, nn::make_model);
  const TrainSummary sp = run_training(plain, nn::make_model);
  const auto r1 = read_lines(one.out / "steps.csv"), r2 = read_lines(two.out / "steps.csv");
  const auto a = read_checkpoint(one.out / "checkpoint.safetensors"),
             b = read_checkpoint(two.out / "checkpoint.safetensors");
  const auto p = read_checkpoint(plain.out / "checkpoint.safetensors");
  REQUIRE(r1.size() == 3);
  REQUIRE(a.tensors.size() == b.tensors.size());
  int row_mismatches = 0;
  for (std::size_t i = 0; i < r1.size(); ++i) row_mismatches += r1[i] != r2[i];
  std::size_t tensor_mismatches = 0, differ_from_plain = 0;
  for (std::size_t t = 0; t < a.tensors.size(); ++t) {
    tensor_mismatches +=
        std::memcmp(a.tensors[t].values.data(), b.tensors[t].values.data(), a.tensors[t].values.size() * 4) != 0;
    differ_from_plain +=
        std::memcmp(a.tensors[t].values.data(), p.tensors[t].values.data(), a.tensors[t].values.size() * 4) != 0;
  }
  std::printf(
      "mixed-fp16:mma=h100: loss %.7f after 2 steps (mixed-fp16 %.7f); steps.csv rows differing between 1 and 2 "
      "threads %d of %zu; checkpoint tensors differing %zu of %zu (from mixed-fp16's: %zu); %.2f s and %.2f s\n",
      s1.final_loss, sp.final_loss, row_mismatches, r1.size(), tensor_mismatches, a.tensors.size(), differ_from_plain,
      s1.wall_seconds, s2.wall_seconds);
  CHECK(std::isfinite(s1.final_loss));
  CHECK(!s1.diverged);
  CHECK(row_mismatches == 0);
  CHECK(tensor_mismatches == 0);
  CHECK(read_checkpoint(one.out / "checkpoint.safetensors").header.at("policy") == "mixed-fp16:mma=h100");
  CHECK(differ_from_plain > 0);  // the unit's truncation changed the weights
  for (const auto& d : {one.out, two.out, plain.out}) fs::remove_all(d);
}
