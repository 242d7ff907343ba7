// Training-step speed under each scaling recipe against mixed-fp16 (issue 34: within 2x of the mixed-fp16
// step). One step = forward + backward + optimiser update (+ the recipe's end of step). The policies take
// turns, round after round, in one process, so that a load that changes over time falls on all of them; the
// median of the rounds is reported with its ratio to mixed-fp16's.
//   bench_recipes [steps_per_round=3] [rounds=7]   prints a table and writes out/bench/bench_recipes.csv
// MPSIM_BENCH_POLICIES="mixed-fp16;mixed-fp16:mma=h100" and MPSIM_BENCH_MODELS="lstm" (';'-separated, the
// first policy the base of the ratios) time other policies the same way: the matrix-unit option (docs/mma.md).
// A policy written "fresh:POLICY" runs with every matrix-unit B operand decoded afresh at each GEMM
// (nn::set_mma_operand_reuse(false)), the cost before the decoded recurrent weight was reused.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/nn/matmul.hpp"
#include "mpsim/nn/model.hpp"
#include "mpsim/nn/policy.hpp"
#include "mpsim/train/optimizer.hpp"
#include "mpsim/train/trainer.hpp"

namespace {

struct Runner {
  std::string policy;
  std::unique_ptr<mpsim::nn::Model> model;
  std::vector<mpsim::nn::Param> params;
  std::vector<std::span<float>> values, grads;
  std::unique_ptr<mpsim::train::Optimizer> opt;
  std::unique_ptr<mpsim::nn::Precision> prec;
  std::uint64_t batch = 0;
  std::vector<double> ms;  // per step, one entry per round

  bool reuse = true;

  Runner(const std::string& model_name, std::string p) : policy(std::move(p)) {
    if (policy.rfind("fresh:", 0) == 0) reuse = false;
    const std::string spec = reuse ? policy : policy.substr(6);
    model = mpsim::nn::make_model(model_name, {}, 1);
    params = model->params();
    std::vector<std::size_t> sizes;
    for (auto& q : params) {
      sizes.push_back(q.value.size());
      values.push_back(q.value);
      grads.push_back(q.grad);
    }
    opt = std::make_unique<mpsim::train::Optimizer>(
        mpsim::train::resolve_optimizer(mpsim::train::model_default_optimizer(), model->hints()), sizes);
    prec = std::make_unique<mpsim::nn::Precision>(mpsim::nn::parse_policy(spec));
  }

  void round(int steps) {
    const float scale = policy.find("mixed-fp16") != std::string::npos ? 1024.0f : 1.0f;
    mpsim::nn::set_mma_operand_reuse(reuse);
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) {
      for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
      prec->reset_stats();
      model->forward_backward(batch++, scale, *prec);
      prec->end_step();
      for (auto& g : grads)
        for (float& x : g) x *= 1.0f / scale;
      opt->step(values, grads);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps);
  }

  double median() const {
    std::vector<double> v = ms;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

}  // namespace

int main(int argc, char** argv) {
  // ./run bench passes its own arguments (--benchmark_filter=...) to every benchmark: numbers only here.
  auto number = [&](int i, int fallback) { return argc > i && std::atoi(argv[i]) > 0 ? std::atoi(argv[i]) : fallback; };
  const int steps = number(1, 3);
  const int rounds = number(2, 7);
  std::vector<std::string> policies{"mixed-fp16",
                                    "fp8-none",
                                    "fp8-tensorwise-delayed",
                                    "fp8-tensorwise-current",
                                    "fp8-rowwise",
                                    "fp8-rowwise-gw-hp",
                                    "fp8-blockwise",
                                    "mxfp8",
                                    "mxfp6_e2m3",
                                    "mxfp4",
                                    "nvfp4"};
  auto list = [](const char* env, std::vector<std::string>& out) {
    const char* v = std::getenv(env);
    if (!v || !*v) return;
    out.clear();
    for (std::string_view rest = v; !rest.empty();) {
      const auto semi = rest.find(';');
      if (semi != 0) out.emplace_back(rest.substr(0, semi));
      rest = semi == std::string_view::npos ? std::string_view{} : rest.substr(semi + 1);
    }
  };
  list("MPSIM_BENCH_POLICIES", policies);
  std::vector<std::string> models{"lstm", "ssd"};
  list("MPSIM_BENCH_MODELS", models);
  std::filesystem::create_directories("out/bench");
  std::ofstream csv("out/bench/bench_recipes.csv");
  csv << "model,policy,median_ms_per_step,ratio_to_mixed_fp16,rounds,steps_per_round\n";
  for (const std::string& model : models) {
    std::vector<Runner> runners;
    for (const auto& p : policies) runners.emplace_back(model, p);
    for (auto& r : runners) r.round(1);  // warm-up, not counted
    for (auto& r : runners) r.ms.clear();
    for (int k = 0; k < rounds; ++k)
      for (auto& r : runners) r.round(steps);
    const double base = runners.front().median();
    std::printf("%s: ms per training step (median of %d rounds of %d steps, policies alternating)\n", model.c_str(),
                rounds, steps);
    const std::string& base_name = runners.front().policy;
    for (const auto& r : runners) {
      std::printf("  %-40s %8.2f ms  %5.2fx %s\n", r.policy.c_str(), r.median(), r.median() / base, base_name.c_str());
      csv << model << ',' << r.policy << ',' << r.median() << ',' << r.median() / base << ',' << rounds << ',' << steps
          << '\n';
    }
  }
  return 0;
}
