#include "mpsim/train/trainer.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "mpsim/analysis/histogram.hpp"
#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/io/names.hpp"
#include "mpsim/nn/policy.hpp"
#include "mpsim/parallel.hpp"
#include "mpsim/train/checkpoint.hpp"
#include "mpsim/version.hpp"

namespace mpsim::train {

namespace {

constexpr const char* kCheckpointName = "checkpoint.safetensors";

nlohmann::json model_config_json(const nn::ModelConfig& m) {
  nlohmann::json j = {{"batch", m.batch}, {"size", m.size}, {"corpus_path", m.corpus_path}};
  // Written only when set, so that runs and checkpoints of the default language keep their bytes.
  if (m.vocab != 0) j["vocab"] = m.vocab;
  if (!std::isnan(m.zipf)) j["zipf"] = m.zipf;
  return j;
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

// Under a scaling recipe the gradients between layers stay fp32 and the rounding of the gradient happens
// inside the GEMMs, at their dy operands (sites "<layer>/dgrad_dy", "<layer>/wgrad_dy", nn/policy.hpp): one
// forward/backward under a copy of the policy finds them (its recipe state is its own; the gradients it adds
// are zeroed). Empty without a recipe.
std::vector<std::string> gradient_operand_sites(nn::Model& model, const std::vector<nn::Param>& params,
                                                const nn::PrecisionPolicy& policy) {
  if (!policy.recipe) return {};
  nn::Precision probe(policy);
  model.forward_backward(0, 1.0f, probe);
  for (const auto& p : params) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
  std::vector<std::string> sites;
  for (const auto& [site, _] : probe.site_stats())
    if (site.ends_with("/dgrad_dy") || site.ends_with("/wgrad_dy")) sites.push_back(site);
  return sites;
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
          {"activation_grad_mass", analysis::mass_lost_json(act_grad_mass.stats())},
          {"updates_nonzero", updates_nonzero},
          {"updates_swallowed", updates_swallowed},
          {"updates_swallowed_pct", 100.0 * swallowed_fraction()},
          {"wall_seconds", wall_seconds}};
}

nlohmann::json to_json(const TrainConfig& c) {
  return {{"model", c.model},
          {"model_config", model_config_json(c.model_config)},
          {"policy", c.policy.spec},
          {"scaler", c.scaler.spec},
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
          {"dump_grads", c.dump_grads},
          {"out", c.out.string()},
          {"resume", c.resume.string()}};
}

void validate(const TrainConfig& c) {
  // The policy and the scaler were parsed where they were given (ParsedPolicy, ParsedScaler); a config changed
  // since is checked here.
  validate(c.scaler.config);
  validate(placeholder_optimizer(c));
  if (c.steps < 0) throw FieldError("steps", std::to_string(c.steps), "must be >= 1");
  if (c.accumulate < 1) throw FieldError("accumulate", std::to_string(c.accumulate), "must be >= 1");
  // 2^-60 times a loss scale up to 2^24 stays a normal float; beyond it the knob would only flush.
  if (c.loss_divisor_log2 < 0 || c.loss_divisor_log2 > 60)
    throw FieldError("loss_divisor_log2", std::to_string(c.loss_divisor_log2), "must lie in [0, 60]");
  if (!(std::isfinite(c.clip_norm) && c.clip_norm >= 0))
    throw FieldError("clip_norm", fmt::format("{}", c.clip_norm), "must be finite and >= 0");
  if (c.eval_every < 0) throw FieldError("eval_every", std::to_string(c.eval_every), "must be >= 0");
  if (c.checkpoint_every < 0) throw FieldError("checkpoint_every", std::to_string(c.checkpoint_every), "must be >= 0");
  if (c.threads < 1) throw FieldError("threads", std::to_string(c.threads), "must be >= 1");
  for (int s : c.hist_steps)
    if (s < 1) throw FieldError("hist_steps", "", fmt::format("step {} is not >= 1", s));
  if (c.out.empty()) throw FieldError("out", "", "an output folder is required");
  // run.json names the folder and the checkpoint in JSON, which holds UTF-8 only: refused here, before the run.
  for (const auto& [field, path] : {std::pair{"out", &c.out}, std::pair{"resume", &c.resume}})
    if (!io::is_valid_utf8(path->native()))
      throw FieldError(field, io::escaped(path->native()), std::string(io::kNotUtf8Name));
  if (std::filesystem::exists(c.out) && !std::filesystem::is_directory(c.out))
    throw FieldError("out", c.out.string(), "exists and is not a folder");
  if (c.previous_run == TrainConfig::PreviousRun::refuse) {
    std::string found;
    for (const char* name : kPreviousRunFiles)
      if (std::error_code ec; std::filesystem::exists(c.out / name, ec))
        found += (found.empty() ? "" : ", ") + std::string(name);
    if (!found.empty())
      throw FieldError("out", c.out.string(),
                       fmt::format("holds a previous run ({}); choose another folder, or replace that run's files "
                                   "({{previous_run}})",
                                   found),
                       {"previous_run"});
  }
}

namespace {

// ---- a run: setup, one step, checkpoint (the shape of llm.c's train_gpt2.c: build, then a loop of
// forward/backward, update, log, save) ----

OptimizerConfig validated(OptimizerConfig o) {
  validate(o);
  return o;
}

// The parameters' element counts, checked against their gradients'.
std::vector<std::size_t> param_sizes(const nn::Model& model, const std::vector<nn::Param>& params) {
  std::vector<std::size_t> sizes;
  for (const auto& p : params) {
    if (p.value.size() != p.grad.size())
      throw Error(fmt::format("model {}: parameter {} has {} values but {} gradients", model.name(), p.name,
                              p.value.size(), p.grad.size()));
    sizes.push_back(p.value.size());
  }
  return sizes;
}

// What a run holds from step to step: the model and its parameters, the optimiser, the scaler, the rounding
// policy with its counters, the totals so far and the run's identity (what a checkpoint must match).
struct Run {
  Run(const TrainConfig& c, const ModelFactory& factory)
      : config(c),
        policy(c.policy.policy),
        scaler_config(c.scaler.config),
        model(factory(c.model, c.model_config, c.seed)),
        optimizer_config(validated(resolve_optimizer(c.optimizer, model->hints()))),
        total_steps(c.steps == 0 ? model->hints().steps : c.steps),
        params(model->params()),
        optimizer(optimizer_config, param_sizes(*model, params)),
        scaler(scaler_config),
        precision(policy) {
    precision.set_gemm_threads(c.threads);  // under mma=MODEL; the bits do not depend on it (mma/dot.hpp)
    for (auto& p : params) {
      values.push_back(p.value);
      grads.push_back(p.grad);
      shapes.push_back({{"name", p.name}, {"size", p.value.size()}});
    }
    if (policy.weight) optimizer.set_no_master_copy(*policy.weight, policy.update_rounding);
    identity = {{"model", model->name()},
                {"model_config", model_config_json(c.model_config)},
                {"shapes", shapes},
                {"policy", c.policy.spec},
                {"scaler", to_spec(scaler_config)},
                {"optimizer", train::to_json(optimizer_config)},
                {"seed", c.seed},
                {"accumulate", c.accumulate},
                {"clip_norm", c.clip_norm},
                {"loss_divisor_log2", c.loss_divisor_log2}};
  }

