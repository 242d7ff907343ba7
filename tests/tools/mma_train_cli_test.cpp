// `mpsim train --policy ...:mma=MODEL` (nn/policy.hpp, docs/mma.md "In the training simulator"): a run under
// the matrix-unit option records its policy; bad option values exit 2 naming the key, nothing written.
#include "catch_compat.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "../io/test_files.hpp"
#include "run_mpsim.hpp"

using mpsim::test::quote;
using mpsim::test::run_mpsim;
using mpsim::test::ScratchDir;
namespace fs = std::filesystem;

TEST_CASE("train under mma=h100 runs; bad mma values exit 2 naming the key", "[mma_train_cli_test]") {
  ScratchDir dir("mma-train");
  const fs::path run = dir / "run";
  const std::string train = "train --model lstm --steps 2 --size 8 --batch 2 --policy ";
  const auto ok = run_mpsim(
      dir, train + quote("fp8-tensorwise-delayed:mma=h100,mma_promote_grad=128") + " --out " + quote(run.string()));
  std::printf("fp8-tensorwise-delayed:mma=h100,mma_promote_grad=128 -> exit %d: %s", ok.status, ok.output.c_str());
  REQUIRE(ok.status == 0);
  std::ifstream f(run / "run.json");
  const nlohmann::json j = nlohmann::json::parse(f);
  const std::string dumped = j.dump();
  CHECK(dumped.find("mma=h100") != std::string::npos);
  CHECK(dumped.find("mma_promote_grad=128") != std::string::npos);
  const struct {
    const char* policy;
    const char* names;
  } bad[] = {
      {"mixed-fp16:mma=h900", "mma: unknown model 'h900'"},
      {"mixed-fp16:mma=h100,mma_promote=100", "mma_promote_fprop=100 is not a multiple"},
      {"mixed-fp16:mma=h100,mma_promote_grad=-16", "mma_promote_grad must be >= 0"},
      {"fp8-blockwise:mma=h100", "recipe fp8-blockwise"},
      {"mixed-fp16-acc16:mma=h100", "mma and accumulate"},
  };
  for (const auto& b : bad) {
    const fs::path out = dir / "bad";
    const auto r = run_mpsim(dir, train + quote(b.policy) + " --out " + quote(out.string()));
    std::printf("%s -> exit %d: %s", b.policy, r.status, r.output.c_str());
    CHECK(r.status == 2);
    CHECK(r.output.find(b.names) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }
}
