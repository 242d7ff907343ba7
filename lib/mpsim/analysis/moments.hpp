// Exact summary statistics of a stream of values, in one pass beside the range counts: min, max, mean,
// std, l1_norm and l2_norm, the tensor statistics NVIDIA Transformer Engine's debug tools log under these
// names (transformer_engine/debug/features/utils/stats_computation.py: std is torch.std, with Bessel's
// correction; l1_norm = sum |x|, l2_norm = sqrt(sum x^2)).
//
// Exact: every finite double is m * 2^(k - 1074) with an integer significand m < 2^53 and 0 <= k < 2046,
// so the sums of x, |x| and x^2 are integers times fixed powers of two. They are kept exactly (per k in
// 128-bit integers, folded into big integers every few thousand values), whatever the order and the
// count; the statistics are then computed once from the exact sums with 256-bit intermediates and
// rounded to double. Only finite values take part (NaN and inf are counted in the report's nan_num /
// inf_num); min and max are signed.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

namespace mpsim::analysis {

struct MomentStats {
  std::uint64_t count = 0;  // finite values
  double min = 0, max = 0, mean = 0, l1_norm = 0, l2_norm = 0;
  double std = 0;  // sample standard deviation (n - 1); NaN when count < 2, as torch.std
};

class Moments {
 public:
  Moments();
  ~Moments();
  Moments(const Moments&);
  Moments& operator=(const Moments&);
  Moments(Moments&&) noexcept;
  Moments& operator=(Moments&&) noexcept;

  void add(std::span<const float> values);
  void add(std::span<const double> values);
  Moments& operator+=(const Moments& other);

  MomentStats stats() const;

  // The exact state as non-negative int64 words in one fixed layout of kWords: the count of finite values, then
  // sum x (its positive part, then its negative part), sum |x| and sum x^2 in 32-bit limbs (units 2^-1074,
  // 2^-1074 and 2^-2148). The words of several streams, added word by word (an all-reduce SUM of fewer than
  // 2^31 streams), are the words of their union: from_words carries the limbs. min and max merge by MIN / MAX.
  static constexpr std::size_t kSumLimbs = 68;      // sum |x| < 2^64 * 2^1024 = 2^2162 units of 2^-1074
  static constexpr std::size_t kSquareLimbs = 134;  // sum x^2 < 2^64 * 2^2048 = 2^4260 units of 2^-2148
  static constexpr std::size_t kWords = 1 + 3 * kSumLimbs + kSquareLimbs;
  std::vector<std::int64_t> words() const;
  // Throws mpsim::Error if words has another size or a negative word. min / max: the signed extremes of the
  // finite values (ignored when the count is 0; NaN when unknown, reported as null).
  static Moments from_words(std::span<const std::int64_t> words, double min, double max);

 private:
  struct Exact;  // the big-integer sums (Boost.Multiprecision stays out of this header)
  void fold() const;

  // Per-binade partial sums since the last fold (folded before they can overflow), and the big integers.
  mutable std::unique_ptr<Exact> exact_;
  std::uint64_t count_ = 0;
  double min_ = 0, max_ = 0;
};

// {"min", "max", "mean", "std", "l1_norm", "l2_norm"} (std null when there are fewer than two finite values;
// all null when there are none).
nlohmann::json moment_stats_json(const MomentStats&);

}  // namespace mpsim::analysis
