#include "mpsim/train/scaler.hpp"

#include <fmt/core.h>

#include <charconv>
#include <cmath>
#include <limits>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"

namespace mpsim::train {

namespace {

// The spec as the messages show it.
std::string spec_text(std::string_view spec) { return "'" + std::string(spec) + "'"; }

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string_view::npos ? std::string_view::npos : at - start));
    if (at == std::string_view::npos) break;
    start = at + 1;
  }
  return parts;
}

double parse_number(std::string_view text, std::string_view spec, std::string_view what) {
  double v = 0;
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end)
    throw FieldError("scaler", spec_text(spec), fmt::format("{} '{}' is not a number", what, text));
  return v;
}

int parse_count(std::string_view text, std::string_view spec, std::string_view what) {
  const double v = parse_number(text, spec, what);
  if (!(v >= 1 && v <= std::numeric_limits<int>::max()) || v != std::floor(v))
    throw FieldError("scaler", spec_text(spec), fmt::format("{} must be a whole number >= 1, got '{}'", what, text));
  return static_cast<int>(v);
}

}  // namespace

std::string_view to_string(ScalerKind k) {
  switch (k) {
    case ScalerKind::none: return "none";
    case ScalerKind::constant: return "static";
    case ScalerKind::dynamic: return "dynamic";
    case ScalerKind::hysteresis_megatron: return "hysteresis:megatron";
    case ScalerKind::hysteresis_deepspeed: return "hysteresis:deepspeed";
  }
  return "?";
}

void validate(const ScalerConfig& c) {
  const std::string spec = to_spec(c);
  if (!(std::isfinite(c.init_scale) && c.init_scale > 0))
    throw FieldError("scaler", spec_text(spec), fmt::format("the scale must be finite and > 0, got {}", c.init_scale));
  if (c.kind == ScalerKind::none || c.kind == ScalerKind::constant) return;
  if (!(std::isfinite(c.growth_factor) && c.growth_factor > 1))
    throw FieldError("scaler", spec_text(spec),
                     fmt::format("growth_factor must be finite and > 1, got {}", c.growth_factor));
  if (!(c.backoff_factor > 0 && c.backoff_factor < 1))
    throw FieldError("scaler", spec_text(spec),
                     fmt::format("backoff_factor must lie in (0, 1), got {}", c.backoff_factor));
  if (c.growth_interval < 1)
    throw FieldError("scaler", spec_text(spec), fmt::format("growth_interval must be >= 1, got {}", c.growth_interval));
  if (c.hysteresis < 1)
    throw FieldError("scaler", spec_text(spec), fmt::format("hysteresis must be >= 1, got {}", c.hysteresis));
  if (!(std::isfinite(c.min_scale) && c.min_scale > 0 && c.min_scale <= c.init_scale))
    throw FieldError("scaler", spec_text(spec),
                     fmt::format("min_scale must be finite, > 0 and <= init_scale, got {}", c.min_scale));
  if (c.init_growth_tracker < 0 || c.init_growth_tracker >= c.growth_interval)
    throw FieldError(
        "scaler", spec_text(spec),
        fmt::format("init_growth_tracker must lie in [0, growth_interval), got {}", c.init_growth_tracker));
}

