// The fp8 / fp4 scaling recipes (docs/design.md, "Training simulator"; docs/recipes.md), defined once for the
// training simulator (nn/policy) and the Python package (python/src/recipe.cpp, mpsim.torch).
//
// A recipe quantizes one operand of a GEMM, viewed as a row-major matrix of `rows` x `cols` whose columns
// run along the GEMM's reduction axis (the K of M x K times K x N), by its role: fprop x / w (forward),
// dgrad dy / w (the input gradient), wgrad x / dy (the weight gradient). Each element is multiplied by
// its scale, rounded to the recipe's element format, and the scale is removed again: the result is the
// fp32 value the GEMM multiplies. Names and options are those of the recipes' sources:
//
//   fp8-tensorwise-delayed  Transformer Engine DelayedScaling (transformer_engine/common/recipe/__init__.py
//                           lines 173-283 of TE at d0067d0; the update in common/recipe/delayed_scaling.cu
//                           lines 91-153): one scale per tensor, computed after each step from an amax
//                           history; options fp8_format (HYBRID | E4M3), margin, amax_history_len,
//                           amax_compute_algo (max | most_recent).
//   fp8-tensorwise-current  TE Float8CurrentScaling (__init__.py lines 286-334) / torchao's tensorwise
//                           recipe (torchao/float8/float8_utils.py lines 32-53): one scale per tensor from
//                           the tensor itself; options fp8_format, power_2_scales.
//   fp8-rowwise             torchao Float8LinearRecipeName.ROWWISE (torchao/float8/config.py lines 334-351):
//                           one scale per row (along the reduction axis), e4m3 everywhere, power-of-two
//                           scales.
//   fp8-rowwise-gw-hp       torchao ROWWISE_WITH_GW_HP (config.py lines 353-379): fprop rowwise, dgrad dy
//                           rowwise and w tensorwise, wgrad left in high precision.
//   fp8-blockwise           DeepSeek-V3 technical report section 3.3 / TE Float8BlockScaling (__init__.py
//                           lines 392-437): 1x128 tiles along the reduction axis for x and dy, 128x128
//                           blocks for w; options fp8_format, scales (pow2 | fp32), block.
//   mxfp8, mxfp6_e2m3, mxfp6_e3m2, mxfp4
//                           OCP Microscaling v1.0 (format/block.hpp): blocks of 32 along the reduction axis
//                           with an E8M0 scale; options scale_rule (floor | rceil), and for mxfp8
//                           fp8_format (E4M3 as TE MXFP8BlockScaling, __init__.py line 369 | HYBRID).
//   nvfp4                   TE NVFP4BlockScaling (__init__.py lines 489-610): e2m1 in blocks of 16 along the
//                           reduction axis with an e4m3 scale under an fp32 tensor scale (format/block.hpp,
//                           torchao's arithmetic); w in 16x16 2D blocks, a 16x16 random Hadamard transform
//                           on the wgrad operands, stochastic rounding of the gradients; options rht,
//                           sr, 2d (each 0 | 1), seed.
//   fp8-none                the fp8 formats of fp8_format with every scale 1 (what the scaling rescues).
//
// A reduction axis that is not a multiple of a block (32, 16, 128) ends in a short block, scaled by its own
// amax; a 2D block at the matrix's edge is the part inside it; the Hadamard transform leaves a tail shorter
// than 16 untransformed (TE requires a multiple of 16).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/format/block.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::recipe {

// The operand roles of the three GEMMs of a layer (x: its input, w: its weight, dy: the gradient arriving
// at its output): y = x w^T (fprop), dx = dy w (dgrad), dw = dy^T x (wgrad).
enum class Role : std::uint8_t { fprop_x, fprop_w, dgrad_dy, dgrad_w, wgrad_x, wgrad_dy };
enum class Operand : std::uint8_t { x, w, dy };
std::string_view to_string(Role);
Role parse_role(std::string_view);  // "fprop_x", ...; mpsim::Error listing the roles otherwise
Operand operand_of(Role);
std::string_view to_string(Operand);

enum class Kind : std::uint8_t {
  none,
  tensorwise_delayed,
  tensorwise_current,
  rowwise,
  rowwise_gw_hp,
  blockwise,
  mx,
  nvfp4
};

struct Recipe {
  std::string name;  // "fp8-tensorwise-delayed", ...
  Kind kind = Kind::none;
  // fp8 element formats (saturating, as torchao's to_fp8_saturated and NVIDIA's satfinite casts): x and w
  // use `forward`, dy uses `backward` (HYBRID: e4m3 / e5m2; E4M3: e4m3 for both).
  std::string fp8_format = "HYBRID";
  Format forward, backward;
  // fp8-tensorwise-delayed (TE DelayedScaling's defaults: margin 0, history 1024, "max").
  int margin = 0;
  int amax_history_len = 1024;
  bool amax_compute_max = true;  // false: most_recent
  // Power-of-two scales (current: off by default, TE and torchao; rowwise: on, torchao; blockwise: on, TE).
  bool power_2_scales = false;
  int block = 0;  // blockwise: the tile length (128); MX: 32; nvfp4: 16
  // MX and nvfp4: the block formats for x / w and for dy.
  BlockFormat block_forward, block_backward;
  // nvfp4's three techniques (all on in TE's NVFP4BlockScaling).
  bool rht = true, sr = true, two_d = true;
  std::uint64_t seed = 0;  // stochastic rounding key (nvfp4 with sr)
  std::string spec;        // canonical "name:key=value,..." with every option, for reports
};

