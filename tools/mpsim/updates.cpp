// mpsim updates W U [--format F] [--mode rne|sr]: the fraction of weight updates that vanish when the
// weights are held in F (round(w + u) == w) and the distribution of log2(|w| / |u|), with F's
// mantissa threshold 2^p marked. W and U: two files whose tensors pair up in order, or one file with
// --weights NAME --updates NAME. Each pair is read in step from the mapped files, chunk by chunk.
#include <algorithm>

#include "analysis_common.hpp"
#include "mpsim/analysis/updates.hpp"
#include "mpsim/io/tensor_source.hpp"

namespace {

using namespace mpsim;
using namespace mpsim::cli::analysis_cli;

// A tensor of an input file: what it is, not yet its values.
struct Listed {
  analysis::TensorInfo info;
};

// Every float tensor of one file, listed (the values are read pair by pair below).
std::vector<Listed> list(const std::string& file, const analysis::InputOptions& options) {
  std::vector<Listed> out;
  const auto failures = analysis::for_each_tensor(
      {file}, options, [&](const analysis::TensorInfo& info, const analysis::TensorRead&) { out.push_back({info}); });
  if (!failures.empty()) throw Error(failures.front().message);
  if (out.empty()) throw Error(file + ": holds no tensors");
  return out;
}

// Adds the pair (w, u) to `s`: read in step, 2^20 elements at a time, from the mapped files (resident
// memory bounded whatever their size); a compressed npz member or a Fortran-order array cannot be read
// by range and is read whole.
void add_pair(analysis::SwallowedUpdates& s, const analysis::TensorInfo& w, const analysis::TensorInfo& u,
              const analysis::InputOptions& options, io::ProgressBar& progress) {
  io::SourceOptions so;
  so.dtype = options.dtype;
  const auto ws = io::TensorSource::open(w.file, so), us = io::TensorSource::open(u.file, so);
  const io::TensorRef& wt = w.name.empty() ? ws.tensors().front() : ws.tensor(w.name);
  const io::TensorRef& ut = u.name.empty() ? us.tensors().front() : us.tensor(u.name);
  const bool by_range = !wt.deflated && !wt.fortran_order && !ut.deflated && !ut.fortran_order;
  const std::uint64_t pair_bytes = wt.count * io::dtype_size(wt.stored) + ut.count * io::dtype_size(ut.stored);
  if (!by_range) {
    const auto wv = ws.read_double(wt), uv = us.read_double(ut);
    s.add(std::span<const double>(wv), std::span<const double>(uv), 0);
    progress.advance(pair_bytes);
    return;
  }
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<double> wv, uv;
  for (std::uint64_t offset = 0; offset < wt.count; offset += kChunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, wt.count - offset));
    ws.read_range_double(wt, offset, n, wv);
    us.read_range_double(ut, offset, n, uv);
    s.add(std::span<const double>(wv), std::span<const double>(uv), offset);
    progress.advance(pair_bytes / wt.count * n);
  }
}

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
  std::vector<std::pair<analysis::TensorInfo, analysis::TensorInfo>> pairs;
  if (o.inputs.size() == 2 && opts.weights.empty() && opts.updates.empty()) {
    auto w = list(o.inputs[0], io), u = list(o.inputs[1], io);
    if (w.size() != u.size())
      throw Error(fmt::format("{} holds {} tensors but {} holds {}", o.inputs[0], w.size(), o.inputs[1], u.size()));
    for (std::size_t i = 0; i < w.size(); ++i) pairs.emplace_back(w[i].info, u[i].info);
  } else if (o.inputs.size() == 1 && !opts.weights.empty() && !opts.updates.empty()) {
    const auto all = list(o.inputs[0], io);
    auto find = [&](const std::string& name) {
      for (const auto& t : all)
        if (t.info.name == name) return t.info;
      throw Error(fmt::format("{}: no tensor named '{}'", o.inputs[0], name));
    };
    pairs.emplace_back(find(opts.weights), find(opts.updates));
  } else {
    throw Error("updates: give two files (weights, updates) or one file with --weights NAME --updates NAME");
  }
  for (const auto& [w, u] : pairs)
    if (w.count != u.count)
      throw Error(fmt::format("{} has {} values but {} has {}", w.label, w.count, u.label, u.count));

  nlohmann::json rows_json = nlohmann::json::array();
  analysis::TidyCsv csv;
  std::vector<analysis::SwallowedUpdates> per;
  for (const auto& [w, u] : pairs) {
    analysis::SwallowedUpdates s(f, r);
    add_pair(s, w, u, io, *progress);
    total += s;
    nlohmann::json j = s.to_json();
    j["weights"] = w.label;
    j["updates"] = u.label;
    csv.add_stats(w.label, f.name, 1.0, j);
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
