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
//
// GemmContext::mma (policy key mma=MODEL): the products add as a matrix-unit model does instead, through
// mma::gemm (mma_matmul below; docs/mma.md "In the training simulator").
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

// The GEMMs added as a matrix unit adds (policy key mma=MODEL, docs/mma.md "In the training simulator"):
// products through mma::gemm (lib/mpsim/mma/dot.hpp, the code `mpsim gemm` runs) with fp32 output.
struct MmaOptions {
  std::string model;      // "h100", ... (mma::model_names)
  Format input;           // the unit's input format without a recipe (the policy's matmul_input)
  int promote_fprop = 0;  // promote_every of the forward GEMMs (0: the unit's own chain along K)
  int promote_grad = 0;   // the same for dgrad and wgrad
  int threads = 1;        // mma::gemm's threads (the results do not depend on them)
};

// What a recipe's quantization of one operand gives the matrix unit: the element format and the scales
// (recipe::QuantizedOperand::scales, scale_rows x scale_cols of them; empty: 1).
struct OperandScales {
  Format format;
  std::vector<double> scales;
  std::size_t scale_rows = 0, scale_cols = 0;
};

// The product of a (M, K) and b^T (N, K), both row-major floats, under the unit of `o`: the operands are
// multiplied by their scales (q = value * scale, exact for fp8 values whose q / scale was a normal float),
// rounded to their formats with round-to-nearest-even (a no-op for values already in them), multiplied and
// added by mma::gemm, and the scales removed from each fp32 output: d / (scale_a(i) * scale_b(j)), in double,
// rounded to float (TE's scale_inv in the GEMM epilogue). `grad`: the dgrad / wgrad promotion. mma_gemm.cpp.
void mma_matmul(float* D, const float* A, const float* Bt, std::size_t M, std::size_t N, std::size_t K,
                const MmaOptions& o, bool grad, const OperandScales& sa, const OperandScales& sb);

// mma_matmul keeps the decoding of the last few B operands (per thread, keyed by their bits) and reuses it when
// the same B comes again: the lstm's recurrent weight at every time step. Off: every call decodes B afresh (the
// same bits; for the benchmark and the test that compare the two).
void set_mma_operand_reuse(bool on);

// What quantizes a GEMM's operands under a scaling recipe (Precision, policy.hpp): `data` is the operand as
// a row-major rows x cols matrix whose rows run along the reduction axis; it is replaced by the values the
// recipe's GEMM multiplies (lib/mpsim/recipe).
class GemmQuantizer {
 public:
  // scales: if not null, receives the operand's element format and scales (for mma_matmul).
  virtual void quantize_operand(std::string_view layer, recipe::Role role, float* data, std::size_t rows,
                                std::size_t cols, OperandScales* scales = nullptr) = 0;

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
  const MmaOptions* mma = nullptr;                               // not null: the products add as this matrix unit does
  GemmContext(const Format* acc = nullptr) : accumulate(acc) {}  // NOLINT: implicit on purpose
  GemmContext(const Format* acc, GemmQuantizer* q, std::string name, const MmaOptions* unit = nullptr)
      : accumulate(acc), quantizer(q), layer(std::move(name)), mma(unit) {}
  // The context of one of a layer's several weights ("lstm" -> "lstm/hh").
  GemmContext sub(std::string_view part) const { return {accumulate, quantizer, layer + "/" + std::string(part), mma}; }
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
    if (g.mma) {
      Mat<float> qa = a;
      Mat<float> qb = b.transpose();
      OperandScales sa, sb;
      if (g.quantizer) {
        g.quantizer->quantize_operand(g.layer, role_a, qa.data(), static_cast<std::size_t>(qa.rows()),
                                      static_cast<std::size_t>(qa.cols()), &sa);
        g.quantizer->quantize_operand(g.layer, role_b, qb.data(), static_cast<std::size_t>(qb.rows()),
                                      static_cast<std::size_t>(qb.cols()), &sb);
      } else {
        sa.format = sb.format = g.mma->input;
      }
      Mat<float> out(qa.rows(), qb.rows());
      const bool grad = role_a != recipe::Role::fprop_x && role_a != recipe::Role::fprop_w;
      mma_matmul(out.data(), qa.data(), qb.data(), static_cast<std::size_t>(qa.rows()),
                 static_cast<std::size_t>(qb.rows()), static_cast<std::size_t>(qa.cols()), *g.mma, grad, sa, sb);
      if constexpr (requires { dst.resize(out.rows(), out.cols()); }) dst.resize(out.rows(), out.cols());
      dst = out;
      return;
    }
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
