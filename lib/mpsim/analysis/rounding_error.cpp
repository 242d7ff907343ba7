#include "mpsim/analysis/rounding_error.hpp"

#include <algorithm>
#include <cmath>

#include "mpsim/analysis/histogram.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"

namespace mpsim::analysis {

namespace {
constexpr int kRelBins = (RoundingError::kRelMaxExp - RoundingError::kRelMinExp) * RoundingError::kRelBinsPerBinade + 1;
constexpr int kUlpBinCount = 4 * RoundingError::kUlpBins;
}  // namespace

void RoundingError::Sum::add(double x) {
  const double t = s + x;
  c += std::fabs(s) >= std::fabs(x) ? (s - t) + x : (x - t) + s;
  s = t;
}

RoundingError::RoundingError(const Format& f, const Rounding& r, int log2_scale)
    : format_(f), rounding_(r), log2_scale_(log2_scale), rel_bins_(kRelBins, 0), ulp_bins_(kUlpBinCount, 0) {
  validate(rounding_);
}

double RoundingError::ulp_of(double y, const Format& f) {
  return std::ldexp(1.0, std::max(binade(y), f.emin) - f.man_bits);
}

void RoundingError::add_pair(double y, double r) {
  if (!std::isfinite(r)) {
    ++overflow_;
    return;
  }
  ++count_;
  const double d = r - y;
  const double ay = std::fabs(y);
  const double rel = std::fabs(d) / ay;
  const double ulp = std::fabs(d) / ulp_of(y, format_);
  if (d == 0) ++exact_;
  rel_sum_.add(rel);
  ulp_sum_.add(ulp);
  bias_rel_sum_.add(d / ay);
  bias_ulp_sum_.add(d / ulp_of(y, format_));
  rel_max_ = std::max(rel_max_, rel);
  ulp_max_ = std::max(ulp_max_, ulp);
  // Relative error bin: [2^(e + i/64), 2^(e + (i+1)/64)), found from log2 (only here, per element of a
  // report that already rounds every value; the histogram pass itself never calls log2).
  int rb = 0;
  if (rel >= std::ldexp(1.0, kRelMinExp)) {
    const double pos = (std::log2(rel) - kRelMinExp) * kRelBinsPerBinade;
    rb = std::clamp(static_cast<int>(std::floor(pos)) + 1, 1, kRelBins - 1);
  }
  ++rel_bins_[static_cast<std::size_t>(rb)];
  const int ub = std::min(static_cast<int>(ulp * kUlpBins), kUlpBinCount - 1);
  ++ulp_bins_[static_cast<std::size_t>(ub)];
}

void RoundingError::add(std::span<const double> x, std::uint64_t index0) {
  scratch_in_.resize(x.size());
  scratch_out_.resize(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) scratch_in_[i] = std::ldexp(x[i], log2_scale_);
  BulkOptions o;
  o.index0 = index0;
  round_array(std::span<const double>(scratch_in_), std::span<double>(scratch_out_), format_, rounding_, nullptr, o);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double y = scratch_in_[i];
    if (!std::isfinite(y) || y == 0) continue;
    add_pair(y, scratch_out_[i]);
  }
}

void RoundingError::add(std::span<const float> x, std::uint64_t index0) {
  if (log2_scale_ != 0 || format_.exp_bits > 8 || format_.man_bits > 23) {
    // Scaled values may leave float's range: round them as doubles (exact scaling).
    std::vector<double> d(x.begin(), x.end());
    add(std::span<const double>(d), index0);
    return;
  }
  scratch_f_.resize(x.size());
  BulkOptions o;
  o.index0 = index0;
  round_array(x, std::span<float>(scratch_f_), format_, rounding_, nullptr, o);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float y = x[i];
    if (!std::isfinite(y) || y == 0) continue;
    add_pair(y, scratch_f_[i]);
  }
}

