#include "mpsim/analysis/mass_lost.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"

namespace mpsim::analysis {

template <class T>
void MassLost::add_impl(std::span<const T> g, std::span<const T> q) {
  if (g.size() != q.size())
    throw Error(fmt::format("MassLost::add: {} values before rounding but {} after", g.size(), q.size()));
  // Branch-free: a flushed element is about every other one in a tensor worth measuring, which a branch
  // would mispredict; the masks select 0 instead.
  for (std::size_t b = 0; b < g.size(); b += kBlock) {
    const std::size_t e = std::min(g.size(), b + kBlock);
    double abs = 0, sq = 0, f_abs = 0, f_sq = 0, f_signed = 0, dot = 0, sq_q = 0;
    std::uint64_t nonzero = 0, flushed = 0, overflowed = 0;
    for (std::size_t i = b; i < e; ++i) {
      const double x = g[i], y = q[i];
      const bool counted = x != 0 && std::isfinite(x);
      const bool lost = counted && y == 0;
      const bool kept = counted && std::isfinite(y);
      const double ax = counted ? std::abs(x) : 0.0, xx = ax * ax;
      nonzero += counted;
      flushed += lost;
      overflowed += counted && !kept;
      abs += ax;
      sq += xx;
      f_abs += lost ? ax : 0.0;
      f_sq += lost ? xx : 0.0;
      f_signed += lost ? x : 0.0;
      dot += kept ? x * y : 0.0;
      sq_q += kept ? y * y : 0.0;
    }
    nonzero_ += nonzero;
    flushed_ += flushed;
    overflowed_ += overflowed;
    sum_abs_ += abs;
    sum_sq_ += sq;
    flushed_abs_ += f_abs;
    flushed_sq_ += f_sq;
    flushed_signed_ += f_signed;
    dot_ += dot;
    sum_sq_q_ += sq_q;
  }
}

void MassLost::add(std::span<const float> g, std::span<const float> q) { add_impl(g, q); }
void MassLost::add(std::span<const double> g, std::span<const double> q) { add_impl(g, q); }

MassLost& MassLost::operator+=(const MassLost& o) {
  nonzero_ += o.nonzero_;
  flushed_ += o.flushed_;
  overflowed_ += o.overflowed_;
  sum_abs_ += o.sum_abs_;
  sum_sq_ += o.sum_sq_;
  flushed_abs_ += o.flushed_abs_;
  flushed_sq_ += o.flushed_sq_;
  flushed_signed_ += o.flushed_signed_;
  signed_known_ = signed_known_ && o.signed_known_;
  dot_ += o.dot_;
  sum_sq_q_ += o.sum_sq_q_;
  return *this;
}

MassLostStats MassLost::stats() const {
  MassLostStats s;
  s.nonzero_finite = nonzero_;
  s.flushed = flushed_;
  s.l1_lost = sum_abs_ > 0 ? flushed_abs_ / sum_abs_ : 0.0;
  s.l2sq_lost = sum_sq_ > 0 ? flushed_sq_ / sum_sq_ : 0.0;
  // sqrt of each factor apart: sum_sq_ * sum_sq_q_ can overflow double for double inputs near its range.
  s.cosine = (overflowed_ > 0 || sum_sq_ == 0 || sum_sq_q_ == 0)
                 ? std::nan("")
                 : std::clamp(dot_ / (std::sqrt(sum_sq_) * std::sqrt(sum_sq_q_)), -1.0, 1.0);  // rounding may pass 1
  // |flushed_signed_| <= flushed_abs_ holds in floating point too (rounding is monotone and odd), so the
  // share stays in [0, 1].
  s.push_down = (!signed_known_ || flushed_abs_ == 0) ? std::nan("")
                                                      : (flushed_abs_ + flushed_signed_) / (2 * flushed_abs_);
  s.lost_bias = !signed_known_ ? std::nan("") : sum_abs_ > 0 ? flushed_signed_ / sum_abs_ : 0.0;
  return s;
}

nlohmann::json MassLost::state() const {
  nlohmann::json j = {{"nonzero", nonzero_},        {"flushed", flushed_},         {"overflowed", overflowed_},
          {"sum_abs", sum_abs_},        {"sum_sq", sum_sq_},           {"flushed_abs", flushed_abs_},
          {"flushed_sq", flushed_sq_},  {"dot", dot_},                 {"sum_sq_q", sum_sq_q_}};
  if (signed_known_) j["flushed_signed"] = flushed_signed_;
  return j;
}

MassLost MassLost::from_state(const nlohmann::json& j) {
  MassLost m;
  try {
    m.nonzero_ = j.at("nonzero").get<std::uint64_t>();
    m.flushed_ = j.at("flushed").get<std::uint64_t>();
    m.overflowed_ = j.at("overflowed").get<std::uint64_t>();
    m.sum_abs_ = j.at("sum_abs").get<double>();
    m.sum_sq_ = j.at("sum_sq").get<double>();
    m.flushed_abs_ = j.at("flushed_abs").get<double>();
    m.flushed_sq_ = j.at("flushed_sq").get<double>();
    m.dot_ = j.at("dot").get<double>();
    m.sum_sq_q_ = j.at("sum_sq_q").get<double>();
    // States written by mpsim 0.2.0 (checkpoints, MassLostCounter JSON) lack the signed sum: the signed
    // measures are then unknown (NaN) rather than a wrong 0.
    m.signed_known_ = j.contains("flushed_signed");
    if (m.signed_known_) m.flushed_signed_ = j.at("flushed_signed").get<double>();
    // get<std::uint64_t> wraps a negative integer and get<double> takes any number: a state is checked for
    // what add() can produce (counts that are non-negative integers, flushed and overflowed among the
    // counted, sums that are finite and non-negative: <g, q> too, as a rounding keeps the sign or gives 0).
    for (const char* key : {"nonzero", "flushed", "overflowed"})
      if (!j.at(key).is_number_unsigned())
        throw Error(fmt::format("gradient mass state: \"{}\" is {}, not a count", key, j.at(key).dump()));
    if (m.flushed_ > m.nonzero_ || m.overflowed_ > m.nonzero_)
      throw Error(fmt::format("gradient mass state: {} flushed and {} overflowed of {} values", m.flushed_,
                              m.overflowed_, m.nonzero_));
    for (const char* key : {"sum_abs", "sum_sq", "flushed_abs", "flushed_sq", "dot", "sum_sq_q"}) {
      const double v = j.at(key).get<double>();
      if (!std::isfinite(v) || v < 0)
        throw Error(fmt::format("gradient mass state: \"{}\" is {}, not a finite sum", key, j.at(key).dump()));
    }
    if (m.signed_known_ && !(std::abs(m.flushed_signed_) <= m.flushed_abs_))
      throw Error(fmt::format("gradient mass state: \"flushed_signed\" is {}, beyond the flushed sum |g| {}",
                              j.at("flushed_signed").dump(), m.flushed_abs_));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("gradient mass state: {}", e.what()));
  }
  return m;
}

