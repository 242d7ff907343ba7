// mpsim underflow FILE... [--format F] [--scale S] [--sweep] [--margin M] [--mode rne]: per tensor, the
// fraction of non-zero values that underflow to zero / become subnormal / overflow in F under S, a
// recommended power-of-two scale, and with --sweep the same for every scale 2^-8..2^32; beside them the
// tensor's min, max, mean, std, l1_norm and l2_norm (exact, analysis/moments.hpp) from the same read.
#include <algorithm>

#include "analysis_common.hpp"
#include "mpsim/analysis/moments.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/underflow.hpp"

namespace {

using namespace mpsim;
using namespace mpsim::cli::analysis_cli;

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("underflow", "Underflow / subnormal / overflow fractions in a format, scale advice");
  auto o = std::make_shared<CommonOptions>();
  auto do_sweep = std::make_shared<bool>(false);
  auto margin = std::make_shared<double>(2.0);
  auto mode = std::make_shared<std::string>("rne");
  add_common(cmd, *o);
  cmd->add_flag("--sweep", *do_sweep, "Also report every power-of-two scale 2^-8..2^32");
  cmd->add_option("--margin", *margin, "Headroom of the recommended scale: cur_amax*S*margin <= max finite")
      ->capture_default_str();
  cmd->add_option("--mode", *mode, "Rounding mode (deterministic: rne, rtz, ru, rd, rna, rto)")->capture_default_str();
  cmd->callback([o, do_sweep, margin, mode] {
    const Format f = parse_format(o->format);
    analysis::UnderflowOptions uo;
    uo.log2_scale = log2_scale(o->scale);
    if (!(*margin >= 1) || !std::isfinite(*margin)) throw Error(fmt::format("--margin {}: must be at least 1", *margin));
    uo.margin = *margin;
    const Rounding r = Rounding::of(parse_rounding_mode(*mode));
    const auto files = analysis::expand_inputs(o->inputs);
    const auto progress = input_progress("underflow", files);
    analysis::RangeCounter total(f, r);  // also validates format and mode before any input is read
    struct Result {
      analysis::TensorInfo info;
      analysis::RangeCounter counter;
      analysis::Moments moments;  // min, max, mean, std, l1_norm, l2_norm, from the same read
    };
    std::vector<Result> results;
    const auto failures = analysis::for_each_tensor(files, input_options(*o, progress.get()), [&](const analysis::TensorInfo& info,
                                                                                 const analysis::TensorRead& read) {
      analysis::RangeCounter c(f, r);
      analysis::Moments m;
      read([&](std::span<const float> x, std::span<const double> d, std::uint64_t) {
        if (!x.empty()) {
          c.add(x);
          m.add(x);
        }
        if (!d.empty()) {
          c.add(d);
          m.add(d);
        }
      });
      results.push_back({info, std::move(c), std::move(m)});
    });
    progress->finish();
    check_failures(failures, results.size());

    nlohmann::json tensors = nlohmann::json::array();
    analysis::TidyCsv csv;
    auto csv_rows = [&](const nlohmann::json& j) {
      const std::string label = j["tensor"].get<std::string>();
      csv.add_stats(label, f.name, o->scale, j);
      if (!j["recommended"].is_null()) {
        const auto& rec = j["recommended"];
        csv.add(label, f.name, o->scale, "recommended_scale", rec["scale"]);
        csv.add(label, f.name, o->scale, "rescued_num", rec["rescued_num"]);
        csv.add(label, f.name, o->scale, "rescued%", rec["rescued%"]);
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
          csv.add(label, f.name, o->scale, "largest_safe_scale", std::ldexp(1.0, s["largest_safe_log2_scale"].get<int>()));
      }
    };
    analysis::Moments total_moments;
    for (const auto& res : results) {
      total += res.counter;
      total_moments += res.moments;
      nlohmann::json j = analysis::underflow_report_json(res.info.label, res.counter, uo, *do_sweep);
      j.update(analysis::moment_stats_json(res.moments.stats()));
      j["shape"] = res.info.shape;
      j["dtype"] = std::string(io::to_string(res.info.dtype));
      csv_rows(j);
      tensors.push_back(j);
    }
    nlohmann::json tj = analysis::underflow_report_json("total", total, uo, *do_sweep);
    tj.update(analysis::moment_stats_json(total_moments.stats()));
    csv_rows(tj);
    const nlohmann::json report = {{"command", "underflow"}, {"format", f.name},
                                   {"rounding", std::string(ieee_name(r.mode))},
                                   {"scale", o->scale},       {"log2_scale", uo.log2_scale},
                                   {"margin", uo.margin},     {"tensors", tensors},
                                   {"total", tj},             {"failed", failures_json(failures)}};
    write_outputs(*o, report, csv);

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
      std::vector<std::string> r = {t["tensor"].get<std::string>(), num(t["numel"]),         num(t["underflows%"]),
                                    num(t["subnormals%"]),          num(t["overflows%"]),    num(t["cur_amax"]),
                                    num(t["dynamic_range"])};
      if (t["recommended"].is_null()) {
        r.insert(r.end(), {"-", "-"});
      } else {
        r.push_back(fmt::format("2^{}", t["recommended"]["log2_scale"].get<int>()));
        r.push_back(num(t["recommended"]["rescued%"]));
      }
      if (*do_sweep) {
        const auto& s = t["sweep"];
        r.push_back(s["largest_safe_log2_scale"].is_null() ? "-" : fmt::format("2^{}", s["largest_safe_log2_scale"].get<int>()));
        r.push_back(s["best_window"].is_null() ? "-"
                                               : fmt::format("2^{}..2^{}", s["best_window"]["lo_log2_scale"].get<int>(),
                                                             s["best_window"]["hi_log2_scale"].get<int>()));
      }
      rows.push_back(r);
    };
    for (const std::size_t i : order) row(tensors[i]);
    row(tj);
    std::vector<std::string> header = {"tensor", "numel", "underflows%", "subnormals%", "overflows%",
                                       "cur_amax", "dynamic_range", "recommended", "rescued%"};
    if (*do_sweep) header.insert(header.end(), {"largest_safe", "best_window"});
    fmt::print("{} under scale {} ({}); recommended scale keeps cur_amax*S*{} <= {}\n", f.name, num(o->scale),
               ieee_name(r.mode), num(uo.margin), num(f.max_finite));
    fmt::print("{}", analysis::text_table(header, rows));
    if (*do_sweep) {
      std::vector<std::vector<std::string>> srows;
      for (const auto& s : tj["sweep"]["rows"])
        srows.push_back({fmt::format("2^{}", s["log2_scale"].get<int>()), num(s["underflows%"]), num(s["subnormals%"]),
                         num(s["overflows%"]), num(s["underflows_num"]), num(s["overflows_num"])});
      fmt::print("\nscale sweep, all tensors:\n{}", analysis::text_table({"scale", "underflows%", "subnormals%", "overflows%",
                                                                          "underflows_num", "overflows_num"},
                                                                         srows));
    }
  });
}

const bool registered = mpsim::cli::register_command("underflow", setup);

}  // namespace
