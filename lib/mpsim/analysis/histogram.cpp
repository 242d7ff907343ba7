#include "mpsim/analysis/histogram.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <string>

#include "mpsim/error.hpp"

namespace mpsim::analysis {

namespace {

// A float's "key": 0 for ±0, bit_width(mantissa) = 1..23 for subnormals, exponent field + 23 = 24..277
// for normals, 278 for ±inf, 279 for NaN. For every finite non-zero value the binade is key - 150:
// a subnormal m * 2^-149 has its leading one at bit bit_width(m) - 1, a normal has binade e - 127.
constexpr int kFloatKeys = 280;
constexpr int kFloatKeyBias = 150;
constexpr int kFloatInfKey = 278;
constexpr int kFloatNanKey = 279;

inline unsigned float_key(std::uint32_t u) {
  const unsigned e = (u >> 23) & 0xffu;
  const std::uint32_t m = u & 0x7fffffu;
  unsigned key = e != 0 ? e + 23 : static_cast<unsigned>(std::bit_width(m));
  key += (e == 0xffu) & (m != 0);
  return key + (u >> 31) * kFloatKeys;  // sign: a second table of keys
}

}  // namespace

int binade(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  return static_cast<int>(float_key(u & 0x7fffffffu)) - kFloatKeyBias;
}

int binade(double x) {
  const std::uint64_t u = std::bit_cast<std::uint64_t>(x);
  const int e = static_cast<int>((u >> 52) & 0x7ff);
  const std::uint64_t m = u & 0xfffffffffffffull;
  // Subnormal m * 2^-1074: leading one at bit bit_width(m) - 1.
  return e != 0 ? e - 1023 : static_cast<int>(std::bit_width(m)) - 1 - 1074;
}

Log2Histogram make_histogram(int min_exp, int max_exp) {
  if (max_exp < min_exp - 1) throw Error("histogram: max_exp below min_exp");
  Log2Histogram h;
  h.min_exp = min_exp;
  h.max_exp = max_exp;
  h.bins.assign(static_cast<std::size_t>(max_exp - min_exp + 1), 0);
  return h;
}

Log2Histogram make_float_histogram() { return make_histogram(-149, 127); }
Log2Histogram make_double_histogram() { return make_histogram(-1074, 1023); }

void Log2Histogram::widen(int lo, int hi) {
  if (lo > hi) return;
  if (bins.empty()) {
    min_exp = lo;
    max_exp = hi;
    bins.assign(static_cast<std::size_t>(hi - lo + 1), 0);
    return;
  }
  if (lo < min_exp) {
    bins.insert(bins.begin(), static_cast<std::size_t>(min_exp - lo), 0);
    min_exp = lo;
  }
  if (hi > max_exp) {
    bins.insert(bins.end(), static_cast<std::size_t>(hi - max_exp), 0);
    max_exp = hi;
  }
}

void Log2Histogram::add(std::span<const float> values) {
  // Two interleaved tables so that runs of values in one binade do not serialise on one counter.
  std::array<std::uint64_t, 2 * kFloatKeys> t0{}, t1{};
  const float* p = values.data();
  const std::size_t n = values.size();
  std::size_t i = 0;
  for (; i + 2 <= n; i += 2) {
    ++t0[float_key(std::bit_cast<std::uint32_t>(p[i]))];
    ++t1[float_key(std::bit_cast<std::uint32_t>(p[i + 1]))];
  }
  for (; i < n; ++i) ++t0[float_key(std::bit_cast<std::uint32_t>(p[i]))];
  for (int s = 0; s < 2; ++s) {
    const std::uint64_t* a = t0.data() + s * kFloatKeys;
    const std::uint64_t* b = t1.data() + s * kFloatKeys;
    zero += a[0] + b[0];
    nan += a[kFloatNanKey] + b[kFloatNanKey];
    (s ? neg_inf : pos_inf) += a[kFloatInfKey] + b[kFloatInfKey];
    for (int k = 1; k < kFloatInfKey; ++k) {
      const std::uint64_t c = a[k] + b[k];
      if (c == 0) continue;
      const int e = k - kFloatKeyBias;
      if (e < min_exp || e > max_exp) widen(std::min(e, min_exp), std::max(e, max_exp));
      bins[static_cast<std::size_t>(e - min_exp)] += c;
    }
  }
}

void Log2Histogram::add(double x) {
  if (std::isnan(x)) {
    ++nan;
    return;
  }
  if (x == 0) {
    ++zero;
    return;
  }
  if (std::isinf(x)) {
    ++(x > 0 ? pos_inf : neg_inf);
    return;
  }
  const int e = binade(x);
  if (e < min_exp || e > max_exp) widen(std::min(e, min_exp), std::max(e, max_exp));
  ++bins[static_cast<std::size_t>(e - min_exp)];
}

void Log2Histogram::add(std::span<const double> values) {
  // Count into a table over double's whole range, then fold: no range check per element.
  std::vector<std::uint64_t> t(2048 + 64 + 2, 0);
  // index: exponent field 1..2046 -> 64 + e; subnormal bit_width 1..52 -> bit_width; 0 -> zero;
  // 64 + 2047 -> inf/NaN (resolved separately, rare).
  for (const double x : values) {
    const std::uint64_t u = std::bit_cast<std::uint64_t>(x);
    const unsigned e = static_cast<unsigned>((u >> 52) & 0x7ff);
    if (e == 0x7ff) {
      add(x);
      continue;
    }
    const std::uint64_t m = u & 0xfffffffffffffull;
    ++t[e != 0 ? 64 + e : static_cast<unsigned>(std::bit_width(m))];
  }
  zero += t[0];
  for (std::size_t k = 1; k < t.size(); ++k) {
    if (t[k] == 0) continue;
    // Normal: binade e - 1023; subnormal with leading one at bit w-1: binade w - 1 - 1074.
    const int e = k >= 64 ? static_cast<int>(k) - 64 - 1023 : static_cast<int>(k) - 1075;
    if (e < min_exp || e > max_exp) widen(std::min(e, min_exp), std::max(e, max_exp));
    bins[static_cast<std::size_t>(e - min_exp)] += t[k];
  }
}

Log2Histogram& Log2Histogram::operator+=(const Log2Histogram& o) {
  if (!o.bins.empty()) widen(o.min_exp, o.max_exp);
  for (std::size_t i = 0; i < o.bins.size(); ++i) bins[static_cast<std::size_t>(o.min_exp - min_exp) + i] += o.bins[i];
  zero += o.zero;
  nan += o.nan;
  neg_inf += o.neg_inf;
  pos_inf += o.pos_inf;
  return *this;
}

std::uint64_t Log2Histogram::finite_nonzero() const {
  std::uint64_t s = 0;
  for (const auto c : bins) s += c;
  return s;
}

std::uint64_t Log2Histogram::total() const { return finite_nonzero() + zero + nan + neg_inf + pos_inf; }

std::uint64_t Log2Histogram::count(int n) const {
  if (n < min_exp || n > max_exp) return 0;
  return bins[static_cast<std::size_t>(n - min_exp)];
}

int Log2Histogram::lowest_nonempty() const {
  for (std::size_t i = 0; i < bins.size(); ++i)
    if (bins[i]) return min_exp + static_cast<int>(i);
  return 0;
}

int Log2Histogram::highest_nonempty() const {
  for (std::size_t i = bins.size(); i-- > 0;)
    if (bins[i]) return min_exp + static_cast<int>(i);
  return -1;
}

nlohmann::json Log2Histogram::to_json() const {
  nlohmann::json b = nlohmann::json::array();
  for (std::size_t i = 0; i < bins.size(); ++i)
    if (bins[i]) b.push_back({min_exp + static_cast<int>(i), bins[i]});
  return {{"min_exp", min_exp}, {"max_exp", max_exp}, {"zero", zero},     {"nan", nan},
          {"neg_inf", neg_inf}, {"pos_inf", pos_inf}, {"total", total()}, {"bins", b}};
}

Log2Histogram Log2Histogram::from_json(const nlohmann::json& j) {
  try {
    Log2Histogram h = make_histogram(j.at("min_exp").get<int>(), j.at("max_exp").get<int>());
    h.zero = j.at("zero").get<std::uint64_t>();
    h.nan = j.at("nan").get<std::uint64_t>();
    h.neg_inf = j.at("neg_inf").get<std::uint64_t>();
    h.pos_inf = j.at("pos_inf").get<std::uint64_t>();
    for (const auto& b : j.at("bins")) {
      const int n = b.at(0).get<int>();
      if (n < h.min_exp || n > h.max_exp)
        throw Error("histogram JSON: bin " + std::to_string(n) + " outside min_exp..max_exp");
      h.bins[static_cast<std::size_t>(n - h.min_exp)] += b.at(1).get<std::uint64_t>();
    }
    return h;
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("histogram JSON: ") + e.what());
  }
}

}  // namespace mpsim::analysis

