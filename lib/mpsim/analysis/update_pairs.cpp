#include "mpsim/analysis/update_pairs.hpp"

#include <fmt/core.h>

#include <algorithm>

#include "mpsim/error.hpp"
#include "mpsim/io/tensor_source.hpp"

namespace mpsim::analysis {

namespace {

// Every float tensor of one file, listed (the values are read pair by pair, add_pair).
std::vector<TensorInfo> list(const std::string& file, const InputOptions& options) {
  std::vector<TensorInfo> out;
  const auto failures =
      for_each_tensor({file}, options, [&](const TensorInfo& info, const TensorRead&) { out.push_back(info); });
  if (!failures.empty()) throw Error(failures.front().message);
  if (out.empty()) throw Error(file + ": holds no tensors");
  return out;
}

void check_counts(const UpdatePair& p) {
  if (p.weights.count != p.updates.count)
    throw Error(fmt::format("{} has {} values but {} has {}", p.weights.label, p.weights.count, p.updates.label,
                            p.updates.count));
}

}  // namespace

std::vector<UpdatePair> pairs_in_order(const std::string& weights_file, const std::string& updates_file,
                                       const InputOptions& options) {
  const auto w = list(weights_file, options), u = list(updates_file, options);
  if (w.size() != u.size())
    throw Error(fmt::format("{} holds {} tensors but {} holds {}", weights_file, w.size(), updates_file, u.size()));
  std::vector<UpdatePair> pairs;
  for (std::size_t i = 0; i < w.size(); ++i) pairs.push_back({w[i], u[i]});
  for (const auto& p : pairs) check_counts(p);
  return pairs;
}

UpdatePair pair_by_name(const std::string& file, const std::string& weights, const std::string& updates,
                        const InputOptions& options) {
  const auto all = list(file, options);
  auto find = [&](const std::string& name) {
    for (const auto& t : all)
      if (t.name == name) return t;
    throw Error(fmt::format("{}: no tensor named '{}'", file, name));
  };
  UpdatePair p{find(weights), find(updates)};
  check_counts(p);
  return p;
}

void add_pair(SwallowedUpdates& s, const UpdatePair& pair, const InputOptions& options, io::ProgressBar* progress) {
  const TensorInfo &w = pair.weights, &u = pair.updates;
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
    if (progress) progress->advance(pair_bytes);
    return;
  }
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  std::vector<double> wv, uv;
  for (std::uint64_t offset = 0; offset < wt.count; offset += kChunk) {
    const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, wt.count - offset));
    ws.read_range_double(wt, offset, n, wv);
    us.read_range_double(ut, offset, n, uv);
    s.add(std::span<const double>(wv), std::span<const double>(uv), offset);
    if (progress) progress->advance(pair_bytes / wt.count * n);
  }
}

}  // namespace mpsim::analysis
