#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/mma/dot.hpp"
#include "mpsim/nn/matmul.hpp"

namespace mpsim::nn {
namespace {

// The scale of element (r, k) of an operand: one per tensor or one per row (the recipes the policy lets
// reach a matrix unit, policy.cpp; a scale varying along K would need a block-scaled unit, which no model has).
double scale_of(const OperandScales& s, std::size_t r) {
  if (s.scales.empty()) return 1.0;
  if (s.scale_cols != 1 || (s.scale_rows != 1 && s.scales.size() <= r))
    throw Error(
        "mma: an operand's scales vary along the reduction axis; the matrix-unit models take per-tensor "
        "or per-row scales only");
  return s.scale_rows == 1 ? s.scales[0] : s.scales[r];
}

// e5m3 holds every fp8_e4m3 and fp8_e5m2 value exactly: the unit's input under HYBRID's dgrad and wgrad,
// whose operands are e5m2 (dy) times e4m3 (x, w). Not a recorded instruction (docs/mma.md).
const Format& fp8_either() {
  static const Format f = make_format("fp8_e4m3|fp8_e5m2", 5, 3, 15);
  return f;
}

// rows x K values, row r scaled by scale_of(s, r), rounded to s.format with nearest-even, written through
// put(r, k, value). Unscaled operands (the mixed policies') are rounded as floats by the bulk engine, which gives
// the bits of mma::round_to_format (one rounding function for every path, docs/design.md) at vector speed; scaled
// ones (a recipe's q = value * scale) are multiplied and rounded in double.
template <class Put>
void operand_values(const float* src, std::size_t rows, std::size_t K, const OperandScales& s, Put put) {
  if (s.scales.empty()) {
    std::vector<float> r(src, src + rows * K);
    BulkOptions opt;
    opt.threads = 1;  // inside a GEMM call; the bits do not depend on it
    round_array(std::span<const float>(r), std::span<float>(r), s.format, Rounding{}, nullptr, opt);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t k = 0; k < K; ++k) put(i, k, static_cast<double>(r[i * K + k]));
    return;
  }
  std::vector<double> v(rows * K);
  for (std::size_t i = 0; i < rows; ++i) {
    const double sc = scale_of(s, i);
    for (std::size_t k = 0; k < K; ++k) v[i * K + k] = static_cast<double>(src[i * K + k]) * sc;
  }
  mma::round_to_format(v, s.format);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t k = 0; k < K; ++k) put(i, k, v[i * K + k]);
}

// The B operands decoded lately, per thread, most recent first. The lstm multiplies its recurrent weight by a
// new state at every time step, forward (B = W_hh^T) and in dgrad (B = W_hh) (lib/mpsim/nn/lstm.hpp lines 65 and
// 126): the decoding is then done once per step, reused until the optimiser changes the weight. Keyed by content,
// the bits compared exactly, so a hit never depends on where a buffer lives or when it was freed; the decoded
// values are those a fresh decoding gives, so the results are the same bits with or without the cache.
struct CachedB {
  std::string unit, input;  // with the promotion, what the decoding depends on
  int promote = 0;
  std::size_t K = 0, N = 0;
  std::string format;
  std::vector<float> bt;
  std::vector<double> scales;
  std::size_t scale_rows = 0, scale_cols = 0;
  std::shared_ptr<const mma::PreparedB> prepared;
};
constexpr std::size_t kCachedB = 4;
std::atomic<bool> reuse_decoded_b{true};  // the lstm's two recurrent operands, with room for a second layer's

bool same_bits(const void* a, const void* b, std::size_t bytes) { return bytes == 0 || std::memcmp(a, b, bytes) == 0; }

std::shared_ptr<const mma::PreparedB> prepared_b(const mma::MatrixUnit& unit, const float* Bt, std::size_t N,
                                                 std::size_t K, const OperandScales& sb) {
  thread_local std::vector<CachedB> cache;
  if (!reuse_decoded_b.load(std::memory_order_relaxed)) cache.clear();
  for (std::size_t i = 0; i < cache.size(); ++i) {
    const CachedB& c = cache[i];
    if (c.unit == unit.name && c.input == unit.input.name && c.promote == unit.promote_every && c.K == K && c.N == N &&
        c.format == sb.format.name && c.scale_rows == sb.scale_rows && c.scale_cols == sb.scale_cols &&
        c.scales.size() == sb.scales.size() && same_bits(c.bt.data(), Bt, K * N * sizeof(float)) &&
        same_bits(c.scales.data(), sb.scales.data(), sb.scales.size() * sizeof(double))) {
      std::rotate(cache.begin(), cache.begin() + static_cast<std::ptrdiff_t>(i),
                  cache.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      return cache.front().prepared;
    }
  }
  std::vector<double> b(K * N);
  operand_values(Bt, N, K, sb, [&](std::size_t j, std::size_t k, double v) { b[k * N + j] = v; });
  CachedB c{unit.name,
            unit.input.name,
            unit.promote_every,
            K,
            N,
            sb.format.name,
            std::vector<float>(Bt, Bt + K * N),
            sb.scales,
            sb.scale_rows,
            sb.scale_cols,
            std::make_shared<const mma::PreparedB>(unit, K, N, b.data())};
  cache.insert(cache.begin(), std::move(c));
  if (cache.size() > kCachedB) cache.pop_back();
  return cache.front().prepared;
}

}  // namespace

void set_mma_operand_reuse(bool on) { reuse_decoded_b.store(on, std::memory_order_relaxed); }

void mma_matmul(float* D, const float* A, const float* Bt, std::size_t M, std::size_t N, std::size_t K,
                const MmaOptions& o, bool grad, const OperandScales& sa, const OperandScales& sb) {
  const bool mixed = !(sa.format == sb.format);
  if (mixed &&
      !((sa.format == fp8_e4m3() && sb.format == fp8_e5m2()) || (sa.format == fp8_e5m2() && sb.format == fp8_e4m3())))
    throw Error(fmt::format("mma: operands in {} and {}: a matrix unit takes one input format (or e4m3 with e5m2)",
                            sa.format.name, sb.format.name));
  mma::MatrixUnit unit = mma::matrix_unit(o.model, mixed ? fp8_e4m3() : sa.format, fp32());
  if (mixed) unit.input = fp8_either();
  unit.promote_every = grad ? o.promote_grad : o.promote_fprop;
  mma::validate(unit);
  std::vector<double> a(M * K), d(M * N);
  operand_values(A, M, K, sa, [&](std::size_t i, std::size_t k, double v) { a[i * K + k] = v; });
  const auto b = prepared_b(unit, Bt, N, K, sb);
  mma::gemm(unit, M, a.data(), *b, nullptr, d.data(), o.threads);
  for (std::size_t i = 0; i < M; ++i) {
    const double si = scale_of(sa, i);
    for (std::size_t j = 0; j < N; ++j) D[i * N + j] = static_cast<float>(d[i * N + j] / (si * scale_of(sb, j)));
  }
}

}  // namespace mpsim::nn
