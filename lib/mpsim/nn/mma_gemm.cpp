#include <fmt/format.h>

#include <cmath>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/mma/dot.hpp"
#include "mpsim/nn/matmul.hpp"

namespace mpsim::nn {
namespace {

// The scale of element (r, k) of an operand: one per tensor or one per row (the recipes the policy lets
// reach a matrix unit, policy.cpp; a scale varying along K would need a block-scaled unit, which no model has).
double scale_of(const OperandScales& s, std::size_t r) {
  if (s.scales.empty()) return 1.0;
  if (s.scale_cols != 1 || (s.scale_rows != 1 && s.scales.size() <= r))
    throw Error("mma: an operand's scales vary along the reduction axis; the matrix-unit models take per-tensor "
                "or per-row scales only");
  return s.scale_rows == 1 ? s.scales[0] : s.scales[r];
}

// e5m3 holds every fp8_e4m3 and fp8_e5m2 value exactly: the unit's input under HYBRID's dgrad and wgrad,
// whose operands are e5m2 (dy) times e4m3 (x, w). Not a recorded instruction (docs/mma.md).
const Format& fp8_either() {
  static const Format f = make_format("fp8_e4m3|fp8_e5m2", 5, 3, 15);
  return f;
}

}  // namespace

void mma_matmul(float* D, const float* A, const float* Bt, std::size_t M, std::size_t N, std::size_t K,
                const MmaOptions& o, bool grad, const OperandScales& sa, const OperandScales& sb) {
  const bool mixed = !(sa.format == sb.format);
  if (mixed && !((sa.format == fp8_e4m3() && sb.format == fp8_e5m2()) || (sa.format == fp8_e5m2() && sb.format == fp8_e4m3())))
    throw Error(fmt::format("mma: operands in {} and {}: a matrix unit takes one input format (or e4m3 with e5m2)",
                            sa.format.name, sb.format.name));
  mma::MatrixUnit unit = mma::matrix_unit(o.model, mixed ? fp8_e4m3() : sa.format, fp32());
  if (mixed) unit.input = fp8_either();
  unit.promote_every = grad ? o.promote_grad : o.promote_fprop;
  mma::validate(unit);
  std::vector<double> a(M * K), b(K * N), d(M * N);
  for (std::size_t i = 0; i < M; ++i) {
    const double s = scale_of(sa, i);
    for (std::size_t k = 0; k < K; ++k) a[i * K + k] = static_cast<double>(A[i * K + k]) * s;
  }
  for (std::size_t j = 0; j < N; ++j) {
    const double s = scale_of(sb, j);
    for (std::size_t k = 0; k < K; ++k) b[k * N + j] = static_cast<double>(Bt[j * K + k]) * s;
  }
  mma::round_to_format(a, sa.format);
  mma::round_to_format(b, sb.format);
  mma::gemm(unit, M, N, K, a.data(), b.data(), nullptr, d.data(), o.threads);
  for (std::size_t i = 0; i < M; ++i) {
    const double si = scale_of(sa, i);
    for (std::size_t j = 0; j < N; ++j)
      D[i * N + j] = static_cast<float>(d[i * N + j] / (si * scale_of(sb, j)));
  }
}

}  // namespace mpsim::nn
