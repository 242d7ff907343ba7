#include "mpsim/nn/policy.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "mpsim/error.hpp"
#include "mpsim/format/detail/key_values.hpp"
#include "mpsim/mma/unit.hpp"

namespace mpsim::nn {

std::string_view to_string(OpClass c) {
  switch (c) {
    case OpClass::matmul_input: return "matmul_input";
    case OpClass::matmul_output: return "matmul_output";
    case OpClass::activation_grad: return "activation_grad";
    case OpClass::weight_grad: return "weight_grad";
    case OpClass::weight: return "weight";
  }
  return "?";
}

const std::optional<Format>& PrecisionPolicy::format_of(OpClass c) const {
  switch (c) {
    case OpClass::matmul_input: return matmul_input;
    case OpClass::matmul_output: return matmul_output;
    case OpClass::activation_grad: return activation_grad;
    case OpClass::weight_grad: return weight_grad;
    case OpClass::weight: return weight;
  }
  return weight;
}

std::string PrecisionPolicy::describe() const {
  std::string out;
  for (OpClass c : {OpClass::matmul_input, OpClass::matmul_output, OpClass::activation_grad, OpClass::weight_grad,
                    OpClass::weight}) {
    if (!out.empty()) out += ' ';
    out += std::string(to_string(c)) + "=" + (format_of(c) ? format_of(c)->name : std::string("fp32"));
  }
  out += " accumulate=" + (accumulate ? accumulate->name : std::string("fp32"));
  out += " rounding=" + std::string(short_name(rounding.mode));
  if (weight) out += " update_rounding=" + std::string(short_name(update_rounding.mode));
  if (recipe) out += " recipe=" + recipe->spec;
  if (mma)
    out += " mma=" + mma->model + " mma_promote_fprop=" + std::to_string(mma->promote_fprop) +
           " mma_promote_grad=" + std::to_string(mma->promote_grad);
  return out;
}

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> n{"fp32",      "mixed-fp16",   "mixed-fp16-acc16", "mixed-bf16",
                               "pure-fp16", "pure-fp16-sr", "custom:..."};
    for (auto r : recipe::recipe_names()) n.push_back(std::string(r) + "[:...]");
    return n;
  }();
  return names;
}

