#include "mpsim/mma/accumulation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/mma/dot.hpp"
#include "mpsim/reference/reference.hpp"

namespace mpsim::mma {
namespace {

// Exact Σ a_k b_k + 0 as an integer multiple of 2^unit_exp, and the error of d against it in the same unit.
struct Exact {
  BigInt sum;
  int unit_exp;
};

int quantum_exp(const Format& f) { return f.emin - f.man_bits; }

Exact exact_dot(const std::vector<double>& a, const std::vector<double>& b, int unit_exp) {
  Exact e{0, unit_exp};
  for (std::size_t k = 0; k < a.size(); ++k) {
    const double p = a[k] * b[k];  // exact: two significands of at most 11 bits
    if (p == 0) continue;
    int ex = 0;
    const double f = std::frexp(std::fabs(p), &ex);
    const auto m = static_cast<std::int64_t>(std::ldexp(f, 53));  // |p| = m * 2^(ex - 53)
    BigInt t = m;
    const int sh = ex - 53 - unit_exp;
    t = sh >= 0 ? BigInt(t << sh) : BigInt(t >> -sh);  // unit_exp is at or below every product's last bit
    e.sum += p < 0 ? BigInt(-t) : t;
  }
  return e;
}

double to_double(const BigInt& x, int unit_exp) { return std::ldexp(static_cast<double>(x), unit_exp); }

AccumulationRow summarise(std::size_t k, std::vector<double> rel, const std::vector<double>& ulps) {
  AccumulationRow r;
  r.k = k;
  r.trials = static_cast<int>(ulps.size());
  if (!rel.empty()) {
    std::sort(rel.begin(), rel.end());
    double s = 0;
    for (double v : rel) s += v;
    r.rel_mean = s / static_cast<double>(rel.size());
    r.rel_median = rel[rel.size() / 2];
    r.rel_max = rel.back();
  }
  double s = 0;
  for (double v : ulps) {
    s += v;
    r.ulps_max = std::max(r.ulps_max, v);
  }
  r.ulps_mean = ulps.empty() ? 0 : s / static_cast<double>(ulps.size());
  return r;
}

nlohmann::json rows_json(const std::vector<AccumulationRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows)
    out.push_back({{"k", r.k},
                   {"trials", r.trials},
                   {"rel_mean", r.rel_mean},
                   {"rel_median", r.rel_median},
                   {"rel_max", r.rel_max},
                   {"ulps_mean", r.ulps_mean},
                   {"ulps_max", r.ulps_max}});
  return out;
}

}  // namespace

