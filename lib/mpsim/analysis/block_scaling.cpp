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
  nlohmann::json j = {{"format", format},           {"scaling", scaling},
                      {"numel", count},             {"nonzero_finite_num", nonzero},
                      {"flushed_num", flushed},     {"flushed%", pct(flushed, nonzero)},
                      {"subnormal_num", subnormal}, {"subnormal%", pct(subnormal, nonzero)},
                      {"saturated_num", saturated}, {"saturated%", pct(saturated, nonzero)},
                      {"nan_num", nan_in},          {"inf_num", inf_in}};
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

ScalingResult block_scaling(std::span<const float> x, std::size_t row_len, const BlockFormat& f, const Rounding& r) {
  BlockStats s;
  quantize_blocks(x, row_len, f, r, &s);
  return block_result(f, s);
}

ScalingResult tensor_scaling(std::span<const float> x, const Format& f, bool per_tensor, double loss_scale,
                             const Rounding& r) {
  float amax = 0;
  for (float v : x)
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  // Transformer Engine's current scaling: scale = fp8_max / amax (margin 0), 1 for an all-zero tensor.
  const float s = per_tensor ? (amax > 0 ? static_cast<float>(f.max_finite) / amax : 1.0f)
                             : static_cast<float>(loss_scale);
  std::vector<float> scaled(x.begin(), x.end());
  for (float& v : scaled) v *= s;
  Stats st;
  std::vector<float> sink(x.size());
  round_array(std::span<const float>(scaled), std::span<float>(sink), f, r, &st);
  ScalingResult out;
  out.format = f.name;
  out.scaling = per_tensor ? "per_tensor" : "loss_scale";
  out.scale = s;
  out.count = st.count;
  out.nan_in = st.nan;
  // Finite non-zero inputs that the scaling itself sent to 0 or to inf (float underflow or overflow of
  // x * S) are flushed or overflowed too; the Stats saw them as zero or inf inputs.
  std::uint64_t scaled_to_zero = 0, scaled_to_inf = 0, nonzero = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(x[i])) ++out.inf_in;
    if (!std::isfinite(x[i]) || x[i] == 0) continue;
    ++nonzero;
    if (scaled[i] == 0) ++scaled_to_zero;
    if (std::isinf(scaled[i])) ++scaled_to_inf;
  }
  out.nonzero = nonzero;
  out.flushed = st.underflow + scaled_to_zero;
  out.subnormal = st.subnormal;
  out.saturated = st.overflow + scaled_to_inf;
  return out;
}

BlockRowStream::BlockRowStream(std::size_t row_len, bool whole_tensor, Rows fn, std::size_t batch)
    : row_len_(row_len), batch_(std::max<std::size_t>(batch, 1)), whole_tensor_(whole_tensor), fn_(std::move(fn)) {}

void BlockRowStream::add(std::span<const float> x) {
  buf_.insert(buf_.end(), x.begin(), x.end());
  if (!whole_tensor_ && buf_.size() >= batch_) flush(false);
}

void BlockRowStream::add(std::span<const double> x) {
  for (const double v : x) buf_.push_back(static_cast<float>(v));
  if (!whole_tensor_ && buf_.size() >= batch_) flush(false);
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

void add_block_rounding_error(RoundingError& acc, std::span<const float> rows, std::size_t row_len,
                              const BlockFormat& f, std::uint64_t index0) {
  BulkOptions opt;
  opt.index0 = index0;
  const BlockQuantized q = quantize_blocks(rows, row_len, f, acc.rounding(), nullptr, opt);
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