namespace {

// The mixed policies of autocast (PyTorch AMP): fp16/bf16 GEMM inputs and outputs, gradients between
// layers in the low format, weight gradients produced by a low-format GEMM; master weights fp32.
PrecisionPolicy mixed(std::string name, const Format& low) {
  PrecisionPolicy p;
  p.name = std::move(name);
  p.matmul_input = low;
  p.matmul_output = low;
  p.activation_grad = low;
  p.weight_grad = low;
  return p;
}

std::string recipe_list() {
  std::string out;
  for (auto n : recipe::recipe_names()) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

// The matrix-unit keys (policy.hpp); false if `key` is not one of them.
bool take_mma_key(PrecisionPolicy& p, std::string_view key, std::string_view value, const std::string& context) {
  if (key != "mma" && key != "mma_promote" && key != "mma_promote_fprop" && key != "mma_promote_grad") return false;
  if (!p.mma) p.mma.emplace();
  if (key == "mma") {
    const auto& names = mma::model_names();
    if (std::find(names.begin(), names.end(), value) == names.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw Error(context + ": mma: unknown model '" + std::string(value) + "' (known: " + list + ")");
    }
    p.mma->model = std::string(value);
    return true;
  }
  const int n = parse_integer<int>(value, context, key);
  if (n < 0)
    throw Error(context + ": " + std::string(key) + " must be >= 0 (0: no promotion), got " + std::string(value));
  if (key != "mma_promote_grad") p.mma->promote_fprop = n;
  if (key != "mma_promote_fprop") p.mma->promote_grad = n;
  return true;
}

// Checks the matrix-unit keys against the rest of the policy once it is parsed: the unit exists for the
// operands' formats, and the promotions fit its block (mma::validate).
void check_mma(PrecisionPolicy& p, const std::string& context) {
  if (!p.mma) return;
  if (p.mma->model.empty()) throw Error(context + ": mma_promote needs mma=MODEL");
  if (p.accumulate) throw Error(context + ": mma and accumulate both say how the products add; give one");
  std::vector<Format> inputs;
  if (p.recipe) {
    using recipe::Kind;
    const Kind k = p.recipe->kind;
    if (k == Kind::blockwise || k == Kind::mx || k == Kind::nvfp4 || k == Kind::rowwise_gw_hp)
      throw Error(context + ": mma: recipe " + p.recipe->name +
                  (k == Kind::rowwise_gw_hp
                       ? " leaves wgrad in high precision"
                       : " scales blocks along the reduction axis (no block-scaled unit is modelled)") +
                  "; mma takes fp8-none, fp8-tensorwise-delayed, fp8-tensorwise-current, fp8-rowwise");
    // Same-format GEMMs run on the unit as recorded; e4m3 x e5m2 (HYBRID's dgrad, wgrad) on its e4m3 unit.
    inputs = {p.recipe->forward};
    if (!(p.recipe->backward == p.recipe->forward)) inputs.push_back(p.recipe->backward);
  } else {
    if (!p.matmul_input)
      throw Error(context + ": mma needs matmul_input set to the unit's input format (fp16, bf16, tf32)");
    inputs = {*p.matmul_input};
    p.mma->input = *p.matmul_input;
  }
  for (const Format& in : inputs) {
    try {
      mma::MatrixUnit u = mma::matrix_unit(p.mma->model, in, fp32());
      for (auto [key, n] : {std::pair<const char*, int>{"mma_promote_fprop", p.mma->promote_fprop},
                            std::pair<const char*, int>{"mma_promote_grad", p.mma->promote_grad}}) {
        if (n % u.block.products != 0)
          throw Error(std::string(key) + "=" + std::to_string(n) + " is not a multiple of the unit's block of " +
                      std::to_string(u.block.products) + " products (" + u.name + ")");
        u.promote_every = n;
        mma::validate(u);
      }
    } catch (const Error& e) {
      throw Error(context + ": mma=" + p.mma->model + " mma_promote_fprop=" + std::to_string(p.mma->promote_fprop) +
                  " mma_promote_grad=" + std::to_string(p.mma->promote_grad) + ": " + e.what());
    }
  }
}

}  // namespace

PrecisionPolicy parse_policy(std::string_view spec) {
  const std::string context = "precision policy '" + std::string(spec) + "'";
  std::string s(trim_blanks(spec));
  // "mixed-fp16:mma=h100" and the like: the named policies take the matrix-unit keys only.
  std::string_view named_options;
  bool named = false;
  for (std::string_view base : {"mixed-fp16-acc16", "mixed-fp16", "mixed-bf16", "pure-fp16-sr", "pure-fp16", "fp32"}) {
    if (s.size() > base.size() && s.compare(0, base.size(), base) == 0 && s[base.size()] == ':') {
      named_options = std::string_view(spec).substr(std::string_view(spec).find(':') + 1);
      s = std::string(base);
      named = true;
      break;
    }
  }
  if (named) {
    PrecisionPolicy p = parse_policy(s);
    p.name = std::string(trim_blanks(spec));
    if (trim_blanks(named_options).empty()) throw Error(context + ": nothing after ':' (expected mma=MODEL,...)");
    for_each_key_value(named_options, context, [&](std::string_view key, std::string_view value) {
      if (!take_mma_key(p, key, value, context))
        throw Error(context + ": " + s +
                    " takes only the keys mma, mma_promote, mma_promote_fprop, mma_promote_grad, "
                    "got '" +
                    std::string(key) + "' (use custom:... for the others)");
    });
    check_mma(p, context);
    return p;
  }
  if (s == "fp32") {
    PrecisionPolicy p;
    p.name = "fp32";
    return p;
  }
  if (s == "mixed-fp16") return mixed("mixed-fp16", fp16());
  if (s == "mixed-fp16-acc16") {
    PrecisionPolicy p = mixed(s, fp16());
    p.accumulate = fp16();
    return p;
  }
  if (s == "mixed-bf16") return mixed("mixed-bf16", bf16());
  if (s == "pure-fp16" || s == "pure-fp16-sr") {
    PrecisionPolicy p = mixed(s, fp16());
    p.weight = fp16();
    if (s == "pure-fp16-sr") p.update_rounding.mode = RoundingMode::stochastic;
    return p;
  }
  if (recipe::is_recipe_name(trim_blanks(std::string_view(s).substr(0, s.find(':'))))) {
    // The matrix-unit keys come out of the recipe's options; the rest go to parse_recipe.
    PrecisionPolicy p;
    const auto colon = s.find(':');
    std::string recipe_spec = s.substr(0, colon);
    if (colon != std::string::npos) {
      std::string rest;
      const std::string_view options = std::string_view(s).substr(colon + 1);
      if (trim_blanks(options).empty()) throw Error(context + ": nothing after ':' (expected KEY=VALUE,...)");
      for_each_key_value(options, context, [&](std::string_view key, std::string_view value) {
        if (!take_mma_key(p, key, value, context))
          rest += (rest.empty() ? "" : ",") + std::string(key) + "=" + std::string(value);
      });
      if (!rest.empty()) recipe_spec += ":" + rest;
    }
    p.recipe = recipe::parse_recipe(recipe_spec);
    p.name = p.recipe->spec;
    check_mma(p, context);
    if (p.mma)  // the canonical spec names every option, the unit's too
      p.name += std::string(p.name.find(':') == std::string::npos ? ":" : ",") + "mma=" + p.mma->model +
                ",mma_promote_fprop=" + std::to_string(p.mma->promote_fprop) +
                ",mma_promote_grad=" + std::to_string(p.mma->promote_grad);
    return p;
  }
  constexpr std::string_view prefix = "custom:";
  if (s.rfind(prefix, 0) != 0)
    throw Error("unknown precision policy '" + std::string(spec) +
                "' (expected fp32, mixed-fp16, mixed-fp16-acc16, mixed-bf16, pure-fp16, pure-fp16-sr, "
                "custom:KEY=FORMAT,... or a recipe: " +
                recipe_list() + ")");
  PrecisionPolicy p;
  p.name = "custom";
  std::string_view rest = std::string_view(s).substr(prefix.size());
  if (trim_blanks(rest).empty())
    throw Error("precision policy '" + std::string(spec) + "': custom policy has no KEY=VALUE");
  for_each_key_value(rest, context, [&](std::string_view key, std::string_view value) {
    if (take_mma_key(p, key, value, context)) return;
    if (key == "rounding") {
      try {
        p.rounding.mode = parse_rounding_mode(value);
      } catch (const Error& e) {
        throw Error("precision policy '" + std::string(spec) + "': " + e.what());
      }
      return;
    }
    if (key == "update_rounding") {
      try {
        p.update_rounding.mode = parse_rounding_mode(value);
      } catch (const Error& e) {
        throw Error("precision policy '" + std::string(spec) + "': " + e.what());
      }
      return;
    }
    if (key == "sr_seed") {
      p.rounding.seed = parse_integer<std::uint64_t>(value, context, key);
      p.update_rounding.seed = p.rounding.seed;
      return;
    }
    if (key == "sr_bits") {
      p.rounding.sr_bits = parse_integer<int>(value, context, key);
      p.update_rounding.sr_bits = p.rounding.sr_bits;
      try {
        validate(p.rounding);
      } catch (const Error& e) {
        throw Error("precision policy '" + std::string(spec) + "': " + e.what());
      }
      return;
    }
    std::optional<Format> fmt;
    if (value != "fp32" && value != "none") {
      try {
        fmt = parse_format(value);
      } catch (const Error& e) {
        throw Error("precision policy '" + std::string(spec) + "': " + e.what());
      }
      // Rounding runs on float arrays: a format wider than float cannot be simulated there.
      if (fmt->exp_bits > 8 || fmt->man_bits > 23 || fmt->emax > 127 || fmt->emin - fmt->man_bits < -149)
        throw Error("precision policy '" + std::string(spec) + "': format " + fmt->name +
                    " is wider than fp32 (use fp32 or none for no rounding)");
    }
    if (key == "matmul") {
      p.matmul_input = fmt;
      p.matmul_output = fmt;
    } else if (key == "matmul_input" || key == "matmul_in") {
      p.matmul_input = fmt;
    } else if (key == "matmul_output" || key == "matmul_out") {
      p.matmul_output = fmt;
    } else if (key == "accumulate") {
      p.accumulate = fmt;
    } else if (key == "activation_grad" || key == "act_grad") {
      p.activation_grad = fmt;
    } else if (key == "weight_grad" || key == "w_grad") {
      p.weight_grad = fmt;
    } else if (key == "weight") {
      p.weight = fmt;
    } else {
      throw Error(
          "precision policy '" + std::string(spec) + "': unknown key '" + std::string(key) +
          "' (expected matmul, matmul_input, matmul_output, accumulate, act_grad, weight_grad, weight, rounding, "
          "update_rounding, sr_seed, sr_bits, mma, mma_promote, mma_promote_fprop, mma_promote_grad)");
    }
  });
  validate(p.rounding);
  check_mma(p, context);
  return p;
}

void Precision::fill_scales(const recipe::QuantizedOperand& q, recipe::Role role, OperandScales& out) const {
  const recipe::Recipe& r = quantizer_->recipe();
  out.format = recipe::operand_of(role) == recipe::Operand::dy ? r.backward : r.forward;
  out.scales = q.scales;
  out.scale_rows = q.scale_rows;
  out.scale_cols = q.scale_cols;
}

Precision::Precision(PrecisionPolicy p) : policy_(std::move(p)) {
  validate(policy_.rounding);
  if (policy_.recipe) {
    quantizer_.emplace(*policy_.recipe);
    quantizer_->keep_scales(false);
  }
}

Precision Precision::evaluation_copy() const {
  Precision p(policy_);
  p.quantizer_ = quantizer_;
  return p;
}

void Precision::observe_operand(std::string_view site, std::span<const float> in, const recipe::QuantizedOperand& q,
                                std::size_t rows, std::size_t cols) {
  if (!q.hadamard) return observer_(site, OpClass::matmul_input, in, q.values);
  // nvfp4's wgrad operands are quantized after the random Hadamard transform: the values to compare with what
  // the GEMM multiplies are the transformed ones (an orthogonal change of basis, recipe.hpp hadamard16).
  observed_before_.assign(in.begin(), in.end());
  recipe::hadamard16(observed_before_, rows, cols);
  observer_(site, OpClass::matmul_input, observed_before_, q.values);
}

void Precision::quantize_operand(std::string_view layer, recipe::Role role, float* data, std::size_t rows,
                                 std::size_t cols, OperandScales* scales) {
  const std::span<const float> in(data, rows * cols);
  const std::string site = std::string(layer) + "/" + std::string(recipe::to_string(role));
  const bool weight = recipe::operand_of(role) == recipe::Operand::w;
  CachedOperand* hit = nullptr;
  if (weight) {
    auto it = weight_cache_.find(site);
    if (it != weight_cache_.end() && it->second.input.size() == in.size() &&
        std::equal(in.begin(), in.end(), it->second.input.begin(),
                   [](float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }))
      hit = &it->second;
  }
  if (!hit) {
    CachedOperand fresh{weight ? std::vector<float>(in.begin(), in.end()) : std::vector<float>{},
                        quantizer_->quantize(layer, role, in, rows, cols)};
    if (weight) {
      hit = &(weight_cache_[site] = std::move(fresh));
    } else {
      if (fresh.q.quantized) stats_[site].merge(fresh.q.stats);
      if (scales) fill_scales(fresh.q, role, *scales);
      if (observer_) observe_operand(site, in, fresh.q, rows, cols);
      std::copy(fresh.q.values.begin(), fresh.q.values.end(), data);
      return;
    }
  }
  const recipe::QuantizedOperand& q = hit->q;
  if (q.quantized) stats_[site].merge(q.stats);
  if (scales) fill_scales(q, role, *scales);
  if (observer_) observe_operand(site, in, q, rows, cols);
  std::copy(q.values.begin(), q.values.end(), data);
}

void Precision::round(std::string_view site, OpClass cls, std::span<float> data) {
  if (capture_ && (cls == OpClass::activation_grad || cls == OpClass::weight_grad)) {
    auto h = histograms_.find(std::string(site));
    if (h == histograms_.end()) h = histograms_.emplace(std::string(site), analysis::make_float_histogram()).first;
    h->second.add(std::span<const float>(data.data(), data.size()));
  }
  const std::optional<Format>& fmt = policy_.format_of(cls);
  if (observer_) {
    if (!fmt) {
      observer_(site, cls, data, data);
      return;
    }
    observed_before_.assign(data.begin(), data.end());
  }
  if (!fmt) return;
  auto it = stats_.find(std::string(site));
  if (it == stats_.end()) it = stats_.emplace(std::string(site), Stats{}).first;
  BulkOptions opt;
  opt.threads = 1;  // the models' arrays are small; one thread keeps the 2-core machine free and the bits fixed
  opt.index0 = sr_offset_;
  round_array(std::span<const float>(data.data(), data.size()), data, *fmt, policy_.rounding, &it->second, opt);
  if (policy_.rounding.mode == RoundingMode::stochastic) sr_offset_ += data.size();
  if (observer_) observer_(site, cls, observed_before_, data);
}

}  // namespace mpsim::nn