ScalerConfig parse_scaler(std::string_view spec) {
  const auto parts = split(spec, ',');
  const std::string_view head = parts[0];
  const std::size_t colon = head.find(':');
  const std::string_view name = head.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? std::string_view{} : head.substr(colon + 1);
  const bool has_arg = colon != std::string_view::npos;

  ScalerConfig c;
  if (name == "none" && !has_arg) {
    c.kind = ScalerKind::none;
    c.init_scale = 1.0;
  } else if (name == "static") {
    if (!has_arg) throw FieldError("scaler", spec_text(spec), "static needs a scale, e.g. static:128");
    c.kind = ScalerKind::constant;
    c.init_scale = parse_number(arg, spec, "scale");
  } else if (name == "dynamic" && !has_arg) {
    c.kind = ScalerKind::dynamic;
  } else if (name == "hysteresis" && (!has_arg || arg == "megatron" || arg == "deepspeed")) {
    c.kind = arg == "deepspeed" ? ScalerKind::hysteresis_deepspeed : ScalerKind::hysteresis_megatron;
    // Megatron-LM --loss-scale-window and DeepSpeed fp16.loss_scale_window both default to 1000.
    c.growth_interval = 1000;
  } else {
    throw FieldError("scaler", spec_text(spec),
                     "unknown scaler (expected none, static:S, dynamic, hysteresis, hysteresis:megatron or "
                     "hysteresis:deepspeed, optionally followed by ,key=value)");
  }
  const bool tunable = c.kind != ScalerKind::none && c.kind != ScalerKind::constant;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::size_t eq = parts[i].find('=');
    if (eq == std::string_view::npos)
      throw FieldError("scaler", spec_text(spec), fmt::format("expected key=value, got '{}'", parts[i]));
    const std::string_view key = parts[i].substr(0, eq), value = parts[i].substr(eq + 1);
    const bool hyst = c.kind == ScalerKind::hysteresis_megatron || c.kind == ScalerKind::hysteresis_deepspeed;
    if (tunable && key == "init_scale") c.init_scale = parse_number(value, spec, key);
    else if (tunable && key == "growth_factor") c.growth_factor = parse_number(value, spec, key);
    else if (tunable && key == "backoff_factor") c.backoff_factor = parse_number(value, spec, key);
    else if (tunable && key == "growth_interval") c.growth_interval = parse_count(value, spec, key);
    else if (hyst && key == "hysteresis") c.hysteresis = parse_count(value, spec, key);
    else if (hyst && key == "min_scale") c.min_scale = parse_number(value, spec, key);
    else if (c.kind == ScalerKind::dynamic && key == "init_growth_tracker")
      c.init_growth_tracker = parse_count(value, spec, key);
    else
      throw FieldError("scaler", spec_text(spec),
                       fmt::format("'{}' is not a parameter of the {} scaler", key, to_string(c.kind)));
  }
  validate(c);
  return c;
}

std::string to_spec(const ScalerConfig& c) {
  switch (c.kind) {
    case ScalerKind::none: return "none";
    case ScalerKind::constant: return fmt::format("static:{}", c.init_scale);
    case ScalerKind::dynamic:
      return fmt::format(
          "dynamic,init_scale={},growth_factor={},backoff_factor={},growth_interval={}{}", c.init_scale,
          c.growth_factor, c.backoff_factor, c.growth_interval,
          c.init_growth_tracker != 0 ? fmt::format(",init_growth_tracker={}", c.init_growth_tracker) : "");
    case ScalerKind::hysteresis_megatron:
    case ScalerKind::hysteresis_deepspeed:
      return fmt::format(
          "{},init_scale={},growth_factor={},backoff_factor={},growth_interval={},hysteresis={},"
          "min_scale={}",
          to_string(c.kind), c.init_scale, c.growth_factor, c.backoff_factor, c.growth_interval, c.hysteresis,
          c.min_scale);
  }
  return "?";
}

LossScaler::LossScaler(const ScalerConfig& config) : config_(config) {
  validate(config_);
  scale_ = config_.kind == ScalerKind::none ? 1.0 : config_.init_scale;
  hysteresis_tracker_ = config_.hysteresis;
  if (config_.kind == ScalerKind::dynamic) growth_tracker_ = config_.init_growth_tracker;
}