namespace {

constexpr std::size_t kChunk = std::size_t{1} << 16;  // elements rounded at a time (bounded scratch)

bool fits_float(const Format& f) {
  // round_array's condition for float output (lib/mpsim/format/bulk.cpp, check_float_fits).
  return f.exp_bits <= 8 && f.man_bits <= 23 && f.emax <= 127 && f.emin - f.man_bits >= -149;
}

BulkOptions one_thread(std::uint64_t index0) {
  BulkOptions o;
  o.threads = 1;  // the callers stream tensors chunk by chunk; the bits do not depend on it
  o.index0 = index0;
  return o;
}

void add_rounded_double(MassLost& into, std::span<const double> g, const Format& fmt, const Rounding& r,
                        int log2_scale, std::uint64_t index0, std::vector<double>& x, std::vector<double>& q) {
  x.resize(g.size());
  q.resize(g.size());
  // 2^k * g is exact in double for every float g and the report's range of k; for double input it may
  // leave double's range only for tensors no format of interest holds.
  for (std::size_t i = 0; i < g.size(); ++i) x[i] = std::ldexp(g[i], log2_scale);
  round_array(std::span<const double>(x), std::span<double>(q), fmt, r, nullptr, one_thread(index0));
  into.add(std::span<const double>(x), std::span<const double>(q));
}

}  // namespace

void add_rounded(MassLost& into, std::span<const double> g, const Format& fmt, const Rounding& r, int log2_scale,
                 std::uint64_t index0) {
  std::vector<double> x, q;
  for (std::size_t b = 0; b < g.size(); b += kChunk) {
    const std::size_t n = std::min(kChunk, g.size() - b);
    add_rounded_double(into, g.subspan(b, n), fmt, r, log2_scale, index0 + b, x, q);
  }
}

void add_rounded(MassLost& into, std::span<const float> g, const Format& fmt, const Rounding& r, int log2_scale,
                 std::uint64_t index0) {
  std::vector<float> xf, qf;
  std::vector<double> xd, qd, widened;
  const bool float_path = fits_float(fmt);
  const float scale = std::ldexp(1.0f, std::clamp(log2_scale, -126, 127));
  for (std::size_t b = 0; b < g.size(); b += kChunk) {
    const std::size_t n = std::min(kChunk, g.size() - b);
    const auto chunk = g.subspan(b, n);
    bool exact = float_path && log2_scale >= -126 && log2_scale <= 127;
    if (exact && log2_scale == 0) {
      xf.assign(chunk.begin(), chunk.end());
    } else if (exact) {
      xf.resize(n);
      // The float product is 2^k * g exactly unless it left float's normal range or g was subnormal;
      // checked by undoing it, element by element.
      for (std::size_t i = 0; i < n && exact; ++i) {
        xf[i] = chunk[i] * scale;
        exact = !std::isfinite(chunk[i]) || (std::isfinite(xf[i]) && xf[i] / scale == chunk[i] &&
                                             (xf[i] == 0 || std::abs(xf[i]) >= 0x1p-126f));
      }
    }
    if (exact) {
      qf.resize(n);
      round_array(std::span<const float>(xf), std::span<float>(qf), fmt, r, nullptr, one_thread(index0 + b));
      into.add(std::span<const float>(xf), std::span<const float>(qf));
    } else {
      widened.assign(chunk.begin(), chunk.end());
      add_rounded_double(into, widened, fmt, r, log2_scale, index0 + b, xd, qd);
    }
  }
}

nlohmann::json mass_lost_json(const MassLostStats& s) {
  return {{"mass_nonzero_num", s.nonzero_finite},
          {"mass_flushed_num", s.flushed},
          {"l1_lost", s.l1_lost},
          {"l2sq_lost", s.l2sq_lost},
          {"cosine", std::isnan(s.cosine) ? nlohmann::json() : nlohmann::json(s.cosine)},
          {"push_down", std::isnan(s.push_down) ? nlohmann::json() : nlohmann::json(s.push_down)},
          {"lost_bias", std::isnan(s.lost_bias) ? nlohmann::json() : nlohmann::json(s.lost_bias)}};
}

}  // namespace mpsim::analysis
