// The per-tensor passes of the analysis commands (tools/mpsim/hist.cpp, underflow.cpp, rounding.cpp): every tensor of the
// inputs streamed once, chunk by chunk, into its accumulators; the command line then writes and prints the
// reports from them. An input that cannot be read is listed in `failures` and the next one goes on
// (for_each_tensor, inputs.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "mpsim/analysis/inputs.hpp"
#include "mpsim/analysis/mass_lost.hpp"
#include "mpsim/analysis/moments.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/rounding_error.hpp"
#include "mpsim/format/block.hpp"

namespace mpsim::analysis {

// The length of a tensor's rows for block formats: its last axis (0-d: its one element).
std::size_t row_length(const TensorInfo& info);

struct TensorRanges {
  TensorInfo info;
  RangeCounter counter;  // the tensor's values in f's ranges (`mpsim hist`)
};
struct RangePass {
  std::vector<TensorRanges> tensors;
  std::vector<InputFailure> failures;
};
RangePass count_ranges(const std::vector<std::string>& files, const InputOptions& options, const Format& f);

struct TensorUnderflow {
  TensorInfo info;
  RangeCounter counter;  // f's ranges under rounding r, every scale at once
  Moments moments;       // min, max, mean, std, l1_norm, l2_norm, from the same read
  MassLost mass;         // the gradient mass f flushes under 2^log2_scale, from the same read
};
struct UnderflowPass {
  std::vector<TensorUnderflow> tensors;
  std::vector<InputFailure> failures;
};
// `mpsim underflow` of an element format: the counts, moments and mass lost of every tensor, from one read.
UnderflowPass count_underflow(const std::vector<std::string>& files, const InputOptions& options, const Format& f,
                              const Rounding& r, int log2_scale);

struct TensorRoundingErrors {
  TensorInfo info;
  std::vector<RoundingError> per_mode;  // one per rounding, in the order given
};
struct RoundingErrorPass {
  std::vector<TensorRoundingErrors> tensors;
  std::vector<InputFailure> failures;
};
// The error of rounding every value times 2^log2_scale into f under each of `roundings` (`mpsim
// rounding-error`); with `block`, of quantizing each tensor into that block format row by row along its last
// axis (add_block_rounding_error, block_scaling.hpp), in f's units (the block format's element type).
RoundingErrorPass measure_rounding_errors(const std::vector<std::string>& files, const InputOptions& options,
                                          const Format& f, const std::vector<Rounding>& roundings, int log2_scale,
                                          const std::optional<BlockFormat>& block);

}  // namespace mpsim::analysis