std::vector<std::size_t> parse_k_range(const std::string& text) {
  auto number = [&](const std::string& s) -> std::size_t {
    std::size_t pos = 0;
    unsigned long long v = 0;
    try {
      v = std::stoull(s, &pos);
    } catch (...) {
      pos = 0;
    }
    if (pos != s.size() || v == 0 || v > (1ull << 26))
      throw FieldError("k", "'" + text + "'", fmt::format("'{}' is not a length in 1..2^26", s));
    return static_cast<std::size_t>(v);
  };
  std::vector<std::size_t> ks;
  const auto dots = text.find("..");
  if (dots != std::string::npos) {
    const std::size_t lo = number(text.substr(0, dots)), hi = number(text.substr(dots + 2));
    if (lo > hi) throw FieldError("k", "'" + text + "'", "the range is empty");
    for (std::size_t k = lo; k <= hi; k *= 2) ks.push_back(k);
    return ks;
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    ks.push_back(number(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return ks;
}

AccumulationReport accumulation_error(const MatrixUnit& unit, const AccumulationOptions& options) {
  if (options.ks.empty()) throw Error("accumulation-error: no K given");
  if (options.trials < 1) throw Error("accumulation-error: trials must be at least 1");
  const bool tensors = !options.a_matrix.empty();
  if (!tensors && options.data != "uniform" && options.data != "normal")
    throw Error("accumulation-error: data '" + options.data + "' is not uniform or normal");
  if (tensors) {
    if (options.a_matrix.size() != options.rows * options.cols ||
        options.b_matrix.size() != options.cols * options.b_cols)
      throw Error("accumulation-error: the tensors' sizes do not match their shapes");
    for (const std::size_t K : options.ks)
      if (K > options.cols)
        throw Error(
            fmt::format("accumulation-error: K = {} is longer than the tensors' inner dimension {}", K, options.cols));
  }
  AccumulationReport rep;
  rep.unit = describe(unit);
  rep.options = options;
  MatrixUnit promoted = unit;
  if (options.promote_every > 0) {
    promoted.promote_every = options.promote_every;
    validate(promoted);
    rep.promoted_unit = describe(promoted);
  }
  // The exact sums' unit: below every product's last bit and the output's quantum.
  const int unit_exp = std::min(2 * quantum_exp(unit.input), quantum_exp(unit.output));
  for (const std::size_t K : options.ks) {
    std::vector<double> rel_f, ulps_f, rel_p, ulps_p;
    for (int t = 0; t < options.trials; ++t) {
      std::mt19937_64 rng(splitmix64(options.seed ^ splitmix64(K * 1000003ull + static_cast<std::uint64_t>(t))));
      std::uniform_real_distribution<double> uni(0.0, 1.0);
      std::normal_distribution<double> nor(0.0, 1.0);
      std::vector<double> a(K), b(K);
      if (tensors) {
        const std::size_t i = static_cast<std::size_t>(t) % options.rows;
        const std::size_t j = static_cast<std::size_t>(t) / options.rows % options.b_cols;
        for (std::size_t k = 0; k < K; ++k) {
          a[k] = options.a_matrix[i * options.cols + k];
          b[k] = options.b_matrix[k * options.b_cols + j];
        }
      } else {
        for (std::size_t k = 0; k < K; ++k) {
          a[k] = options.data == "uniform" ? uni(rng) : nor(rng);
          b[k] = options.data == "uniform" ? uni(rng) : nor(rng);
        }
      }
      round_to_format(a, unit.input);
      round_to_format(b, unit.input);
      const Exact ex = exact_dot(a, b, unit_exp);
      const double exact = to_double(ex.sum, unit_exp);
      auto measure = [&](const MatrixUnit& u, std::vector<double>& rel, std::vector<double>& ulps) {
        const double d = dot(u, a, b, 0.0);
        if (!std::isfinite(d)) throw Error(fmt::format("accumulation-error: K={} overflowed in {}", K, u.name));
        // d is a multiple of the output's quantum, so of 2^unit_exp: the error is exact in the same unit.
        int ed = 0;
        const double fd = std::frexp(d, &ed);
        BigInt di = static_cast<std::int64_t>(std::ldexp(fd, 53));
        const int sh = ed - 53 - unit_exp;
        di = sh >= 0 ? BigInt(di << sh) : BigInt(di >> -sh);
        BigInt err = di - ex.sum;
        if (err < 0) err = -err;
        const double abs_err = to_double(err, unit_exp);
        if (exact != 0) rel.push_back(abs_err / std::fabs(exact));
        int e2 = 0;
        std::frexp(exact == 0 ? u.output.min_normal : exact, &e2);
        const double ulp = std::ldexp(1.0, std::max(e2 - 1, u.output.emin) - u.output.man_bits);
        ulps.push_back(abs_err / ulp);
      };
      measure(unit, rel_f, ulps_f);
      if (options.promote_every > 0) measure(promoted, rel_p, ulps_p);
    }
    rep.fast.push_back(summarise(K, rel_f, ulps_f));
    if (options.promote_every > 0) rep.promoted.push_back(summarise(K, rel_p, ulps_p));
  }
  return rep;
}

std::string accumulation_json(const AccumulationReport& r) {
  nlohmann::json j = {{"schema", "mpsim-accumulation-error-1"},
                      {"unit", r.unit},
                      {"promoted_unit", r.promoted_unit},
                      {"promote_every", r.options.promote_every},
                      {"trials", r.options.trials},
                      {"seed", r.options.seed},
                      {"data", r.options.data},
                      {"fast", rows_json(r.fast)},
                      {"promoted", rows_json(r.promoted)}};
  return j.dump(2) + "\n";
}

std::string accumulation_csv(const AccumulationReport& r) {
  std::string out = "variant,k,trials,rel_mean,rel_median,rel_max,ulps_mean,ulps_max\n";
  auto rows = [&](const char* name, const std::vector<AccumulationRow>& v) {
    for (const auto& x : v)
      out += fmt::format("{},{},{},{:.9g},{:.9g},{:.9g},{:.9g},{:.9g}\n", name, x.k, x.trials, x.rel_mean, x.rel_median,
                         x.rel_max, x.ulps_mean, x.ulps_max);
  };
  rows("fast", r.fast);
  rows("promoted", r.promoted);
  return out;
}

}  // namespace mpsim::mma
