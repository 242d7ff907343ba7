// Speed of block-format quantize-dequantize (lib/mpsim/format/block.hpp) against per-tensor fp8 through
// the bulk engine, timed in the same run: 2^26 float32 values N(0,1) times 2^U(-20, 4) (gradient-like),
// as rows of 4096; the engine's default threads. Per-tensor fp8 = one amax pass, x * S, round_array
// (simulate mode, fp8_e4m3), x / S: what Transformer Engine's current scaling does to a tensor.
// Prints the median ms of 7 passes per case and the ratio to per-tensor fp8.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "mpsim/format/block.hpp"
#include "mpsim/format/bulk.hpp"

using namespace mpsim;

namespace {

constexpr std::size_t kN = std::size_t{1} << 26;
constexpr std::size_t kRow = 4096;
constexpr int kRepetitions = 7;

double median_ms(const std::function<void()>& f) {
  std::vector<double> t;
  for (int i = 0; i < kRepetitions; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main() {
  std::vector<float> x(kN), y(kN), tmp(kN);
  std::mt19937_64 rng(26);
  std::normal_distribution<float> g;
  std::uniform_real_distribution<float> u(-20.0f, 4.0f);
  for (auto& v : x) v = g(rng) * std::exp2(u(rng));

  const double per_tensor = median_ms([&] {
    float amax = 0;
    for (float v : x) amax = std::max(amax, std::fabs(v));
    const float s = static_cast<float>(fp8_e4m3().max_finite) / amax;
    for (std::size_t i = 0; i < kN; ++i) tmp[i] = x[i] * s;
    round_array(std::span<const float>(tmp), std::span<float>(tmp), fp8_e4m3());
    for (std::size_t i = 0; i < kN; ++i) y[i] = tmp[i] / s;
  });
  std::printf("%-26s %9s %8s\n", "case (2^26 float32)", "ms", "ratio");
  std::printf("%-26s %9.1f %8.2f\n", "per-tensor fp8_e4m3", per_tensor, 1.0);
  for (const char* name : {"mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp4_e2m1", "nvfp4"}) {
    const BlockFormat f = parse_block_format(name);
    const double t = median_ms([&] { round_blocks(x, y, kRow, f); });
    std::printf("%-26s %9.1f %8.2f\n", name, t, t / per_tensor);
  }
  const BlockFormat mx = parse_block_format("mxfp8_e4m3");
  const double sr = median_ms([&] { round_blocks(x, y, kRow, mx, Rounding::stochastic(1)); });
  std::printf("%-26s %9.1f %8.2f\n", "mxfp8_e4m3 stochastic", sr, sr / per_tensor);
  BlockStats st;
  const double with_stats = median_ms([&] { quantize_blocks(x, kRow, mx, {}, &st); });
  std::printf("%-26s %9.1f %8.2f\n", "mxfp8_e4m3 quantize+stats", with_stats, with_stats / per_tensor);
  return 0;
}
