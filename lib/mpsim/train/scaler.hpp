// Loss scalers (docs/design.md, "Training simulator"): none, static S, dynamic with PyTorch GradScaler
// semantics, and dynamic with hysteresis in the Megatron-LM and DeepSpeed variants.
//
// One training step with a scaler:
//   loss * scale() is back-propagated; the gradients are unscaled (times 1/scale()) and checked for
//   inf/NaN; if skips_step(found_inf) the optimiser step is skipped; then update(found_inf).
// The parameters carry the names users know from PyTorch (init_scale, growth_factor, backoff_factor,
// growth_interval) and Megatron-LM (hysteresis, min_scale).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace mpsim::train {

enum class ScalerKind : std::uint8_t {
  none,                  // scale 1, never skips (fp16 training without a scaler)
  constant,              // static S: the scale never changes; skips a step whose gradients are not finite
  dynamic,               // torch.amp.GradScaler
  hysteresis_megatron,   // Megatron-LM DynamicGradScaler
  hysteresis_deepspeed,  // DeepSpeed DynamicLossScaler with consecutive_hysteresis=True
};

struct ScalerConfig {
  ScalerKind kind = ScalerKind::none;
  double init_scale = 65536.0;  // GradScaler default init_scale 2^16 (torch/amp/grad_scaler.py)
  double growth_factor = 2.0;   // GradScaler default growth_factor
  double backoff_factor = 0.5;  // GradScaler default backoff_factor
  int growth_interval = 2000;   // GradScaler default growth_interval
  int hysteresis = 2;           // Megatron-LM --hysteresis default 2; DeepSpeed fp16.hysteresis default 2
  double min_scale = 1.0;       // Megatron-LM --min-loss-scale default 1; DeepSpeed min_loss_scale default 1
  // dynamic: clean steps already counted toward the next growth when the run starts (GradScaler's
  // _init_growth_tracker, set by load_state_dict from a saved "_growth_tracker").
  std::int64_t init_growth_tracker = 0;
};

// Parses the CLI spelling:
//   none | static:S | dynamic | hysteresis | hysteresis:megatron | hysteresis:deepspeed
// optionally followed by ",key=value" pairs for the parameters above (e.g.
// "dynamic,growth_interval=100", "hysteresis:deepspeed,hysteresis=3,min_scale=8").
// "hysteresis" alone is the Megatron-LM variant; dynamic also takes init_growth_tracker. Throws mpsim::Error naming the
// spec on anything else (unknown name or key, a scale <= 0 or not finite, growth_factor <= 1, backoff_factor outside
// (0,1), ...).
ScalerConfig parse_scaler(std::string_view spec);
// The canonical spelling of a config (parse_scaler(to_spec(c)) == c).
std::string to_spec(const ScalerConfig&);
std::string_view to_string(ScalerKind);
void validate(const ScalerConfig&);

// The dynamic scaler a torch.amp.GradScaler.state_dict() describes (saved as JSON: json.dump(scaler.state_dict())):
// its five entries "scale" (float), "growth_factor" (float), "backoff_factor" (float), "growth_interval" (int)
// and "_growth_tracker" (int), as GradScaler.state_dict's docstring lists them (torch/amp/grad_scaler.py).
// Throws mpsim::Error naming `source` and the missing or wrong-typed entry, an empty dict (a disabled
// GradScaler's) or a value the scaler refuses.
ScalerConfig scaler_from_torch_state(const nlohmann::json& state, std::string_view source);

class LossScaler {
 public:
  explicit LossScaler(const ScalerConfig& config);

  const ScalerConfig& config() const { return config_; }
  // The scale the next backward pass multiplies the loss by.
  double scale() const { return scale_; }
  // Whether the optimiser step is skipped when the unscaled gradients hold inf/NaN. `none` never skips
  // (the update goes through with the non-finite values, as plain fp16 training without a scaler does);
  // static skips like Megatron-LM's ConstantGradScaler inside its mixed-precision optimiser; the
  // dynamic kinds skip (GradScaler.step, Megatron-LM, DeepSpeed).
  bool skips_step(bool found_inf) const { return found_inf && config_.kind != ScalerKind::none; }
  // Updates the scale after a step whose unscaled gradients were (found_inf) or were not finite.
  void update(bool found_inf);

  // Serialisable state (for checkpoints): {"kind", "scale"}; the dynamic kinds add GradScaler.state_dict()'s
  // "growth_factor", "backoff_factor", "growth_interval" and "_growth_tracker" (hysteresis:deepspeed has no
  // growth tracker: it counts from its last overflow); hysteresis:megatron adds "hysteresis", "min_scale"
  // and DynamicGradScaler.state_dict()'s "hysteresis_tracker"; hysteresis:deepspeed adds "hysteresis",
  // "min_scale" and DynamicLossScaler's "cur_hysteresis", "cur_iter", "last_overflow_iter". The dynamic
  // scaler's state is a GradScaler.state_dict() that torch loads (load_state_dict reads only its five keys).
  nlohmann::json state() const;
  // Restores a state(); throws mpsim::Error if it does not belong to this kind or is malformed.
  void load_state(const nlohmann::json& state);

  std::int64_t growth_tracker() const { return growth_tracker_; }
  std::int64_t hysteresis_tracker() const { return hysteresis_tracker_; }

 private:
  ScalerConfig config_;
  double scale_ = 1.0;
  std::int64_t growth_tracker_ = 0;       // GradScaler/Megatron: consecutive clean steps since the last change
  std::int64_t hysteresis_tracker_ = 0;   // Megatron: _hysteresis_tracker; DeepSpeed: cur_hysteresis
  std::int64_t cur_iter_ = 0;             // DeepSpeed: cur_iter
  std::int64_t last_overflow_iter_ = -1;  // DeepSpeed: last_overflow_iter
};

}  // namespace mpsim::train
