// The precision policy (docs/design.md, "Training simulator"), the way autocast works: matrix products and
// convolutions take inputs rounded to the low format, accumulate in fp32 and round their outputs;
// softmax, log, exp, losses and reductions stay in fp32; the gradients flowing between layers are
// stored in the low format (where underflow happens); weight gradients leave their GEMM in the low
// format; "pure" modes keep the weights themselves in the low format.
//
// Every rounding goes through Precision::round() at a named site ("conv1/act_grad", "fc/out"), which
// calls the bulk engine (round_array) with Stats on: the one rounding path, counted per site.
//
// A scaling recipe (lib/mpsim/recipe, docs/recipes.md) as a policy: every GEMM operand is quantized inside
// its GEMM by its role (fprop x / w, dgrad dy / w, wgrad x / dy) with its scale applied before rounding and
// removed after; the products accumulate in fp32, their outputs, the gradients between layers and the weight
// gradients stay fp32 (the recipes' high-precision outputs; TE and torchao keep them in the model's dtype),
// and the fp32 master weights take the gradients. Stats per operand are kept at sites "<layer>/<role>".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/analysis/histogram.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/nn/matmul.hpp"
#include "mpsim/recipe/recipe.hpp"

namespace mpsim::nn {

// The classes of rounding sites a policy assigns a format to.
enum class OpClass {
  matmul_input,     // inputs of a matrix product / convolution (activations and the weight copy)
  matmul_output,    // results of a matrix product / convolution (after fp32 accumulation)
  activation_grad,  // gradients stored between layers (dL/d activation)
  weight_grad,      // weight gradients as produced by their GEMM, before they reach the fp32 master
  weight,           // the weights themselves ("pure" policies; the optimizer rounds after its update)
};
std::string_view to_string(OpClass);

struct PrecisionPolicy {
  std::string name;  // "fp32", "mixed-fp16", "mixed-bf16", "pure-fp16", or "custom"
  // nullopt = fp32: the site is left alone (no rounding, no Stats).
  std::optional<Format> matmul_input, matmul_output, activation_grad, weight_grad, weight;
  // The accumulator of the matrix products and convolutions (nn/matmul.hpp): nullopt = fp32 (autocast,
  // the paper's mixed precision); a format = running sums kept in it ("accumulate=fp16").
  std::optional<Format> accumulate;
  Rounding rounding;  // nearest-even by default
  // "pure" policies (weight set) train without an fp32 master copy: the optimiser rounds theta - update
  // with this (nearest-even, or stochastic in pure-fp16-sr); its other operations round to nearest-even.
  Rounding update_rounding;
  // A scaling recipe: the GEMM operands are quantized by it (matmul.hpp GemmContext); nullopt: none.
  std::optional<recipe::Recipe> recipe;
  // The products add as a matrix unit does (keys mma, mma_promote, mma_promote_fprop, mma_promote_grad;
  // docs/mma.md): nullopt = the accumulator above.
  std::optional<MmaOptions> mma;

  const std::optional<Format>& format_of(OpClass) const;
  // "matmul_input=fp16 matmul_output=fp16 ..." for reports.
  std::string describe() const;
};

// Parses a policy: "fp32", "mixed-fp16", "mixed-fp16-acc16" (mixed-fp16 whose products accumulate in
// fp16), "mixed-bf16", "pure-fp16" (no fp32 master copy: weights, momentum and update in fp16),
// "pure-fp16-sr" (the same, theta - update rounded stochastically), or
// "custom:KEY=VALUE,KEY=VALUE,..." with keys
//   matmul (sets matmul_input and matmul_output), matmul_input | matmul_in, matmul_output | matmul_out,
//   accumulate (the products' accumulator),
//   activation_grad | act_grad, weight_grad | w_grad, weight, rounding (a name parse_rounding_mode takes),
//   update_rounding (the same, for theta - update when weight is set), sr_seed (stochastic rounding key,
//   both roundings), sr_bits
// or a scaling recipe, "<recipe>[:KEY=VALUE,...]" as recipe::parse_recipe takes it ("fp8-tensorwise-delayed",
// "mxfp8:scaling_mode=rceil", ...).
// The matrix-unit keys, in custom, after a recipe's options, or after "mixed-fp16:" / "mixed-bf16:" (the only
// options those take): mma=MODEL (mma::model_names; the unit's input is matmul_input, or the recipe's fp8
// formats), mma_promote=N (both promotions), mma_promote_fprop=N, mma_promote_grad=N (dgrad and wgrad):
// split accumulation every N elements of K (0: none). Refused with accumulate, with recipes whose scales vary
// along K (fp8-blockwise, MX, nvfp4) and fp8-rowwise-gw-hp (its wgrad is not fp8).
// and values a format name parse_format takes, or "fp32" / "none" for no rounding. Unset keys are fp32.
// Throws mpsim::Error naming the spec on anything else.
PrecisionPolicy parse_policy(std::string_view spec);

// The policy names parse_policy knows (for help texts).
const std::vector<std::string>& policy_names();

class Precision final : public GemmQuantizer {
 public:
  explicit Precision(PrecisionPolicy p);
  // A Precision for an evaluation pass: the same policy, the recipe's state (delayed scales) copied, fresh
  // counters; what it records is not kept.
  Precision evaluation_copy() const;
  const PrecisionPolicy& policy() const { return policy_; }

