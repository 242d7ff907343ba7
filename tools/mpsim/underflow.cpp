// mpsim underflow FILE... [--format F] [--scale S] [--sweep] [--margin M] [--mode rne]: per tensor, the
// fraction of non-zero values that underflow to zero / become subnormal / overflow in F under S, a
// recommended power-of-two scale, and with --sweep the same for every scale 2^-8..2^32; beside them the
// tensor's min, max, mean, std, l1_norm and l2_norm (exact, analysis/moments.hpp) from the same read, and
// the gradient mass lost under S (analysis/mass_lost.hpp): the shares of sum |g| and sum g^2 that F
// flushes, and the cosine between the tensor and its rounding; per tensor and for all tensors together.
#include <algorithm>
#include <optional>

#include "analysis_common.hpp"
#include "mpsim/analysis/block_scaling.hpp"
#include "mpsim/analysis/mass_lost.hpp"
#include "mpsim/analysis/moments.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/tensor_passes.hpp"
#include "mpsim/analysis/underflow.hpp"

namespace {

using namespace mpsim;
using namespace mpsim::cli::analysis_cli;

struct Options {
  CommonOptions common;
  BlockOptions blocks;
  bool sweep = false;   // also every power-of-two scale 2^-8..2^32
  double margin = 2.0;  // headroom of the recommended scale
  std::string mode = "rne";
};

// `--format A,B,...` with a block format among them (mxfp8_e4m3, ..., nvfp4): per tensor and in total, each
// format's flushed / subnormal / saturated shares of the non-zero values, side by side (block formats: inside
// their blocks, with the block-scale distribution; formats of at most 8 bits: one per-tensor amax scale;
// others: the loss scale --scale). lib/mpsim/analysis/block_scaling.hpp says what each kind means.
void run_block_comparison(const CommonOptions& o, const std::string& mode, const BlockOptions& blocks) {
  const std::string& block_scale = blocks.scale_rule;
  const int block = blocks.block;
  std::vector<std::string> names;
  for (std::size_t b = 0, e; b <= o.format.size(); b = e + 1) {
    e = o.format.find(',', b);
    if (e == std::string::npos) e = o.format.size();
    if (e > b) names.push_back(o.format.substr(b, e - b));
  }
  const Rounding r = Rounding::of(parse_rounding_mode(mode));
  std::vector<analysis::ScalingTarget> targets;
  for (const auto& n : names) {
    if (is_block_format_name(n))
      targets.push_back({parse_block_format(n, block, parse_block_scale_rule(block_scale)), fp32()});
    else targets.push_back({std::nullopt, parse_format(n)});
  }
  const auto files = analysis::expand_inputs(o.inputs);
  const auto progress = input_progress("underflow", files, analysis::telemetry_reads(targets));
  auto pass = analysis::scaling_pass(files, input_options(o, progress.get()), targets, o.scale, r);
  const auto& results = finish_pass(pass, *progress).tensors;
  const auto& failures = pass.failures;

  std::vector<analysis::ScalingResult> total(targets.size());
  nlohmann::json tensors = nlohmann::json::array();
  analysis::TidyCsv csv;
  std::vector<std::vector<std::string>> rows;
  auto emit = [&](const std::string& label, const std::vector<analysis::ScalingResult>& per, nlohmann::json* out) {
    nlohmann::json formats = nlohmann::json::array();
    for (const auto& res : per) {
      nlohmann::json j = res.json();
      csv.add_stats(label, res.format, res.scaling == "block" ? 1.0 : res.scale, j);
      rows.push_back({label, res.format,
                      res.scaling == "block" ? "block" : fmt::format("{} {}", res.scaling, num(res.scale)),
                      num(j["nonzero_finite_num"]), num(j["flushed%"]), num(j["subnormal%"]), num(j["saturated%"]),
                      res.scale_log2.empty()
                          ? "-"
                          : fmt::format("2^{}..2^{}", res.scale_log2.begin()->first, res.scale_log2.rbegin()->first)});
      formats.push_back(std::move(j));
    }
    if (out) *out = {{"tensor", label}, {"formats", formats}};
    return formats;
  };
  for (const auto& res : results) {
    for (std::size_t i = 0; i < targets.size(); ++i) {
      total[i].format = res.per_format[i].format;
      total[i].scaling = res.per_format[i].scaling;
      total[i].merge(res.per_format[i]);
    }
    nlohmann::json j;
    emit(res.info.label, res.per_format, &j);
    j["shape"] = res.info.shape;
    j["dtype"] = std::string(io::to_string(res.info.dtype));
    tensors.push_back(j);
  }
  nlohmann::json tj;
  emit("total", total, &tj);
  write_outputs(o,
                {.command = "underflow",
                 .fields = {{"formats", names},
                            {"rounding", std::string(ieee_name(r.mode))},
                            {"scale", o.scale},
                            {"block_scale", block_scale}},
                 .tensors = tensors,
                 .total = tj,
                 .failed = failures},
                csv);
  fmt::print(
      "share of the non-zero values lost (flushed to 0), subnormal and saturated/overflowed, per format; "
      "block formats inside their blocks, formats of <= 8 bits at one per-tensor amax scale, others at "
      "--scale {} ({})\n",
      num(o.scale), ieee_name(r.mode));
  fmt::print("{}", analysis::text_table({"tensor", "format", "scaling", "nonzero", "flushed%", "subnormal%",
                                         "saturated%", "block scales"},
                                        rows));
}

// Per tensor and in total: the underflow report of one element format (with --sweep, every scale), or with a
// list or a block format, run_block_comparison.
void run(const Options& opts) {
  const CommonOptions& o = opts.common;
  if (o.format.find(',') != std::string::npos || is_block_format_name(o.format)) {
    if (opts.sweep) throw Error("--sweep applies to a single element format, not to a list or a block format");
    return run_block_comparison(o, opts.mode, opts.blocks);
  }
  const Format f = parse_format(o.format);
  analysis::UnderflowOptions uo;
  uo.log2_scale = log2_scale(o.scale);
  if (!(opts.margin >= 1) || !std::isfinite(opts.margin))
    throw Error(fmt::format("--margin {}: must be at least 1", opts.margin));
  uo.margin = opts.margin;
  const Rounding r = Rounding::of(parse_rounding_mode(opts.mode));
  const auto files = analysis::expand_inputs(o.inputs);
  const auto progress = input_progress("underflow", files);
  analysis::RangeCounter total(f, r);  // also validates format and mode before any input is read
  auto pass = analysis::count_underflow(files, input_options(o, progress.get()), f, r, uo.log2_scale);
  const auto& results = finish_pass(pass, *progress).tensors;
  const auto& failures = pass.failures;

  nlohmann::json tensors = nlohmann::json::array();
  analysis::TidyCsv csv;
  auto csv_rows = [&](const nlohmann::json& j) {
    const std::string label = j["tensor"].get<std::string>();
    csv.add_stats(label, f.name, o.scale, j);
    if (!j["recommended"].is_null()) {
      const auto& rec = j["recommended"];
      csv.add(label, f.name, o.scale, "recommended_scale", rec["scale"]);
      csv.add(label, f.name, o.scale, "rescued_num", rec["rescued_num"]);
      csv.add(label, f.name, o.scale, "rescued%", rec["rescued%"]);
    }
    if (j.contains("sweep")) {
      for (const auto& row : j["sweep"]["rows"]) {
        nlohmann::json stats = row;
        stats.erase("scale");
        stats.erase("log2_scale");
        csv.add_stats(label, f.name, row["scale"].get<double>(), stats);
      }
      const auto& s = j["sweep"];
      if (!s["largest_safe_log2_scale"].is_null())
        csv.add(label, f.name, o.scale, "largest_safe_scale", std::ldexp(1.0, s["largest_safe_log2_scale"].get<int>()));
    }
  };
  analysis::Moments total_moments;
  analysis::MassLost total_mass;
  for (const auto& res : results) {
    total += res.counter;
    total_moments += res.moments;
    total_mass += res.mass;
    nlohmann::json j = analysis::underflow_report_json(res.info.label, res.counter, uo, opts.sweep);
    j.update(analysis::moment_stats_json(res.moments.stats()));
    j.update(analysis::mass_lost_json(res.mass.stats()));
    j["shape"] = res.info.shape;
    j["dtype"] = std::string(io::to_string(res.info.dtype));
    csv_rows(j);
    tensors.push_back(j);
  }
  nlohmann::json tj = analysis::underflow_report_json("total", total, uo, opts.sweep);
  tj.update(analysis::moment_stats_json(total_moments.stats()));
  tj.update(analysis::mass_lost_json(total_mass.stats()));
  csv_rows(tj);
  write_outputs(o,
                {.command = "underflow",
                 .fields = {{"format", f.name},
                            {"rounding", std::string(ieee_name(r.mode))},
                            {"scale", o.scale},
                            {"log2_scale", uo.log2_scale},
                            {"margin", uo.margin}},
                 .tensors = tensors,
                 .total = tj,
                 .failed = failures},
                csv);

  // Per-tensor table, worst first: most underflow, then most overflow.
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](std::size_t i) {
    return std::pair{tensors[i]["underflows%"].get<double>() + tensors[i]["overflows%"].get<double>(),
                     tensors[i]["overflows%"].get<double>()};
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(a) > key(b); });
  std::vector<std::vector<std::string>> rows;
  auto row = [&](const nlohmann::json& t) {
    std::vector<std::string> r = {t["tensor"].get<std::string>(),
                                  num(t["numel"]),
                                  num(t["underflows%"]),
                                  num(t["subnormals%"]),
                                  num(t["overflows%"]),
                                  num(t["cur_amax"]),
                                  num(t["dynamic_range"]),
                                  num(100.0 * t["l1_lost"].get<double>()),
                                  num(100.0 * t["l2sq_lost"].get<double>()),
                                  t["cosine"].is_null() ? "-" : fmt::format("{:.9f}", t["cosine"].get<double>())};
    if (t["recommended"].is_null()) {
      r.insert(r.end(), {"-", "-"});
    } else {
      r.push_back(fmt::format("2^{}", t["recommended"]["log2_scale"].get<int>()));
      r.push_back(num(t["recommended"]["rescued%"]));
    }
    if (opts.sweep) {
      const auto& s = t["sweep"];
      r.push_back(
          s["largest_safe_log2_scale"].is_null() ? "-" : fmt::format("2^{}", s["largest_safe_log2_scale"].get<int>()));
      r.push_back(s["best_window"].is_null() ? "-"
                                             : fmt::format("2^{}..2^{}", s["best_window"]["lo_log2_scale"].get<int>(),
                                                           s["best_window"]["hi_log2_scale"].get<int>()));
    }
    rows.push_back(r);
  };
  for (const std::size_t i : order) row(tensors[i]);
  row(tj);
  std::vector<std::string> header = {"tensor",     "numel",    "underflows%",   "subnormals%",
                                     "overflows%", "cur_amax", "dynamic_range", "|g| lost%",
                                     "g^2 lost%",  "cosine",   "recommended",   "rescued%"};
  if (opts.sweep) header.insert(header.end(), {"largest_safe", "best_window"});
  fmt::print(
      "{} under scale {} ({}); |g| lost% and g^2 lost%: the shares of sum |g| and sum g^2 flushed to zero; "
      "cosine between the tensor and its rounding; recommended scale keeps cur_amax*S*{} <= {}\n",
      f.name, num(o.scale), ieee_name(r.mode), num(uo.margin), num(f.max_finite));
  fmt::print("{}", analysis::text_table(header, rows));
  if (opts.sweep) {
    std::vector<std::vector<std::string>> srows;
    for (const auto& s : tj["sweep"]["rows"])
      srows.push_back({fmt::format("2^{}", s["log2_scale"].get<int>()), num(s["underflows%"]), num(s["subnormals%"]),
                       num(s["overflows%"]), num(s["underflows_num"]), num(s["overflows_num"])});
    fmt::print("\nscale sweep, all tensors:\n{}",
               analysis::text_table(
                   {"scale", "underflows%", "subnormals%", "overflows%", "underflows_num", "overflows_num"}, srows));
  }
}

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("underflow", "Underflow / subnormal / overflow fractions in a format, scale advice");
  auto o = std::make_shared<Options>();
  add_common(cmd, o->common);
  add_block_options(cmd, o->blocks);
  cmd->add_flag("--sweep", o->sweep, "Also report every power-of-two scale 2^-8..2^32");
  cmd->add_option("--margin", o->margin, "Headroom of the recommended scale: cur_amax*S*margin <= max finite")
      ->capture_default_str();
  cmd->add_option("--mode", o->mode, "Rounding mode (deterministic: rne, rtz, ru, rd, rna, rto)")
      ->capture_default_str();
  cmd->callback([o] { run(*o); });
}

const bool registered = mpsim::cli::register_command("underflow", setup);

}  // namespace