// The recipe names, for help texts and error messages.
const std::vector<std::string_view>& recipe_names();
bool is_recipe_name(std::string_view name);
// "name" or "name:key=value,key=value". Unknown names are refused listing the known ones; options the
// recipe does not take are refused by name. mpsim::Error naming the spec.
Recipe parse_recipe(std::string_view spec);

// What quantizing one operand gave.
struct QuantizedOperand {
  std::vector<float> values;  // rows * cols, row-major: the values the GEMM multiplies
  // The scales, in the convention of the recipe's source: fp8 recipes the factor the values were
  // multiplied by before rounding (TE's and torchao's `scale`; dequantized = q / scale); MX and nvfp4 the
  // factor the elements are multiplied by (block_scale_factors: 2^k, T * S). scale_rows x scale_cols of
  // them, row-major (1 x 1 per tensor, rows x 1 per row, one per tile); empty where the role is not
  // quantized (fp8-rowwise-gw-hp's wgrad).
  std::vector<double> scales;
  std::size_t scale_rows = 0, scale_cols = 0;
  float tensor_scale = 1.0f;  // nvfp4's per-tensor scale T
  bool quantized = true;      // false: the role stays in high precision (values = input)
  bool hadamard = false;      // the values are of the Hadamard-transformed operand (nvfp4 wgrad)
  Stats stats;                // the bulk engine's counts of the rounding (for MX / nvfp4 from BlockStats)
};

// The 16x16 random Hadamard transform of nvfp4's wgrad operands, in place along each row in groups of 16
// (a tail shorter than 16 is left alone): y = x (D H) / 4 with H the Sylvester Hadamard matrix and D TE's
// sign vector (transformer_engine/pytorch/custom_recipes/reference_nvfp4.py lines 335-341 and 396-448),
// computed with the butterflies of the fast Walsh-Hadamard transform in double and rounded to float once
// (the double sums are exact, so the result is the correctly rounded x (D H) / 4, whenever a group's 16
// inputs lie within a factor 2^25 of each other in magnitude: 24 + 25 + 4 bits fit in 53). The transform is orthogonal:
// dy^T x = (dy^T H')(H'^T x) for both wgrad operands.
void hadamard16(std::span<float> x, std::size_t rows, std::size_t cols);
// TE's sign vector D (reference_nvfp4.py line 338).
const std::array<float, 16>& hadamard_signs();

// The state of a delayed-scaling tensor (TE's amax_history and scale): history[0] is the amax being
// recorded this step; the scale is the one this step quantizes with.
struct DelayedState {
  std::vector<float> amax_history;
  float scale = 1.0f;
  friend bool operator==(const DelayedState&, const DelayedState&) = default;
};

// A recipe with its state: delayed scaling's histories (one per tensor and operand, keyed "tensor/x",
// "tensor/w", "tensor/dy"), and the stochastic-rounding counter.
class Quantizer {
 public:
  explicit Quantizer(Recipe r);
  const Recipe& recipe() const { return recipe_; }

  // Quantizes x (rows x cols, the reduction axis along the rows) as `role` of the GEMMs of `tensor` (a
  // layer name; delayed scaling keys its state by it). Deterministic; single-threaded (the models are
  // small and the machine shared). Stochastic rounding uses generator indices sr_offset() + i and then
  // advances the offset by rows * cols.
  QuantizedOperand quantize(std::string_view tensor, Role role, std::span<const float> x, std::size_t rows,
                            std::size_t cols);

  // Delayed scaling: the end of a training step. Each history is rolled and the scale for the next step
  // computed from it (TE delayed_scaling.cu lines 91-153): amax = max over the history (or its most recent
  // entry); scale = fp8_max * 2^-margin / amax if that amax is finite and > 0, else the previous scale; an
  // infinite result becomes FLT_MAX. No-op for the other recipes.
  void end_step();

  const std::map<std::string, DelayedState>& delayed_state() const { return delayed_; }
  // Restores saved state (a checkpoint); histories must have amax_history_len entries, else mpsim::Error.
  void set_delayed_state(std::map<std::string, DelayedState> s);
  // Whether quantize() fills QuantizedOperand::scales and tensor_scale (on by default). The simulator needs
  // the values and Stats only: off, the block recipes take block.hpp's fused round_blocks pass.
  void keep_scales(bool on) { keep_scales_ = on; }
  std::uint64_t sr_offset() const { return sr_offset_; }
  void set_sr_offset(std::uint64_t o) { sr_offset_ = o; }

  // The state as JSON for a checkpoint: {"recipe": spec, "sr_offset": n, "delayed": {key: {"amax_history_bits":
  // [...], "scale_bits": u}}}, floats as their bit patterns so that inf and NaN amaxes survive (JSON has
  // neither). load_state refuses a state of another recipe (mpsim::Error).
  nlohmann::json state_json() const;
  void load_state(const nlohmann::json& j);

 private:
  Recipe recipe_;
  std::map<std::string, DelayedState> delayed_;
  std::uint64_t sr_offset_ = 0;
  bool keep_scales_ = true;
};

// The scale rules, exposed for the tests' independent references to be checked against.
// torchao's amax_to_scale (float8_utils.py lines 32-53): float(fp8_max / max(amax, 1e-12)) computed in
// double; power_2: 2^floor(log2(scale)) (exact floor here; torchao takes log2 in float32).
float torchao_scale(float amax, double fp8_max, bool power_2);
// TE's compute_scale_from_amax with epsilon 0 (transformer_engine/common/recipe/recipe_common.cuh lines
// 14-49): 1 for a zero, inf or NaN amax; fp8_max / amax in float; FLT_MAX if that is inf; power_2 keeps
// the exponent bits only.
float te_scale(float amax, float fp8_max, bool power_2);

}  // namespace mpsim::recipe
