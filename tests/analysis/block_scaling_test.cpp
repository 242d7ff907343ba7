// Tests of lib/mpsim/analysis/block_scaling.hpp's streaming pieces: BlockRowStream cuts chunks that ignore
// row boundaries into whole rows, so that quantizing the pieces (stochastic rounding keyed by index0) gives
// the bits of quantizing the whole tensor at once; add_block_rounding_error's relative errors equal those of
// the dequantized values (round_blocks), computed here in double.
#include "catch_compat.hpp"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "mpsim/analysis/block_scaling.hpp"
#include "mpsim/error.hpp"

using namespace mpsim;

namespace {

std::vector<float> gradients(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  std::uniform_int_distribution<int> e(-30, 10);
  std::vector<float> x(n);
  for (auto& v : x) v = std::ldexp(d(g), e(g));
  return x;
}

}  // namespace

TEST_CASE("BlockRowStream: chunks across rows give the bits of the whole tensor", "[block_scaling_test]") {
  const std::size_t row = 96, rows = 37, n = row * rows;
  const auto x = gradients(n, 1);
  for (const char* name : {"mxfp8_e4m3", "nvfp4"}) {
    const BlockFormat f = parse_block_format(name);
    const Rounding r = Rounding::stochastic(5);
    std::vector<float> whole(n);
    round_blocks(x, whole, row, f, r);
    std::vector<float> pieces;
    int calls = 0;
    analysis::BlockRowStream stream(row, f.two_level, [&](std::span<const float> part, std::uint64_t index0) {
      CHECK(part.size() % row == 0);
      CHECK(index0 == pieces.size());
      std::vector<float> y(part.size());
      BulkOptions opt;
      opt.index0 = index0;
      round_blocks(part, y, row, f, r, nullptr, opt);
      pieces.insert(pieces.end(), y.begin(), y.end());
      ++calls;
    }, 500);
    for (std::size_t b = 0; b < n; b += 1000) stream.add(std::span<const float>(x).subspan(b, std::min<std::size_t>(1000, n - b)));
    stream.finish();
    REQUIRE(pieces.size() == n);
    CHECK(std::memcmp(pieces.data(), whole.data(), n * sizeof(float)) == 0);
    CHECK(calls == (f.two_level ? 1 : 4));  // nvfp4's tensor scale needs the whole tensor
    std::printf("BlockRowStream %s: %zu elements in chunks of 1000 (rows of %zu), %d pieces, bits %s the whole "
                "tensor's (stochastic)\n",
                name, n, row, calls, std::memcmp(pieces.data(), whole.data(), n * sizeof(float)) == 0 ? "equal to" : "DIFFER from");
  }
  analysis::BlockRowStream partial(row, false, [](std::span<const float>, std::uint64_t) {});
  partial.add(std::span<const float>(x).first(row + 1));
  CHECK_THROWS_AS(partial.finish(), Error);
}

TEST_CASE("block rounding error: relative errors equal those of the dequantized values", "[block_scaling_test]") {
  const std::size_t row = 100, n = row * 50;
  for (const char* name : {"mxfp8_e4m3", "mxfp4_e2m1", "nvfp4"}) {
    const BlockFormat f = parse_block_format(name);
    auto x = gradients(n, 2);
    // An MX block holding NaN (elements 0..31) is NaN: its 31 other values are overflows, not measured. (For
    // nvfp4 the whole tensor would be NaN.)
    if (!f.two_level) x[7] = std::numeric_limits<float>::quiet_NaN();
    Format named = f.element;
    named.name = f.name;
    analysis::RoundingError acc(named, Rounding{});
    analysis::add_block_rounding_error(acc, x, row, f, 0);
    std::vector<float> y(n);
    round_blocks(x, y, row, f);
    double rel_max = 0;
    long double rel_sum = 0;  // long double: the library's compensated sum is as accurate
    std::uint64_t measured = 0, not_measured = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(x[i]) || x[i] == 0) continue;
      if (!std::isfinite(y[i])) {
        ++not_measured;
        continue;
      }
      const double rel = std::fabs(static_cast<double>(y[i]) - x[i]) / std::fabs(static_cast<double>(x[i]));
      rel_max = std::max(rel_max, rel);
      rel_sum += rel;
      ++measured;
    }
    CHECK(acc.count() == measured);
    CHECK(acc.overflow() == not_measured);
    // MX scales are powers of two: the dequantized values are element * 2^k exactly, the same quotients. An
    // nvfp4 value is element * (T S) rounded to float (dequantize_blocks), the library's quotient x / (T S) in
    // double: each relative error may differ by about 2^-24 of itself.
    const double tol = f.two_level ? 0x1p-23 : 1e-12;
    CHECK(std::fabs(acc.rel_max() - rel_max) <= tol * rel_max);
    CHECK(std::fabs(acc.rel_mean() - static_cast<double>(rel_sum / measured)) <= tol * acc.rel_mean());
    std::printf("block rounding error %s: %llu measured, %llu in NaN blocks; rel max %.6g / %.6g, mean %.6g / %.6g "
                "(add_block_rounding_error / dequantized values)\n",
                name, static_cast<unsigned long long>(acc.count()), static_cast<unsigned long long>(acc.overflow()),
                acc.rel_max(), rel_max, acc.rel_mean(), static_cast<double>(rel_sum / measured));
  }
}
