// Training-step speed: one step (forward + backward + optimiser update) of each model under fp32 and
// under mixed-fp16, in the same process (issue 6: mixed-fp16 step <= 1.6 x the fp32 step).
// The emulated policy rounds through the bulk engine at every site; fp32 leaves the sites alone.
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "mpsim/nn/model.hpp"
#include "mpsim/nn/policy.hpp"
#include "mpsim/train/optimizer.hpp"
#include "mpsim/train/trainer.hpp"

namespace {

void train_step(benchmark::State& state, const std::string& model_name, const std::string& policy) {
  auto model = mpsim::nn::make_model(model_name, {}, 1);
  auto params = model->params();
  std::vector<std::size_t> sizes;
  std::vector<std::span<float>> values, grads;
  for (auto& p : params) {
    sizes.push_back(p.value.size());
    values.push_back(p.value);
    grads.push_back(p.grad);
  }
  const auto opt_config = mpsim::train::resolve_optimizer(mpsim::train::model_default_optimizer(), model->hints());
  mpsim::train::Optimizer opt(opt_config, sizes);
  mpsim::nn::Precision prec(mpsim::nn::parse_policy(policy));
  const float scale = policy == "fp32" ? 1.0f : 1024.0f;
  std::uint64_t batch = 0;
  for (auto _ : state) {
    for (auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
    prec.reset_stats();
    benchmark::DoNotOptimize(model->forward_backward(batch++, scale, prec));
    for (auto& g : grads)
      for (float& x : g) x *= 1.0f / scale;
    opt.step(values, grads);
  }
  state.SetLabel(model_name + " " + policy);
}

}  // namespace

BENCHMARK_CAPTURE(train_step, ssd_fp32, std::string("ssd"), std::string("fp32"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(train_step, ssd_mixed_fp16, std::string("ssd"), std::string("mixed-fp16"))
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(train_step, lstm_fp32, std::string("lstm"), std::string("fp32"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(train_step, lstm_mixed_fp16, std::string("lstm"), std::string("mixed-fp16"))
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
