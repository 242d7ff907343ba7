#include "mpsim/train/trainer.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <set>

#include "mpsim/analysis/histogram.hpp"
#include "mpsim/error.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/nn/policy.hpp"
#include "mpsim/parallel.hpp"
#include "mpsim/train/checkpoint.hpp"
#include "mpsim/version.hpp"

namespace mpsim::train {

namespace {

constexpr const char* kCheckpointName = "checkpoint.safetensors";

nlohmann::json model_config_json(const nn::ModelConfig& m) {
  return {{"batch", m.batch}, {"size", m.size}, {"corpus_path", m.corpus_path}};
}

// The optimiser config with placeholders for the model's values, for checks before the model exists.
OptimizerConfig placeholder_optimizer(const TrainConfig& c) {
  nn::TrainHints h;
  h.optimizer = "sgd";
  return resolve_optimizer(c.optimizer, h);
}

std::string number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{}", v);  // shortest representation that reads back to the same double
}

std::string fraction(std::uint64_t part, std::uint64_t whole) {
  return whole ? fmt::format("{:.6g}", static_cast<double>(part) / static_cast<double>(whole)) : "0";
}

// The activation-gradient rounding sites of a model: one forward/backward under a probe policy that
// gives only activation_grad a format (fp32 itself, so nothing changes) and so records Stats exactly at
// those sites. The gradients it adds are zeroed afterwards.
std::vector<std::string> activation_grad_sites(nn::Model& model, const std::vector<nn::Param>& params) {
  nn::PrecisionPolicy probe_policy;
  probe_policy.name = "probe";
  probe_policy.activation_grad = mpsim::fp32();
  nn::Precision probe(probe_policy);
  model.forward_backward(0, 1.0f, probe);
  for (const auto& p : params) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
  std::vector<std::string> sites;
  for (const auto& [site, _] : probe.site_stats()) sites.push_back(site);
  return sites;
}

void check_same(const nlohmann::json& header, const char* key, const nlohmann::json& want, const std::string& file,
                const char* what) {
  if (!header.contains(key) || header[key] != want)
    throw Error(fmt::format("{}: checkpoint of another run: its {} is {}, this run's is {}", file, what,
                            header.contains(key) ? header[key].dump() : "missing", want.dump()));
}

}  // namespace

OptimizerConfig model_default_optimizer() {
  OptimizerConfig o;
  o.name = "";
  o.lr = 0;
  o.momentum = std::nan("");
  o.weight_decay = std::nan("");
  return o;
}

double default_lr(std::string_view optimizer) {
  return optimizer == "adamw" ? 1e-3 : 0.01;  // torch.optim.AdamW's default lr; a common SGD starting point
}

OptimizerConfig resolve_optimizer(const OptimizerConfig& config, const nn::TrainHints& hints) {
  OptimizerConfig o = config;
  if (o.name.empty()) o.name = hints.optimizer;
  const bool hinted = o.name == hints.optimizer;
  if (o.lr == 0) o.lr = hinted ? hints.lr : default_lr(o.name);
  if (std::isnan(o.momentum)) o.momentum = hinted ? hints.momentum : 0.9;
  if (std::isnan(o.weight_decay)) o.weight_decay = hinted ? hints.weight_decay : 0.0;
  return o;
}

nlohmann::json TrainSummary::to_json() const {
  return {{"steps_done", steps_done},
          {"final_loss", std::isfinite(final_loss) ? nlohmann::json(final_loss) : nlohmann::json(number(final_loss))},
          {"final_metric",
           {{"name", final_metric.name},
            {"value", std::isfinite(final_metric.value) ? nlohmann::json(final_metric.value)
                                                        : nlohmann::json(number(final_metric.value))},
            {"higher_is_better", final_metric.higher_is_better}}},
          {"skipped_steps", skipped_steps},
          {"diverged", diverged},
          {"first_nonfinite_step", diverged_at},
          {"final_scale", final_scale},
          {"activation_grad_nonzero", act_grad_nonzero},
          {"activation_grad_underflow", act_grad_underflow},
          {"activation_grad_subnormal", act_grad_subnormal},
          {"activation_grad_overflow", act_grad_overflow},
          {"activation_grad_lost_pct", 100.0 * act_grad_lost_fraction()},
          {"updates_nonzero", updates_nonzero},
          {"updates_swallowed", updates_swallowed},
          {"updates_swallowed_pct", 100.0 * swallowed_fraction()},
          {"wall_seconds", wall_seconds}};
}

