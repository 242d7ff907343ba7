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

namespace mpsim::analysis {

struct MomentStats {
  std::uint64_t count = 0;  // finite values
  double min = 0, max = 0, mean = 0, l1_norm = 0, l2_norm = 0;
  double std = 0;           // sample standard deviation (n - 1); NaN when count < 2, as torch.std
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
