#include "mpsim/analysis/block_scaling.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "mpsim/error.hpp"

#include "mpsim/format/bulk.hpp"

namespace mpsim::analysis {

namespace {
double pct(std::uint64_t part, std::uint64_t whole) { return whole ? 100.0 * double(part) / double(whole) : 0.0; }
}  // namespace

void ScalingResult::merge(const ScalingResult& o) {
  count += o.count;
  nonzero += o.nonzero;
  flushed += o.flushed;
  subnormal += o.subnormal;
  saturated += o.saturated;
  nan_in += o.nan_in;
  inf_in += o.inf_in;
  blocks += o.blocks;
  nan_blocks += o.nan_blocks;
  scale = o.scale;
  for (const auto& [k, c] : o.scale_log2) scale_log2[k] += c;
}

nlohmann::json ScalingResult::json() const {
  nlohmann::json j = {{"format", format},
                      {"scaling", scaling},
                      {"numel", count},
                      {"nonzero_finite_num", nonzero},
                      {"flushed_num", flushed},
                      {"flushed%", pct(flushed, nonzero)},
                      {"subnormal_num", subnormal},
                      {"subnormal%", pct(subnormal, nonzero)},
                      {"saturated_num", saturated},
                      {"saturated%", pct(saturated, nonzero)},
                      {"nan_num", nan_in},
                      {"inf_num", inf_in}};
  if (scaling == "block") {
    nlohmann::json dist = nlohmann::json::array();
    for (const auto& [k, c] : scale_log2) dist.push_back({k, c});
    j["blocks"] = blocks;
    j["nan_blocks"] = nan_blocks;
    j["block_scale_log2"] = dist;
    if (!scale_log2.empty()) {
      j["block_scale_log2_min"] = scale_log2.begin()->first;
      j["block_scale_log2_max"] = scale_log2.rbegin()->first;
    }
  } else {
    j["scale"] = scale;
  }
  return j;
}

ScalingResult block_result(const BlockFormat& f, const BlockStats& s) {
  ScalingResult out;
  out.format = f.name;
  out.scaling = "block";
  out.count = s.count;
  out.nonzero = s.nonzero;
  out.flushed = s.flushed;
  out.subnormal = s.subnormal;
  out.saturated = s.saturated;
  out.nan_in = s.nan_in;
  out.inf_in = s.inf_in;
  out.blocks = s.blocks;
  out.nan_blocks = s.nan_blocks;
  out.scale_log2 = s.scale_log2;
  return out;
}

namespace {

// A chunk of a tensor as float32: `f` itself, or `d` converted (float64 tensors are compared as float32).
std::span<const float> as_float(std::span<const float> f, std::span<const double> d, std::vector<float>& buf) {
  if (d.empty()) return f;
  buf.resize(d.size());
  for (std::size_t i = 0; i < d.size(); ++i) buf[i] = static_cast<float>(d[i]);
  return buf;
}

// The largest finite magnitude, and nvfp4's amax, of a tensor: the first pass of a two-pass telemetry.
struct TensorRange {
  float finite_amax = 0;
  TensorAmax amax;
  void add(std::span<const float> x) {
    amax.add(x);
    for (const float v : x)
      if (std::isfinite(v)) finite_amax = std::max(finite_amax, std::fabs(v));
  }
};

// Adds a chunk (elements offset .. of the tensor) of an element-format target: x * s rounded to f.
void add_scaled(ScalingResult& out, std::span<const float> x, std::uint64_t offset, const Format& f, float s,
                const Rounding& r, std::vector<float>& scaled, std::vector<float>& sink) {
  scaled.assign(x.begin(), x.end());
  for (float& v : scaled) v *= s;
  sink.resize(x.size());
  Stats st;
  BulkOptions opt;
  opt.index0 = offset;
  round_array(std::span<const float>(scaled), std::span<float>(sink), f, r, &st, opt);
  out.count += st.count;
  out.nan_in += st.nan;
  // Finite non-zero inputs that the scaling itself sent to 0 or to inf (float underflow or overflow of
  // x * S) are flushed or overflowed too; the Stats saw them as zero or inf inputs.
  std::uint64_t scaled_to_zero = 0, scaled_to_inf = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(x[i])) ++out.inf_in;
    if (!std::isfinite(x[i]) || x[i] == 0) continue;
    ++out.nonzero;
    if (scaled[i] == 0) ++scaled_to_zero;
    if (std::isinf(scaled[i])) ++scaled_to_inf;
  }
  out.flushed += st.underflow + scaled_to_zero;
  out.subnormal += st.subnormal;
  out.saturated += st.overflow + scaled_to_inf;
}

bool per_tensor(const Format& f) { return f.storage_bits <= 8; }

}  // namespace

int telemetry_reads(const std::vector<ScalingTarget>& targets) {
  for (const auto& t : targets)
    if (t.block ? t.block->two_level : per_tensor(t.element)) return 2;
  return 1;
}

