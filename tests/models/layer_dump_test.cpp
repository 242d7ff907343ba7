// Tests of lib/mpsim/models/layer_dump.hpp: the dump of one step holds the gradients a plain run of the
// same step computes (bit for bit), every site with one row per call, the batch the step used, and under a
// rounding policy the rounded values and the per-site counts of the Precision of that step.
// (tests/python/test_sim_vs_torch.py compares the dump's contents with PyTorch.)
#include "catch_compat.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "io/test_files.hpp"
#include "models/models_test_util.hpp"
#include "mpsim/error.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "mpsim/models/layer_dump.hpp"

using namespace mpsim;

namespace {

nlohmann::json metadata_of(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  const nlohmann::json header = nlohmann::json::parse(bytes.substr(8, n));
  nlohmann::json meta = nlohmann::json::object();
  for (const auto& [k, v] : header.at("__metadata__").items()) meta[k] = nlohmann::json::parse(v.get<std::string>());
  return meta;
}

}  // namespace

TEST_CASE("a layer dump holds the step's gradients, sites and batch", "[layer_dump]") {
  test::ScratchDir dir("layer-dump");
  for (const std::string model : {"lstm", "ssd"}) {
    for (const std::string policy : {"fp32", "mixed-fp16"}) {
      models::LayerDumpOptions o;
      o.model = model;
      o.config.batch = 2;
      o.config.size = 8;
      o.seed = 3;
      o.batch_index = 5;
      o.policy = policy;
      o.loss_scale = 4.0f;
      const auto path = dir / (model + "-" + policy + ".safetensors");
      models::write_layer_dump(path, o);
      const auto src = io::TensorSource::open(path);
      const auto meta = metadata_of(path);

      // The same step, run here without the dump.
      auto m = nn::make_model(model, o.config, o.seed);
      nn::Precision prec(nn::parse_policy(policy));
      const auto params = m->params();
      modeltest::zero_grads(params);
      const double loss = m->forward_backward(o.batch_index, o.loss_scale, prec);
      std::size_t compared = 0, mismatches = 0;
      for (const auto& p : params) {
        const auto got = src.read_float(src.tensor("grad/" + p.name));
        REQUIRE(got.size() == p.grad.size());
        for (std::size_t i = 0; i < got.size(); ++i, ++compared)
          mismatches += std::memcmp(&got[i], &p.grad[i], sizeof(float)) != 0;
      }
      CHECK(meta["loss"].get<double>() == loss);

      // Every site, rows = calls; rounded/ and counts only where the policy rounds.
      std::size_t sites = 0, rounded = 0;
      for (const auto& s : meta["sites"]) {
        const std::string name = s["name"];
        const auto& t = src.tensor("site/" + name);
        CHECK(t.shape.size() == 2);
        CHECK(t.shape[0] == s["calls"].get<std::int64_t>());
        const bool rounds = policy != "fp32";
        CHECK(rounds == (meta["site_stats"].contains(name)));
        if (rounds) {
          ++rounded;
          const auto& st = prec.site_stats().at(name);
          CHECK(meta["site_stats"][name]["count"].get<std::uint64_t>() == st.count);
          CHECK(meta["site_stats"][name]["underflow"].get<std::uint64_t>() == st.underflow);
          CHECK(meta["site_stats"][name]["subnormal"].get<std::uint64_t>() == st.subnormal);
          CHECK(src.tensor("rounded/" + name).shape == t.shape);
        }
        ++sites;
      }
      if (model == "lstm") {
        const auto gates = src.tensor("site/lstm/gates_grad");
        CHECK(gates.shape == std::vector<std::int64_t>{32, 2 * 4 * 8});  // T = 32 steps of (B, 4H)
        CHECK(meta["inputs"].size() == 32);
        CHECK(meta["inputs"][0].size() == 2);
      } else {
        CHECK(src.tensor("batch/images").shape == std::vector<std::int64_t>{2, 1, 32, 32});
        CHECK(src.read_float(src.tensor("batch/images")) == src.read_float(src.tensor("site/conv1/in")));
        CHECK(meta["truths"].size() == 2);
      }
      std::printf(
          "%s under %s: %zu gradient values compared with a plain run of the step, %zu mismatches; %zu sites "
          "(%zu with counts)\n",
          model.c_str(), policy.c_str(), compared, mismatches, sites, rounded);
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("a layer dump with a bad option is an error naming it, nothing written", "[layer_dump]") {
  test::ScratchDir dir("layer-dump-bad");
  models::LayerDumpOptions o;
  o.model = "gpt";
  CHECK_THROWS_WITH(models::write_layer_dump(dir / "x.safetensors", o), Catch::Contains("'gpt'"));
  o.model = "lstm";
  o.policy = "mixed-fp17";
  CHECK_THROWS_WITH(models::write_layer_dump(dir / "x.safetensors", o), Catch::Contains("mixed-fp17"));
  CHECK(dir.files().empty());
}
