// Tests of lib/mpsim/analysis/range_counter.hpp: the counts at every power-of-two scale against a
// brute-force scalar loop (round_bits of x·2^k, classified here from the decoded value), and against
// the bulk engine's Stats, on random and adversarial inputs (values exactly on every rounding boundary
// of each format at each scale, and their float neighbours).
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"
#include "sanitized.hpp"

using namespace mpsim;
using mpsim::analysis::RangeCounter;
using mpsim::analysis::RangeCounts;

namespace {

struct Brute {
  std::uint64_t zero_in = 0, nan_in = 0, inf_in = 0, underflow = 0, subnormal = 0, normal = 0, overflow = 0;
  double lost_sum = 0;
};

// Classifies by the decoded value (independent of the bit-level classification in the library).
template <class T>
Brute brute(const std::vector<T>& v, const Format& f, const Rounding& r, int k) {
  Brute b;
  for (const T x : v) {
    if (std::isnan(x)) {
      ++b.nan_in;
      continue;
    }
    if (std::isinf(x)) {
      ++b.inf_in;
      continue;
    }
    if (x == 0) {
      ++b.zero_in;
      continue;
    }
    const double xs = std::ldexp(static_cast<double>(x), k);
    const double y = decode(round_bits(xs, f, r), f);
    if (y == 0) ++b.underflow;
    else if (std::isnan(y) || std::isinf(y)) ++b.overflow;
    else if (f.saturates() && std::fabs(y) == f.max_finite && std::fabs(xs) > f.max_finite) ++b.overflow;
    else if (std::fabs(y) < f.min_normal) {
      ++b.subnormal;
      b.lost_sum += std::min(f.emin - std::ilogb(xs), f.man_bits);
    } else ++b.normal;
  }
  return b;
}

bool same(const RangeCounts& c, const Brute& b) {
  return c.zero_in == b.zero_in && c.nan_in == b.nan_in && c.inf_in == b.inf_in && c.underflow == b.underflow &&
         c.subnormal == b.subnormal && c.normal == b.normal && c.overflow == b.overflow &&
         c.subnormal_bits_lost_sum == b.lost_sum;
}

std::vector<float> log_uniform(std::size_t n, std::uint64_t seed, double lo_exp, double hi_exp) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> e(lo_exp, hi_exp);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i & 1 ? -1 : 1) * std::exp2(e(g)));
  return v;
}

// Every rounding boundary of f at every scale 2^-k, k in -8..32, with its float neighbours.
std::vector<float> boundaries(const Format& f) {
  std::vector<float> v;
  const double ulp_max = std::ldexp(1.0, f.emax - f.man_bits);
  const double pts[] = {
      f.min_subnormal / 2, f.min_subnormal,    f.min_subnormal * 1.5,      f.min_normal - f.min_subnormal / 2,
      f.min_normal,        f.max_finite,       f.max_finite + ulp_max / 2, f.max_finite + ulp_max,
      2 * f.max_finite,    f.min_subnormal / 4};
  for (int k = -8; k <= 32; ++k)
    for (const double p : pts) {
      const float x = static_cast<float>(std::ldexp(p, -k));
      if (!std::isfinite(x) || x == 0) continue;
      for (const float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, 1e38f)}) {
        v.push_back(y);
        v.push_back(-y);
      }
    }
  return v;
}

const std::vector<Format>& formats() {
  static const std::vector<Format> all = {
      fp16(), bf16(), fp8_e4m3(), fp8_e5m2(), fp8_e4m3fnuz(), tf32(),
      make_format("e5m10_flush", 5, 10, 15, true, NanEncoding::ieee, Subnormals::flush),
      make_format("e4m3_sat", 4, 3, 7, false, NanEncoding::all_ones, Subnormals::keep, Overflow::saturate),
      make_format("e3m1", 3, 1, 3),
      // The OCP MX element types (no inf, no NaN: overflow saturates) and ml_dtypes' other fp8 types.
      float4_e2m1fn(), float6_e2m3fn(), float6_e3m2fn(), float8_e4m3b11fnuz(), float8_e3m4()};
  return all;
}

}  // namespace

