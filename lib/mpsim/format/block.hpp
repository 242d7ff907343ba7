// Block formats (docs/design.md): an element Format, a scale Format, a block size and a scale rule.
//
//  * OCP Microscaling (MX) v1.0, 2023: mxfp8_e4m3, mxfp8_e5m2, mxfp6_e2m3, mxfp6_e3m2, mxfp4_e2m1. Blocks
//    of 32 consecutive elements along the last axis (the last block of a row may be shorter) share one
//    E8M0 scale X = 2^(floor(log2 amax) - emax_elem) (section 6.3), clamped to E8M0's 2^-127 .. 2^127;
//    elements are V / X rounded to the element type and clamped to its largest normal.
//    BlockScaleRule::rceil instead takes the smallest power of two with amax / X <= max_elem (the RCEIL
//    of NVIDIA's quantizers and torchao), which never saturates.
//  * nvfp4 (NVIDIA, as torchao's nvfp4_quantize with a per-tensor scale defines it): a per-tensor fp32
//    scale T = amax_tensor / (448 * 6); blocks of 16 e2m1 elements share an e4m3fn scale
//    S = e4m3(clamp(amax_block / 6 / T, 2^-6, 448)); elements are x / (T * S) in float, clamped to ±6 and
//    rounded to e2m1; the value is element * (T * S).
//
// Elements are rounded by the bulk engine (round_array) in any Rounding, stochastic included: element i
// of the tensor uses generator index opt.index0 + i. opt.threads sets the threads as for round_array (0:
// all hardware threads for large arrays); the bits and the statistics never depend on it. Scaling by a power of two is
// exact (done in float where that is exact for the result, in double otherwise), so an MX element is the single
// rounding of V / X. NaN or ±inf in a block (docs/formats.md): the block's scale is the scale format's NaN (E8M0 0xFF,
// e4m3fn 0x7F), its elements are stored as 0 and it dequantizes to NaN throughout, as OCP MX v1.0
// section 5.3 makes every element of a block with a NaN scale NaN. For nvfp4 a non-finite tensor amax
// makes the tensor scale NaN and the whole tensor NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim {

enum class BlockScaleRule : std::uint8_t { floor, rceil };

struct BlockFormat {
  std::string name;  // "mxfp8_e4m3", "nvfp4"
  Format element;    // the element type, saturating
  Format scale;      // float8_e8m0fnu (MX) or fp8_e4m3 (nvfp4)
  int block = 32;    // elements per block along the last axis
  BlockScaleRule rule = BlockScaleRule::floor;
  bool two_level = false;  // nvfp4: e4m3 block scales under a per-tensor fp32 scale
};

// The block format names ("mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2", "mxfp4_e2m1", "nvfp4").
const std::vector<std::string_view>& block_format_names();
bool is_block_format_name(std::string_view name);
// The named block format; block 0 keeps its default (32, nvfp4 16). rceil applies to MX formats only.
// Throws mpsim::Error naming the input.
BlockFormat parse_block_format(std::string_view name, int block = 0, BlockScaleRule rule = BlockScaleRule::floor);
BlockScaleRule parse_block_scale_rule(std::string_view);  // "floor" | "rceil"

// What quantizing did, for the block-scaling telemetry.
struct BlockStats {
  std::uint64_t count = 0;    // elements
  std::uint64_t nonzero = 0;  // finite non-zero inputs
  std::uint64_t nan_in = 0, inf_in = 0;
  std::uint64_t flushed = 0;    // finite non-zero input whose element is zero (lost inside its block)
  std::uint64_t subnormal = 0;  // element is a non-zero subnormal of the element type
  std::uint64_t saturated = 0;  // |V| / X beyond the element type's largest value (clamped)
  std::uint64_t blocks = 0, nan_blocks = 0;
  // Distribution of block scales by log2 (nvfp4: floor(log2) of the total scale T * S); NaN scales are
  // counted in nan_blocks only.
  std::map<int, std::uint64_t> scale_log2;

  void merge(const BlockStats& o);
};

struct BlockQuantized {
  std::vector<std::uint8_t> elements;  // one encoding per input element (the element type's storage)
  std::vector<std::uint8_t> scales;    // one encoding per block, row by row
  float tensor_scale = 1.0f;           // nvfp4's per-tensor scale T (1 for MX)
};

// The largest magnitude of a tensor that arrives in pieces, for nvfp4's per-tensor scale: when a tensor is
// quantized by runs of rows (to bound memory), a first pass adds every piece and the second quantizes each run
// under tensor_scale(), the T that quantize_blocks computes from the whole tensor.
class TensorAmax {
 public:
  void add(std::span<const float> x);
  // T = amax / (448 * 6) for a two-level format (1 for an all-zero tensor; NaN once a NaN or inf was added);
  // 1 for MX.
  float tensor_scale(const BlockFormat& fmt) const;

 private:
  std::uint32_t amax_bits_ = 0;  // of |x| as float bits: their order is the order of the magnitudes, NaN above inf
};

// Quantizes x, viewed as rows of row_len elements (the last axis; row_len 0 = the whole array is one
// row), into blocks of fmt.block along each row. r rounds the elements; fmt.rule picks MX scales.
// tensor_scale: for a two-level format (nvfp4) when x is a run of rows of a larger tensor, that tensor's T
// (TensorAmax; opt.index0 then gives x's place in it); by default T is computed from x. Ignored for MX.
BlockQuantized quantize_blocks(std::span<const float> x, std::size_t row_len, const BlockFormat& fmt,
                               const Rounding& r = {}, BlockStats* stats = nullptr, const BulkOptions& opt = {},
                               std::optional<float> tensor_scale = std::nullopt);
// The values the quantized blocks stand for, as float (exact for MX under the floor rule, where element * 2^k
// stays below 2^128; rceil can reach 2^128 near float's top, which becomes inf).
void dequantize_blocks(const BlockQuantized& q, std::size_t row_len, const BlockFormat& fmt, std::span<float> out,
                       const BulkOptions& opt = {});
// The factor each block's elements are multiplied by when dequantized (MX: 2^k; nvfp4: T * S in float),
// one per block in the order of q.scales; NaN for a block whose scale is NaN.
std::vector<double> block_scale_factors(const BlockQuantized& q, const BlockFormat& fmt);
// Quantize then dequantize (simulate mode), out may alias x.
void round_blocks(std::span<const float> x, std::span<float> out, std::size_t row_len, const BlockFormat& fmt,
                  const Rounding& r = {}, BlockStats* stats = nullptr, const BulkOptions& opt = {},
                  std::optional<float> tensor_scale = std::nullopt);

}  // namespace mpsim
