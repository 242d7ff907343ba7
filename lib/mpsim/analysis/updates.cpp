#include "mpsim/analysis/updates.hpp"

#include <bit>
#include <cmath>
#include <limits>

#include "mpsim/error.hpp"

namespace mpsim::analysis {

SwallowedUpdates::SwallowedUpdates(const Format& f, const Rounding& r)
    : format_(f), rounding_(r), ratio_(make_histogram(-64, 64)), ratio_swallowed_(make_histogram(-64, 64)) {
  validate(rounding_);
  if (f.exp_bits > 10 || f.man_bits > 50)
    throw Error("updates report: format " + f.name + " is too wide (at most 10 exponent and 50 mantissa bits)");
}

double SwallowedUpdates::rounded_sum(double a, double b, const Format& f, const Rounding& r, std::uint64_t index) {
  // TwoSum (Knuth): s + e == a + b exactly.
  const double s = a + b;
  const double bb = s - a;
  const double e = (a - (s - bb)) + (b - bb);
  double odd = s;
  if (e != 0 && (std::bit_cast<std::uint64_t>(s) & 1u) == 0)
    odd = std::nextafter(s, e > 0 ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity());
  // Rounding to odd at 53 bits then to p <= 51 bits equals rounding the exact sum (Boldo & Melquiond).
  return decode(round_bits(odd, f, r, index), f);
}

void SwallowedUpdates::add(std::span<const double> w, std::span<const double> u, std::uint64_t index0) {
  if (w.size() != u.size())
    throw Error("updates report: weights hold " + std::to_string(w.size()) + " values, updates " +
                std::to_string(u.size()));
  for (std::size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i]) || !std::isfinite(u[i])) {
      ++nonfinite_;
      continue;
    }
    if (u[i] == 0) {
      ++u_zero_;
      continue;
    }
    // The weight as F holds it (deterministic nearest-even: the stored weight, not a random draw).
    const double wf = decode(round_bits(w[i], format_), format_);
    if (!std::isfinite(wf)) {
      ++nonfinite_;
      continue;
    }
    ++measured_;
    const double sum = rounded_sum(wf, u[i], format_, rounding_, index0 + i);
    const bool lost = sum == wf;
    swallowed_ += lost;
    if (wf == 0) {
      ++w_zero_;
      continue;
    }
    const double q = std::fabs(wf) / std::fabs(u[i]);
    ratio_.add(q);
    if (lost) ratio_swallowed_.add(q);
  }
}

void SwallowedUpdates::add(std::span<const float> w, std::span<const float> u, std::uint64_t index0) {
  std::vector<double> wd(w.begin(), w.end()), ud(u.begin(), u.end());
  add(std::span<const double>(wd), std::span<const double>(ud), index0);
}

SwallowedUpdates& SwallowedUpdates::operator+=(const SwallowedUpdates& o) {
  measured_ += o.measured_;
  swallowed_ += o.swallowed_;
  u_zero_ += o.u_zero_;
  nonfinite_ += o.nonfinite_;
  w_zero_ += o.w_zero_;
  ratio_ += o.ratio_;
  ratio_swallowed_ += o.ratio_swallowed_;
  return *this;
}

nlohmann::json SwallowedUpdates::to_json() const {
  nlohmann::json hist = nlohmann::json::array();
  for (int n = ratio_.min_exp; n <= ratio_.max_exp; ++n)
    if (ratio_.count(n)) hist.push_back({n, ratio_.count(n), ratio_swallowed_.count(n)});
  return {{"format", format_.name},
          {"rounding", std::string(ieee_name(rounding_.mode))},
          {"swallowed%", measured_ ? 100.0 * double(swallowed_) / double(measured_) : 0.0},
          {"swallowed_num", swallowed_},
          {"measured_num", measured_},
          {"u_zero_num", u_zero_},
          {"nonfinite_num", nonfinite_},
          {"w_zero_num", w_zero_},
          {"threshold_log2_ratio", threshold_log2()},
          {"ratio_log2_hist", hist}};
}

}  // namespace mpsim::analysis