  // Rounds `data` in place at `site` if the policy gives `cls` a format, accumulating the bulk engine's
  // Stats under the site's name. With stochastic rounding, element i of a call uses generator index
  // sr_offset() + i and the offset then advances by data.size(): reproducible for the same sequence of
  // calls (checkpoint sr_offset() to resume bit for bit).
  void round(std::string_view site, OpClass cls, std::span<float> data);
  // True if round(site, cls, ...) would change anything (lets callers skip copies under fp32).
  bool rounds(OpClass cls) const { return policy_.format_of(cls).has_value(); }
  // The products' accumulator for the layers (nullptr = fp32).
  const Format* accumulate_format() const { return policy_.accumulate ? &*policy_.accumulate : nullptr; }
  // The context of `layer`'s GEMMs: the accumulator and, under a recipe, this Precision as their quantizer.
  GemmContext gemm(std::string layer) {
    return {accumulate_format(), quantizer_ ? this : nullptr, std::move(layer), policy_.mma ? &*policy_.mma : nullptr};
  }
  // mma::gemm's threads under mma=MODEL (the trainer's thread count; the results do not depend on it).
  void set_gemm_threads(int threads) {
    if (policy_.mma) policy_.mma->threads = threads;
  }
  // GemmQuantizer: quantizes under the recipe, adding the Stats at site "<layer>/<role>".
  void quantize_operand(std::string_view layer, recipe::Role role, float* data, std::size_t rows, std::size_t cols,
                        OperandScales* scales = nullptr) override;
  // The recipe's state (delayed scaling's histories and scales, its stochastic-rounding offset); null without
  // a recipe. end_step() closes a training step (recipe::Quantizer::end_step).
  recipe::Quantizer* quantizer() { return quantizer_ ? &*quantizer_ : nullptr; }
  const recipe::Quantizer* quantizer() const { return quantizer_ ? &*quantizer_ : nullptr; }
  void end_step() {
    if (quantizer_) quantizer_->end_step();
    weight_cache_.clear();
  }

  const std::map<std::string, Stats>& site_stats() const { return stats_; }
  void reset_stats() { stats_.clear(); }

  // When on, round() also adds the values BEFORE rounding at activation_grad and weight_grad sites into a
  // per-site log2 histogram (whatever the policy: under fp32 it is the histogram of the exact gradients).
  // Values include the loss scale the caller applied.
  void capture_histograms(bool on) { capture_ = on; }
  bool capturing_histograms() const { return capture_; }
  const std::map<std::string, analysis::Log2Histogram>& histograms() const { return histograms_; }
  void reset_histograms() { histograms_.clear(); }

  std::uint64_t sr_offset() const { return sr_offset_; }
  void set_sr_offset(std::uint64_t o) { sr_offset_ = o; }

  // A tap on every rounding site, for tools that record what one step computed (models/layer_dump.hpp):
  // round() calls it with the values before and after rounding (the same values where the policy leaves
  // `cls` in fp32); under a recipe quantize_operand() calls it for every operand at "<layer>/<role>" with
  // class matmul_input (nvfp4's wgrad operands: before = the Hadamard-transformed operand). While one is set, the
  // models' rounded_input() (sites.hpp) passes their inputs through round() under fp32 too, so every site is seen
  // whatever the policy. Empty function: no tap.
  using SiteObserver = std::function<void(std::string_view site, OpClass cls, std::span<const float> before,
                                          std::span<const float> after)>;
  void observe(SiteObserver f) { observer_ = std::move(f); }
  bool observing() const { return static_cast<bool>(observer_); }

 private:
  PrecisionPolicy policy_;
  std::map<std::string, Stats> stats_;
  std::map<std::string, analysis::Log2Histogram> histograms_;
  bool capture_ = false;
  std::uint64_t sr_offset_ = 0;
  SiteObserver observer_;
  std::optional<recipe::Quantizer> quantizer_;
  // The last weight operand quantized at each site and its result: the lstm's recurrent GEMMs quantize the
  // same weight at every time step, and a weight quantizes the same way until the step ends (w roles never
  // round stochastically; a delayed scale changes only at end_step, which clears this).
  struct CachedOperand {
    std::vector<float> input;
    recipe::QuantizedOperand q;
  };
  std::map<std::string, CachedOperand> weight_cache_;
  std::vector<float> observed_before_;
  void fill_scales(const recipe::QuantizedOperand& q, recipe::Role role, OperandScales& out) const;
  // Calls the observer with an operand before and after its quantization (before: Hadamard-transformed when
  // the recipe quantized the transformed operand).
  void observe_operand(std::string_view site, std::span<const float> in, const recipe::QuantizedOperand& q,
                       std::size_t rows, std::size_t cols);
};

}  // namespace mpsim::nn
