#include "mpsim/analysis/underflow.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "mpsim/error.hpp"

namespace mpsim::analysis {

namespace {
double percent(std::uint64_t n, std::uint64_t of) { return of ? 100.0 * double(n) / double(of) : 0.0; }
}  // namespace

ScaleRecommendation recommend_scale(const RangeCounter& c, const UnderflowOptions& o) {
  ScaleRecommendation r;
  const double amax = c.amax();
  if (amax == 0) return r;
  const double top = amax * o.margin;
  const double max_finite = c.format().max_finite;
  int k = static_cast<int>(std::floor(std::log2(max_finite) - std::log2(top)));
  // log2 is inexact: settle k with exact power-of-two products.
  while (std::ldexp(top, k + 1) <= max_finite) ++k;
  while (std::ldexp(top, k) > max_finite) --k;
  r.found = true;
  r.log2_scale = k;
  r.counts = c.at_scale(k);
  r.rescued =
      static_cast<std::int64_t>(c.at_scale(o.log2_scale).underflow) - static_cast<std::int64_t>(r.counts.underflow);
  return r;
}

Sweep sweep(const RangeCounter& c, const UnderflowOptions& o) {
  Sweep s;
  std::uint64_t least = std::numeric_limits<std::uint64_t>::max();
  for (int k = o.sweep_lo; k <= o.sweep_hi; ++k) {
    s.rows.push_back(c.at_scale(k));
    const RangeCounts& rc = s.rows.back();
    if (rc.overflow != 0) continue;
    s.largest_safe = k;
    if (rc.underflow < least) {
      least = rc.underflow;
      s.best_lo = k;
    }
    if (rc.underflow == least) s.best_hi = k;
  }
  return s;
}

namespace {

// The largest k in [lo, hi] with pred(k), for pred true up to some k and false after it, pred(lo) true: a
// galloping search from `guess` (a few evaluations when the guess is close), then bisection. (The search
// python/mpsim/torch/monitor.py did in 0.2.0, moved here.)
template <class Pred>
int last_true(Pred pred, int lo, int hi, int guess) {
  const int g = std::clamp(guess, lo, hi);
  int a = 0, b = 0;  // pred(a) is true; b is the first k known false (hi + 1: none in range)
  if (pred(g)) {
    a = g;
    b = hi + 1;
    bool bounded = false;
    for (int step = 1; a + step <= hi; step *= 2) {
      if (!pred(a + step)) {
        b = a + step;
        bounded = true;
        break;
      }
      a += step;
    }
    if (!bounded && a < hi) {
      if (pred(hi)) return hi;
      b = hi;
    }
  } else {
    a = lo;
    b = g;
    for (int step = 1; b - step > lo; step *= 2) {
      if (pred(b - step)) {
        a = b - step;
        break;
      }
      b -= step;
    }
  }
  while (b - a > 1) {
    const int m = a + (b - a) / 2;
    if (pred(m)) a = m;
    else b = m;
  }
  return a;
}

// log2 of x rounded down / up, exactly (frexp, not log2's rounding); `otherwise` where x is 0, inf or NaN (a
// ratio of extremes out of double's range: then only the start of a search is lost).
int floor_log2(double x, int otherwise) {
  if (!(x > 0) || !std::isfinite(x)) return otherwise;
  int e = 0;
  std::frexp(x, &e);  // x = m 2^e, m in [0.5, 1)
  return e - 1;
}
int ceil_log2(double x, int otherwise) {
  if (!(x > 0) || !std::isfinite(x)) return otherwise;
  int e = 0;
  const double m = std::frexp(x, &e);
  return m == 0.5 ? e - 1 : e;
}

}  // namespace

std::optional<ScaleWindow> best_window(const RangeCounter& c, int lo, int hi) {
  if (lo > hi) throw Error("best_window: lo " + std::to_string(lo) + " exceeds hi " + std::to_string(hi));
  // The counts at a scale, each asked once (at_scale walks the whole layout).
  std::map<int, std::pair<std::uint64_t, std::uint64_t>> memo;  // k -> (overflow, underflow)
  auto at = [&](int k) {
    auto it = memo.find(k);
    if (it == memo.end()) {
      const RangeCounts r = c.at_scale(k);
      it = memo.emplace(k, std::pair{r.overflow, r.underflow}).first;
    }
    return it->second;
  };
  if (at(lo).first != 0) return std::nullopt;
  // The searches start where amax and the smallest non-zero magnitude put the format's edges (any start gives
  // the same answer; a close one saves evaluations).
  const Format& f = c.format();
  const double amax = c.amax(), amin = c.amin_nonzero();
  const int guess_hi = amax > 0 ? floor_log2(f.max_finite / amax, hi) : hi;
  const int top = last_true([&](int k) { return at(k).first == 0; }, lo, hi, guess_hi);
  const std::uint64_t least = at(top).second;
  if (at(lo).second == least) return ScaleWindow{lo, top};
  const int guess_lo = amin > 0 ? ceil_log2(f.min_subnormal / amin, lo + 1) - 1 : lo;
  // The last k with more underflow than the top's (lo is one), plus one.
  return ScaleWindow{last_true([&](int k) { return at(k).second > least; }, lo, top, guess_lo) + 1, top};
}

nlohmann::json range_stats_json(const RangeCounts& c) {
  return {{"numel", c.total},
          {"nonzero_finite_num", c.nonzero_finite},
          {"underflows%", percent(c.underflow, c.nonzero_finite)},
          {"underflows_num", c.underflow},
          {"subnormals%", percent(c.subnormal, c.nonzero_finite)},
          {"subnormals_num", c.subnormal},
          {"overflows%", percent(c.overflow, c.nonzero_finite)},
          {"overflows_num", c.overflow},
          {"subnormal_bits_lost_mean", c.subnormal_bits_lost_mean()},
          {"subnormal_bits_lost_max", c.subnormal_bits_lost_max},
          {"zero_num", c.zero_in},
          {"nan_num", c.nan_in},
          {"inf_num", c.inf_in}};
}

nlohmann::json amax_stats_json(const RangeCounter& c) {
  nlohmann::json j = {{"cur_amax", c.amax()}, {"nonzero_amin", c.amin_nonzero()}};
  j["dynamic_range"] = c.amax() > 0 ? std::log2(c.amax()) - std::log2(c.amin_nonzero()) : 0.0;
  return j;
}

nlohmann::json hist_stats_json(const RangeCounter& c, int log2_scale) {
  nlohmann::json j = range_stats_json(c.at_scale(log2_scale));
  j.update(amax_stats_json(c));
  j["histogram"] = c.histogram().to_json();
  return j;
}

nlohmann::json underflow_report_json(const std::string& tensor, const RangeCounter& c, const UnderflowOptions& o,
                                     bool with_sweep) {
  nlohmann::json j = {{"tensor", tensor},
                      {"format", c.format().name},
                      {"rounding", std::string(ieee_name(c.rounding().mode))},
                      {"scale", std::ldexp(1.0, o.log2_scale)},
                      {"log2_scale", o.log2_scale}};
  j.update(range_stats_json(c.at_scale(o.log2_scale)));
  j.update(amax_stats_json(c));
  const ScaleRecommendation rec = recommend_scale(c, o);
  if (rec.found) {
    nlohmann::json r = {
        {"scale", std::ldexp(1.0, rec.log2_scale)},
        {"log2_scale", rec.log2_scale},
        {"margin", o.margin},
        {"rescued_num", rec.rescued},
        {"rescued%",
         rec.counts.nonzero_finite ? 100.0 * double(rec.rescued) / double(rec.counts.nonzero_finite) : 0.0}};
    r.update(range_stats_json(rec.counts));
    j["recommended"] = r;
  } else {
    j["recommended"] = nullptr;
  }
  if (with_sweep) {
    const Sweep s = sweep(c, o);
    nlohmann::json rows = nlohmann::json::array();
    for (const RangeCounts& rc : s.rows) {
      nlohmann::json row = {{"scale", std::ldexp(1.0, rc.log2_scale)}, {"log2_scale", rc.log2_scale}};
      row.update(range_stats_json(rc));
      rows.push_back(row);
    }
    j["sweep"] = {
        {"rows", rows},
        {"largest_safe_log2_scale", s.largest_safe ? nlohmann::json(*s.largest_safe) : nlohmann::json()},
        {"best_window",
         s.best_lo ? nlohmann::json{{"lo_log2_scale", *s.best_lo},
                                    {"hi_log2_scale", *s.best_hi},
                                    {"underflows%",
                                     range_stats_json(
                                         s.rows[static_cast<std::size_t>(*s.best_lo - o.sweep_lo)])["underflows%"]}}
                   : nlohmann::json()}};
  }
  return j;
}

}  // namespace mpsim::analysis