TEST_CASE("counts at every scale 2^-8..2^32 equal the brute force, every format and deterministic mode",
          "[range_counter]") {
  // Under the sanitizers (tests/sanitized.hpp) 500 random values and every 4th / 9th scale: this file took
  // 54 s there in full.
  const auto random = log_uniform(kSanitized ? 500 : 4000, 11, -160, 130);
  std::size_t checks = 0, bad = 0;
  for (const Format& f : formats()) {
    std::vector<float> v = boundaries(f);
    v.insert(v.end(), random.begin(), random.end());
    v.push_back(0.0f);
    v.push_back(-0.0f);
    v.push_back(std::numeric_limits<float>::quiet_NaN());
    v.push_back(-std::numeric_limits<float>::infinity());
    v.push_back(std::numeric_limits<float>::denorm_min());
    for (const RoundingMode m : {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up,
                                 RoundingMode::down, RoundingMode::nearest_away, RoundingMode::to_odd}) {
      const Rounding r = Rounding::of(m);
      RangeCounter c(f, r);
      c.add(v);
      for (int k = -8; k <= 32; k += (m == RoundingMode::nearest_even ? 1 : 3) * (kSanitized ? 3 : 1)) {
        const RangeCounts got = c.at_scale(k);
        const Brute want = brute(v, f, r, k);
        ++checks;
        if (!same(got, want)) {
          ++bad;
          UNSCOPED_INFO(f.name << " " << ieee_name(m) << " 2^" << k << ": underflow " << got.underflow << " vs "
                               << want.underflow << ", subnormal " << got.subnormal << " vs " << want.subnormal
                               << ", normal " << got.normal << " vs " << want.normal << ", overflow " << got.overflow
                               << " vs " << want.overflow << ", lost " << got.subnormal_bits_lost_sum << " vs "
                               << want.lost_sum);
        }
      }
    }
  }
  WARN("range counter: " << checks << " (format, mode, scale) cases against brute force, mismatches " << bad);
  CHECK(bad == 0);
}

TEST_CASE("double input, merged streams and the histogram agree with brute force and the bulk engine",
          "[range_counter]") {
  const Format& f = fp16();
  const auto a = log_uniform(20000, 5, -40, 20);
  const auto b = boundaries(f);
  std::vector<double> bd(b.begin(), b.end());
  for (double& x : bd) x *= 1 + std::ldexp(1.0, -40);  // significand bits beyond float's
  RangeCounter ca(f), cb(f), call(f);
  ca.add(a);
  cb.add(bd);
  call = ca;
  call += cb;
  std::size_t bad = 0;
  for (int k = -8; k <= 32; ++k) {
    const RangeCounts got = call.at_scale(k);
    const Brute wa = brute(a, f, {}, k), wb = brute(bd, f, {}, k);
    bad += got.underflow != wa.underflow + wb.underflow || got.subnormal != wa.subnormal + wb.subnormal ||
           got.overflow != wa.overflow + wb.overflow || got.normal != wa.normal + wb.normal;
    // The bulk engine's Stats on the scaled float values.
    std::vector<float> scaled(a.size()), out(a.size());
    bool exact_scaling = true;
    for (std::size_t i = 0; i < a.size(); ++i) {
      scaled[i] = std::ldexp(a[i], k);
      exact_scaling &= std::ldexp(static_cast<double>(a[i]), k) == static_cast<double>(scaled[i]);
    }
    if (exact_scaling) {
      Stats st;
      round_array(scaled, out, f, {}, &st);
      const RangeCounts ga = ca.at_scale(k);
      bad += st.underflow != ga.underflow || st.subnormal != ga.subnormal || st.overflow != ga.overflow;
    }
  }
  WARN("range counter: float + double streams merged, 41 scales, mismatches " << bad);
  CHECK(bad == 0);
  mpsim::analysis::Log2Histogram h = mpsim::analysis::make_float_histogram();
  h.add(a);
  h.add(bd);
  CHECK(call.histogram() == h);
  double amax = 0, amin = 1e300;
  for (const float x : a) amax = std::max(amax, double(std::fabs(x))), amin = std::min(amin, double(std::fabs(x)));
  for (const double x : bd) amax = std::max(amax, std::fabs(x)), amin = std::min(amin, std::fabs(x));
  CHECK(call.amax() == amax);
  CHECK(call.amin_nonzero() == amin);
}

