// The rounding report: how far rounding into F moves each value, per rounding mode — relative error
// and error in ulps of F (mean, max, percentiles) and the mean signed error (bias), the number that
// separates round-to-nearest-even (biased on skewed data, e.g. small updates added to large weights)
// from stochastic rounding (unbiased in expectation; Connolly, Higham & Mary, SIAM J. Sci. Comput.
// 43(1), 2021). Streams: values arrive in chunks, percentiles come from fixed histograms.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::analysis {

class RoundingError {
 public:
  // Relative-error percentiles resolve 1/kRelBinsPerBinade of a binade (a factor 2^(1/64));
  // ulp-error percentiles resolve 1/kUlpBins ulp below 4 ulp. A percentile is the upper edge of the
  // bin that holds it, clamped to the largest error seen (errors of 4 ulp and more share one open bin,
  // reported as the largest error).
  static constexpr int kRelBinsPerBinade = 64;
  static constexpr int kRelMinExp = -80;  // relative errors below 2^-80 (and exact results) count as 0
  static constexpr int kRelMaxExp = 140;  // "up" rounding of 2^-140 to fp16's 2^-24 is a relative error 2^116
  static constexpr int kUlpBins = 4096;   // per ulp, over [0, 4) ulp; larger errors in the last bin

  RoundingError(const Format& f, const Rounding& r, int log2_scale = 0);

  // Rounds x·2^log2_scale into F (through the bulk engine, round_array) and accumulates the errors.
  // `index0` is the element index of x[0] in its tensor (keys stochastic rounding).
  void add(std::span<const float> x, std::uint64_t index0);
  void add(std::span<const double> x, std::uint64_t index0);
  // Accumulates given (exact value y, rounded value r) pairs; y finite and non-zero.
  void add_pair(double y, double r);
  RoundingError& operator+=(const RoundingError&);

  std::uint64_t count() const { return count_; }        // non-zero finite values measured
  std::uint64_t overflow() const { return overflow_; }  // results ±inf/NaN: not measured
  std::uint64_t exact() const { return exact_; }
  double rel_mean() const;
  double rel_max() const { return rel_max_; }
  double ulp_mean() const;
  double ulp_max() const { return ulp_max_; }
  double bias_rel() const;  // mean of (r - y) / |y|
  double bias_ulp() const;  // mean of (r - y) / ulp(y)
  double rel_percentile(double q) const;
  double ulp_percentile(double q) const;

  // rel_err_mean, rel_err_max, rel_err_p50/p90/p99/p99.9, ulp_err_* likewise, bias_rel, bias_ulp,
  // measured_num, exact_num, overflows_num, rounding (IEEE name), format, scale.
  nlohmann::json to_json() const;

  const Format& format() const { return format_; }
  const Rounding& rounding() const { return rounding_; }

  // The ulp of F at y: the spacing of F's numbers in y's binade (the quantum 2^(emin - man_bits)
  // below the normal range).
  static double ulp_of(double y, const Format& f);

 private:
  // Neumaier's compensated sum: means over 2^28 and more values stay accurate.
  struct Sum {
    double s = 0, c = 0;
    void add(double x);
    double value() const { return s + c; }
    void add(const Sum& o) {
      add(o.s);
      add(o.c);
    }
  };
  Format format_;
  Rounding rounding_;
  int log2_scale_ = 0;
  std::uint64_t count_ = 0, overflow_ = 0, exact_ = 0;
  Sum rel_sum_, ulp_sum_, bias_rel_sum_, bias_ulp_sum_;
  double rel_max_ = 0, ulp_max_ = 0;
  std::vector<std::uint64_t> rel_bins_;  // [0]: below 2^kRelMinExp; then kRelBinsPerBinade per binade
  std::vector<std::uint64_t> ulp_bins_;
  std::vector<double> scratch_in_, scratch_out_;
  std::vector<float> scratch_f_;
};

}  // namespace mpsim::analysis
