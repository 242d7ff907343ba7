// RangeCounter: one pass over a stream of values that answers, for every power-of-two loss scale
// S = 2^k at once, how many values rounding x·S into a target format F would turn into zero
// (underflow), into a subnormal, or into inf / NaN / a saturated max (overflow).
//
// Why one pass suffices: multiplying by 2^k keeps the significand and moves the binade by k, and
// rounding is monotone in |x|. For each transition (zero -> subnormal, subnormal -> normal,
// normal -> overflow) there is one binade of F, per sign, in which the outcome depends on the
// significand; below it every value is on the lower side and above it every value on the upper side.
// So the counter keeps a log2 histogram by (sign, binade) split by where each value's significand
// lies relative to the three significand thresholds of those boundary binades (found once, with
// round_bits() itself, by bisection). The count at any scale is then a sum over bins: the values in
// the binade just below F's smallest subnormal are counted exactly, by significand, not by binade.
//
// Outcome classes are those of mpsim::Stats (lib/mpsim/format/bulk.hpp): overflow means the result
// is ±inf or NaN, or (Overflow::saturate) ±max_finite from an input beyond max_finite.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "mpsim/analysis/histogram.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::analysis {

// What rounding x·2^k into F does to a stream.
struct RangeCounts {
  int log2_scale = 0;
  std::uint64_t total = 0;           // every element
  std::uint64_t zero_in = 0;         // input ±0
  std::uint64_t nan_in = 0;          // input NaN
  std::uint64_t inf_in = 0;          // input ±inf
  std::uint64_t nonzero_finite = 0;  // = underflow + subnormal + normal + overflow
  std::uint64_t underflow = 0;       // non-zero finite -> ±0
  std::uint64_t subnormal = 0;       // -> a non-zero subnormal of F
  std::uint64_t normal = 0;          // -> a normal finite value of F (not an overflow)
  std::uint64_t overflow = 0;        // -> ±inf, NaN or saturated ±max_finite
  // Precision the subnormal results lose: bits short of F's precision p, by the binade b of x·S
  // (min(emin - b, man_bits)); summed and largest over the subnormal results.
  double subnormal_bits_lost_sum = 0;
  int subnormal_bits_lost_max = 0;

  double fraction(std::uint64_t n) const { return nonzero_finite ? double(n) / double(nonzero_finite) : 0.0; }
  double subnormal_bits_lost_mean() const { return subnormal ? subnormal_bits_lost_sum / double(subnormal) : 0.0; }
};

class RangeCounter {
 public:
  // Deterministic rounding modes only (stochastic rounding has no single outcome per value): throws
  // mpsim::Error for stochastic, and for formats with exp_bits > 10 (fp64-like, beyond the double
  // arithmetic used to find the thresholds). `path` forces the scalar or the AVX2 loop of add(float)
  // (tests compare them); automatic takes AVX2 where the CPU has it.
  RangeCounter(const Format& target, const Rounding& rounding = {}, Path path = Path::automatic);

  void add(std::span<const float> values);
  void add(std::span<const double> values);
  // Counts the same values into each of `counters` (any formats and deterministic modes) reading them once:
  // each counter ends as its own add(values) would leave it, count for count. The binade of a value is the
  // same in every format and only the significand thresholds differ, so the float32 loops compare against
  // the union of the counters' thresholds and map that code to each counter's (range_counter_kernel.hpp);
  // float64 values go to each counter in turn. `path` as the constructor's (the counters' own are not used).
  static void add_each(std::span<RangeCounter* const> counters, std::span<const float> values,
                       Path path = Path::automatic);
  static void add_each(std::span<RangeCounter* const> counters, std::span<const double> values);
  // Sum of two counters of the same format and rounding (mpsim::Error otherwise).
  RangeCounter& operator+=(const RangeCounter& other);
  // Back to no values counted, keeping the format's thresholds and the tables' memory: every count, amax and
  // amin_nonzero then read as a new counter's (a zero count and an unallocated table read alike), at the cost
  // of zeroing 18 KiB instead of finding the thresholds again (the torch monitor reuses a site's counters
  // from one sampled step to the next).
  void clear();

  // Exact counts under the scale 2^log2_scale.
  RangeCounts at_scale(int log2_scale) const;
  // The log2 histogram of the values seen (unscaled).
  Log2Histogram histogram() const;
  std::uint64_t total() const;
  double amax() const { return amax_; }                  // largest finite |x| (0 if none): TE's cur_amax
  double amin_nonzero() const { return amin_nonzero_; }  // smallest non-zero finite |x| (0 if none)

  const Format& format() const { return format_; }

  // Every count in one fixed layout for this format and rounding (the float table, then the double table;
  // counts_size() values), so that counters of several processes merge with one element-wise sum of int64
  // and amax / amin_nonzero with a max / min (torch.distributed.all_reduce). from_counts() rebuilds the
  // counter; throws mpsim::Error on a wrong size or a negative count.
  std::vector<std::int64_t> counts() const;
  std::size_t counts_size() const;
  static RangeCounter from_counts(const Format& target, const Rounding& rounding, std::span<const std::int64_t> counts,
                                  double amax, double amin_nonzero);
  const Rounding& rounding() const { return rounding_; }

  // The boundary binade of F (in the binade of x·S) and significand threshold of one transition,
  // for tests and docs: values of `sign` in binade `binade` with significand field (52 bits) >=
  // `threshold` reach class `rank` (1 subnormal-or-more, 2 normal-or-more, 3 overflow); all in higher
  // binades do, none in lower ones. binade is kAll / kNone where every / no value does.
  struct Boundary {
    int binade;
    std::uint64_t threshold;
  };
  static constexpr int kAll = -1000000;
  static constexpr int kNone = 1000000;
  Boundary boundary(int sign, int rank) const { return boundary_[sign][rank - 1]; }

 private:
  // Per table (one for float input, one for double input): counts by [sign][key][code], where key is
  // the binade key of the source type and code in 0..3 is how many of that sign's sorted thresholds
  // the significand reaches.
  struct Table {
    int mant_bits = 0;  // 23 or 52
    int key_bias = 0;   // binade = key - key_bias for finite non-zero keys
    int keys = 0;       // keys per sign: 0 zero, 1..last finite, then inf, NaN
    std::array<std::array<std::uint64_t, 3>, 2> sorted_threshold{};  // per sign, ascending, in mant_bits units
    std::array<std::array<int, 3>, 2> position{};                    // per sign, rank-1 -> index in sorted order
    std::vector<std::uint64_t> counts;                               // [(sign * keys + key) * 4 + code]
  };
  void init_table(Table& t, int mant_bits, int key_bias, int keys);
  void add_counts(RangeCounts& out, const Table& t, int log2_scale) const;

  Format format_;
  Rounding rounding_;
  Path path_ = Path::automatic;
  std::array<std::array<Boundary, 3>, 2> boundary_{};
  Table float_table_, double_table_;
  double amax_ = 0, amin_nonzero_ = 0;
};

// The outcome classes RangeCounter counts are those of mpsim::Stats (lib/mpsim/format/bulk.hpp).
using mpsim::outcome_class;

}  // namespace mpsim::analysis
