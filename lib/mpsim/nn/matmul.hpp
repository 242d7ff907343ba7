// The matrix products of the layers, with the precision policy's choice of accumulator.
//
// accumulate == nullptr: Eigen's product, accumulating in the scalar type (fp32 for the models), in
// Eigen's blocked order. Otherwise (float only) the product accumulates in that format, as a GEMM that
// keeps its running sums in fp16 does (Micikevicius et al., Mixed Precision Training, ICLR 2018, §3.2:
// "products ... accumulated into an FP32 output" is the alternative this switch removes): every output
// is a running sum s = 0; s = round(s + a_mk * b_kn) for k = 0, 1, ..., K-1 in that order, one rounding
// per multiply-add (nearest-even, through the bulk engine). Each multiply-add is formed exactly in
// double first: a product of two floats has at most 48 significant bits, and with fp16 inputs (the
// policy's matmul_input) a product has 22 and its sum with an fp16 running sum is exact in double
// unless the product is too small to move the fp16 result, so the result is the correctly rounded fused
// multiply-add in the low format. With wider inputs a rare double rounding is possible.
#pragma once

#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/nn/eigen.hpp"

namespace mpsim::nn {

// dst (M, N) = a (M, K) · b (K, N); a and b are Eigen expressions (maps, transposes); dst is resized
// if it is a matrix, or must have the size if it is a map.
template <class Dst, class A, class B>
void matmul(Dst&& dst, const A& a, const B& b, const Format* accumulate) {
  using T = typename std::decay_t<Dst>::Scalar;
  if constexpr (std::is_same_v<T, float>) {
    if (accumulate) {
      const std::int64_t M = a.rows(), K = a.cols(), N = b.cols();
      std::vector<double> sum(static_cast<std::size_t>(M * N), 0.0);
      for (std::int64_t k = 0; k < K; ++k) {
        for (std::int64_t m = 0; m < M; ++m) {
          const double av = a.coeff(m, k);
          double* row = sum.data() + m * N;
          for (std::int64_t n = 0; n < N; ++n) row[n] += av * static_cast<double>(b.coeff(k, n));
        }
        BulkOptions opt;
        opt.threads = 1;  // the bits must not depend on the thread count, and the machine is shared
        round_array(std::span<const double>(sum), std::span<double>(sum), *accumulate, Rounding{}, nullptr, opt);
      }
      if constexpr (requires { dst.resize(M, N); }) dst.resize(M, N);
      for (std::int64_t m = 0; m < M; ++m)
        for (std::int64_t n = 0; n < N; ++n) dst(m, n) = static_cast<float>(sum[static_cast<std::size_t>(m * N + n)]);
      return;
    }
  }
  dst.noalias() = a * b;
}

}  // namespace mpsim::nn