RoundingError& RoundingError::operator+=(const RoundingError& o) {
  if (!(o.format_ == format_) || o.rounding_.mode != rounding_.mode || o.log2_scale_ != log2_scale_)
    throw Error("rounding report: cannot merge results for different formats, modes or scales");
  count_ += o.count_;
  overflow_ += o.overflow_;
  exact_ += o.exact_;
  rel_sum_.add(o.rel_sum_);
  ulp_sum_.add(o.ulp_sum_);
  bias_rel_sum_.add(o.bias_rel_sum_);
  bias_ulp_sum_.add(o.bias_ulp_sum_);
  rel_max_ = std::max(rel_max_, o.rel_max_);
  ulp_max_ = std::max(ulp_max_, o.ulp_max_);
  for (std::size_t i = 0; i < rel_bins_.size(); ++i) rel_bins_[i] += o.rel_bins_[i];
  for (std::size_t i = 0; i < ulp_bins_.size(); ++i) ulp_bins_[i] += o.ulp_bins_[i];
  return *this;
}

double RoundingError::rel_mean() const { return count_ ? rel_sum_.value() / double(count_) : 0.0; }
double RoundingError::ulp_mean() const { return count_ ? ulp_sum_.value() / double(count_) : 0.0; }
double RoundingError::bias_rel() const { return count_ ? bias_rel_sum_.value() / double(count_) : 0.0; }
double RoundingError::bias_ulp() const { return count_ ? bias_ulp_sum_.value() / double(count_) : 0.0; }

namespace {
// The index of the bin holding the q-quantile: the first bin where the cumulative count reaches
// ceil(q · n) (at least 1).
std::size_t quantile_bin(const std::vector<std::uint64_t>& bins, std::uint64_t n, double q) {
  const auto want = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::ceil(q * double(n))));
  std::uint64_t cum = 0;
  for (std::size_t i = 0; i < bins.size(); ++i) {
    cum += bins[i];
    if (cum >= want) return i;
  }
  return bins.size() - 1;
}
}  // namespace

double RoundingError::rel_percentile(double q) const {
  if (count_ == 0) return 0;
  const std::size_t b = quantile_bin(rel_bins_, count_, q);
  if (b == 0) return std::min(rel_max_, std::ldexp(1.0, kRelMinExp));
  const double upper = std::exp2(kRelMinExp + double(b) / kRelBinsPerBinade);
  return std::min(upper, rel_max_);
}

double RoundingError::ulp_percentile(double q) const {
  if (count_ == 0) return 0;
  const std::size_t b = quantile_bin(ulp_bins_, count_, q);
  // The top bin is open ([4 ulp, inf): saturation and directed rounding of tiny values): its upper
  // bound is the largest error seen.
  if (b + 1 == ulp_bins_.size()) return ulp_max_;
  return std::min(double(b + 1) / kUlpBins, ulp_max_);
}

nlohmann::json RoundingError::to_json() const {
  return {{"format", format_.name},
          {"rounding", std::string(ieee_name(rounding_.mode))},
          {"scale", std::ldexp(1.0, log2_scale_)},
          {"measured_num", count_},
          {"exact_num", exact_},
          {"overflows_num", overflow_},
          {"rel_err_mean", rel_mean()},
          {"rel_err_max", rel_max()},
          {"rel_err_p50", rel_percentile(0.5)},
          {"rel_err_p90", rel_percentile(0.9)},
          {"rel_err_p99", rel_percentile(0.99)},
          {"rel_err_p99.9", rel_percentile(0.999)},
          {"ulp_err_mean", ulp_mean()},
          {"ulp_err_max", ulp_max()},
          {"ulp_err_p50", ulp_percentile(0.5)},
          {"ulp_err_p90", ulp_percentile(0.9)},
          {"ulp_err_p99", ulp_percentile(0.99)},
          {"ulp_err_p99.9", ulp_percentile(0.999)},
          {"bias_rel", bias_rel()},
          {"bias_ulp", bias_ulp()}};
}

}  // namespace mpsim::analysis
