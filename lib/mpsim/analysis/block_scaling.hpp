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
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "mpsim/format/block.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/analysis/rounding_error.hpp"
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
// One tensor, viewed as rows of row_len (its last axis), quantized to a block format.
ScalingResult block_scaling(std::span<const float> x, std::size_t row_len, const BlockFormat& f, const Rounding& r);
// One tensor in an element format: per_tensor (amax -> max_finite) when `per_tensor`, else times loss_scale.
ScalingResult tensor_scaling(std::span<const float> x, const Format& f, bool per_tensor, double loss_scale,
                             const Rounding& r);

// Cuts a tensor arriving in chunks (the analysis commands' streamed reads) into runs of whole rows for
// block quantization: fn(rows, index0) receives whole rows of row_len, about `batch` elements at a time,
// index0 being the element index of the first (stochastic rounding keys on it). A two-level format's
// tensor scale (nvfp4) depends on every value: with whole_tensor the tensor comes in one piece at finish().
// Resident memory: about one batch (MX), the whole tensor (nvfp4, or one row longer than a batch).
class BlockRowStream {
 public:
  using Rows = std::function<void(std::span<const float> rows, std::uint64_t index0)>;
  BlockRowStream(std::size_t row_len, bool whole_tensor, Rows fn, std::size_t batch = std::size_t{1} << 20);
  void add(std::span<const float> x);
  void add(std::span<const double> x);  // compared as float32, as the block formats take float32
  // Passes on what is left; throws mpsim::Error if the elements were not whole rows.
  void finish();

 private:
  void flush(bool at_end);
  std::size_t row_len_, batch_;
  bool whole_tensor_;
  Rows fn_;
  std::vector<float> buf_;
  std::uint64_t index0_ = 0;
};

// The rounding error of block quantization, in the element type's units: every finite non-zero x of the
// rows (whole rows of row_len; index0 as BlockRowStream gives it) as y = x / X, X the factor of its block
// (block_scale_factors), against its element's value, rounded in acc's mode. Elements of NaN blocks count
// as overflows (not measured). acc's format must be f.element (its name may be the block format's).
void add_block_rounding_error(RoundingError& acc, std::span<const float> rows, std::size_t row_len,
                              const BlockFormat& f, std::uint64_t index0);

}  // namespace mpsim::analysis