nlohmann::json to_json(const TrainConfig& c) {
  return {{"model", c.model},
          {"model_config", model_config_json(c.model_config)},
          {"policy", c.policy},
          {"scaler", c.scaler},
          {"optimizer_requested",
           {{"name", c.optimizer.name.empty() ? "model's" : c.optimizer.name},
            {"lr", c.optimizer.lr == 0 ? nlohmann::json("model's") : nlohmann::json(c.optimizer.lr)}}},
          {"steps", c.steps},
          {"seed", c.seed},
          {"accumulate", c.accumulate},
          {"clip_norm", c.clip_norm},
          {"loss_divisor_log2", c.loss_divisor_log2},
          {"eval_every", c.eval_every},
          {"checkpoint_every", c.checkpoint_every},
          {"threads", c.threads},
          {"hist_steps", c.hist_steps},
          {"out", c.out.string()},
          {"resume", c.resume.string()}};
}

void validate(const TrainConfig& c) {
  nn::parse_policy(c.policy);
  parse_scaler(c.scaler);
  validate(placeholder_optimizer(c));
  if (c.steps < 0) throw Error(fmt::format("--steps {}: must be >= 1", c.steps));
  if (c.accumulate < 1) throw Error(fmt::format("--accumulate {}: must be >= 1", c.accumulate));
  // 2^-60 times a loss scale up to 2^24 stays a normal float; beyond it the knob would only flush.
  if (c.loss_divisor_log2 < 0 || c.loss_divisor_log2 > 60)
    throw Error(fmt::format("--loss-divisor-log2 {}: must lie in [0, 60]", c.loss_divisor_log2));
  if (!(std::isfinite(c.clip_norm) && c.clip_norm >= 0))
    throw Error(fmt::format("--clip-norm {}: must be finite and >= 0", c.clip_norm));
  if (c.eval_every < 0) throw Error(fmt::format("--eval-every {}: must be >= 0", c.eval_every));
  if (c.checkpoint_every < 0) throw Error(fmt::format("--checkpoint-every {}: must be >= 0", c.checkpoint_every));
  if (c.threads < 1) throw Error(fmt::format("--threads {}: must be >= 1", c.threads));
  for (int s : c.hist_steps)
    if (s < 1) throw Error(fmt::format("--hist-steps: step {} is not >= 1", s));
  if (c.out.empty()) throw Error("--out: an output folder is required");
  if (std::filesystem::exists(c.out) && !std::filesystem::is_directory(c.out))
    throw Error(fmt::format("--out {}: exists and is not a folder", c.out.string()));
}

