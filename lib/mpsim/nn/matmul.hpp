// The matrix products of the layers, with the precision policy's choice of accumulator.
//
// accumulate == nullptr: Eigen's product, accumulating in the scalar type (fp32 for the models), in
// Eigen's blocked order. Otherwise (float only) the product accumulates in that format, as a GEMM that
// keeps its running sums in fp16 does (Micikevicius et al., Mixed Precision Training, ICLR 2018, §3:
// fp16 products "accumulated into an FP32 output" is what this switch removes): every output is a
// running sum s = 0; s = round(s + a_mk * b_kn) for k = 0, 1, ..., K-1 in that order, the product and
// the addition in fp32 and the result rounded to the low format (nearest-even, through the bulk
// engine): an fp32 multiply-add unit writing an fp16 accumulator. With fp16 inputs (the policy's
// matmul_input) the product is exact (22 significant bits) and so is the fp32 sum unless the two terms
// lie more than about 2^13 apart; only then can the result differ from a fused fp16 multiply-add, by a
// double rounding at a tie (tests/nn/matmul_test.cpp counts it: 1 of 30 sums of 700 terms). The sums
// are rounded once per k over the whole output through the vector path: about 30 times faster than
// rounding a double sum per element, which is what makes training runs with it affordable.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/nn/eigen.hpp"
#include "mpsim/recipe/recipe.hpp"

namespace mpsim::nn {

// What quantizes a GEMM's operands under a scaling recipe (Precision, policy.hpp): `data` is the operand as
// a row-major rows x cols matrix whose rows run along the reduction axis; it is replaced by the values the
// recipe's GEMM multiplies (lib/mpsim/recipe).
class GemmQuantizer {
 public:
  virtual void quantize_operand(std::string_view layer, recipe::Role role, float* data, std::size_t rows,
                                std::size_t cols) = 0;

 protected:
  ~GemmQuantizer() = default;
};

// How a layer's GEMMs run: the accumulator (null: fp32) and, under a scaling recipe, the quantizer of their
// operands with the layer's name (the key of its delayed-scaling state and of its Stats sites). Built from
// a bare accumulator format, so callers that pass `prec.accumulate_format()` or nullptr keep working.
struct GemmContext {
  const Format* accumulate = nullptr;
  GemmQuantizer* quantizer = nullptr;
  std::string layer;
  GemmContext(const Format* acc = nullptr) : accumulate(acc) {}  // NOLINT: implicit on purpose
  GemmContext(const Format* acc, GemmQuantizer* q, std::string name)
      : accumulate(acc), quantizer(q), layer(std::move(name)) {}
  // The context of one of a layer's several weights ("lstm" -> "lstm/hh").
  GemmContext sub(std::string_view part) const { return {accumulate, quantizer, layer + "/" + std::string(part)}; }
};

// dst (M, N) = a (M, K) · b (K, N); a and b are Eigen expressions (maps, transposes); dst is resized
// if it is a matrix, or must have the size if it is a map.
template <class Dst, class A, class B>
void matmul(Dst&& dst, const A& a, const B& b, const Format* accumulate) {
  using T = typename std::decay_t<Dst>::Scalar;
  if constexpr (std::is_same_v<T, float>) {
    if (accumulate) {
      const std::int64_t M = a.rows(), K = a.cols(), N = b.cols();
      // Dense row-major copies: the inner loop then runs along contiguous rows of B and of the sums.
      const Mat<float> Af = a, Bf = b;
      Mat<float> sum = Mat<float>::Zero(M, N);
      BulkOptions opt;
      opt.threads = 1;  // the bits must not depend on the thread count, and the machine is shared
      for (std::int64_t k = 0; k < K; ++k) {
        const float* brow = Bf.data() + k * N;
        for (std::int64_t m = 0; m < M; ++m) {
          const float av = Af(m, k);
          float* row = sum.data() + m * N;
          for (std::int64_t n = 0; n < N; ++n) row[n] += av * brow[n];
        }
        round_array(std::span<const float>(sum.data(), static_cast<std::size_t>(M * N)),
                    std::span<float>(sum.data(), static_cast<std::size_t>(M * N)), *accumulate, Rounding{}, nullptr,
                    opt);
      }
      if constexpr (requires { dst.resize(M, N); }) dst.resize(M, N);
      dst = sum;
      return;
    }
  }
  dst.noalias() = a * b;
}

// dst = a (M, K) · b (K, N) with the operands in their GEMM roles: without a quantizer the plain product
// above; with one, a is quantized as `role_a` along its rows and b^T as `role_b` along its rows (both run
// along K), and the product of the quantized values accumulates as the context says.
template <class Dst, class A, class B>
void matmul(Dst&& dst, const A& a, const B& b, const GemmContext& g, recipe::Role role_a, recipe::Role role_b) {
  using T = typename std::decay_t<Dst>::Scalar;
  if constexpr (std::is_same_v<T, float>) {
    if (g.quantizer) {
      Mat<float> aq = a;
      Mat<float> bt = b.transpose();
      g.quantizer->quantize_operand(g.layer, role_a, aq.data(), static_cast<std::size_t>(aq.rows()),
                                    static_cast<std::size_t>(aq.cols()));
      g.quantizer->quantize_operand(g.layer, role_b, bt.data(), static_cast<std::size_t>(bt.rows()),
                                    static_cast<std::size_t>(bt.cols()));
      matmul(dst, aq, bt.transpose(), g.accumulate);
      return;
    }
  }
  matmul(dst, a, b, g.accumulate);
}

}  // namespace mpsim::nn
