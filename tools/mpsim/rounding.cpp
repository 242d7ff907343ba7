// mpsim rounding-error FILE... [--format F] [--scale S] [--modes rne,sr,...] [--seed N] [--sr-bits B]: per
// tensor and rounding mode, the relative error and the error in ulps of F (mean, max, percentiles)
// and the mean signed error (bias) of rounding every value into F. A block format F (mxfp8_e4m3, ...,
// nvfp4): the error of block quantization, in ulps of the element type inside each block
// (analysis::add_block_rounding_error); tensors are quantized row by row as they stream in.
#include <algorithm>
#include <sstream>

#include "analysis_common.hpp"
#include "mpsim/analysis/block_scaling.hpp"
#include "mpsim/analysis/rounding_error.hpp"
#include "mpsim/analysis/tensor_passes.hpp"

namespace {

using namespace mpsim;
using namespace mpsim::cli::analysis_cli;

std::vector<Rounding> parse_modes(const std::string& list, std::uint64_t seed, int sr_bits) {
  std::vector<Rounding> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    Rounding r = Rounding::of(parse_rounding_mode(item));
    r.seed = seed;
    r.sr_bits = sr_bits;
    validate(r);
    out.push_back(r);
  }
  if (out.empty()) throw Error("--modes: no rounding mode given");
  return out;
}

struct Options {
  CommonOptions common;
  BlockOptions blocks;
  std::string modes = "rne,sr";  // comma-separated rounding modes
  std::uint64_t seed = 0;        // stochastic rounding's
  int sr_bits = 32;
};

// The rounding error of every mode over every tensor (a block format: in its element type's units).
void run(const Options& opts) {
  const CommonOptions& o = opts.common;
  const auto bf = block_format_of(o.format, opts.blocks);
  // A block format is measured in its element type's units, under the block format's name.
  Format f = bf ? bf->element : parse_format(o.format);
  if (bf) {
    f.name = bf->name;
    if (o.scale != 1)
      throw Error(fmt::format("--scale {}: block formats set their own scales; a loss scale does not apply to {}",
                              o.scale, bf->name));
  }
  const int k = log2_scale(o.scale);
  const auto rs = parse_modes(opts.modes, opts.seed, opts.sr_bits);
  const auto files = analysis::expand_inputs(o.inputs);
  const auto progress = input_progress("rounding", files, bf && bf->two_level ? 2 : 1);
  std::vector<analysis::RoundingError> total;
  for (const auto& r : rs) total.emplace_back(f, r, k);
  auto pass = analysis::measure_rounding_errors(files, input_options(o, progress.get()), f, rs, k, bf);
  const auto& results = finish_pass(pass, *progress).tensors;
  const auto& failures = pass.failures;

  nlohmann::json tensors = nlohmann::json::array();
  analysis::TidyCsv csv;
  auto modes_json = [&](const std::string& label, const std::vector<analysis::RoundingError>& acc) {
    nlohmann::json m = nlohmann::json::array();
    for (const auto& a : acc) {
      const nlohmann::json j = a.to_json();
      for (const auto& [key, v] : j.items())
        if (v.is_number() && key != "scale")
          csv.add(label, f.name, o.scale, j["rounding"].get<std::string>() + "." + key, v);
      m.push_back(j);
    }
    return m;
  };
  for (std::size_t i = 0; i < results.size(); ++i) {
    for (std::size_t m = 0; m < rs.size(); ++m) total[m] += results[i].per_mode[m];
    tensors.push_back({{"tensor", results[i].info.label},
                       {"shape", results[i].info.shape},
                       {"dtype", std::string(io::to_string(results[i].info.dtype))},
                       {"modes", modes_json(results[i].info.label, results[i].per_mode)}});
  }
  const nlohmann::json tj = {{"tensor", "total"}, {"modes", modes_json("total", total)}};
  analysis::Report report{.command = "rounding-error",
                          .fields = {{"format", f.name}, {"scale", o.scale}, {"log2_scale", k}},
                          .tensors = tensors,
                          .total = tj,
                          .failed = failures};
  if (bf) {
    report.fields["block"] = bf->block;
    report.fields["element_format"] = bf->element.name;
    report.fields["ulp_of"] = "the element type, inside each block (error / block scale)";
  }
  write_outputs(o, report, csv);

  // One row per (tensor, mode); tensors worst first by their largest mean relative error.
  std::vector<std::size_t> order(tensors.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto worst = [&](std::size_t i) {
    double w = 0;
    for (const auto& m : tensors[i]["modes"]) w = std::max(w, m["rel_err_mean"].get<double>());
    return w;
  };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return worst(a) > worst(b); });
  std::vector<std::vector<std::string>> rows;
  auto add_rows = [&](const nlohmann::json& t) {
    for (const auto& m : t["modes"])
      rows.push_back({t["tensor"].get<std::string>(), m["rounding"].get<std::string>(), num(m["measured_num"]),
                      num(m["rel_err_mean"]), num(m["rel_err_max"]), num(m["rel_err_p99"]), num(m["ulp_err_mean"]),
                      num(m["ulp_err_max"]), num(m["ulp_err_p99"]), num(m["bias_rel"]), num(m["bias_ulp"]),
                      num(m["overflows_num"])});
  };
  for (const std::size_t i : order) add_rows(tensors[i]);
  add_rows(tj);
  fmt::print(
      "rounding into {} under scale {}:\n{}", f.name, num(o.scale),
      analysis::text_table({"tensor", "rounding", "measured_num", "rel_err_mean", "rel_err_max", "rel_err_p99",
                            "ulp_err_mean", "ulp_err_max", "ulp_err_p99", "bias_rel", "bias_ulp", "overflows_num"},
                           rows));
}

// The command, under its name or (`old_name`) under the name it had before `mpsim round` stood beside it:
// that one is hidden from --help and prints a notice first.
void setup_named(CLI::App& app, const std::string& name, bool old_name) {
  auto* cmd = app.add_subcommand(name, "Rounding error (relative, ulps, bias) per rounding mode");
  if (old_name) cmd->group("");
  auto o = std::make_shared<Options>();
  add_common(cmd, o->common);
  add_block_options(cmd, o->blocks);
  cmd->add_option("--modes", o->modes, "Comma-separated rounding modes (rne, rtz, ru, rd, rna, rto, sr)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Stochastic rounding seed")->capture_default_str();
  cmd->add_option("--sr-bits", o->sr_bits, "Stochastic rounding random bits (1..32)")->capture_default_str();
  cmd->callback([o, name, old_name] {
    if (old_name)
      fmt::print(stderr,
                 "mpsim: notice: '{}' is now called 'rounding-error' (beside 'round', which converts); the "
                 "old name still works for now\n",
                 name);
    run(*o);
  });
}

const bool registered = mpsim::cli::register_command("rounding-error", [](CLI::App& app) {
  setup_named(app, "rounding-error", false);
  setup_named(app, "rounding", true);
});

}  // namespace
