// Tests of lib/mpsim/analysis/block_scaling.hpp's streaming pieces: BlockRowStream cuts chunks that ignore
// row boundaries into whole rows, so that quantizing the pieces (stochastic rounding keyed by index0) gives
// the bits of quantizing the whole tensor at once; add_block_rounding_error's relative errors equal those of
// the dequantized values (round_blocks), computed here in double.
#include "catch_compat.hpp"

#include <algorithm>
#include <bit>
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

// A tensor read in chunks of `chunk` elements (as for_each_tensor's reads give it), counting the reads;
// as_double: the chunks come as float64 (a float64 tensor), the values being the floats' exact doubles.
analysis::TensorRead chunked(const std::vector<float>& x, std::size_t chunk, int& reads, bool as_double = false) {
  return [&x, chunk, &reads, as_double](const analysis::ChunkVisitor& visit) {
    ++reads;
    std::vector<double> d;
    for (std::size_t b = 0; b < x.size(); b += chunk) {
      const auto part = std::span<const float>(x).subspan(b, std::min(chunk, x.size() - b));
      if (as_double) {
        d.assign(part.begin(), part.end());
        visit({}, d, b);
      } else {
        visit(part, {}, b);
      }
    }
  };
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("for_each_block_rows: runs of rows from any chunking give the bits of the whole tensor",
          "[block_scaling_test]") {
  // Rows of 100 (MX: three blocks of 32 and one of 4; nvfp4: six of 16 and one of 4), 37 of them; chunks of
  // 1, 7, 1000 and 4096 values end inside rows and blocks, batches of 500 and 1 hold 5 rows and one row.
  const std::size_t row = 100, rows = 37, n = row * rows;
  auto x = gradients(n, 1);
  int compared = 0;
  for (const char* name : {"mxfp8_e4m3", "mxfp4_e2m1", "nvfp4"}) {
    for (const bool with_nan : {false, true}) {
      const BlockFormat f = parse_block_format(name);
      const Rounding r = Rounding::stochastic(5);
      std::vector<float> xs = x;
      if (with_nan) xs[1234] = std::numeric_limits<float>::quiet_NaN();  // nvfp4: the whole tensor NaN
      std::vector<float> whole(n);
      BlockStats whole_stats;
      round_blocks(xs, whole, row, f, r, &whole_stats);
      const BlockQuantized whole_q = quantize_blocks(xs, row, f, r);
      for (const std::size_t chunk : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{4096}}) {
        for (const std::size_t batch : {std::size_t{1}, std::size_t{500}}) {
          for (const bool as_double : {false, true}) {
            int reads = 0, runs = 0;
            std::vector<float> pieces;
            std::vector<std::uint8_t> elements, scales;
            BlockStats stats;
            const float t = analysis::for_each_block_rows(
                chunked(xs, chunk, reads, as_double), row, f,
                [&](std::span<const float> part, std::uint64_t index0, float tensor_scale) {
                  CHECK(part.size() % row == 0);
                  CHECK(index0 == pieces.size());
                  std::vector<float> y(part.size());
                  BulkOptions opt;
                  opt.index0 = index0;
                  round_blocks(part, y, row, f, r, &stats, opt, tensor_scale);
                  pieces.insert(pieces.end(), y.begin(), y.end());
                  const BlockQuantized q = quantize_blocks(part, row, f, r, nullptr, opt, tensor_scale);
                  elements.insert(elements.end(), q.elements.begin(), q.elements.end());
                  scales.insert(scales.end(), q.scales.begin(), q.scales.end());
                  ++runs;
                },
                batch);
            INFO(name << (with_nan ? " with a NaN" : "") << ", chunks of " << chunk << ", batches of " << batch
                      << (as_double ? ", float64 chunks" : ""));
            CHECK(same_bits(pieces, whole));
            CHECK(elements == whole_q.elements);
            CHECK(scales == whole_q.scales);
            CHECK(std::bit_cast<std::uint32_t>(t) == std::bit_cast<std::uint32_t>(whole_q.tensor_scale));
            CHECK(stats.flushed == whole_stats.flushed);
            CHECK(stats.subnormal == whole_stats.subnormal);
            CHECK(stats.saturated == whole_stats.saturated);
            CHECK(stats.nan_blocks == whole_stats.nan_blocks);
            CHECK(stats.scale_log2 == whole_stats.scale_log2);
            CHECK(reads == (f.two_level ? 2 : 1));  // nvfp4: the amax first, then the rows
            // A run holds whole rows, about a batch: never more than a batch plus a chunk and a row.
            CHECK(runs >= static_cast<int>(n / (batch + chunk + row)));
            ++compared;
          }
        }
      }
      std::printf(
          "for_each_block_rows %s%s: %zu elements (rows of %zu), chunks of 1/7/1000/4096, batches of 1/500, "
          "float32 and float64 reads: values, elements, scales, tensor scale %g and stats equal to the whole "
          "tensor's (stochastic)\n",
          name, with_nan ? " with a NaN" : "", n, row, static_cast<double>(whole_q.tensor_scale));
    }
  }
  std::printf("for_each_block_rows: %d streamed quantizations compared bit for bit\n", compared);
  analysis::BlockRowStream partial(row, [](std::span<const float>, std::uint64_t) {});
  partial.add(std::span<const float>(x).first(row + 1));
  CHECK_THROWS_AS(partial.finish(), Error);
}

