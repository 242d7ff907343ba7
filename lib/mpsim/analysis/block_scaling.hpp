// Block-scaling telemetry (`mpsim underflow --format mxfp8_e4m3,fp8_e4m3,fp16`): what a block format loses on
// a tensor beside the same tensor in an element format under one scale for the whole tensor.
//
// Three kinds of result, one per format named:
//  * block:      a block format (MX, nvfp4; lib/mpsim/format/block.hpp): elements flushed to zero inside
//                their block, subnormal, saturated, and the distribution of block scales;
//  * per_tensor: a format of at most 8 bits: one scale per tensor with amax mapped to the format's largest
//                value, S = max_finite / amax (Transformer Engine's current scaling, margin 0), x * S in float;
//  * loss_scale: any other format: the loss scale S given (--scale), as fp16 training uses it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpsim/analysis/inputs.hpp"
#include "mpsim/analysis/rounding_error.hpp"
#include "mpsim/format/block.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::analysis {

struct ScalingResult {
  std::string format;
  std::string scaling;  // "block", "per_tensor", "loss_scale"
  double scale = 1;     // per_tensor / loss_scale: the scale applied (per_tensor: the last tensor's)
  std::uint64_t count = 0, nonzero = 0, flushed = 0, subnormal = 0, saturated = 0, nan_in = 0, inf_in = 0;
  std::uint64_t blocks = 0, nan_blocks = 0;
  std::map<int, std::uint64_t> scale_log2;  // block scales by log2 (block formats)

  void merge(const ScalingResult& o);
  nlohmann::json json() const;  // counts and percentages of the non-zero finite inputs
};

// The telemetry of a block quantization (quantize_blocks' statistics) as a "block" result.
ScalingResult block_result(const BlockFormat& f, const BlockStats& s);

// One format of the comparison: a block format, or an element format (per_tensor when it has at most 8 bits,
// loss_scale otherwise).
struct ScalingTarget {
  std::optional<BlockFormat> block;
  Format element;  // when block is empty
};

// One tensor (read as for_each_tensor gives it) in every target format, streamed in bounded memory: the
// tensor is read once, or twice when a target needs its amax first (nvfp4's tensor scale, a per_tensor
// scale); block formats see it in runs of whole rows of row_len (for_each_block_rows). The counts are those
// of the whole tensor at once. float64 tensors are compared as float32.
// How many times scaling_telemetry reads each tensor: 2 when a target needs the tensor's amax first, else 1.
int telemetry_reads(const std::vector<ScalingTarget>& targets);
std::vector<ScalingResult> scaling_telemetry(const TensorRead& read, std::size_t row_len,
                                             const std::vector<ScalingTarget>& targets, double loss_scale,
                                             const Rounding& r, std::size_t batch = std::size_t{1} << 20);

// Cuts a tensor arriving in chunks (the analysis commands' streamed reads) into runs of whole rows for
// block quantization: fn(rows, index0) receives whole rows of row_len, about `batch` elements at a time,
// index0 being the element index of the first (stochastic rounding keys on it). Resident memory: about one
// batch (one row when a row is longer than a batch; row_len 0, the whole tensor as one row).
class BlockRowStream {
 public:
  using Rows = std::function<void(std::span<const float> rows, std::uint64_t index0)>;
  BlockRowStream(std::size_t row_len, Rows fn, std::size_t batch = std::size_t{1} << 20);
  void add(std::span<const float> x);
  void add(std::span<const double> x);  // compared as float32, as the block formats take float32
  // Passes on what is left; throws mpsim::Error if the elements were not whole rows.
  void finish();

 private:
  void flush(bool at_end);
  std::size_t row_len_, batch_;
  Rows fn_;
  std::vector<float> buf_;
  std::uint64_t index0_ = 0;
};

// A tensor (read) quantized to a block format by runs of whole rows (BlockRowStream), in bounded memory:
// fn(rows, index0, tensor_scale) is to quantize the rows under tensor_scale (quantize_blocks' argument). A
// two-level format's (nvfp4) tensor scale depends on every value, so its tensor is read twice: its amax
// first (TensorAmax), then the rows. Returns the tensor scale (1 for MX).
using ScaledRows = std::function<void(std::span<const float> rows, std::uint64_t index0, float tensor_scale)>;
float for_each_block_rows(const TensorRead& read, std::size_t row_len, const BlockFormat& f, const ScaledRows& fn,
                          std::size_t batch = std::size_t{1} << 20);

// The rounding error of block quantization, in the element type's units: every finite non-zero x of the
// rows (whole rows of row_len; index0 as BlockRowStream gives it) as y = x / X, X the factor of its block
// (block_scale_factors), against its element's value, rounded in acc's mode. Elements of NaN blocks count
// as overflows (not measured). acc's format must be f.element (its name may be the block format's).
// tensor_scale: nvfp4's T of the whole tensor (for_each_block_rows gives it); by default computed from the rows.
void add_block_rounding_error(RoundingError& acc, std::span<const float> rows, std::size_t row_len,
                              const BlockFormat& f, std::uint64_t index0,
                              std::optional<float> tensor_scale = std::nullopt);

}  // namespace mpsim::analysis
