// Training-step speed under each scaling recipe against mixed-fp16 (issue 34: within 2x of the mixed-fp16
// step). One step = forward + backward + optimiser update (+ the recipe's end of step). The policies take
// turns, round after round, in one process, so that a load that changes over time falls on all of them; the
// median of the rounds is reported with its ratio to mixed-fp16's.
//   bench_recipes [steps_per_round=3] [rounds=7]   prints a table and writes out/bench/bench_recipes.csv
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

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

  Runner(const std::string& model_name, std::string p) : policy(std::move(p)) {
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
    prec = std::make_unique<mpsim::nn::Precision>(mpsim::nn::parse_policy(policy));
  }

  void round(int steps) {
    const float scale = policy == "mixed-fp16" ? 1024.0f : 1.0f;
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
  const std::vector<std::string> policies{"mixed-fp16",    "fp8-none",        "fp8-tensorwise-delayed",
                                          "fp8-tensorwise-current", "fp8-rowwise", "fp8-rowwise-gw-hp",
                                          "fp8-blockwise", "mxfp8",           "mxfp6_e2m3",
                                          "mxfp4",         "nvfp4"};
  std::filesystem::create_directories("out/bench");
  std::ofstream csv("out/bench/bench_recipes.csv");
  csv << "model,policy,median_ms_per_step,ratio_to_mixed_fp16,rounds,steps_per_round\n";
  for (const std::string model : {"lstm", "ssd"}) {
    std::vector<Runner> runners;
    for (const auto& p : policies) runners.emplace_back(model, p);
    for (auto& r : runners) r.round(1);  // warm-up, not counted
    for (auto& r : runners) r.ms.clear();
    for (int k = 0; k < rounds; ++k)
      for (auto& r : runners) r.round(steps);
    const double base = runners.front().median();
    std::printf("%s: ms per training step (median of %d rounds of %d steps, policies alternating)\n", model.c_str(),
                rounds, steps);
    for (const auto& r : runners) {
      std::printf("  %-24s %8.2f ms  %5.2fx mixed-fp16\n", r.policy.c_str(), r.median(), r.median() / base);
      csv << model << ',' << r.policy << ',' << r.median() << ',' << r.median() / base << ',' << rounds << ',' << steps
          << '\n';
    }
  }
  return 0;
}