TEST_CASE("adversarial: all subnormal, one exponent, NaN only, alternating signs", "[range_counter]") {
  std::vector<std::vector<float>> cases;
  std::mt19937 g(3);
  {
    std::vector<float> v;
    for (std::uint32_t m = 1; m < (1u << 23); m += 997) v.push_back(std::bit_cast<float>(m));
    cases.push_back(v);
  }
  {
    std::vector<float> v(5000);
    for (auto& x : v)
      x = std::bit_cast<float>(static_cast<std::uint32_t>(0x33000000u | (g() & 0x807fffffu)));  // ±[2^-25, 2^-24)
    cases.push_back(v);
  }
  cases.push_back(std::vector<float>(100, std::numeric_limits<float>::quiet_NaN()));
  {
    std::vector<float> v(1001);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, -25);
    cases.push_back(v);
  }
  std::size_t bad = 0, checks = 0;
  for (const auto& v : cases)
    for (const Format& f : formats())
      for (const RoundingMode m : {RoundingMode::nearest_even, RoundingMode::up, RoundingMode::down}) {
        RangeCounter c(f, Rounding::of(m));
        c.add(v);
        for (int k = -8; k <= 32; k += 4) {
          ++checks;
          bad += !same(c.at_scale(k), brute(v, f, Rounding::of(m), k));
        }
      }
  WARN("range counter adversarial: " << checks << " cases, mismatches " << bad);
  CHECK(bad == 0);
}

TEST_CASE("fp16 boundaries: the tie below the smallest subnormal and the overflow threshold", "[range_counter]") {
  RangeCounter c(fp16());
  // Rank 1 (non-zero) starts in binade -25 above the tie 2^-25 (which goes to zero, the even choice).
  CHECK(c.boundary(0, 1).binade == -25);
  CHECK(c.boundary(0, 1).threshold == 1);
  // Overflow starts at 65520 = 2^15 * (1 + 2047/2048).
  CHECK(c.boundary(0, 3).binade == 15);
  CHECK(c.boundary(0, 3).threshold == (std::uint64_t{2047} << 41));
  CHECK_THROWS_AS(RangeCounter(fp16(), Rounding::stochastic(1)), Error);
  CHECK_THROWS_AS(RangeCounter(fp64()), Error);
}

TEST_CASE("the scalar and AVX2 loops count alike: specials at every position, every length, concentrated data",
          "[range_counter]") {
  if (!path_available(Path::avx2)) {
    WARN("no AVX2 on this CPU: only the scalar loop exists here");
    return;
  }
  std::mt19937_64 g(17);
  const float specials[] = {std::numeric_limits<float>::denorm_min(),
                            -std::numeric_limits<float>::denorm_min(),
                            std::bit_cast<float>(0x007fffffu),
                            std::bit_cast<float>(0x807fffffu),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::bit_cast<float>(0xff800001u),
                            0.0f,
                            -0.0f,
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::min()};
  std::vector<std::vector<float>> cases;
  for (const std::size_t n :
       {std::size_t{511}, std::size_t{512}, std::size_t{513}, std::size_t{1000}, std::size_t{4099}}) {
    auto v = log_uniform(n, n, -150, 128);
    cases.push_back(v);
    // One special value at each position of a sixteen (the vector loop's step), then two.
    for (std::size_t at = 0; at < 17 && at < n; ++at) {
      auto w = v;
      w[at + n / 2 - (n / 2) % 16] = specials[at % std::size(specials)];
      if (at + 40 < n) w[at + 40] = specials[(at + 5) % std::size(specials)];
      cases.push_back(w);
    }
  }
  cases.push_back(std::vector<float>(3000, 1.5f));                               // one bin only
  cases.push_back(std::vector<float>(3000, 0.0f));                               // zeros only
  cases.push_back(std::vector<float>(3000, std::bit_cast<float>(0x00000301u)));  // subnormal only
  {
    std::vector<float> v(70000);  // the significand thresholds of every format, and their neighbours
    for (auto& x : v) x = std::bit_cast<float>(static_cast<std::uint32_t>(g()));
    cases.push_back(v);
  }
  std::size_t bad = 0, checks = 0;
  for (const auto& v : cases)
    for (const Format& f : formats())
      for (const RoundingMode m : {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up}) {
        RangeCounter scalar(f, Rounding::of(m), Path::scalar), avx2(f, Rounding::of(m), Path::avx2);
        scalar.add(v);
        avx2.add(v);
        ++checks;
        bool same_counts = scalar.histogram() == avx2.histogram() && scalar.amax() == avx2.amax() &&
                           scalar.amin_nonzero() == avx2.amin_nonzero();
        for (int k = -8; k <= 32 && same_counts; k += 5) {
          const RangeCounts a = scalar.at_scale(k), b = avx2.at_scale(k);
          same_counts = a.underflow == b.underflow && a.subnormal == b.subnormal && a.normal == b.normal &&
                        a.overflow == b.overflow && a.zero_in == b.zero_in && a.nan_in == b.nan_in &&
                        a.inf_in == b.inf_in;
        }
        bad += !same_counts;
      }
  // And both against brute force on the longest case, where every bin of the fast table is in play.
  for (const Path p : {Path::scalar, Path::avx2}) {
    RangeCounter c(fp16(), {}, p);
    c.add(cases.back());
    for (int k = -8; k <= 32; k += 8) bad += !same(c.at_scale(k), brute(cases.back(), fp16(), {}, k));
  }
  WARN("range counter scalar vs avx2: " << checks << " (data, format, mode) cases, mismatches " << bad);
  CHECK(bad == 0);
  CHECK_THROWS_AS(RangeCounter(fp16(), {}, Path::avx512), Error);
}