namespace mpsim::analysis {

std::vector<std::int64_t> Log2Histogram::counts() const {
  std::vector<std::int64_t> c(kCountsSize, 0);
  c[0] = static_cast<std::int64_t>(zero);
  c[1] = static_cast<std::int64_t>(nan);
  c[2] = static_cast<std::int64_t>(neg_inf);
  c[3] = static_cast<std::int64_t>(pos_inf);
  for (int n = std::max(min_exp, kCountsMinExp); n <= std::min(max_exp, kCountsMaxExp); ++n)
    c[static_cast<std::size_t>(4 + n - kCountsMinExp)] = static_cast<std::int64_t>(count(n));
  return c;
}

Log2Histogram Log2Histogram::from_counts(std::span<const std::int64_t> c) {
  if (c.size() != kCountsSize)
    throw Error("histogram counts: " + std::to_string(c.size()) + " values, the layout has " +
                std::to_string(kCountsSize));
  for (std::size_t i = 0; i < c.size(); ++i)
    if (c[i] < 0)
      throw Error("histogram counts: value " + std::to_string(i) + " is negative (" + std::to_string(c[i]) + ")");
  Log2Histogram h = make_float_histogram();
  h.zero = static_cast<std::uint64_t>(c[0]);
  h.nan = static_cast<std::uint64_t>(c[1]);
  h.neg_inf = static_cast<std::uint64_t>(c[2]);
  h.pos_inf = static_cast<std::uint64_t>(c[3]);
  for (int n = kCountsMinExp; n <= kCountsMaxExp; ++n) {
    const auto v = static_cast<std::uint64_t>(c[static_cast<std::size_t>(4 + n - kCountsMinExp)]);
    if (v == 0) continue;
    h.widen(std::min(n, h.min_exp), std::max(n, h.max_exp));
    h.bins[static_cast<std::size_t>(n - h.min_exp)] = v;
  }
  return h;
}

}  // namespace mpsim::analysis
