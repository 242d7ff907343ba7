// The per-tensor passes of the analysis commands (tools/mpsim/hist.cpp, underflow.cpp, rounding.cpp): every tensor of
// the inputs streamed once, chunk by chunk, into its accumulators; the command line then writes and prints the reports
// from them. An input that cannot be read is listed in `failures` and the next one goes on (for_each_tensor,
// inputs.hpp).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "mpsim/analysis/block_scaling.hpp"
#include "mpsim/analysis/inputs.hpp"
#include "mpsim/analysis/mass_lost.hpp"
#include "mpsim/analysis/moments.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/rounding_error.hpp"
#include "mpsim/format/block.hpp"

namespace mpsim::analysis {

// The length of a tensor's rows for block formats: its last axis (0-d: its one element).
std::size_t row_length(const TensorInfo& info);

// What a pass over the inputs gives: one entry per tensor read, and the inputs that could not be read.
template <class Entry>
struct Pass {
  std::vector<Entry> tensors;
  std::vector<InputFailure> failures;
};

struct TensorRanges {
  TensorInfo info;
  RangeCounter counter;  // the tensor's values in f's ranges (`mpsim hist`)
};
using RangePass = Pass<TensorRanges>;
RangePass count_ranges(const std::vector<std::string>& files, const InputOptions& options, const Format& f);

struct TensorBlockValues {
  TensorInfo info;
  RangeCounter values;  // the dequantized values, in fp32's ranges (they are floats)
  BlockStats stats;     // the block telemetry of the quantization
};
using BlockValuesPass = Pass<TensorBlockValues>;
// `mpsim hist` of a block format: every tensor quantized row by row into bf (nearest-even elements) and
// dequantized, as it streams in (for_each_block_rows: nvfp4's tensors are read twice, the amax first).
BlockValuesPass count_dequantized(const std::vector<std::string>& files, const InputOptions& options,
                                  const BlockFormat& bf);

struct TensorScaling {
  TensorInfo info;
  std::vector<ScalingResult> per_format;  // one per target, in the order given
};
using ScalingPass = Pass<TensorScaling>;
// `mpsim underflow --format A,B,...`: scaling_telemetry (block_scaling.hpp) of every tensor, rows along its last axis.
ScalingPass scaling_pass(const std::vector<std::string>& files, const InputOptions& options,
                         const std::vector<ScalingTarget>& targets, double loss_scale, const Rounding& r);

struct TensorUnderflow {
  TensorInfo info;
  RangeCounter counter;  // f's ranges under rounding r, every scale at once
  Moments moments;       // min, max, mean, std, l1_norm, l2_norm, from the same read
  MassLost mass;         // the gradient mass f flushes under 2^log2_scale, from the same read
};
using UnderflowPass = Pass<TensorUnderflow>;
// `mpsim underflow` of an element format: the counts, moments and mass lost of every tensor, from one read.
UnderflowPass count_underflow(const std::vector<std::string>& files, const InputOptions& options, const Format& f,
                              const Rounding& r, int log2_scale);

struct TensorRoundingErrors {
  TensorInfo info;
  std::vector<RoundingError> per_mode;  // one per rounding, in the order given
};
using RoundingErrorPass = Pass<TensorRoundingErrors>;
// The error of rounding every value times 2^log2_scale into f under each of `roundings` (`mpsim
// rounding-error`); with `block`, of quantizing each tensor into that block format row by row along its last
// axis (add_block_rounding_error, block_scaling.hpp), in f's units (the block format's element type).
RoundingErrorPass measure_rounding_errors(const std::vector<std::string>& files, const InputOptions& options,
                                          const Format& f, const std::vector<Rounding>& roundings, int log2_scale,
                                          const std::optional<BlockFormat>& block);

}  // namespace mpsim::analysis
