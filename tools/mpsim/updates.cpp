// mpsim updates W U [--format F] [--mode rne|sr]: the fraction of weight updates that vanish when the
// weights are held in F (round(w + u) == w) and the distribution of log2(|w| / |u|), with F's
// mantissa threshold 2^p marked. W and U: two files whose tensors pair up in order, or one file with
// --weights NAME --updates NAME. Each pair is read in step from the mapped files, chunk by chunk.
#include <algorithm>

#include "analysis_common.hpp"
#include "mpsim/analysis/update_pairs.hpp"
#include "mpsim/analysis/updates.hpp"

namespace {

using namespace mpsim;
using namespace mpsim::cli::analysis_cli;

struct Options {
  CommonOptions common;
  std::string weights, updates;  // with one file: the names of the two tensors
  std::string mode = "rne";
  std::uint64_t seed = 0;
};

// The swallowed updates of every (weights, updates) pair, and of all of them together.
void run(const Options& opts) {
  const CommonOptions& o = opts.common;
  const Format f = parse_format(o.format);
  if (o.scale != 1) throw Error("--scale: the updates report takes no scale (updates are applied unscaled)");
  Rounding r = Rounding::of(parse_rounding_mode(opts.mode));
  r.seed = opts.seed;
  analysis::SwallowedUpdates total(f, r);  // validates the format first
  // Drawn on a terminal as the pairs are read.
  const auto progress = input_progress("updates", o.inputs);
  const auto io = input_options(o);
  std::vector<analysis::UpdatePair> pairs;
  if (o.inputs.size() == 2 && opts.weights.empty() && opts.updates.empty())
    pairs = analysis::pairs_in_order(o.inputs[0], o.inputs[1], io);
  else if (o.inputs.size() == 1 && !opts.weights.empty() && !opts.updates.empty())
    pairs.push_back(analysis::pair_by_name(o.inputs[0], opts.weights, opts.updates, io));
  else throw Error("updates: give two files (weights, updates) or one file with --weights NAME --updates NAME");

  nlohmann::json rows_json = nlohmann::json::array();
  analysis::TidyCsv csv;
  std::vector<analysis::SwallowedUpdates> per;
  for (const auto& pair : pairs) {
    analysis::SwallowedUpdates s(f, r);
    analysis::add_pair(s, pair, io, progress.get());
    total += s;
    nlohmann::json j = s.to_json();
    j["weights"] = pair.weights.label;
    j["updates"] = pair.updates.label;
    csv.add_stats(pair.weights.label, f.name, 1.0, j);
    rows_json.push_back(j);
    per.push_back(std::move(s));
  }
  progress->finish();
  nlohmann::json tj = total.to_json();
  tj["weights"] = "total";
  csv.add_stats("total", f.name, 1.0, tj);
  write_outputs(o,
                {.command = "updates",
                 .fields = {{"format", f.name}},
                 .tensors = rows_json,
                 .total = tj,
                 .entries_key = "pairs",
                 .lists_failures = false},
                csv);

  std::vector<std::size_t> order(rows_json.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return rows_json[a]["swallowed%"].get<double>() > rows_json[b]["swallowed%"].get<double>();
  });
  std::vector<std::vector<std::string>> rows;
  for (const std::size_t i : order) {
    const auto& j = rows_json[i];
    rows.push_back({j["weights"].get<std::string>(), j["updates"].get<std::string>(), num(j["measured_num"]),
                    num(j["swallowed%"]), num(j["swallowed_num"]), num(j["u_zero_num"]), num(j["w_zero_num"])});
  }
  rows.push_back({"total", "", num(tj["measured_num"]), num(tj["swallowed%"]), num(tj["swallowed_num"]),
                  num(tj["u_zero_num"]), num(tj["w_zero_num"])});
  fmt::print(
      "updates applied to weights held in {} ({}):\n{}", f.name, ieee_name(r.mode),
      analysis::text_table(
          {"weights", "updates", "measured_num", "swallowed%", "swallowed_num", "u_zero_num", "w_zero_num"}, rows));
  // The ratio distribution: '#' all elements, with the swallowed ones counted beside; F's threshold 2^p marked.
  const auto& h = total.ratio();
  std::uint64_t top = 0;
  for (int n = h.lowest_nonempty(); n <= h.highest_nonempty(); ++n) top = std::max(top, h.count(n));
  fmt::print("\nlog2(|w|/|u|)  (threshold 2^{}: above it {} keeps no trace of u in round-to-nearest)\n",
             total.threshold_log2(), f.name);
  for (int n = h.highest_nonempty(); n >= h.lowest_nonempty(); --n) {
    const int len = top ? static_cast<int>(std::ceil(double(h.count(n)) * 40 / double(top))) : 0;
    fmt::print("{:>6} |{:<40}| {:>12} swallowed {:>12}{}\n", fmt::format("2^{}", n),
               std::string(static_cast<std::size_t>(len), '#'), h.count(n), total.ratio_swallowed().count(n),
               n == total.threshold_log2() ? "  <- 2^p" : "");
  }
}

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("updates", "Swallowed weight updates: round(w + u) == w in a format");
  auto o = std::make_shared<Options>();
  add_common(cmd, o->common);
  cmd->add_option("--weights", o->weights, "With one file: the name of the weights tensor");
  cmd->add_option("--updates", o->updates, "With one file: the name of the updates tensor");
  cmd->add_option("--mode", o->mode, "Rounding mode of the update (rne, sr, ...)")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Stochastic rounding seed")->capture_default_str();
  cmd->callback([o] { run(*o); });
}

const bool registered = mpsim::cli::register_command("updates", setup);

}  // namespace