ScalerConfig scaler_from_torch_state(const nlohmann::json& state, std::string_view source) {
  if (!state.is_object())
    throw Error(fmt::format("{}: a GradScaler state_dict is a JSON object, this is {}", source, state.type_name()));
  if (state.empty())
    throw Error(fmt::format("{}: the GradScaler state_dict is empty (saved from a disabled GradScaler)", source));
  // A float entry takes any JSON number (json.dump writes 65536.0, a hand-written file may say 65536); an
  // int entry only an integer.
  auto entry = [&](const char* key, bool integer) -> const nlohmann::json& {
    if (!state.contains(key)) throw Error(fmt::format("{}: the GradScaler state_dict has no \"{}\"", source, key));
    const nlohmann::json& v = state[key];
    if (integer ? !v.is_number_integer() : !v.is_number())
      throw Error(fmt::format("{}: \"{}\" is {} ({}), GradScaler.state_dict() holds a Python {} there", source, key,
                              v.type_name(), v.dump(), integer ? "int" : "float"));
    return v;
  };
  ScalerConfig c;
  c.kind = ScalerKind::dynamic;
  c.init_scale = entry("scale", false).get<double>();
  c.growth_factor = entry("growth_factor", false).get<double>();
  c.backoff_factor = entry("backoff_factor", false).get<double>();
  const auto& interval = entry("growth_interval", true);
  const auto& tracker = entry("_growth_tracker", true);
  if (!(interval.get<double>() >= 1 && interval.get<double>() <= std::numeric_limits<int>::max()))
    throw Error(fmt::format("{}: \"growth_interval\" must be an int >= 1, got {}", source, interval.dump()));
  c.growth_interval = interval.get<int>();
  if (!(tracker.get<double>() >= 0 && tracker.get<double>() < c.growth_interval))
    throw Error(fmt::format("{}: \"_growth_tracker\" must lie in [0, growth_interval = {}), got {}", source,
                            c.growth_interval, tracker.dump()));
  c.init_growth_tracker = tracker.get<std::int64_t>();
  try {
    validate(c);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  return c;
}

void LossScaler::update(bool found_inf) {
  const ScalerConfig& c = config_;
  switch (c.kind) {
    case ScalerKind::none:
    case ScalerKind::constant: return;

    case ScalerKind::dynamic:
      // torch.amp.GradScaler.update -> _amp_update_scale_ (aten/src/ATen/native/cpu/AmpGradScalerKernels.cpp,
      // _amp_update_scale_cpu_kernel): on inf/NaN scale *= backoff_factor and the growth tracker is reset;
      // otherwise the tracker counts the clean step and at growth_interval the scale grows (only if the
      // grown float scale is finite) and the tracker is reset.
      if (found_inf) {
        scale_ = static_cast<float>(scale_ * c.backoff_factor);
        growth_tracker_ = 0;
      } else {
        const std::int64_t successful = growth_tracker_ + 1;
        if (successful == c.growth_interval) {
          const float grown = static_cast<float>(scale_ * c.growth_factor);
          if (std::isfinite(grown)) scale_ = grown;
          growth_tracker_ = 0;
        } else {
          growth_tracker_ = successful;
        }
      }
      return;

    case ScalerKind::hysteresis_megatron:
      // Megatron-LM DynamicGradScaler.update (megatron/core/optimizer/grad_scaler.py): an inf/NaN resets the
      // growth tracker and uses up one unit of hysteresis; once it is used up (<= 0) every further inf/NaN
      // backs off, floored at min_scale. growth_interval clean steps grow the scale, and only then is the
      // hysteresis refilled.
      if (found_inf) {
        growth_tracker_ = 0;
        hysteresis_tracker_ -= 1;
        if (hysteresis_tracker_ <= 0) scale_ = std::max(scale_ * c.backoff_factor, c.min_scale);
      } else {
        growth_tracker_ += 1;
        if (growth_tracker_ == c.growth_interval) {
          growth_tracker_ = 0;
          hysteresis_tracker_ = c.hysteresis;
          scale_ = scale_ * c.growth_factor;
        }
      }
      return;

    case ScalerKind::hysteresis_deepspeed:
      // DeepSpeed DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py) with
      // consecutive_hysteresis=True (delayed_shift = hysteresis, scale_window = growth_interval,
      // scale_factor = growth_factor; the backoff divides by scale_factor there, multiplies by
      // backoff_factor here, the same for the defaults). An inf/NaN backs off (floored at min_scale) when
      // delayed_shift == 1 or cur_hysteresis == 1, otherwise it uses up one unit of hysteresis; any clean
      // step refills the hysteresis; the scale grows when (cur_iter - last_overflow_iter) % scale_window == 0
      // (the long-standing DeepSpeed rule: growth_interval clean steps after the last overflow, then every
      // growth_interval; recent DeepSpeed versions wait one step longer). DeepSpeed raises an exception
      // at min_scale (raise_error_at_min_scale); we stay at min_scale and keep training.
      if (found_inf) {
        if (c.hysteresis == 1 || hysteresis_tracker_ == 1) scale_ = std::max(scale_ * c.backoff_factor, c.min_scale);
        else hysteresis_tracker_ -= 1;
        last_overflow_iter_ = cur_iter_;
      } else {
        hysteresis_tracker_ = c.hysteresis;  // consecutive_hysteresis
        if ((cur_iter_ - last_overflow_iter_) % c.growth_interval == 0) scale_ *= c.growth_factor;
      }
      cur_iter_ += 1;
      return;
  }
}

nlohmann::json LossScaler::state() const {
  const ScalerConfig& c = config_;
  nlohmann::json s = {{"kind", std::string(to_string(c.kind))}, {"scale", scale_}};
  if (c.kind == ScalerKind::none || c.kind == ScalerKind::constant) return s;
  s["growth_factor"] = c.growth_factor;
  s["backoff_factor"] = c.backoff_factor;
  s["growth_interval"] = c.growth_interval;
  switch (c.kind) {
    case ScalerKind::dynamic: s["_growth_tracker"] = growth_tracker_; break;
    case ScalerKind::hysteresis_megatron:
      s["_growth_tracker"] = growth_tracker_;
      s["hysteresis"] = c.hysteresis;
      s["min_scale"] = c.min_scale;
      s["hysteresis_tracker"] = hysteresis_tracker_;
      break;
    case ScalerKind::hysteresis_deepspeed:
      s["hysteresis"] = c.hysteresis;
      s["min_scale"] = c.min_scale;
      s["cur_hysteresis"] = hysteresis_tracker_;
      s["cur_iter"] = cur_iter_;
      s["last_overflow_iter"] = last_overflow_iter_;
      break;
    default: break;
  }
  return s;
}

void LossScaler::load_state(const nlohmann::json& s) {
  const ScalerConfig& c = config_;
  try {
    if (s.at("kind").get<std::string>() != to_string(c.kind))
      throw Error(
          fmt::format("scaler state is for '{}', not '{}'", s.at("kind").get<std::string>(), to_string(c.kind)));
    const double scale = s.at("scale").get<double>();
    if (!(std::isfinite(scale) && scale > 0)) throw Error(fmt::format("scaler state has scale {}", scale));
    if (c.kind != ScalerKind::none && c.kind != ScalerKind::constant) {
      // The parameters are the config's (a resumed run checks the scaler spec too); a state of other
      // parameters would continue another run's sequence.
      auto same = [&](const char* key, double want) {
        if (s.at(key).get<double>() != want)
          throw Error(fmt::format("scaler state has {} {}, the scaler {}", key, s.at(key).dump(), want));
      };
      same("growth_factor", c.growth_factor);
      same("backoff_factor", c.backoff_factor);
      same("growth_interval", c.growth_interval);
    }
    scale_ = scale;
    switch (c.kind) {
      case ScalerKind::none:
      case ScalerKind::constant: break;
      case ScalerKind::dynamic: growth_tracker_ = s.at("_growth_tracker").get<std::int64_t>(); break;
      case ScalerKind::hysteresis_megatron:
        growth_tracker_ = s.at("_growth_tracker").get<std::int64_t>();
        hysteresis_tracker_ = s.at("hysteresis_tracker").get<std::int64_t>();
        break;
      case ScalerKind::hysteresis_deepspeed:
        hysteresis_tracker_ = s.at("cur_hysteresis").get<std::int64_t>();
        cur_iter_ = s.at("cur_iter").get<std::int64_t>();
        last_overflow_iter_ = s.at("last_overflow_iter").get<std::int64_t>();
        break;
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("scaler state is malformed: ") + e.what());
  }
}

}  // namespace mpsim::train
