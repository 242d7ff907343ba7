// mpsim updates W U [--format F] [--mode rne|sr]: the fraction of weight updates that vanish when the
// weights are held in F (round(w + u) == w) and the distribution of log2(|w| / |u|), with F's
// mantissa threshold 2^p marked. W and U: two files whose tensors pair up in order, or one file with
// --weights NAME --updates NAME.
#include <algorithm>

#include "analysis_common.hpp"
#include "mpsim/analysis/updates.hpp"

namespace {

using namespace mpsim;
using namespace mpsim::cli::analysis_cli;

struct Loaded {
  analysis::TensorInfo info;
  std::vector<double> values;
};

// Every tensor of one file, whole (updates pair elements, so both sides are held in memory).
std::vector<Loaded> load(const std::string& file, const analysis::InputOptions& io) {
  std::vector<Loaded> out;
  const auto failures = analysis::for_each_tensor({file}, io, [&](const analysis::TensorInfo& info,
                                                                  const analysis::TensorRead& read) {
    out.push_back({info, analysis::read_all(read, info.count)});
  });
  if (!failures.empty()) throw Error(failures.front().message);
  if (out.empty()) throw Error(file + ": holds no tensors");
  return out;
}

void setup(CLI::App& app) {
  auto* cmd = app.add_subcommand("updates", "Swallowed weight updates: round(w + u) == w in a format");
  auto o = std::make_shared<CommonOptions>();
  auto weights = std::make_shared<std::string>();
  auto updates = std::make_shared<std::string>();
  auto mode = std::make_shared<std::string>("rne");
  auto seed = std::make_shared<std::uint64_t>(0);
  add_common(cmd, *o);
  cmd->add_option("--weights", *weights, "With one file: the name of the weights tensor");
  cmd->add_option("--updates", *updates, "With one file: the name of the updates tensor");
  cmd->add_option("--mode", *mode, "Rounding mode of the update (rne, sr, ...)")->capture_default_str();
  cmd->add_option("--seed", *seed, "Stochastic rounding seed")->capture_default_str();
  cmd->callback([o, weights, updates, mode, seed] {
    const Format f = parse_format(o->format);
    if (o->scale != 1) throw Error("--scale: the updates report takes no scale (updates are applied unscaled)");
    Rounding r = Rounding::of(parse_rounding_mode(*mode));
    r.seed = *seed;
    analysis::SwallowedUpdates total(f, r);  // validates the format first
    // Each pair of tensors is held whole (elements pair up across files); the reading shows progress.
    const auto progress = input_progress("updates", o->inputs);
    const auto io = input_options(*o, progress.get());
    std::vector<std::pair<Loaded, Loaded>> pairs;
    if (o->inputs.size() == 2 && weights->empty() && updates->empty()) {
      auto w = load(o->inputs[0], io), u = load(o->inputs[1], io);
      if (w.size() != u.size())
        throw Error(fmt::format("{} holds {} tensors but {} holds {}", o->inputs[0], w.size(), o->inputs[1], u.size()));
      for (std::size_t i = 0; i < w.size(); ++i) pairs.emplace_back(std::move(w[i]), std::move(u[i]));
    } else if (o->inputs.size() == 1 && !weights->empty() && !updates->empty()) {
      auto all = load(o->inputs[0], io);
      auto find = [&](const std::string& name) {
        for (auto& t : all)
          if (t.info.name == name) return t;
        throw Error(fmt::format("{}: no tensor named '{}'", o->inputs[0], name));
      };
      pairs.emplace_back(find(*weights), find(*updates));
    } else {
      throw Error("updates: give two files (weights, updates) or one file with --weights NAME --updates NAME");
    }
    progress->finish();
    for (const auto& [w, u] : pairs)
      if (w.values.size() != u.values.size())
        throw Error(fmt::format("{} has {} values but {} has {}", w.info.label, w.values.size(), u.info.label, u.values.size()));

    nlohmann::json rows_json = nlohmann::json::array();
    analysis::TidyCsv csv;
    std::vector<analysis::SwallowedUpdates> per;
    for (const auto& [w, u] : pairs) {
      analysis::SwallowedUpdates s(f, r);
      s.add(std::span<const double>(w.values), std::span<const double>(u.values), 0);
      total += s;
      nlohmann::json j = s.to_json();
      j["weights"] = w.info.label;
      j["updates"] = u.info.label;
      csv.add_stats(w.info.label, f.name, 1.0, j);
      rows_json.push_back(j);
      per.push_back(std::move(s));
    }
    nlohmann::json tj = total.to_json();
    tj["weights"] = "total";
    csv.add_stats("total", f.name, 1.0, tj);
    const nlohmann::json report = {{"command", "updates"}, {"format", f.name}, {"pairs", rows_json}, {"total", tj}};
    write_outputs(*o, report, csv);

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
    fmt::print("updates applied to weights held in {} ({}):\n{}", f.name, ieee_name(r.mode),
               analysis::text_table({"weights", "updates", "measured_num", "swallowed%", "swallowed_num", "u_zero_num",
                                     "w_zero_num"},
                                    rows));
    // The ratio distribution: '#' all elements, with the swallowed ones counted beside; F's threshold 2^p marked.
    const auto& h = total.ratio();
    std::uint64_t top = 0;
    for (int n = h.lowest_nonempty(); n <= h.highest_nonempty(); ++n) top = std::max(top, h.count(n));
    fmt::print("\nlog2(|w|/|u|)  (threshold 2^{}: above it {} keeps no trace of u in round-to-nearest)\n",
               total.threshold_log2(), f.name);
    for (int n = h.highest_nonempty(); n >= h.lowest_nonempty(); --n) {
      const int len = top ? static_cast<int>(std::ceil(double(h.count(n)) * 40 / double(top))) : 0;
      fmt::print("{:>6} |{:<40}| {:>12} swallowed {:>12}{}\n", fmt::format("2^{}", n), std::string(static_cast<std::size_t>(len), '#'),
                 h.count(n), total.ratio_swallowed().count(n), n == total.threshold_log2() ? "  <- 2^p" : "");
    }
  });
}

const bool registered = mpsim::cli::register_command("updates", setup);

}  // namespace
