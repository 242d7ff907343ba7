// mpsim hist FILE... [--format F] [--scale S]: log2 histograms of every tensor (counts by binade,
// zero/NaN/inf buckets), drawn as a bar chart with F's subnormal / normal / overflow ranges marked. A block
// format F (mxfp8_e4m3, ..., nvfp4): the histogram of the dequantized values beside the block telemetry.
#include <algorithm>

#include "analysis_common.hpp"
#include "mpsim/analysis/block_scaling.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/tensor_passes.hpp"
#include "mpsim/analysis/underflow.hpp"

namespace {

using namespace mpsim;
using namespace mpsim::cli::analysis_cli;

struct Options {
  CommonOptions common;
  BlockOptions blocks;
  bool each = false;  // a chart for every tensor, not only the total
};

// --format naming a block format (mxfp8_e4m3, ..., nvfp4): the histogram of the dequantized values (what the
// tensor holds after a quantize-dequantize round trip, nearest-even elements), beside the block telemetry
// (the shares of the non-zero values flushed inside their block, left subnormal, saturated). Tensors are
// quantized row by row as they stream in (analysis::for_each_block_rows; nvfp4's tensors are read twice, the
// amax first).
void run_block(const CommonOptions& o, const BlockFormat& bf, bool per_tensor) {
  if (o.scale != 1)
    throw Error(fmt::format("--scale {}: block formats set their own scales; a loss scale does not apply to {}",
                            o.scale, bf.name));
  const auto files = analysis::expand_inputs(o.inputs);
  const auto progress = input_progress("hist", files, bf.two_level ? 2 : 1);
  analysis::RangeCounter total_values(fp32());
  BlockStats total_stats;
  auto pass = analysis::count_dequantized(files, input_options(o, progress.get()), bf);
  const auto& results = finish_pass(pass, *progress).tensors;
  const auto& failures = pass.failures;

  nlohmann::json tensors = nlohmann::json::array();
  analysis::TidyCsv csv;
  auto entry = [&](const std::string& label, const analysis::RangeCounter& c, const BlockStats& s) {
    const auto counts = c.at_scale(0);
    nlohmann::json j = {{"tensor", label},
                        {"numel", counts.total},
                        {"zero_num", counts.zero_in},
                        {"nan_num", counts.nan_in},
                        {"inf_num", counts.inf_in}};
    j.update(analysis::amax_stats_json(c));
    j["block_telemetry"] = analysis::block_result(bf, s).json();
    csv.add_stats(label, bf.name, 1.0, j);
    for (const auto& [key, v] : j["block_telemetry"].items())
      if (v.is_number() && key != "numel") csv.add(label, bf.name, 1.0, key, v);
    const auto h = c.histogram();
    for (int n = h.lowest_nonempty(); n <= h.highest_nonempty(); ++n)
      if (h.count(n)) csv.add(label, bf.name, 1.0, "bin_2^" + std::to_string(n), h.count(n));
    j["histogram"] = h.to_json();
    return j;
  };
  for (const auto& r : results) {
    total_values += r.values;
    total_stats.merge(r.stats);
    nlohmann::json j = entry(r.info.label, r.values, r.stats);
    j["shape"] = r.info.shape;
    j["dtype"] = std::string(io::to_string(r.info.dtype));
    tensors.push_back(j);
  }
  write_outputs(o,
                {.command = "hist",
                 .fields = {{"format", bf.name}, {"block", bf.block}, {"values", "dequantized"}},
                 .tensors = tensors,
                 .total = entry("total", total_values, total_stats),
                 .failed = failures},
                csv);

  if (per_tensor)
    for (const auto& r : results)
      fmt::print("{}\n{}\n", r.info.label, analysis::bar_chart(r.values.histogram(), nullptr, 0));
  fmt::print("log2 histogram of {} tensor(s) after {} quantize-dequantize (blocks of {} along the last axis):\n{}\n",
             results.size(), bf.name, bf.block, analysis::bar_chart(total_values.histogram(), nullptr, 0));
  std::vector<std::vector<std::string>> rows;
  for (const auto& t : tensors) {
    const auto& b = t["block_telemetry"];
    rows.push_back({t["tensor"].get<std::string>(), num(t["numel"]), num(t["zero_num"]), num(t["cur_amax"]),
                    num(t["nonzero_amin"]), num(b["flushed%"]), num(b["subnormal%"]), num(b["saturated%"])});
  }
  fmt::print("{}", analysis::text_table({"tensor", "numel", "zero_num (after)", "cur_amax (after)",
                                         "nonzero_amin (after)", "flushed%", "subnormal%", "saturated%"},
                                        rows));
}

// The log2 histograms of every tensor under a scale, in an element format's ranges (a block format: run_block).
void run(const Options& opts) {
  const CommonOptions& o = opts.common;
  const bool each = opts.each;
  if (const auto bf = block_format_of(o.format, opts.blocks)) return run_block(o, *bf, each);
  const Format f = parse_format(o.format);
  const int k = log2_scale(o.scale);
  const auto files = analysis::expand_inputs(o.inputs);
  const auto progress = input_progress("hist", files);
  analysis::RangeCounter total(f);
  auto pass = analysis::count_ranges(files, input_options(o, progress.get()), f);
  const auto& results = finish_pass(pass, *progress).tensors;
  const auto& failures = pass.failures;

  nlohmann::json tensors = nlohmann::json::array();
  analysis::TidyCsv csv;
  auto entry = [&](const std::string& label, const analysis::RangeCounter& c) {
    nlohmann::json j = {{"tensor", label}};
    j.update(analysis::hist_stats_json(c, k));
    const nlohmann::json hist = j["histogram"];
    j.erase("histogram");
    csv.add_stats(label, f.name, o.scale, j);
    const auto h = c.histogram();
    for (int n = h.lowest_nonempty(); n <= h.highest_nonempty(); ++n)
      if (h.count(n)) csv.add(label, f.name, o.scale, "bin_2^" + std::to_string(n), h.count(n));
    j["histogram"] = hist;
    return j;
  };
  for (const auto& r : results) {
    total += r.counter;
    nlohmann::json j = entry(r.info.label, r.counter);
    j["shape"] = r.info.shape;
    j["dtype"] = std::string(io::to_string(r.info.dtype));
    tensors.push_back(j);
  }
  write_outputs(o,
                {.command = "hist",
                 .fields = {{"format", f.name}, {"scale", o.scale}, {"log2_scale", k}},
                 .tensors = tensors,
                 .total = entry("total", total),
                 .failed = failures},
                csv);

  // The readable summary: chart(s), then the tensors, worst (most underflow) first.
  if (each)
    for (const auto& r : results)
      fmt::print("{}\n{}\n", r.info.label, analysis::bar_chart(r.counter.histogram(), &f, k));
  fmt::print("log2 histogram of {} tensor(s); ranges of {} under scale {}:\n{}\n", results.size(), f.name, num(o.scale),
             analysis::bar_chart(total.histogram(), &f, k));
  std::vector<std::size_t> order(results.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto uf = [&](std::size_t i) { return tensors[i]["underflows%"].get<double>(); };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return uf(a) > uf(b); });
  std::vector<std::vector<std::string>> rows;
  for (const std::size_t i : order) {
    const auto& t = tensors[i];
    rows.push_back({t["tensor"].get<std::string>(), num(t["numel"]), num(t["zero_num"]), num(t["nan_num"]),
                    num(t["inf_num"]), num(t["cur_amax"]), num(t["nonzero_amin"]), num(t["dynamic_range"]),
                    num(t["underflows%"]), num(t["overflows%"])});
  }
  fmt::print("{}", analysis::text_table({"tensor", "numel", "zero_num", "nan_num", "inf_num", "cur_amax",
                                         "nonzero_amin", "dynamic_range", "underflows%", "overflows%"},
                                        rows));
}

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("hist", "Log2 histograms of tensors, with a target format's ranges marked");
  auto o = std::make_shared<Options>();
  add_common(cmd, o->common);
  add_block_options(cmd, o->blocks);
  cmd->add_flag("--each", o->each, "Draw a chart for every tensor (default: the total only)");
  cmd->callback([o] { run(*o); });
}

const bool registered = mpsim::cli::register_command("hist", setup);

}  // namespace
