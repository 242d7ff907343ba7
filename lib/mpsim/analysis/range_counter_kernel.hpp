// The inner loop of RangeCounter::add(span<const float>), shared by the scalar code
// (range_counter.cpp) and the AVX2 kernel (range_counter_avx2.cpp, compiled with -mavx2).
//
// Why a second table layout: the counts are kept by (sign, binade key, threshold code), and finding a
// subnormal's binade needs a bit_width per value. Gradients hold few subnormal floats, so the hot
// loop indexes by the float's top nine bits instead, (sign << 8 | exponent field) << 2 | code, which
// a vector unit computes for eight values at once; the rare values it cannot index that way (float
// subnormals, inf, NaN) take the per-value path, and flush() folds the fast table into the keyed one.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpsim::analysis::range_detail {

// Bins of the fast table: (sign << 8 | exponent field) << 2 | code.
constexpr std::size_t kFastBins = 2048;
// Independent copies of the fast table: gradients crowd into a few binades, and increments of one
// bin in different copies do not wait on each other (store-to-load forwarding).
constexpr std::size_t kFastCopies = 4;
// Copy c starts at c * kCopyStride counters: 2048 + 16, so that one bin in different copies does not
// share its address modulo 4 KiB (loads and stores that do are taken as dependent: 4K aliasing,
// measured here at 2.6x slower with a stride of 2048).
constexpr std::size_t kCopyStride = kFastBins + 16;

struct FastState {
  // Per sign, the three sorted significand thresholds minus one (so "m >= t" is the signed "m > t-1",
  // and a threshold of 0 is -1: every significand reaches it).
  std::int32_t threshold_minus1[2][3];
  std::uint32_t* counts;     // kFastCopies * kCopyStride
  std::uint32_t max_abs;     // largest |x| bits among finite non-zero values counted (0 if none)
  std::uint32_t min_abs_m1;  // smallest |x| bits minus one among them (0xffffffff if none)
};

// Counts p[0, n) sixteen at a time until a sixteen holds a float subnormal, inf or NaN; returns
// the index of that sixteen (or of the last whole sixteen's end). Only on CPUs with AVX2.
std::size_t count_fast_avx2(const float* p, std::size_t n, FastState& st);

}  // namespace mpsim::analysis::range_detail