TEST_CASE("scaling_telemetry: streamed counts equal those of the whole tensor, block and element formats",
          "[block_scaling_test]") {
  // Reference: each format over the whole tensor at once, computed here: quantize_blocks' statistics; for the
  // element formats x * S rounded by round_array, S = max_finite / amax (fp8_e4m3, per tensor) or the loss
  // scale (fp16), the values the scaling itself sends to 0 or inf counted as flushed / saturated.
  const std::size_t row = 100, n = row * 41;
  auto x = gradients(n, 3);
  x[17] = 0;
  x[99] = std::numeric_limits<float>::infinity();  // an MX block of inf: NaN block; nvfp4: the whole tensor NaN
  x[2000] = 1e-30f;                                // scaled by 2^-8 ... below fp16's range
  std::vector<float> finite = x;
  finite[99] = 3.0f;
  const Rounding r = Rounding::of(RoundingMode::nearest_even);
  const double loss_scale = 0x1p-8;
  std::vector<analysis::ScalingTarget> targets;
  for (const char* b : {"mxfp8_e4m3", "mxfp4_e2m1", "nvfp4"}) targets.push_back({parse_block_format(b), fp32()});
  targets.push_back({std::nullopt, fp8_e4m3()});
  targets.push_back({std::nullopt, fp16()});
  CHECK(analysis::telemetry_reads(targets) == 2);
  CHECK(analysis::telemetry_reads({{std::nullopt, fp16()}, {parse_block_format("mxfp8_e4m3"), fp32()}}) == 1);
  int compared = 0;
  for (const auto* input : {&x, &finite}) {
    const std::vector<float>& xs = *input;
    std::vector<analysis::ScalingResult> want;
    for (const auto& t : targets) {
      if (t.block) {
        BlockStats s;
        quantize_blocks(xs, row, *t.block, r, &s);
        want.push_back(analysis::block_result(*t.block, s));
        continue;
      }
      const bool per_tensor = t.element.storage_bits <= 8;
      float amax = 0;
      for (float v : xs)
        if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
      const float s = per_tensor ? static_cast<float>(t.element.max_finite) / amax : static_cast<float>(loss_scale);
      std::vector<float> scaled(xs), sink(n);
      for (float& v : scaled) v *= s;
      Stats st;
      round_array(std::span<const float>(scaled), std::span<float>(sink), t.element, r, &st);
      analysis::ScalingResult w;
      w.format = t.element.name;
      w.scaling = per_tensor ? "per_tensor" : "loss_scale";
      w.scale = s;
      w.count = n;
      w.nan_in = st.nan;
      for (std::size_t i = 0; i < n; ++i) {
        w.inf_in += std::isinf(xs[i]);
        if (!std::isfinite(xs[i]) || xs[i] == 0) continue;
        ++w.nonzero;
        w.flushed += scaled[i] == 0;
        w.saturated += std::isinf(scaled[i]);
      }
      w.flushed += st.underflow;
      w.subnormal = st.subnormal;
      w.saturated += st.overflow;
      want.push_back(w);
    }
    for (const std::size_t chunk : {std::size_t{13}, std::size_t{1000}, n}) {
      for (const bool as_double : {false, true}) {
        int reads = 0;
        const auto got = analysis::scaling_telemetry(chunked(xs, chunk, reads, as_double), row, targets, loss_scale, r,
                                                     std::min<std::size_t>(chunk, 512));
        CHECK(reads == 2);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) {
          INFO(want[i].format << ", chunks of " << chunk << (as_double ? ", float64" : "") << ": "
                              << got[i].json().dump() << " vs " << want[i].json().dump());
          CHECK(got[i].json() == want[i].json());
          ++compared;
        }
      }
    }
    for (const auto& w : want)
      std::printf(
          "scaling_telemetry %-10s %-10s nonzero %llu flushed %llu subnormal %llu saturated %llu nan %llu "
          "inf %llu blocks %llu (%llu NaN)\n",
          w.format.c_str(), w.scaling.c_str(), static_cast<unsigned long long>(w.nonzero),
          static_cast<unsigned long long>(w.flushed), static_cast<unsigned long long>(w.subnormal),
          static_cast<unsigned long long>(w.saturated), static_cast<unsigned long long>(w.nan_in),
          static_cast<unsigned long long>(w.inf_in), static_cast<unsigned long long>(w.blocks),
          static_cast<unsigned long long>(w.nan_blocks));
  }
  std::printf("scaling_telemetry: %d (format, chunking) results equal the whole tensor's JSON field for field\n",
              compared);
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
    std::printf(
        "block rounding error %s: %llu measured, %llu in NaN blocks; rel max %.6g / %.6g, mean %.6g / %.6g "
        "(add_block_rounding_error / dequantized values)\n",
        name, static_cast<unsigned long long>(acc.count()), static_cast<unsigned long long>(acc.overflow()),
        acc.rel_max(), rel_max, acc.rel_mean(), static_cast<double>(rel_sum / measured));
  }
}
