// mpsim hist FILE... [--format F] [--scale S]: log2 histograms of every tensor (counts by binade,
// zero/NaN/inf buckets), drawn as a bar chart with F's subnormal / normal / overflow ranges marked.
#include <algorithm>

#include "analysis_common.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/underflow.hpp"

namespace {

using namespace mpsim;
using namespace mpsim::cli::analysis_cli;

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("hist", "Log2 histograms of tensors, with a target format's ranges marked");
  auto o = std::make_shared<CommonOptions>();
  auto per_tensor = std::make_shared<bool>(false);
  add_common(cmd, *o);
  cmd->add_flag("--each", *per_tensor, "Draw a chart for every tensor (default: the total only)");
  cmd->callback([o, per_tensor] {
    const Format f = parse_format(o->format);
    const int k = log2_scale(o->scale);
    const auto files = analysis::expand_inputs(o->inputs);
    const auto progress = input_progress("hist", files);
    struct Result {
      analysis::TensorInfo info;
      analysis::RangeCounter counter;
    };
    std::vector<Result> results;
    analysis::RangeCounter total(f);
    const auto failures = analysis::for_each_tensor(files, input_options(*o, progress.get()), [&](const analysis::TensorInfo& info,
                                                                                 const analysis::TensorRead& read) {
      analysis::RangeCounter c(f);
      read([&](std::span<const float> x, std::span<const double> d, std::uint64_t) {
        if (!x.empty()) c.add(x);
        if (!d.empty()) c.add(d);
      });
      results.push_back({info, std::move(c)});
    });
    progress->finish();
    check_failures(failures, results.size());

    nlohmann::json tensors = nlohmann::json::array();
    analysis::TidyCsv csv;
    auto entry = [&](const std::string& label, const analysis::RangeCounter& c) {
      nlohmann::json j = {{"tensor", label}};
      j.update(analysis::hist_stats_json(c, k));
      const nlohmann::json hist = j["histogram"];
      j.erase("histogram");
      csv.add_stats(label, f.name, o->scale, j);
      const auto h = c.histogram();
      for (int n = h.lowest_nonempty(); n <= h.highest_nonempty(); ++n)
        if (h.count(n)) csv.add(label, f.name, o->scale, "bin_2^" + std::to_string(n), h.count(n));
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
    const nlohmann::json report = {{"command", "hist"},
                                   {"format", f.name},
                                   {"scale", o->scale},
                                   {"log2_scale", k},
                                   {"tensors", tensors},
                                   {"total", entry("total", total)},
                                   {"failed", failures_json(failures)}};
    write_outputs(*o, report, csv);

    // The readable summary: chart(s), then the tensors, worst (most underflow) first.
    if (*per_tensor)
      for (const auto& r : results)
        fmt::print("{}\n{}\n", r.info.label, analysis::bar_chart(r.counter.histogram(), &f, k));
    fmt::print("log2 histogram of {} tensor(s); ranges of {} under scale {}:\n{}\n", results.size(), f.name,
               num(o->scale), analysis::bar_chart(total.histogram(), &f, k));
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
  });
}

const bool registered = mpsim::cli::register_command("hist", setup);

}  // namespace