  const TrainConfig& config;
  const nn::PrecisionPolicy policy;
  const ScalerConfig scaler_config;
  std::unique_ptr<nn::Model> model;
  const OptimizerConfig optimizer_config;
  const int total_steps;
  std::vector<nn::Param> params;
  std::vector<std::span<float>> values, grads;
  nlohmann::json shapes = nlohmann::json::array();
  nlohmann::json identity;
  Optimizer optimizer;
  LossScaler scaler;
  nn::Precision precision;
  TrainSummary summary;
  int start_step = 0;
  // Set by prepare(): the activation-gradient sites (the CSV's columns), the steps that write histograms,
  // and how often the metric is evaluated.
  std::vector<std::string> act_sites;
  // The sites of steps.csv's per-site columns and of the activation-gradient totals: act_sites, then under a
  // recipe its gradient operands (gradient_operand_sites).
  std::vector<std::string> grad_sites;
  std::set<std::string, std::less<>> grad_site_set;
  std::set<std::string> act_site_set;
  std::vector<int> hist_steps;
  std::set<int> hist_set;
  int eval_every = 1;
  // This step's gradient mass lost per activation-gradient site, filled by the precision's observer.
  std::map<std::string, analysis::MassLost, std::less<>> step_mass;
};

// Loads a checkpoint of the same run: weights, optimiser buffers and steps, scaler state, the stochastic
// rounding offset and the totals; throws mpsim::Error naming the file on any mismatch.
void resume(Run& run, const std::filesystem::path& path) {
  const std::string file = path.string();
  const Checkpoint ck = read_checkpoint(path);
  const nlohmann::json& h = ck.header;
  check_same(h, "model", run.identity["model"], file, "model");
  check_same(h, "shapes", run.identity["shapes"], file, "parameter shapes");
  for (const char* key :
       {"model_config", "policy", "scaler", "optimizer", "seed", "accumulate", "clip_norm", "loss_divisor_log2"})
    check_same(h, key, run.identity[key], file, key);
  try {
    run.start_step = h.at("step").get<int>();
    if (run.start_step >= run.total_steps)
      throw FieldError("steps", std::to_string(run.total_steps),
                       fmt::format("leaves nothing to do: {} is at step {}", file, run.start_step));
    auto& params = run.params;
    const std::size_t n_buffers = run.optimizer.buffers().size();
    if (ck.tensors.size() != params.size() + n_buffers ||
        h.at("optimizer_layout") != run.optimizer.state_layout()["buffers"])
      throw Error(fmt::format("{}: checkpoint of another run: its optimiser state does not fit", file));
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (ck.tensors[i].values.size() != params[i].value.size())
        throw Error(fmt::format("{}: tensor {} has {} values, the model's {} has {}", file, ck.tensors[i].name,
                                ck.tensors[i].values.size(), params[i].name, params[i].value.size()));
    }
    for (std::size_t i = 0; i < params.size(); ++i)
      std::copy(ck.tensors[i].values.begin(), ck.tensors[i].values.end(), params[i].value.begin());
    for (std::size_t b = 0; b < n_buffers; ++b) run.optimizer.buffers()[b] = ck.tensors[params.size() + b].values;
    run.optimizer.set_steps(h.at("optimizer_steps").get<std::int64_t>());
    run.scaler.load_state(h.at("scaler_state"));
    run.precision.set_sr_offset(h.at("sr_offset").get<std::uint64_t>());
    if (run.precision.quantizer()) run.precision.quantizer()->load_state(h.at("recipe_state"));
    const auto& t = h.at("totals");
    TrainSummary& s = run.summary;
    s.skipped_steps = t.at("skipped_steps").get<int>();
    s.diverged_at = t.at("diverged_at").get<int>();
    s.act_grad_nonzero = t.at("act_grad_nonzero").get<std::uint64_t>();
    s.act_grad_underflow = t.at("act_grad_underflow").get<std::uint64_t>();
    s.act_grad_subnormal = t.at("act_grad_subnormal").get<std::uint64_t>();
    s.act_grad_overflow = t.at("act_grad_overflow").get<std::uint64_t>();
    // Totals added for the swallowed-update count (written in save_checkpoint's "totals").
    s.updates_nonzero = t.at("updates_nonzero").get<std::uint64_t>();
    s.updates_swallowed = t.at("updates_swallowed").get<std::uint64_t>();
    // Checkpoints written before the mass totals existed resume with them counted from here on.
    if (t.contains("act_grad_mass")) s.act_grad_mass = analysis::MassLost::from_state(t.at("act_grad_mass"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: corrupt checkpoint header ({})", file, e.what()));
  }
}

// What the loop needs once the weights are in place: the activation-gradient sites, the histogram steps,
// the evaluation interval; without a master copy the weights go to the low format (a resumed run's
// already are).
void prepare(Run& run) {
  run.act_sites = activation_grad_sites(*run.model, run.params);
  run.act_site_set = std::set<std::string>(run.act_sites.begin(), run.act_sites.end());
  run.grad_sites = run.act_sites;
  for (auto& s : gradient_operand_sites(*run.model, run.params, run.policy)) run.grad_sites.push_back(std::move(s));
  run.grad_site_set = {run.grad_sites.begin(), run.grad_sites.end()};
  run.hist_steps = run.config.hist_steps;
  if (run.hist_steps.empty()) run.hist_steps = {1, run.total_steps};
  run.hist_set = std::set<int>(run.hist_steps.begin(), run.hist_steps.end());
  run.eval_every = run.config.eval_every > 0 ? run.config.eval_every : std::max(1, run.total_steps / 10);
  if (run.policy.weight && run.config.resume.empty())
    for (auto& p : run.params) run.precision.round(p.name + "/weight", nn::OpClass::weight, p.value);
  // The mass measures need each activation gradient before and after its rounding: the observer sees
  // both (under fp32 the same values). It changes no value the run computes.
  run.precision.observe(
      [&run](std::string_view site, nn::OpClass cls, std::span<const float> before, std::span<const float> after) {
        if (cls != nn::OpClass::activation_grad && !run.grad_site_set.contains(site)) return;
        auto it = run.step_mass.find(site);
        if (it == run.step_mass.end()) it = run.step_mass.emplace(std::string(site), analysis::MassLost{}).first;
        it->second.add(before, after);
      });
}

std::string csv_header(const std::vector<std::string>& act_sites) {
  std::string csv = "step,loss,metric,scale,skipped,grad_norm,swallowed";
  for (const auto& s : act_sites) csv += fmt::format(",{0}:zero,{0}:subnormal,{0}:overflow", s);
  for (const auto& s : act_sites)
    csv += fmt::format(",{0}:l1_lost,{0}:l2sq_lost,{0}:cosine,{0}:push_down,{0}:lost_bias", s);
  return csv + ",step:l1_lost,step:l2sq_lost,step:cosine,step:push_down,step:lost_bias\n";
}

// Forward and backward over the step's micro-batches from the scaled loss; returns the mean loss.
double forward_backward(Run& run, int step, double scale) {
  const TrainConfig& c = run.config;
  // What backward starts from, as `scaler.scale(loss / accumulate).backward()` in PyTorch: the gradient
  // of (loss / accumulate) * scale with respect to the loss is scale / accumulate, in float; the
  // experiment divisor multiplies the scale by 2^-k, exactly.
  const float seed_scale =
      static_cast<float>(std::ldexp(scale, -c.loss_divisor_log2)) / static_cast<float>(c.accumulate);
  double loss = 0;
  for (int micro = 0; micro < c.accumulate; ++micro) {
    const std::uint64_t batch = static_cast<std::uint64_t>(step - 1) * c.accumulate + micro;
    loss += run.model->forward_backward(batch, seed_scale, run.precision);
  }
  return loss / c.accumulate;
}

// Unscales the gradients (times the float reciprocal, as GradScaler's inv_scale =
// scale.double().reciprocal().float(), and times 2^k for the experiment divisor, exactly); returns whether
// any unscaled gradient is inf or NaN.
bool unscale_and_check(Run& run, double scale) {
  const float inv = std::ldexp(static_cast<float>(1.0 / scale), run.config.loss_divisor_log2);
  auto& grads = run.grads;
  std::vector<char> tensor_has_inf(grads.size(), 0);
  // Each tensor is touched by one worker only, so the result does not depend on the thread count.
  const int workers =
      static_cast<int>(std::min<std::size_t>(static_cast<std::size_t>(run.config.threads), grads.size()));
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
  return std::any_of(tensor_has_inf.begin(), tensor_has_inf.end(), [](char c) { return c != 0; });
}

// hist/step_NNNNNN.json: the histograms the rounding sites captured this step and the unscaled gradients'.
void write_histograms(const Run& run, int step, double scale, const std::filesystem::path& hist_dir) {
  nlohmann::json act = nlohmann::json::object(), wgrad = nlohmann::json::object(), master = nlohmann::json::object();
  for (const auto& [site, h] : run.precision.histograms())
    (run.act_site_set.count(site) ? act : wgrad)[site] = h.to_json();
  for (std::size_t i = 0; i < run.params.size(); ++i) {
    auto h = analysis::make_float_histogram();
    h.add(std::span<const float>(run.grads[i].data(), run.grads[i].size()));
    master[run.params[i].name] = h.to_json();
  }
  const nlohmann::json snap = {{"step", step},
                               {"model", run.model->name()},
                               {"policy", run.config.policy.spec},
                               {"scaler", run.config.scaler.spec},
                               {"loss_scale", scale},
                               {"loss_divisor_log2", run.config.loss_divisor_log2},
                               {"note",
                                "activation_grad and weight_grad: values at the rounding sites before "
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

// grads/step_NNNNNN.safetensors: the unscaled gradients, one F32 tensor per parameter (by its name), the
// step and the loss scale in the metadata.
void write_gradients(const Run& run, int step, double scale, const std::filesystem::path& grads_dir) {
  std::vector<CheckpointTensorView> tensors;
  for (std::size_t i = 0; i < run.params.size(); ++i) tensors.push_back({run.params[i].name, run.grads[i]});
  const nlohmann::json header = {{"schema", "mpsim-train-grads-1"},
                                 {"mpsim_version", kVersion},
                                 {"step", step},
                                 {"model", run.model->name()},
                                 {"policy", run.config.policy.spec},
                                 {"scaler", run.config.scaler.spec},
                                 {"loss_scale", scale},
                                 {"note", "unscaled fp32 gradients in the model's units, before clipping"}};
  std::filesystem::create_directories(grads_dir);
  write_checkpoint(grads_dir / fmt::format("step_{:06d}.safetensors", step), header, tensors);
}

// The step's activation-gradient columns (zero, subnormal, overflow fractions per site), added to the totals.
std::string site_columns(Run& run) {
  std::string cols;
  for (const auto& site : run.grad_sites) {
    const auto it = run.precision.site_stats().find(site);
    const Stats st = it == run.precision.site_stats().end() ? Stats{} : it->second;
    const std::uint64_t nz = st.nonzero_finite();
    cols += "," + fraction(st.underflow, nz) + "," + fraction(st.subnormal, nz) + "," + fraction(st.overflow, nz);
    run.summary.act_grad_nonzero += nz;
    run.summary.act_grad_underflow += st.underflow;
    run.summary.act_grad_subnormal += st.subnormal;
    run.summary.act_grad_overflow += st.overflow;
  }
  analysis::MassLost step;
  auto mass_columns = [](const analysis::MassLost& m) {
    const auto s = m.stats();
    return fmt::format(",{:.6g},{:.6g},{},{},{}", s.l1_lost, s.l2sq_lost, number(s.cosine),
                       std::isnan(s.push_down) ? std::string("nan") : fmt::format("{:.6g}", s.push_down),
                       std::isnan(s.lost_bias) ? std::string("nan") : fmt::format("{:.6g}", s.lost_bias));
  };
  for (const auto& site : run.grad_sites) {
    const auto it = run.step_mass.find(site);
    const analysis::MassLost m = it == run.step_mass.end() ? analysis::MassLost{} : it->second;
    cols += mass_columns(m);
    step += m;
  }
  run.summary.act_grad_mass += step;
  return cols + mass_columns(step);
}

struct StepResult {
  double loss = 0;
  std::string csv_row;
  bool stop = false;  // the master weights became non-finite: nothing recovers from that
};

// One optimiser step: forward/backward at the loss scale, unscale, the histogram snapshot, the update
// (or the scaler's skip), the scaler's update, the counters and the metric.
StepResult train_step(Run& run, int step, const std::filesystem::path& out_dir) {
  for (const auto& g : run.grads) std::fill(g.begin(), g.end(), 0.0f);
  run.precision.reset_stats();
  run.step_mass.clear();
  const bool snapshot = run.hist_set.count(step) > 0;
  run.precision.capture_histograms(snapshot);
  run.precision.reset_histograms();

  const double scale = run.scaler.scale();
  StepResult r;
  r.loss = forward_backward(run, step, scale);
  run.precision.end_step();  // delayed scaling: this step's amaxes give the next step's scales
  const bool found_inf = unscale_and_check(run, scale);
  if (snapshot) write_histograms(run, step, scale, out_dir / "hist");
  if (snapshot && run.config.dump_grads) write_gradients(run, step, scale, out_dir / "grads");

  const bool skipped = run.scaler.skips_step(found_inf);
  double grad_norm = std::nan("");
  std::string swallowed_text;
  if (!skipped) {
    grad_norm = clip_grad_norm(run.grads, run.config.clip_norm);
    const UpdateStats updates = run.optimizer.step(run.values, run.grads);
    run.summary.updates_nonzero += updates.nonzero;
    run.summary.updates_swallowed += updates.swallowed;
    swallowed_text = fraction(updates.swallowed, updates.nonzero);
  } else {
    run.summary.skipped_steps += 1;
  }
  run.scaler.update(found_inf);
  const std::string site_cols = site_columns(run);

  bool weights_finite = true;
  if (found_inf && !skipped)
    for (const auto& v : run.values)
      weights_finite = weights_finite && std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
  if ((!std::isfinite(r.loss) || !weights_finite) && run.summary.diverged_at == 0) run.summary.diverged_at = step;
  r.stop = !weights_finite;

  std::string metric_text;
  if (step % run.eval_every == 0 || step == run.total_steps || r.stop) {
    run.summary.final_metric = run.model->evaluate(run.precision);
    metric_text = number(run.summary.final_metric.value);
  }
  r.csv_row = fmt::format("{},{},{},{},{},{},{}{}\n", step, number(r.loss), metric_text, number(scale), skipped ? 1 : 0,
                          number(grad_norm), swallowed_text, site_cols);
  return r;
}

// checkpoint.safetensors: the weights and optimiser buffers, with everything a resume needs in its header.
void save_checkpoint(const Run& run, int step) {
  nlohmann::json header = run.identity;
  header["mpsim_version"] = kVersion;
  header["step"] = step;
  header["optimizer_steps"] = run.optimizer.steps();
  header["optimizer_layout"] = run.optimizer.state_layout()["buffers"];
  header["scaler_state"] = run.scaler.state();
  header["sr_offset"] = run.precision.sr_offset();
  if (run.precision.quantizer()) header["recipe_state"] = run.precision.quantizer()->state_json();
  // Data batches come from (seed, batch index): the step fixes the data RNG, nothing else to save.
  header["rng"] = {{"seed", run.config.seed},
                   {"next_batch_index", static_cast<std::uint64_t>(step) * run.config.accumulate}};
  const TrainSummary& s = run.summary;
  header["totals"] = {{"skipped_steps", s.skipped_steps},
                      {"diverged_at", s.diverged_at},
                      {"act_grad_nonzero", s.act_grad_nonzero},
                      {"act_grad_underflow", s.act_grad_underflow},
                      {"act_grad_subnormal", s.act_grad_subnormal},
                      {"act_grad_overflow", s.act_grad_overflow},
                      // Swallowed-update totals (read back by resume).
                      {"updates_nonzero", s.updates_nonzero},
                      {"updates_swallowed", s.updates_swallowed},
                      {"act_grad_mass", s.act_grad_mass.state()}};
  std::vector<CheckpointTensorView> tensors;
  for (const auto& p : run.params) tensors.push_back({"param/" + p.name, p.value});
  for (std::size_t b = 0; b < run.optimizer.buffers().size(); ++b)
    tensors.push_back({fmt::format("optimizer/{}", b), run.optimizer.buffers()[b]});
  write_checkpoint(run.config.out / kCheckpointName, header, tensors);
}

// run.json: the resolved config, the summary and where the other files are.
void write_run_json(const Run& run, const TrainSummary& summary) {
  TrainConfig resolved = run.config;
  resolved.optimizer = run.optimizer_config;
  resolved.steps = run.total_steps;
  nlohmann::json cfg = to_json(resolved);
  cfg["model_name"] = run.model->name();
  cfg["optimizer"] = train::to_json(run.optimizer_config);
  cfg["policy_formats"] = run.policy.describe();
  cfg["scaler_spec"] = to_spec(run.scaler_config);
  cfg["parameters"] = run.shapes;
  nlohmann::json j = {{"schema", "mpsim-train-run-1"},
                      {"mpsim_version", kVersion},
                      {"config", cfg},
                      {"summary", summary.to_json()},
                      {"activation_grad_sites", run.act_sites},
                      {"histogram_steps", run.hist_steps},
                      {"files",
                       {{"steps", "steps.csv"},
                        {"histograms", "hist/step_NNNNNN.json"},
                        {"gradients", run.config.dump_grads ? "grads/step_NNNNNN.safetensors" : ""},
                        {"checkpoint", kCheckpointName}}}};
  if (run.grad_sites.size() > run.act_sites.size())  // a recipe's dy operands: steps.csv has their columns too
    j["gradient_operand_sites"] = std::vector<std::string>(
        run.grad_sites.begin() + static_cast<std::ptrdiff_t>(run.act_sites.size()), run.grad_sites.end());
  io::write_text_file(run.config.out / "run.json", j.dump(2) + "\n");
}

// The output folder of a run. A run that fails before its first checkpoint leaves nothing behind: the
// folder is removed if this run created it, else the subfolders (hist/, grads/) this run created. From the
// first checkpoint on, the folder holds a state to resume from and stays whatever happens next.
class OutputFolder {
 public:
  OutputFolder(const std::filesystem::path& dir, TrainConfig::PreviousRun previous)
      : dir_(dir), created_(!std::filesystem::exists(dir)) {
    // The old run's files go before the new run writes any (its checkpoint, if resumed from, is read by now).
    if (previous == TrainConfig::PreviousRun::replace)
      for (const char* name : kPreviousRunFiles)
        if (std::error_code ec; std::filesystem::remove_all(dir / name, ec) == static_cast<std::uintmax_t>(-1))
          throw FieldError("out", dir.string(),
                           fmt::format("cannot remove the previous run's {}: {}", name, ec.message()));
    for (const char* sub : {"hist", "grads"})
      if (!std::filesystem::exists(dir / sub)) new_subfolders_.push_back(dir / sub);
    std::filesystem::create_directories(dir_);
  }
  ~OutputFolder() {
    if (kept_) return;
    std::error_code ec;  // best effort while an exception unwinds
    if (created_) std::filesystem::remove_all(dir_, ec);
    else
      for (const auto& sub : new_subfolders_) std::filesystem::remove_all(sub, ec);
  }
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;
  void keep() { kept_ = true; }
  const std::filesystem::path& path() const { return dir_; }

 private:
  std::filesystem::path dir_;
  bool created_, kept_ = false;
  std::vector<std::filesystem::path> new_subfolders_;
};

}  // namespace

TrainSummary run_training(const TrainConfig& config, const ModelFactory& factory, const Progress& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  validate(config);
  Run run(config, factory);
  if (!config.resume.empty()) resume(run, config.resume);
  prepare(run);

  // Nothing has been written so far; from here on the outputs appear.
  OutputFolder out(config.out, config.previous_run);
  std::string csv = csv_header(run.grad_sites);
  StepResult last;
  int step = run.start_step;
  for (step = run.start_step + 1; step <= run.total_steps; ++step) {
    last = train_step(run, step, out.path());
    csv += last.csv_row;
    if (progress) progress(step, run.total_steps, last.loss, run.scaler.scale());
    if ((config.checkpoint_every > 0 && step % config.checkpoint_every == 0) || step == run.total_steps || last.stop) {
      io::write_text_file(config.out / "steps.csv", csv);
      save_checkpoint(run, step);
      out.keep();
    }
    if (last.stop) break;
  }

  TrainSummary summary = run.summary;
  summary.steps_done = std::min(step, run.total_steps);
  summary.final_loss = last.loss;
  summary.final_scale = run.scaler.scale();
  summary.diverged =
      summary.diverged_at != 0 &&
      (!std::isfinite(last.loss) || !std::isfinite(summary.final_metric.value) || summary.steps_done < run.total_steps);
  summary.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  write_run_json(run, summary);
  return summary;
}

}  // namespace mpsim::train