std::vector<ScalingResult> scaling_telemetry(const TensorRead& read, std::size_t row_len,
                                             const std::vector<ScalingTarget>& targets, double loss_scale,
                                             const Rounding& r, std::size_t batch) {
  const bool needs_range = telemetry_reads(targets) == 2;
  bool any_block = false;
  for (const auto& t : targets) any_block = any_block || t.block.has_value();
  std::vector<float> buf;
  TensorRange range;
  if (needs_range)
    read([&](std::span<const float> f, std::span<const double> d, std::uint64_t) { range.add(as_float(f, d, buf)); });

  std::vector<ScalingResult> out(targets.size());
  std::vector<BlockStats> block_stats(targets.size());
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const auto& t = targets[i];
    if (t.block) continue;
    out[i].format = t.element.name;
    out[i].scaling = per_tensor(t.element) ? "per_tensor" : "loss_scale";
    // Transformer Engine's current scaling: scale = fp8_max / amax (margin 0), 1 for an all-zero tensor.
    out[i].scale = per_tensor(t.element)
                       ? (range.finite_amax > 0 ? static_cast<float>(t.element.max_finite) / range.finite_amax : 1.0f)
                       : static_cast<float>(loss_scale);
  }
  BlockRowStream rows(
      row_len,
      [&](std::span<const float> x, std::uint64_t index0) {
        BulkOptions opt;
        opt.index0 = index0;
        for (std::size_t i = 0; i < targets.size(); ++i)
          if (const auto& b = targets[i].block)
            quantize_blocks(x, row_len, *b, r, &block_stats[i], opt, range.amax.tensor_scale(*b));
      },
      batch);
  std::vector<float> scaled, sink;
  read([&](std::span<const float> f, std::span<const double> d, std::uint64_t offset) {
    const std::span<const float> x = as_float(f, d, buf);
    if (any_block) rows.add(x);
    for (std::size_t i = 0; i < targets.size(); ++i)
      if (!targets[i].block)
        add_scaled(out[i], x, offset, targets[i].element, static_cast<float>(out[i].scale), r, scaled, sink);
  });
  rows.finish();
  for (std::size_t i = 0; i < targets.size(); ++i)
    if (const auto& b = targets[i].block) out[i] = block_result(*b, block_stats[i]);
  return out;
}

BlockRowStream::BlockRowStream(std::size_t row_len, Rows fn, std::size_t batch)
    : row_len_(row_len), batch_(std::max<std::size_t>(batch, 1)), fn_(std::move(fn)) {}

void BlockRowStream::add(std::span<const float> x) {
  buf_.insert(buf_.end(), x.begin(), x.end());
  if (buf_.size() >= batch_) flush(false);
}

void BlockRowStream::add(std::span<const double> x) {
  for (const double v : x) buf_.push_back(static_cast<float>(v));
  if (buf_.size() >= batch_) flush(false);
}

void BlockRowStream::flush(bool at_end) {
  // row_len 0: the whole tensor is one row, which only the end completes.
  const std::size_t whole = at_end ? buf_.size() : row_len_ == 0 ? 0 : buf_.size() / row_len_ * row_len_;
  if (whole == 0) return;
  fn_(std::span<const float>(buf_.data(), whole), index0_);
  index0_ += whole;
  buf_.erase(buf_.begin(), buf_.begin() + static_cast<std::ptrdiff_t>(whole));
}

void BlockRowStream::finish() {
  if (row_len_ != 0 && buf_.size() % row_len_ != 0)
    throw Error(fmt::format("block formats: the tensor's {} elements are not whole rows of {}", index0_ + buf_.size(),
                            row_len_));
  flush(true);
}

float for_each_block_rows(const TensorRead& read, std::size_t row_len, const BlockFormat& f, const ScaledRows& fn,
                          std::size_t batch) {
  std::vector<float> buf;
  TensorAmax amax;
  if (f.two_level)
    read([&](std::span<const float> x, std::span<const double> d, std::uint64_t) { amax.add(as_float(x, d, buf)); });
  const float t = amax.tensor_scale(f);
  BlockRowStream rows(
      row_len, [&](std::span<const float> x, std::uint64_t index0) { fn(x, index0, t); }, batch);
  read([&](std::span<const float> x, std::span<const double> d, std::uint64_t) {
    if (!x.empty()) rows.add(x);
    if (!d.empty()) rows.add(d);
  });
  rows.finish();
  return t;
}

void add_block_rounding_error(RoundingError& acc, std::span<const float> rows, std::size_t row_len,
                              const BlockFormat& f, std::uint64_t index0, std::optional<float> tensor_scale) {
  BulkOptions opt;
  opt.index0 = index0;
  const BlockQuantized q = quantize_blocks(rows, row_len, f, acc.rounding(), nullptr, opt, tensor_scale);
  const std::vector<double> factor = block_scale_factors(q, f);
  const std::size_t row = row_len == 0 ? rows.size() : row_len;
  const std::size_t per_row = (row + static_cast<std::size_t>(f.block) - 1) / static_cast<std::size_t>(f.block);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const float x = rows[i];
    if (!std::isfinite(x) || x == 0) continue;
    const double xf = factor[i / row * per_row + i % row / static_cast<std::size_t>(f.block)];
    acc.add_pair(static_cast<double>(x) / xf, std::isnan(xf) ? xf : decode(q.elements[i], f.element));
  }
}

}  // namespace mpsim::analysis