TrainSummary run_training(const TrainConfig& config, const ModelFactory& factory, const Progress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  validate(config);
  const nn::PrecisionPolicy policy = nn::parse_policy(config.policy);
  const ScalerConfig scaler_config = parse_scaler(config.scaler);

  std::unique_ptr<nn::Model> model = factory(config.model, config.model_config, config.seed);
  const nn::TrainHints hints = model->hints();
  const OptimizerConfig optimizer_config = resolve_optimizer(config.optimizer, hints);
  validate(optimizer_config);
  TrainConfig resolved = config;
  resolved.optimizer = optimizer_config;
  if (resolved.steps == 0) resolved.steps = hints.steps;
  const int total_steps = resolved.steps;
  std::vector<nn::Param> params = model->params();
  std::vector<std::size_t> sizes;
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& p : params) {
    if (p.value.size() != p.grad.size())
      throw Error(fmt::format("model {}: parameter {} has {} values but {} gradients", model->name(), p.name,
                              p.value.size(), p.grad.size()));
    sizes.push_back(p.value.size());
    shapes.push_back({{"name", p.name}, {"size", p.value.size()}});
  }
  std::vector<std::span<float>> values, grads;
  for (auto& p : params) {
    values.push_back(p.value);
    grads.push_back(p.grad);
  }

  Optimizer optimizer(optimizer_config, sizes);
  if (policy.weight) optimizer.set_no_master_copy(*policy.weight, policy.update_rounding);
  LossScaler scaler(scaler_config);
  nn::Precision precision(policy);
  TrainSummary summary;
  int start_step = 0;

  const nlohmann::json run_identity = {{"model", model->name()},
                                       {"model_config", model_config_json(config.model_config)},
                                       {"shapes", shapes},
                                       {"policy", config.policy},
                                       {"scaler", to_spec(scaler_config)},
                                       {"optimizer", train::to_json(optimizer_config)},
                                       {"seed", config.seed},
                                       {"accumulate", config.accumulate},
                                       {"clip_norm", config.clip_norm},
                                       {"loss_divisor_log2", config.loss_divisor_log2}};

  if (!config.resume.empty()) {
    const std::string file = config.resume.string();
    const Checkpoint ck = read_checkpoint(config.resume);
    const nlohmann::json& h = ck.header;
    check_same(h, "model", run_identity["model"], file, "model");
    check_same(h, "shapes", run_identity["shapes"], file, "parameter shapes");
    for (const char* key :
         {"model_config", "policy", "scaler", "optimizer", "seed", "accumulate", "clip_norm", "loss_divisor_log2"})
      check_same(h, key, run_identity[key], file, key);
    try {
      start_step = h.at("step").get<int>();
      if (start_step >= total_steps)
        throw Error(fmt::format("{}: the checkpoint is at step {}; --steps {} leaves nothing to do", file, start_step,
                                total_steps));
      const std::size_t n_buffers = optimizer.buffers().size();
      if (ck.tensors.size() != params.size() + n_buffers || h.at("optimizer_layout") != optimizer.state_layout()["buffers"])
        throw Error(fmt::format("{}: checkpoint of another run: its optimiser state does not fit", file));
      for (std::size_t i = 0; i < params.size(); ++i) {
        if (ck.tensors[i].values.size() != params[i].value.size())
          throw Error(fmt::format("{}: tensor {} has {} values, the model's {} has {}", file, ck.tensors[i].name,
                                  ck.tensors[i].values.size(), params[i].name, params[i].value.size()));
      }
      for (std::size_t i = 0; i < params.size(); ++i)
        std::copy(ck.tensors[i].values.begin(), ck.tensors[i].values.end(), params[i].value.begin());
      for (std::size_t b = 0; b < n_buffers; ++b) optimizer.buffers()[b] = ck.tensors[params.size() + b].values;
      optimizer.set_steps(h.at("optimizer_steps").get<std::int64_t>());
      scaler.load_state(h.at("scaler_state"));
      precision.set_sr_offset(h.at("sr_offset").get<std::uint64_t>());
      const auto& t = h.at("totals");
      summary.skipped_steps = t.at("skipped_steps").get<int>();
      summary.diverged_at = t.at("diverged_at").get<int>();
      summary.act_grad_nonzero = t.at("act_grad_nonzero").get<std::uint64_t>();
      summary.act_grad_underflow = t.at("act_grad_underflow").get<std::uint64_t>();
      summary.act_grad_subnormal = t.at("act_grad_subnormal").get<std::uint64_t>();
      summary.act_grad_overflow = t.at("act_grad_overflow").get<std::uint64_t>();
      // Totals added for the swallowed-update count (written in write_checkpoint_now's "totals").
      summary.updates_nonzero = t.at("updates_nonzero").get<std::uint64_t>();
      summary.updates_swallowed = t.at("updates_swallowed").get<std::uint64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("{}: corrupt checkpoint header ({})", file, e.what()));
    }
  }

  const std::vector<std::string> act_sites = activation_grad_sites(*model, params);
  const std::set<std::string> act_site_set(act_sites.begin(), act_sites.end());
  std::vector<int> hist_steps = config.hist_steps;
  if (hist_steps.empty()) hist_steps = {1, total_steps};
  const std::set<int> hist_set(hist_steps.begin(), hist_steps.end());
  const int eval_every = config.eval_every > 0 ? config.eval_every : std::max(1, total_steps / 10);

  // Without a master copy the weights live in the low format from the start (a resumed run's already do).
  if (policy.weight && config.resume.empty())
    for (auto& p : params) precision.round(p.name + "/weight", nn::OpClass::weight, p.value);

  // Nothing has been written so far; from here on the outputs appear.
  std::filesystem::create_directories(config.out);
  const std::filesystem::path hist_dir = config.out / "hist";

  std::string csv = "step,loss,metric,scale,skipped,grad_norm,swallowed";
  for (const auto& s : act_sites) csv += fmt::format(",{0}:zero,{0}:subnormal,{0}:overflow", s);
  csv += "\n";

  auto write_checkpoint_now = [&](int step) {
    nlohmann::json header = run_identity;
    header["mpsim_version"] = kVersion;
    header["step"] = step;
    header["optimizer_steps"] = optimizer.steps();
    header["optimizer_layout"] = optimizer.state_layout()["buffers"];
    header["scaler_state"] = scaler.state();
    header["sr_offset"] = precision.sr_offset();
    // Data batches come from (seed, batch index): the step fixes the data RNG, nothing else to save.
    header["rng"] = {{"seed", config.seed}, {"next_batch_index", static_cast<std::uint64_t>(step) * config.accumulate}};
    header["totals"] = {{"skipped_steps", summary.skipped_steps},
                        {"diverged_at", summary.diverged_at},
                        {"act_grad_nonzero", summary.act_grad_nonzero},
                        {"act_grad_underflow", summary.act_grad_underflow},
                        {"act_grad_subnormal", summary.act_grad_subnormal},
                        {"act_grad_overflow", summary.act_grad_overflow},
                        // Swallowed-update totals (read back in the resume block).
                        {"updates_nonzero", summary.updates_nonzero},
                        {"updates_swallowed", summary.updates_swallowed}};
    std::vector<CheckpointTensorView> tensors;
    for (const auto& p : params) tensors.push_back({"param/" + p.name, p.value});
    for (std::size_t b = 0; b < optimizer.buffers().size(); ++b)
      tensors.push_back({fmt::format("optimizer/{}", b), optimizer.buffers()[b]});
    write_checkpoint(config.out / kCheckpointName, header, tensors);
  };

  double loss = 0;
  int step = start_step;
  for (step = start_step + 1; step <= total_steps; ++step) {
    for (const auto& g : grads) std::fill(g.begin(), g.end(), 0.0f);
    precision.reset_stats();
    const bool snapshot = hist_set.count(step) > 0;
    precision.capture_histograms(snapshot);
    precision.reset_histograms();

    const double scale = scaler.scale();
    // What backward starts from, as `scaler.scale(loss / accumulate).backward()` in PyTorch: the gradient
    // of (loss / accumulate) * scale with respect to the loss is scale / accumulate, in float; the
    // experiment divisor multiplies the scale by 2^-k, exactly.
    const float seed_scale =
        static_cast<float>(std::ldexp(scale, -config.loss_divisor_log2)) / static_cast<float>(config.accumulate);
    loss = 0;
    for (int micro = 0; micro < config.accumulate; ++micro) {
      const std::uint64_t batch = static_cast<std::uint64_t>(step - 1) * config.accumulate + micro;
      loss += model->forward_backward(batch, seed_scale, precision);
    }
    loss /= config.accumulate;

    // Unscale (times the float reciprocal, as GradScaler's inv_scale = scale.double().reciprocal().float(),
    // and times 2^k for the experiment divisor, exactly), then look for inf/NaN in the unscaled gradients.
    const float inv = std::ldexp(static_cast<float>(1.0 / scale), config.loss_divisor_log2);
    std::vector<char> tensor_has_inf(grads.size(), 0);
    // Each tensor is touched by one worker only, so the result does not depend on the thread count.
    const int workers = static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(config.threads), grads.size()));
    parallel_for(grads.size(), workers, "train", [&](int, std::size_t begin, std::size_t end) {
      for (std::size_t i = begin; i < end; ++i) {
        bool bad = false;
        for (float& g : grads[i]) {
          g *= inv;
          bad |= !std::isfinite(g);
        }
        tensor_has_inf[i] = bad;
      }
    });
    const bool found_inf = std::any_of(tensor_has_inf.begin(), tensor_has_inf.end(), [](char c) { return c != 0; });

    if (snapshot) {
      nlohmann::json act = nlohmann::json::object(), wgrad = nlohmann::json::object(),
                     master = nlohmann::json::object();
      for (const auto& [site, h] : precision.histograms()) (act_site_set.count(site) ? act : wgrad)[site] = h.to_json();
      for (std::size_t i = 0; i < params.size(); ++i) {
        auto h = analysis::make_float_histogram();
        h.add(std::span<const float>(grads[i].data(), grads[i].size()));
        master[params[i].name] = h.to_json();
      }
      const nlohmann::json snap = {{"step", step},
                                   {"model", model->name()},
                                   {"policy", config.policy},
                                   {"scaler", config.scaler},
                                   {"loss_scale", scale},
                                   {"loss_divisor_log2", config.loss_divisor_log2},
                                   {"note", "activation_grad and weight_grad: values at the rounding sites before "
                                            "rounding, loss scale (and 2^-loss_divisor_log2) included; master_grad: "
                                            "unscaled fp32 gradients in the model's units"},
                                   {"activation_grad", act},
                                   {"weight_grad", wgrad},
                                   {"master_grad", master},
                                   {"schema", "mpsim-train-hist-1"},
                                   {"mpsim_version", kVersion}};
      std::filesystem::create_directories(hist_dir);
      io::write_text_file(hist_dir / fmt::format("step_{:06d}.json", step), snap.dump(1) + "\n");
    }

    const bool skipped = scaler.skips_step(found_inf);
    double grad_norm = std::nan("");
    std::string swallowed_text;
    if (!skipped) {
      grad_norm = clip_grad_norm(grads, config.clip_norm);
      const UpdateStats updates = optimizer.step(values, grads);
      summary.updates_nonzero += updates.nonzero;
      summary.updates_swallowed += updates.swallowed;
      swallowed_text = fraction(updates.swallowed, updates.nonzero);
    } else {
      summary.skipped_steps += 1;
    }
    scaler.update(found_inf);

    std::uint64_t step_nonzero = 0;
    std::string site_cols;
    for (const auto& site : act_sites) {
      const auto it = precision.site_stats().find(site);
      const Stats st = it == precision.site_stats().end() ? Stats{} : it->second;
      const std::uint64_t nz = st.nonzero_finite();
      site_cols += "," + fraction(st.underflow, nz) + "," + fraction(st.subnormal, nz) + "," + fraction(st.overflow, nz);
      step_nonzero += nz;
      summary.act_grad_nonzero += nz;
      summary.act_grad_underflow += st.underflow;
      summary.act_grad_subnormal += st.subnormal;
      summary.act_grad_overflow += st.overflow;
    }

    bool weights_finite = true;
    if (found_inf && !skipped)
      for (const auto& v : values)
        weights_finite = weights_finite && std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
    if ((!std::isfinite(loss) || !weights_finite) && summary.diverged_at == 0) summary.diverged_at = step;

    std::string metric_text;
    const bool stop = !weights_finite;  // nothing recovers from non-finite master weights
    if (step % eval_every == 0 || step == total_steps || stop) {
      summary.final_metric = model->evaluate(precision);
      metric_text = number(summary.final_metric.value);
    }
    csv += fmt::format("{},{},{},{},{},{},{}{}\n", step, number(loss), metric_text, number(scale), skipped ? 1 : 0,
                       number(grad_norm), swallowed_text, site_cols);
    (void)step_nonzero;

    if (progress) progress(step, total_steps, loss, scaler.scale());
    if ((config.checkpoint_every > 0 && step % config.checkpoint_every == 0) || step == total_steps || stop) {
      io::write_text_file(config.out / "steps.csv", csv);
      write_checkpoint_now(step);
    }
    if (stop) break;
  }

  summary.steps_done = std::min(step, total_steps);
  summary.final_loss = loss;
  summary.final_scale = scaler.scale();
  summary.diverged = summary.diverged_at != 0 && (!std::isfinite(loss) || !std::isfinite(summary.final_metric.value) ||
                                                  summary.steps_done < total_steps);
  summary.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  nlohmann::json cfg = to_json(resolved);
  cfg["model_name"] = model->name();
  cfg["optimizer"] = train::to_json(optimizer_config);
  cfg["policy_formats"] = policy.describe();
  cfg["scaler_spec"] = to_spec(scaler_config);
  cfg["parameters"] = shapes;
  const nlohmann::json run = {{"schema", "mpsim-train-run-1"},
                              {"mpsim_version", kVersion},
                              {"config", cfg},
                              {"summary", summary.to_json()},
                              {"activation_grad_sites", act_sites},
                              {"histogram_steps", hist_steps},
                              {"files",
                               {{"steps", "steps.csv"},
                                {"histograms", "hist/step_NNNNNN.json"},
                                {"checkpoint", kCheckpointName}}}};
  io::write_text_file(config.out / "run.json", run.dump(2) + "\n");
  return summary;
}

}  // namespace mpsim::train
