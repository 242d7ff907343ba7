// The accumulation-error report (`mpsim accumulation-error`): how far a matrix unit's dot product lies from
// the exact one as K grows, with the unit as it is ("fast") and with its partial sums promoted to an fp32
// accumulator every N elements (split accumulation, DeepSeek-V3 §3.3.2: every 128 on H800 fp8).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpsim/mma/unit.hpp"

namespace mpsim::mma {

// Operands: "uniform" draws a, b from [0, 1) (no cancellation: the error grows with K as a sum of
// positive terms does), "normal" from N(0, 1); both rounded to the unit's input format (nearest-even).
struct AccumulationOptions {
  std::vector<std::size_t> ks;  // dot-product lengths
  int trials = 32;              // dot products per K
  int promote_every = 128;      // the promoted variant; 0: report the fast unit only
  std::uint64_t seed = 0;
  std::string data = "uniform";  // "uniform" | "normal" | "tensors" (set by the fields below)
  // Real operands instead of random ones: A (rows x cols) and B (cols x b_cols), row-major. Trial t at length K
  // takes row t % rows of A and column (t / rows) % b_cols of B, their first K elements (K <= cols).
  std::vector<double> a_matrix, b_matrix;
  std::size_t rows = 0, cols = 0, b_cols = 0;
};

// Errors of one variant at one K over the trials: relative |d - exact| / |exact| (trials with exact == 0
// left out) and in ulps of the exact value in the output format.
struct AccumulationRow {
  std::size_t k = 0;
  int trials = 0;
  double rel_mean = 0, rel_median = 0, rel_max = 0;
  double ulps_mean = 0, ulps_max = 0;
};

struct AccumulationReport {
  std::string unit;           // describe() of the fast unit
  std::string promoted_unit;  // describe() of the promoted one ("" without)
  AccumulationOptions options;
  std::vector<AccumulationRow> fast, promoted;
};

// The exact dot products are summed in Boost.Multiprecision integers (lib/mpsim/reference). Deterministic:
// operands depend on (seed, K, trial) only. Throws mpsim::Error on bad options (no K, trials < 1, unknown data).
AccumulationReport accumulation_error(const MatrixUnit& unit, const AccumulationOptions& options);

// "32..65536" (powers of two from 32 to 65536), "100,1000" or a single K; throws mpsim::Error naming the text.
std::vector<std::size_t> parse_k_range(const std::string& text);

std::string accumulation_json(const AccumulationReport&);  // schema mpsim-accumulation-error-1
std::string accumulation_csv(
    const AccumulationReport&);  // variant,k,trials,rel_mean,rel_median,rel_max,ulps_mean,ulps_max

}  // namespace mpsim::mma