TEST_CASE("the AVX2 pair loop: rare significands, blocks with special values, interleaved counters",
          "[range_counter]") {
  if (!path_available(Path::avx2)) {
    WARN("no AVX2 on this CPU: only the scalar loop exists here");
    return;
  }
  const RoundingMode modes[] = {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up,
                                RoundingMode::down, RoundingMode::nearest_away};
  // Significand fields the pair loop must correct: every format's thresholds (in float units) and
  // their neighbours, the top of the binade, exact powers of two.
  std::vector<std::uint32_t> rare_m = {0, 1, 0x7fffff, 0x7ffffe, 0x7fe000, 0x7ff000, 0x7fefff, 0x400000};
  for (const Format& f : formats())
    for (const RoundingMode m : modes) {
      const RangeCounter c(f, Rounding::of(m));
      for (int s = 0; s < 2; ++s)
        for (int rank = 1; rank <= 3; ++rank) {
          const std::uint64_t t = c.boundary(s, rank).threshold;
          const auto t23 = static_cast<std::uint32_t>(std::min<std::uint64_t>((t + (1u << 29) - 1) >> 29, 0x7fffff));
          for (const std::uint32_t d : {0u, 1u, 2u}) {
            rare_m.push_back(std::min<std::uint32_t>(t23 + d, 0x7fffff));
            if (t23 >= d) rare_m.push_back(t23 - d);
          }
        }
    }
  std::mt19937_64 g(29);
  const std::size_t n = 3 * 2048 + 16 * 5 + 7;  // three blocks, part of a fourth, a tail
  std::vector<float> base(n);
  for (auto& x : base) {
    const std::uint32_t r = static_cast<std::uint32_t>(g());
    const std::uint32_t sign = (r & 1u) << 31;
    const std::uint32_t e = 1 + static_cast<std::uint32_t>(g() % 254);  // normal floats
    std::uint32_t m = static_cast<std::uint32_t>(g()) & 0x7fffffu;
    switch ((r >> 1) % 8) {
      case 0: m = 0; break;
      case 1:
      case 2: m = rare_m[g() % rare_m.size()]; break;
      case 3: m |= 0x7fe000u; break;
      case 4: x = std::bit_cast<float>(sign); continue;  // ±0
      default: break;
    }
    x = std::bit_cast<float>(sign | e << 23 | m);
  }
  auto with = [&](std::initializer_list<std::size_t> at, float special) {
    auto v = base;
    for (const std::size_t i : at) v[i] = special;
    return v;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float sub = std::bit_cast<float>(0x00012345u);
  std::vector<std::vector<float>> cases = {base, with({2047, 6144}, inf), with({2048}, -nan), with({0, 6143}, sub),
                                           with({n - 1, n - 8}, nan)};
  {
    auto v = base;  // a special value in every block, and in the tail
    for (std::size_t i = 100; i < n; i += 700) v[i] = (i / 700) % 2 ? -inf : -sub;
    cases.push_back(v);
  }
  std::size_t checks = 0, bad = 0;
  for (std::size_t ci = 0; ci < cases.size(); ++ci) {
    const auto& v = cases[ci];
    for (const Format& f : formats())
      for (const RoundingMode m : modes) {
        RangeCounter scalar(f, Rounding::of(m), Path::scalar), avx2(f, Rounding::of(m), Path::avx2);
        scalar.add(v);
        // The AVX2 counter takes the data in two calls, with another counter's call between them (the
        // pair table is per thread and must be left clean by each call).
        const std::size_t half = 2048 + 48;
        avx2.add(std::span<const float>(v.data(), half));
        RangeCounter other(bf16(), Rounding::of(RoundingMode::up), Path::avx2);
        other.add(std::span<const float>(v.data() + 1000, 3000));
        avx2.add(std::span<const float>(v.data() + half, v.size() - half));
        ++checks;
        bool same_counts = scalar.histogram() == avx2.histogram() && scalar.amax() == avx2.amax() &&
                           scalar.amin_nonzero() == avx2.amin_nonzero() && scalar.total() == avx2.total();
        for (int k = -8; k <= 32 && same_counts; ++k) {
          const RangeCounts a = scalar.at_scale(k), b = avx2.at_scale(k);
          same_counts = a.underflow == b.underflow && a.subnormal == b.subnormal && a.normal == b.normal &&
                        a.overflow == b.overflow && a.zero_in == b.zero_in && a.nan_in == b.nan_in &&
                        a.inf_in == b.inf_in && a.subnormal_bits_lost_sum == b.subnormal_bits_lost_sum;
        }
        // And against brute force on two of the cases.
        if (ci == 1 || ci == 5)
          for (int k = -8; k <= 32 && same_counts; k += 8)
            same_counts = same(avx2.at_scale(k), brute(v, f, Rounding::of(m), k));
        if (!same_counts) UNSCOPED_INFO("case " << ci << " " << f.name << " " << ieee_name(m));
        bad += !same_counts;
      }
  }
  WARN("range counter pair loop vs scalar: " << checks << " (data, format, mode) cases, mismatches " << bad);
  CHECK(bad == 0);
}

TEST_CASE("counts(): the flat int64 layout sums like the counters and rebuilds them", "[range_counter]") {
  // A counter per "process", merged through their count vectors (sum) and amax / amin (max / min), must
  // answer every scale as one counter fed everything, and as the brute force.
  for (const Format& f : {fp16(), fp8_e4m3(), bf16()}) {
    const Rounding r = Rounding::of(RoundingMode::toward_zero);
    const auto a = log_uniform(5000, 1, -40, 20);
    std::vector<double> b(300);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = std::ldexp(1.0 + double(i) / 300, -60 + int(i % 100));
    RangeCounter ca(f, r), cb(f, r), whole(f, r);
    ca.add(a);
    cb.add(b);
    whole.add(a);
    whole.add(b);
    const auto va = ca.counts(), vb = cb.counts();
    REQUIRE(va.size() == ca.counts_size());
    std::vector<std::int64_t> sum(va.size());
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = va[i] + vb[i];
    const RangeCounter merged = RangeCounter::from_counts(f, r, sum, std::max(ca.amax(), cb.amax()),
                                                          std::min(ca.amin_nonzero(), cb.amin_nonzero()));
    std::vector<double> all(a.begin(), a.end());
    all.insert(all.end(), b.begin(), b.end());
    for (int k = -8; k <= 32; ++k) {
      const Brute want = brute(all, f, r, k);
      INFO(f.name << " scale 2^" << k);
      CHECK(same(merged.at_scale(k), want));
      CHECK(same(whole.at_scale(k), want));
    }
    CHECK(merged.histogram() == whole.histogram());
    CHECK(merged.amax() == whole.amax());
    CHECK(merged.amin_nonzero() == whole.amin_nonzero());
    CHECK(merged.counts() == whole.counts());
    // A float-only counter rebuilds without a double table, as it was.
    CHECK(RangeCounter::from_counts(f, r, va, ca.amax(), ca.amin_nonzero()).histogram() == ca.histogram());
  }
  CHECK_THROWS(RangeCounter::from_counts(fp16(), {}, std::vector<std::int64_t>(3, 0), 0, 0));
  std::vector<std::int64_t> bad(RangeCounter(fp16()).counts_size(), 0);
  bad[5] = -2;
  CHECK_THROWS(RangeCounter::from_counts(fp16(), {}, bad, 0, 0));
}

TEST_CASE("add_each: one pass into several counters equals each counter's own add, every pair of formats",
          "[range_counter]") {
  // Pairs (a, b) of formats under modes whose thresholds differ per sign (up) or not (nearest-even, toward
  // zero): counters filled by one add_each must hold the counts their own add() gives, bit for bit; and a
  // pass into every format at once (more counters than one threshold union holds) as well.
  std::mt19937_64 g(41);
  auto random_bits = [&](std::size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = std::bit_cast<float>(static_cast<std::uint32_t>(g()));
    return v;
  };
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  auto with_specials = [&](std::vector<float> v) {
    for (std::size_t i = 7; i < v.size(); i += 613)
      v[i] = (i / 613) % 3 == 0 ? inf : (i / 613) % 3 == 1 ? -nan : std::bit_cast<float>(0x80012345u);
    return v;
  };
  const std::vector<Format>& fs = formats();
  std::vector<std::vector<float>> common = {log_uniform(300, 3, -150, 128),  // below the fast table's minimum
                                            with_specials(log_uniform(4099, 4, -60, 30)), random_bits(2100)};
  std::size_t checks = 0, bad = 0, values = 0;
  auto compare = [&](std::vector<RangeCounter>& alone, std::vector<RangeCounter>& together, const std::vector<float>& v,
                     Path path) {
    std::vector<RangeCounter*> ptrs;
    for (auto& c : together) ptrs.push_back(&c);
    RangeCounter::add_each(ptrs, v, path);
    for (std::size_t i = 0; i < alone.size(); ++i) {
      alone[i].add(v);
      const bool ok = alone[i].counts() == together[i].counts() && alone[i].amax() == together[i].amax() &&
                      alone[i].amin_nonzero() == together[i].amin_nonzero();
      if (!ok)
        UNSCOPED_INFO(alone[i].format().name << " " << ieee_name(alone[i].rounding().mode) << ", n " << v.size());
      bad += !ok;
      ++checks;
      values += v.size();
    }
  };
  const std::vector<Path> paths =
      path_available(Path::avx2) ? std::vector<Path>{Path::scalar, Path::avx2} : std::vector<Path>{Path::scalar};
  for (std::size_t a = 0; a < fs.size(); ++a)
    for (std::size_t b = a; b < fs.size(); ++b)
      for (const RoundingMode m : {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up}) {
        // Both formats' rounding boundaries at every scale, and their float neighbours, with the common data.
        std::vector<float> edges = boundaries(fs[a]);
        const auto eb = boundaries(fs[b]);
        edges.insert(edges.end(), eb.begin(), eb.end());
        for (const Path p : paths) {
          const Rounding r = Rounding::of(m);
          // The second counter in another mode (down): the union then mixes the two modes' thresholds.
          const Rounding rb = Rounding::of(a == b ? RoundingMode::down : m);
          std::vector<RangeCounter> alone = {RangeCounter(fs[a], r, p), RangeCounter(fs[b], rb, p)};
          std::vector<RangeCounter> together = alone;
          compare(alone, together, edges, p);
          for (const auto& v : common) compare(alone, together, v, p);
        }
      }
  // Every format at once, in two calls (the pair table is left clean between them), and against brute force.
  for (const Path p : paths) {
    std::vector<RangeCounter> alone;
    for (const Format& f : fs) alone.emplace_back(f, Rounding::of(RoundingMode::nearest_even), p);
    std::vector<RangeCounter> together = alone;
    for (const auto& v : common) compare(alone, together, v, p);
    std::vector<float> all;
    for (const auto& v : common) all.insert(all.end(), v.begin(), v.end());
    for (std::size_t i = 0; i < fs.size(); ++i)
      for (int k = -8; k <= 32; k += 8) bad += !same(together[i].at_scale(k), brute(all, fs[i], {}, k));
  }
  WARN("range counter add_each vs add: " << checks << " counters compared over " << values << " values, mismatches "
                                         << bad);
  CHECK(bad == 0);
}

TEST_CASE("clear(): a cleared counter counts as a new one, float and double input, specials included",
          "[range_counter]") {
  // The torch monitor reuses a site's counters from one sampled step to the next (RangeCounter::clear): after
  // clear() and new values, every count, amax and amin_nonzero must be those of a new counter given the new
  // values only.
  const float inf = std::numeric_limits<float>::infinity();
  auto first = log_uniform(5000, 9, -150, 128);
  first[17] = inf;
  first[99] = std::bit_cast<float>(0x00000301u);
  const std::vector<double> doubles = {1e-300, -3.5, 0.0, 7e30};
  auto second = log_uniform(3000, 10, -40, 10);
  second[5] = -inf;
  second[6] = std::numeric_limits<float>::quiet_NaN();
  std::size_t checks = 0, bad = 0;
  for (const Format& f : formats())
    for (const RoundingMode m : {RoundingMode::nearest_even, RoundingMode::up}) {
      RangeCounter reused(f, Rounding::of(m)), fresh(f, Rounding::of(m));
      reused.add(first);
      reused.add(doubles);
      reused.clear();
      bad += reused.total() != 0 || reused.amax() != 0 || reused.amin_nonzero() != 0;
      reused.add(second);
      fresh.add(second);
      bad += reused.counts() != fresh.counts() || reused.amax() != fresh.amax() ||
             reused.amin_nonzero() != fresh.amin_nonzero() || !(reused.histogram() == fresh.histogram());
      for (int k = -8; k <= 32; k += 5) {
        const RangeCounts a = reused.at_scale(k), b = fresh.at_scale(k);
        bad += a.underflow != b.underflow || a.subnormal != b.subnormal || a.normal != b.normal ||
               a.overflow != b.overflow || a.zero_in != b.zero_in || a.nan_in != b.nan_in || a.inf_in != b.inf_in;
      }
      ++checks;
    }
  WARN("range counter clear(): " << checks << " (format, mode) counters cleared and refilled, mismatches " << bad);
  CHECK(bad == 0);
}

TEST_CASE("the monitor's four formats in one pass: the fast-table loop against scalar and brute force, every mode",
          "[range_counter]") {
  // fp16, bf16, fp8_e4m3 and fp8_e5m2 in one add_each: a threshold union whose dominant interval holds too few
  // significands for the pair loop (e4m3's overflow threshold 1.8125), so the AVX2 path counts through the fast
  // table (pairs_pay), comparing against the live thresholds only, one set for both signs under nearest and
  // toward zero, one per sign under up and down. Every counter must hold what the scalar loop and brute force give.
  if (!path_available(Path::avx2)) {
    WARN("no AVX2 on this CPU: only the scalar loop exists here");
    return;
  }
  const std::vector<Format> four = {fp16(), bf16(), fp8_e4m3(), fp8_e5m2()};
  std::vector<float> v = log_uniform(6000, 23, -150, 128);
  for (const Format& f : four) {
    const auto b = boundaries(f);
    v.insert(v.end(), b.begin(), b.end());
  }
  // Specials inside the vector loop's blocks (a sixteen holding one is counted value by value).
  v[40] = std::numeric_limits<float>::infinity();
  v[41] = -std::numeric_limits<float>::quiet_NaN();
  v[300] = std::bit_cast<float>(0x80000005u);
  v[301] = -0.0f;
  std::size_t checks = 0, bad = 0;
  for (const RoundingMode m : {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up,
                               RoundingMode::down, RoundingMode::nearest_away}) {
    std::vector<RangeCounter> scalar, avx2;
    for (const Format& f : four) {
      scalar.emplace_back(f, Rounding::of(m), Path::scalar);
      avx2.emplace_back(f, Rounding::of(m), Path::avx2);
    }
    std::vector<RangeCounter*> ps, pa;
    for (std::size_t i = 0; i < four.size(); ++i) {
      ps.push_back(&scalar[i]);
      pa.push_back(&avx2[i]);
    }
    RangeCounter::add_each(ps, v, Path::scalar);
    RangeCounter::add_each(pa, v, Path::avx2);
    for (std::size_t i = 0; i < four.size(); ++i) {
      const bool ok = scalar[i].counts() == avx2[i].counts() && scalar[i].amax() == avx2[i].amax() &&
                      scalar[i].amin_nonzero() == avx2[i].amin_nonzero();
      if (!ok) UNSCOPED_INFO(four[i].name << " " << ieee_name(m));
      bad += !ok;
      for (int k = -8; k <= 32; k += 8) bad += !same(avx2[i].at_scale(k), brute(v, four[i], Rounding::of(m), k));
      ++checks;
    }
  }
  WARN("four formats in one pass, avx2 vs scalar and brute force: " << checks << " counters over " << v.size()
                                                                    << " values, mismatches " << bad);
  CHECK(bad == 0);
}
