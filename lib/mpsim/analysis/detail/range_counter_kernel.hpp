// The inner loops of RangeCounter::add(span<const float>), shared by the scalar code
// (range_counter.cpp) and the AVX2 kernels (range_counter_avx2.cpp, compiled with -mavx2): the fast
// table (the scalar loop, and with AVX2 the blocks holding a float subnormal, inf or NaN) and, with
// AVX2, the pair table below.
//
// Why a second table layout: the counts are kept by (sign, binade key, threshold code), and finding a
// subnormal's binade needs a bit_width per value. Gradients hold few subnormal floats, so the hot
// loop indexes by the float's top nine bits instead, (sign << 8 | exponent field) << code_bits | code,
// which a vector unit computes for eight values at once; the rare values it cannot index that way (float
// subnormals, inf, NaN) take the per-value path, and add() folds the fast table into the keyed one.
//
// Several counters in one pass (RangeCounter::add_each): the binade is the same for every format, and a
// value's threshold code in each format follows from where its significand lies among the union of every
// format's thresholds. So the loops below compare against that union (per sign, sorted, up to
// kMaxThresholds of them: "code" here is the number of union thresholds the significand reaches) and the
// folds map each code to every counter's own; one counter is the case of one format's three thresholds.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpsim::analysis::range_detail {

// Significand thresholds per sign one pass compares against: five formats' three each (codes 0..15 fit
// four bits).
constexpr int kMaxThresholds = 15;
constexpr int kMaxCodeBits = 4;
// Sign and exponent field: the top nine bits of a float.
constexpr std::size_t kTopKeys = 512;
// Bins of the fast table: (sign << 8 | exponent field) << code_bits | code, at most this many.
constexpr std::size_t kFastBinsMax = kTopKeys << kMaxCodeBits;
// Independent copies of the fast table: gradients crowd into a few binades, and increments of one
// bin in different copies do not wait on each other (store-to-load forwarding).
constexpr std::size_t kFastCopies = 4;
// Copy c starts at c * copy_stride(code_bits) counters: the bins + 16, so that one bin in different copies
// does not share its address modulo 4 KiB (loads and stores that do are taken as dependent: 4K aliasing,
// measured here at 2.6x slower with a stride of 2048, the bins of two code bits).
constexpr std::size_t copy_stride(int code_bits) { return (kTopKeys << code_bits) + 16; }

struct FastState {
  int thresholds;  // per sign: 3, 7 or 15 (padded with 2^23, which no significand reaches)
  int code_bits;   // bits of the code in a bin index: bit_width(thresholds)
  // The vector loops compare against the first `live` thresholds only (the padding adds nothing to a code),
  // and against one set for both signs where both signs' are the same (the rounding modes symmetric in the
  // sign: nearest and toward zero): the compares are most of a value's work when four formats' thresholds
  // are in the union (docs/performance.md, 2026-11-28).
  int live;
  bool same_signs;
  // Per sign, the sorted significand thresholds minus one (so "m >= t" is the signed "m > t-1",
  // and a threshold of 0 is -1: every significand reaches it).
  std::int32_t threshold_minus1[2][kMaxThresholds];
  std::uint32_t* counts;     // kFastCopies * copy_stride(code_bits)
  std::uint32_t max_abs;     // largest |x| bits among finite non-zero values counted (0 if none)
  std::uint32_t min_abs_m1;  // smallest |x| bits minus one among them (0xffffffff if none)
};

// Counts p[0, n) sixteen at a time until a sixteen holds a float subnormal, inf or NaN; returns
// the index of that sixteen (or of the last whole sixteen's end). Only on CPUs with AVX2.
std::size_t count_fast_avx2(const float* p, std::size_t n, FastState& st);

// The pair table: why. One table increment per value bounds the loop above (measured here: a bare
// `++count[u >> 23]` loop runs at 0.41 ns/value in cache, more than the analysis may take to keep
// up with a plain read); counting values two at a time, (row: one value's top nine bits, column:
// the other's), halves the increments. The threshold code is not in the key: every value is
// counted as if its significand lay in its sign's widest code interval (the dominant one, which
// holds nearly every significand for the formats' thresholds near 0 and near the top of a binade),
// and the few that do not (rare lanes) are counted once more at their code in the corrections; the fold
// moves them from the dominant code to theirs. The fp8 formats' overflow thresholds (e4m3: significand
// 1.8125, e5m2: 1.875) leave about one value in seven outside the dominant interval (log-uniform data:
// log2(2 / 1.8125) = 0.14 of significands lie above 1.8125), so a sixteen holding
// a rare lane computes the codes of all sixteen with vector compares and makes sixteen increments, the
// lanes that are not rare into spare slots: no branch per lane.
// Rows are kPairKeys + 16 counters apart: 512-counter rows put every row's hot bins at one address
// modulo 4 KiB, into a few L1 sets (measured here 0.52 -> 0.34 ns/value in cache with the padding).
constexpr std::size_t kPairKeys = 512;
constexpr std::size_t kPairRow = kPairKeys + 16;
constexpr std::size_t kPairCounts = kPairKeys * kPairRow;

// The corrections: the bins [(sign << 8 | exponent field) << code_bits | code], then sixteen spare slots
// (one per lane of a sixteen, so that lanes do not wait on each other's increments) that nothing reads.
constexpr std::size_t kCorrectionSlots = kFastBinsMax + 16;

struct PairState {
  std::uint32_t* pairs;       // kPairCounts: [row key * kPairRow + column key]
  std::int32_t* corrections;  // kCorrectionSlots
  std::uint32_t lo[2];        // per sign, the dominant interval [lo, lo + width) of significand fields
  std::uint32_t width[2];
  int thresholds;  // per sign, as FastState's
  int code_bits;
  int live;                                    // as FastState's
  bool same_signs;                             // as FastState's
  std::uint32_t threshold[2][kMaxThresholds];  // per sign, the sorted thresholds (the code of a rare lane)
  std::uint32_t dominant[2];                   // per sign, the code of the dominant interval
};

struct BlockExtremes {
  std::uint32_t max_abs;     // largest |x| bits in the block (inf and NaN included)
  std::uint32_t min_abs_m1;  // smallest |x| bits minus one (zero wraps to 0xffffffff)
  // A float subnormal, inf or NaN was among them: the block's counts are wrong and must be undone.
  bool special() const { return max_abs > 0x7f7fffffu || min_abs_m1 < 0x007fffffu; }
};

// Adds `delta` (+1, or -1 to undo an earlier call on the same values) to the pair table and the
// corrections for p[0, n), n a multiple of 16, as if no value were a float subnormal, inf or NaN;
// the caller checks the returned extremes for those. Only on CPUs with AVX2.
BlockExtremes count_pairs_avx2(const float* p, std::size_t n, const PairState& st, std::int32_t delta);

}  // namespace mpsim::analysis::range_detail
