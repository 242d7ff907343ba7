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
#include <map>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

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

// One tensor, viewed as rows of row_len (its last axis), quantized to a block format.
ScalingResult block_scaling(std::span<const float> x, std::size_t row_len, const BlockFormat& f, const Rounding& r);
// One tensor in an element format: per_tensor (amax -> max_finite) when `per_tensor`, else times loss_scale.
ScalingResult tensor_scaling(std::span<const float> x, const Format& f, bool per_tensor, double loss_scale,
                             const Rounding& r);

}  // namespace mpsim::analysis
