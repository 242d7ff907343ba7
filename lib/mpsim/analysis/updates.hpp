// The swallowed-updates report: given weights W and updates U, how often the update vanishes when
// the weight is held in F — round(w + u) == w — and the distribution of log2(|w| / |u|). Under
// round-to-nearest an update is lost once |u| < ulp(w)/2, i.e. roughly once |w|/|u| > 2^p for F's
// precision p (2^11 for fp16, 2^8 for bf16): the reason for fp32 master weights (Micikevicius et al.,
// "Mixed Precision Training", ICLR 2018, section 3.1) and for stochastic rounding of updates.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

#include "mpsim/analysis/histogram.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::analysis {

class SwallowedUpdates {
 public:
  SwallowedUpdates(const Format& f, const Rounding& r);

  // Element i: the weight as F holds it, wf = round(w[i]); the new weight round(wf + u[i]), the sum
  // exact and rounded once (index0 + i keys stochastic rounding). w and u must have the same size.
  void add(std::span<const double> w, std::span<const double> u, std::uint64_t index0);
  void add(std::span<const float> w, std::span<const float> u, std::uint64_t index0);
  SwallowedUpdates& operator+=(const SwallowedUpdates&);

  std::uint64_t measured() const { return measured_; }    // finite w, finite non-zero u
  std::uint64_t swallowed() const { return swallowed_; }  // round(wf + u) == wf
  std::uint64_t u_zero() const { return u_zero_; }        // u == 0: nothing to lose, not measured
  std::uint64_t nonfinite() const { return nonfinite_; }  // w or u NaN/inf: not measured
  std::uint64_t w_zero() const { return w_zero_; }        // wf == 0 (measured; no ratio)
  // Histogram of floor(log2(|wf| / |u|)) over the measured elements with wf != 0, and the swallowed
  // ones among them by the same ratio.
  const Log2Histogram& ratio() const { return ratio_; }
  const Log2Histogram& ratio_swallowed() const { return ratio_swallowed_; }
  // log2 of the ratio above which round-to-nearest always swallows: p = man_bits + 1.
  int threshold_log2() const { return format_.man_bits + 1; }

  // swallowed%, swallowed_num, measured_num, u_zero_num, nonfinite_num, w_zero_num,
  // threshold_log2_ratio, ratio_log2_hist [[n, count, swallowed], ...], format, rounding.
  nlohmann::json to_json() const;

  // round(a + b) into F with one rounding (a, b finite doubles): the exact sum is carried as a double
  // rounded to odd (TwoSum, Boldo & Melquiond 2008), which rounds to F like the exact sum.
  static double rounded_sum(double a, double b, const Format& f, const Rounding& r, std::uint64_t index);

 private:
  Format format_;
  Rounding rounding_;
  std::uint64_t measured_ = 0, swallowed_ = 0, u_zero_ = 0, nonfinite_ = 0, w_zero_ = 0;
  Log2Histogram ratio_, ratio_swallowed_;
};

}  // namespace mpsim::analysis
