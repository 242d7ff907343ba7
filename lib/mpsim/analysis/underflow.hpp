// The underflow report: what rounding a tensor into format F under a loss scale S = 2^k does
// (underflows%, subnormals%, overflows% — the statistic names of NVIDIA Transformer Engine's
// LogFp8TensorStats, with a _num count beside each), the recommended power-of-two scale, and the sweep
// over every scale 2^-8..2^32. Everything is computed from one RangeCounter pass (range_counter.hpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "mpsim/analysis/range_counter.hpp"

namespace mpsim::analysis {

struct UnderflowOptions {
  int log2_scale = 0;   // the scale S = 2^log2_scale the report is for
  double margin = 2.0;  // the recommended scale keeps cur_amax·S·margin <= max_finite
  int sweep_lo = -8;    // the sweep covers 2^sweep_lo .. 2^sweep_hi
  int sweep_hi = 32;
};

struct ScaleRecommendation {
  bool found = false;        // false when there is no non-zero finite value
  int log2_scale = 0;        // largest k with cur_amax·2^k·margin <= max_finite
  RangeCounts counts;        // the counts at 2^log2_scale
  std::int64_t rescued = 0;  // underflows at the report's scale minus underflows at the recommended one
};
ScaleRecommendation recommend_scale(const RangeCounter&, const UnderflowOptions&);

struct Sweep {
  std::vector<RangeCounts> rows;  // one per k = sweep_lo..sweep_hi
  // The largest k in the range with no overflow; none if every scale overflows.
  std::optional<int> largest_safe;
  // The window of k in which nothing overflows and underflow is least (contiguous: underflow only
  // falls and overflow only rises as k grows); none if every scale overflows.
  std::optional<int> best_lo, best_hi;
};
Sweep sweep(const RangeCounter&, const UnderflowOptions&);

// Sweep's best window over the scales 2^lo .. 2^hi (best_lo, best_hi of sweep() with sweep_lo = lo, sweep_hi =
// hi; none when every scale overflows), found from the counts at a few scales instead of all of them (a
// galloping search from where amax and the smallest magnitude put the format's edges): overflow only rises and
// underflow only falls as k grows (each value's class is monotone in |x|·2^k: outcome_class, format/bulk.hpp), so the
// window's top is the largest k without overflow and its bottom the smallest k whose underflow equals the top's. What
// mpsim.torch's GradientMonitor asks at every sampled step, over 2^-128 .. 2^128 (python/mpsim/torch/monitor.py).
// mpsim::Error when lo > hi.
struct ScaleWindow {
  int lo = 0, hi = 0;
  friend bool operator==(const ScaleWindow&, const ScaleWindow&) = default;
};
std::optional<ScaleWindow> best_window(const RangeCounter&, int lo, int hi);

// The TE-named statistics of one RangeCounts: numel, underflows%, underflows_num, subnormals%,
// subnormals_num, overflows%, overflows_num, subnormal_bits_lost_mean / _max, zero_num, nan_num, inf_num.
// Percentages are of the non-zero finite elements (as TE's underflows%).
nlohmann::json range_stats_json(const RangeCounts&);

// cur_amax, nonzero_amin and dynamic_range = log2(amax) - log2(nonzero_amin) (TE's definition).
nlohmann::json amax_stats_json(const RangeCounter&);

// One tensor's entry of `mpsim hist` without its label: range_stats_json at 2^log2_scale, amax_stats_json and
// "histogram" (Log2Histogram::to_json of the values seen).
nlohmann::json hist_stats_json(const RangeCounter&, int log2_scale);

// The whole report of one tensor (schema in docs/analysis.md).
nlohmann::json underflow_report_json(const std::string& tensor, const RangeCounter&, const UnderflowOptions&,
                                     bool with_sweep);

}  // namespace mpsim::analysis
