// Matrix-unit GEMM speed (lib/mpsim/mma) against Eigen's fp32 GEMM on the same shapes, in the same run:
// 1024^3 and the shapes of the simulator's layers. Reports MAC/s (items per second) for both; the ratio is
// their quotient. The models decode each operand once and run the block code per output (scalar, threaded).
#include <benchmark/benchmark.h>

#include <Eigen/Dense>
#include <random>
#include <string>
#include <vector>

#include "mpsim/format/round.hpp"
#include "mpsim/mma/dot.hpp"

namespace {

std::vector<double> random_matrix(std::size_t n, const mpsim::Format& f, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = mpsim::decode(mpsim::round_bits(dist(rng), f), f);
  return v;
}

void eigen_fp32(benchmark::State& state) {
  const auto M = state.range(0), N = state.range(1), K = state.range(2);
  Eigen::MatrixXf A = Eigen::MatrixXf::Random(M, K), B = Eigen::MatrixXf::Random(K, N), C(M, N);
  for (auto _ : state) {
    C.noalias() = A * B;
    benchmark::DoNotOptimize(C.data());
  }
  state.SetItemsProcessed(state.iterations() * M * N * K);
}

void model(benchmark::State& state, const std::string& name, const mpsim::Format& in, const mpsim::Format& out) {
  const auto M = static_cast<std::size_t>(state.range(0)), N = static_cast<std::size_t>(state.range(1)),
             K = static_cast<std::size_t>(state.range(2));
  const auto unit = mpsim::mma::matrix_unit(name, in, out);
  const auto A = random_matrix(M * K, in, 1), B = random_matrix(K * N, in, 2);
  std::vector<double> D(M * N);
  for (auto _ : state) {
    mpsim::mma::gemm(unit, M, N, K, A.data(), B.data(), nullptr, D.data());
    benchmark::DoNotOptimize(D.data());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(M * N * K));
  state.SetLabel(unit.name);
}

// 1024^3, then 256 x 256 x 256 and 64 x 512 x 256 (the order of the simulator's layer GEMMs).
void shapes(benchmark::internal::Benchmark* b) {
  b->Args({1024, 1024, 1024})
      ->Args({256, 256, 256})
      ->Args({64, 512, 256})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime();
}

}  // namespace

BENCHMARK(eigen_fp32)->Apply(shapes);
BENCHMARK_CAPTURE(model, h100_fp16, std::string("h100"), mpsim::fp16(), mpsim::fp32())->Apply(shapes);
BENCHMARK_CAPTURE(model, h100_bf16, std::string("h100"), mpsim::bf16(), mpsim::fp32())->Apply(shapes);
BENCHMARK_CAPTURE(model, h100_fp8, std::string("h100"), mpsim::fp8_e4m3(), mpsim::fp32())->Apply(shapes);
BENCHMARK_CAPTURE(model, b200_fp8, std::string("b200"), mpsim::fp8_e4m3(), mpsim::fp32())->Apply(shapes);
BENCHMARK_MAIN();
