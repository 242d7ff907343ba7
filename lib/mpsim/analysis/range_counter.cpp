#include "mpsim/analysis/range_counter.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include "mpsim/analysis/detail/range_counter_kernel.hpp"
#include "mpsim/error.hpp"

namespace mpsim::analysis {

namespace {

// Binade keys, as in histogram.cpp: 0 for ±0, bit_width(significand field) for subnormals, exponent
// field + mant_bits for normals, then inf, then NaN; binade = key - key_bias for finite non-zero keys.
constexpr int kFloatKeys = 280, kFloatBias = 150;      // inf 278, NaN 279
constexpr int kDoubleKeys = 2101, kDoubleBias = 1075;  // inf 2099, NaN 2100

constexpr std::uint64_t kSig52 = std::uint64_t{1} << 52;  // "no significand reaches it"

}  // namespace

RangeCounter::RangeCounter(const Format& target, const Rounding& rounding, Path path)
    : format_(target), rounding_(rounding), path_(path) {
  validate(rounding_);
  if (path_ == Path::avx512) throw Error("range counts: there is no AVX-512 path (use auto, scalar or avx2)");
  if (path_ == Path::avx2 && !path_available(Path::avx2))
    throw Error("range counts: the avx2 path was asked for and this CPU lacks AVX2");
  if (rounding_.mode == RoundingMode::stochastic)
    throw Error("range counts: stochastic rounding has no single outcome per value; use a deterministic mode");
  if (format_.exp_bits > 10)
    throw Error("range counts: format " + format_.name + " has " + std::to_string(format_.exp_bits) +
                " exponent bits; at most 10 are supported (the target must be narrower than double)");
  const Format& f = format_;
  const int lo = f.emin - f.man_bits - 3;  // every value at or below this binade rounds alike
  const int hi = f.emax + 2;               // and at or above this one
  for (int s = 0; s < 2; ++s) {
    const double sign = s ? -1.0 : 1.0;
    auto value = [&](int b, std::uint64_t m) { return sign * std::ldexp(static_cast<double>(kSig52 + m), b - 52); };
    for (int rank = 1; rank <= 3; ++rank) {
      // Smallest significand m in binade b whose value reaches `rank` (kSig52 if none): bisection,
      // valid because rounding is monotone in |x| within a sign.
      auto threshold = [&](int b) -> std::uint64_t {
        if (outcome_class(value(b, 0), f, rounding_) >= rank) return 0;
        if (outcome_class(value(b, kSig52 - 1), f, rounding_) < rank) return kSig52;
        std::uint64_t below = 0, at = kSig52 - 1;  // class(below) < rank <= class(at)
        while (at - below > 1) {
          const std::uint64_t mid = below + (at - below) / 2;
          (outcome_class(value(b, mid), f, rounding_) >= rank ? at : below) = mid;
        }
        return at;
      };
      Boundary bd{kNone, kSig52};
      for (int b = lo; b <= hi; ++b) {
        const std::uint64_t t = threshold(b);
        if (bd.binade == kNone) {
          if (t == kSig52) continue;
          bd = {b == lo ? (t == 0 ? kAll : b) : b, t};
          if (b == lo && t != 0)
            throw Error("range counts: internal error: " + f.name + " has a rounding boundary at binade " +
                        std::to_string(b) + ", below the range searched");
        } else if (t != 0) {
          throw Error("range counts: internal error: " + f.name + " rounding is not monotone at binade " +
                      std::to_string(b));
        }
      }
      if (bd.binade == kAll) bd.threshold = 0;
      boundary_[s][rank - 1] = bd;
    }
  }
  init_table(float_table_, 23, kFloatBias, kFloatKeys);
  init_table(double_table_, 52, kDoubleBias, kDoubleKeys);
}

void RangeCounter::init_table(Table& t, int mant_bits, int key_bias, int keys) {
  t.mant_bits = mant_bits;
  t.key_bias = key_bias;
  t.keys = keys;
  const int shift = 52 - mant_bits;
  for (int s = 0; s < 2; ++s) {
    std::array<std::pair<std::uint64_t, int>, 3> th;
    for (int r = 0; r < 3; ++r) {
      // In the table's units: a significand field m reaches the threshold T iff (m << shift) >= T.
      const std::uint64_t T = boundary_[s][r].threshold;
      th[r] = {(T + (std::uint64_t{1} << shift) - 1) >> shift, r};
    }
    std::stable_sort(th.begin(), th.end());
    for (int i = 0; i < 3; ++i) {
      t.sorted_threshold[s][i] = th[i].first;
      t.position[s][th[i].second] = i;
    }
  }
  // The double table is large; it is allocated when doubles arrive.
  if (mant_bits == 23) t.counts.assign(static_cast<std::size_t>(2 * keys * 4), 0);
}

namespace {

namespace rd = range_detail;

// True where the fast table cannot take x: a float subnormal, inf or NaN (±0 it can). Not in the
// kernel header: that one is also compiled with -mavx2, and an inline function both objects emit could
// be taken from the AVX2 one by the linker.
bool needs_key(std::uint32_t u) {
  const std::uint32_t a = u & 0x7fffffffu;
  return a - 1u < 0x007fffffu || a >= 0x7f800000u;
}

// The significand thresholds one pass compares against: per sign, the union of its counters' thresholds
// (float units), sorted, without repeats, padded with 2^23 (no significand reaches it) to count: 3, 7 or
// 15, so that a code fills its bits and the per-value loops have a fixed length (one counter's three
// compares cost what they cost before there were several).
struct ThresholdUnion {
  int count = 0;
  int code_bits = 0;        // bit_width(count): the bits of a union code in a bin index
  int live = 0;             // per sign at most this many thresholds below 2^23 (the rest is padding)
  bool same_signs = false;  // th[0] and th[1] equal
  std::uint32_t th[2][rd::kMaxThresholds] = {};
};

// One counter's share of a pass: its float table's counts, and per sign its own code (how many of its three
// thresholds a significand reaches) for each union code.
struct Target {
  std::uint64_t* counts = nullptr;  // [(sign * kFloatKeys + key) * 4 + code]
  std::uint8_t code[2][rd::kMaxThresholds + 1] = {};
};

// |x| bits of the finite non-zero values counted: the largest, and the smallest minus one.
struct Extremes {
  std::uint32_t max_abs = 0;
  std::uint32_t min_abs_m1 = 0xffffffffu;
};

// The pair table and corrections of the AVX2 loop (range_counter_kernel.hpp), per thread: 1 MiB is
// too much to allocate per call (the commands call once per 4 MiB chunk) or to keep per counter (one
// per tensor). Zero between calls: a fold zeroes what it reads, and a call that ends by an exception
// zeroes it all.
struct PairScratch {
  std::vector<std::uint32_t> pairs = std::vector<std::uint32_t>(rd::kPairCounts, 0);
  std::vector<std::int32_t> corrections = std::vector<std::int32_t>(rd::kCorrectionSlots, 0);
};
PairScratch& pair_scratch() {
  thread_local PairScratch scratch;
  return scratch;
}

// Values per block of the pair loop: a block holding a float subnormal, inf or NaN is counted again
// with -1 and then through the fast table, so a block should stay in L1 for that second reading.
constexpr std::size_t kPairBlock = 2048;

// Counts p[0, n) (n >= 16) with the AVX2 pair loop into every target; `keyed` takes single values,
// `count_fast(i, stop, true)` a block that held a special value, and `fold_fast()` folds what count_fast
// counted (its uint32 counts: every 2^30 values, with the pair table); `ext` takes the extremes of the
// blocks counted by pairs.
template <class Keyed, class CountFast, class FoldFast>
void count_pairs(const float* p, std::size_t n, const ThresholdUnion& un, std::span<const Target> targets, Keyed& keyed,
                 CountFast& count_fast, FoldFast& fold_fast, Extremes& ext) {
  PairScratch& scratch = pair_scratch();
  struct Guard {
    PairScratch& s;
    bool done = false;
    ~Guard() {
      if (done) return;
      std::fill(s.pairs.begin(), s.pairs.end(), 0u);
      std::fill(s.corrections.begin(), s.corrections.end(), 0);
    }
  } guard{scratch};
  rd::PairState ps{};
  ps.pairs = scratch.pairs.data();
  ps.corrections = scratch.corrections.data();
  ps.thresholds = un.count;
  ps.live = un.live;
  ps.same_signs = un.same_signs;
  ps.code_bits = un.code_bits;
  for (int s = 0; s < 2; ++s) {
    // The code intervals [0, th0), [th0, th1), ..., [th_last, 2^23): the widest is the dominant one.
    std::uint32_t edge[rd::kMaxThresholds + 2] = {0};
    for (int r = 0; r < un.count; ++r) edge[r + 1] = ps.threshold[s][r] = un.th[s][r];
    edge[un.count + 1] = 0x800000u;
    unsigned best = 0;
    for (unsigned c = 1; c <= static_cast<unsigned>(un.count); ++c)
      if (edge[c + 1] - edge[c] > edge[best + 1] - edge[best]) best = c;
    ps.lo[s] = edge[best];
    ps.width[s] = edge[best + 1] - edge[best];
    ps.dominant[s] = best;
  }
  std::uint32_t pmax = 0, pmin_m1 = 0xffffffffu;
  // Folds the pair table into the targets: only the rows and columns of keys the counted blocks can hold
  // (±0 and the exponents between the smallest and largest |x|), and zeroes them.
  auto fold = [&] {
    std::array<unsigned, 512> rows;
    std::size_t nrows = 0;
    const unsigned e_lo = (pmin_m1 + 1u) >> 23, e_hi = pmax >> 23;
    for (unsigned s = 0; s < 2; ++s) {
      rows[nrows++] = s << 8;
      if (pmax != 0)
        for (unsigned e = e_lo; e <= e_hi; ++e) rows[nrows++] = (s << 8) | e;
    }
    std::array<std::uint64_t, 512> per_key{};
    for (std::size_t a = 0; a < nrows; ++a) {
      std::uint32_t* row = ps.pairs + rows[a] * rd::kPairRow;
      for (std::size_t b = 0; b < nrows; ++b) {
        const std::uint32_t c = row[rows[b]];
        if (c == 0) continue;
        per_key[rows[a]] += c;
        per_key[rows[b]] += c;
        row[rows[b]] = 0;
      }
    }
    for (std::size_t a = 0; a < nrows; ++a) {
      const unsigned k = rows[a], s = k >> 8, e = k & 0xffu;
      const std::size_t bin = (s * kFloatKeys + (e == 0 ? 0 : e + 23)) << 2;
      // The rare values: counted at the dominant code by the pairs, and at their own in the corrections.
      std::uint64_t rare = 0;
      for (unsigned code = 0; code <= static_cast<unsigned>(un.count); ++code) {
        std::int32_t& corr = ps.corrections[(k << un.code_bits) | code];
        if (corr == 0) continue;
        const auto c = static_cast<std::uint64_t>(static_cast<std::int64_t>(corr));  // modulo 2^64, as the counts
        rare += c;
        for (const Target& t : targets) t.counts[bin + t.code[s][code]] += c;
        corr = 0;
      }
      for (const Target& t : targets) t.counts[bin + t.code[s][ps.dominant[s]]] += per_key[k] - rare;
    }
    std::fill(ps.corrections + rd::kFastBinsMax, ps.corrections + rd::kCorrectionSlots, 0);
  };
  const std::size_t whole = n - n % 16;
  std::size_t i = 0;
  while (i < whole) {
    // uint32 pair counts: at most 2^29 pairs per window.
    const std::size_t stop = std::min(whole, i + (std::size_t{1} << 30));
    while (i < stop) {
      const std::size_t len = std::min(kPairBlock, stop - i);
      const rd::BlockExtremes e = rd::count_pairs_avx2(p + i, len, ps, 1);
      if (e.special()) {
        rd::count_pairs_avx2(p + i, len, ps, -1);
        count_fast(i, i + len, true);
      } else {
        pmax = std::max(pmax, e.max_abs);
        pmin_m1 = std::min(pmin_m1, e.min_abs_m1);
      }
      i += len;
    }
    fold();
    fold_fast();
  }
  for (; i < n; ++i) keyed(std::bit_cast<std::uint32_t>(p[i]));
  guard.done = true;
  ext.max_abs = std::max(ext.max_abs, pmax);
  ext.min_abs_m1 = std::min(ext.min_abs_m1, pmin_m1);
}

// Whether the pair loop (range_counter_kernel.hpp) beats the fast table for a union of thresholds. The pair loop
// makes half an increment per value, plus a sixteen's codes and sixteen increments wherever one of its values is
// rare (outside its sign's dominant interval); the fast table makes one increment per value and always computes
// the codes. With significands spread as log-uniform data spreads them (the share of [a, b) is
// log2((1 + b) / (1 + a)), Benford's law), a sixteen has no rare value with probability P^16, P the dominant
// interval's share: the pairs when that is at least one half. Measured on the 2-vCPU Xeon (2026-11-28, loaded by
// other builds, AVX2, ns per value on 2^20 normal values, scripts in docs/performance.md): fp16 alone 0.44 pairs / 0.84
// fast table, fp16 + bf16 0.58 / 0.95, fp8_e4m3 alone (P = log2(1.8125) = 0.86: its overflow threshold) 1.15 / 0.83,
// the monitor's four formats 1.35 / 1.07.
bool pairs_pay(const ThresholdUnion& un) {
  double worst = 1;
  for (int s = 0; s < 2; ++s) {
    std::uint32_t edge[rd::kMaxThresholds + 2] = {0};
    for (int r = 0; r < un.count; ++r) edge[r + 1] = un.th[s][r];
    edge[un.count + 1] = 0x800000u;
    unsigned best = 0;  // the widest interval, as count_pairs picks it
    for (unsigned c = 1; c <= static_cast<unsigned>(un.count); ++c)
      if (edge[c + 1] - edge[c] > edge[best + 1] - edge[best]) best = c;
    const double share = std::log2((0x800000 + double(edge[best + 1])) / (0x800000 + double(edge[best])));
    worst = std::min(worst, std::pow(share, 16));
  }
  return worst >= 0.5;
}

// Below this many values a call counts straight into the keyed tables: the fast table's setup and
// fold (2 x 32 KiB for one counter) would cost more than it saves.
constexpr std::size_t kFastMin = 512;

// Counts p[0, n) into every target, reading each value once; returns the extremes of |x|. `vector`: the
// AVX2 loops (the CPU has them). Thresholds: un.count.
template <int Thresholds>
Extremes count_floats(const float* p, std::size_t n, const ThresholdUnion& un, std::span<const Target> targets,
                      bool vector) {
  const auto& th = un.th;
  constexpr int thresholds = Thresholds, code_bits = std::bit_width(static_cast<unsigned>(Thresholds));
  Extremes ext;
  // How many of sign s's union thresholds the significand field m (23 bits) reaches.
  auto union_code = [&](unsigned s, std::uint32_t m) {
    unsigned code = 0;
    for (int r = 0; r < thresholds; ++r) code += m >= th[s][r];
    return code;
  };
  // Any value, into the keyed tables (binade key as in histogram.cpp).
  auto keyed = [&](std::uint32_t u) {
    const unsigned e = (u >> 23) & 0xffu;
    const std::uint32_t m = u & 0x7fffffu;
    const unsigned bw = static_cast<unsigned>(std::bit_width(m));
    unsigned key = e != 0 ? e + 23 : bw;
    key += (e == 0xffu) & (m != 0);
    const unsigned s = u >> 31;
    // The significand normalised to its leading one (subnormals shifted up), 23 bits after the point.
    const std::uint32_t sig = e != 0 ? m : (m << (24 - bw)) & 0x7fffffu;
    const unsigned code = union_code(s, sig);
    const std::size_t bin = (s * kFloatKeys + key) << 2;
    for (const Target& t : targets) ++t.counts[bin + t.code[s][code]];
    const std::uint32_t a = u & 0x7fffffffu;
    if (a - 1u < 0x7f7fffffu) {  // finite, non-zero
      ext.max_abs = std::max(ext.max_abs, a);
      ext.min_abs_m1 = std::min(ext.min_abs_m1, a - 1u);
    }
  };
  if (n < kFastMin) {
    for (std::size_t i = 0; i < n; ++i) keyed(std::bit_cast<std::uint32_t>(p[i]));
    return ext;
  }
  // The four-copy fast table (range_counter_kernel.hpp): the whole call on CPUs without AVX2, and
  // with AVX2 the blocks that hold a float subnormal, inf or NaN.
  const std::size_t stride = rd::copy_stride(code_bits);
  std::vector<std::uint32_t> fast;
  rd::FastState st{};
  st.thresholds = thresholds;
  st.live = un.live;
  st.same_signs = un.same_signs;
  st.code_bits = code_bits;
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < thresholds; ++r) st.threshold_minus1[s][r] = static_cast<std::int32_t>(th[s][r]) - 1;
  st.max_abs = 0;
  st.min_abs_m1 = 0xffffffffu;
  // A value the fast table can take (not a float subnormal, inf or NaN), into copy `c`.
  auto quick = [&](std::uint32_t u, std::size_t c) {
    const unsigned s = u >> 31;
    ++fast[c * stride + ((u >> 23) << code_bits) + union_code(s, u & 0x7fffffu)];
    const std::uint32_t a = u & 0x7fffffffu;
    st.max_abs = std::max(st.max_abs, a);
    st.min_abs_m1 = std::min(st.min_abs_m1, a - 1u);  // a = 0 gives 0xffffffff: no effect
  };
  auto one = [&](std::uint32_t u, std::size_t c) {
    if (needs_key(u)) keyed(u);
    else quick(u, c);
  };
  // The fast table's copies hold uint32 counts: folded into the keyed tables every 2^30 values.
  auto fold_fast = [&] {
    if (fast.empty()) return;
    for (unsigned s = 0; s < 2; ++s)
      for (unsigned e = 0; e < 0xffu; ++e) {
        const unsigned key = e == 0 ? 0 : e + 23;  // e = 0 holds only ±0 here
        for (unsigned code = 0; code <= static_cast<unsigned>(thresholds); ++code) {
          const std::size_t b = (((s << 8) | e) << code_bits) | code;
          std::uint64_t sum = 0;
          for (std::size_t c = 0; c < rd::kFastCopies; ++c) sum += fast[c * stride + b];
          if (sum == 0) continue;
          for (const Target& t : targets) t.counts[((s * kFloatKeys + key) << 2) + t.code[s][code]] += sum;
        }
      }
    std::fill(fast.begin(), fast.end(), 0u);
  };
  // Counts [i, stop) through the fast table: the AVX2 sixteen-value loop where it may, and the
  // sixteen it stops at (or everything, without AVX2) per value.
  auto count_fast = [&](std::size_t i, std::size_t stop, bool vec) {
    if (fast.empty()) {
      fast.assign(rd::kFastCopies * stride, 0);
      st.counts = fast.data();
    }
    while (i < stop) {
      if (vec) i += rd::count_fast_avx2(p + i, stop - i, st);
      const std::size_t upto = vec ? std::min(stop, i + 16) : stop;
      for (; i + 4 <= upto; i += 4) {
        one(std::bit_cast<std::uint32_t>(p[i]), 0);
        one(std::bit_cast<std::uint32_t>(p[i + 1]), 1 % rd::kFastCopies);
        one(std::bit_cast<std::uint32_t>(p[i + 2]), 2 % rd::kFastCopies);
        one(std::bit_cast<std::uint32_t>(p[i + 3]), 3 % rd::kFastCopies);
      }
      for (; i < upto; ++i) one(std::bit_cast<std::uint32_t>(p[i]), 0);
    }
  };
  if (!vector) {
    for (std::size_t i = 0; i < n;) {
      const std::size_t stop = std::min(n, i + (std::size_t{1} << 30));
      count_fast(i, stop, false);
      fold_fast();
      i = stop;
    }
  } else if (!pairs_pay(un)) {
    for (std::size_t i = 0; i < n;) {
      const std::size_t stop = std::min(n, i + (std::size_t{1} << 30));
      count_fast(i, stop, true);
      fold_fast();
      i = stop;
    }
  } else {
    Extremes pair_ext;
    count_pairs(p, n, un, targets, keyed, count_fast, fold_fast, pair_ext);
    st.max_abs = std::max(st.max_abs, pair_ext.max_abs);
    st.min_abs_m1 = std::min(st.min_abs_m1, pair_ext.min_abs_m1);
  }
  ext.max_abs = std::max(ext.max_abs, st.max_abs);
  ext.min_abs_m1 = std::min(ext.min_abs_m1, st.min_abs_m1);
  return ext;
}

}  // namespace

void RangeCounter::add(std::span<const float> values) {
  RangeCounter* self = this;
  add_each(std::span<RangeCounter* const>(&self, 1), values, path_);
}

void RangeCounter::add_each(std::span<RangeCounter* const> counters, std::span<const float> values, Path path) {
  if (path == Path::avx512) throw Error("range counts: there is no AVX-512 path (use auto, scalar or avx2)");
  if (path == Path::avx2 && !path_available(Path::avx2))
    throw Error("range counts: the avx2 path was asked for and this CPU lacks AVX2");
  // The bulk engine's cpuid check (AVX2 with FMA and F16C: every AVX2 CPU has them).
  const bool vector = path == Path::automatic ? path_available(Path::avx2) : path != Path::scalar;
  // Three thresholds per counter per sign: this many counters share one union.
  constexpr std::size_t kPerPass = rd::kMaxThresholds / 3;
  for (std::size_t first = 0; first < counters.size(); first += kPerPass) {
    const auto group = counters.subspan(first, std::min(kPerPass, counters.size() - first));
    ThresholdUnion un;
    std::array<Target, kPerPass> targets;
    for (int s = 0; s < 2; ++s) {
      std::array<std::uint32_t, rd::kMaxThresholds> all;
      std::size_t n = 0;
      for (const RangeCounter* c : group)
        for (const std::uint64_t t : c->float_table_.sorted_threshold[s]) all[n++] = static_cast<std::uint32_t>(t);
      std::sort(all.begin(), all.begin() + n);
      n = static_cast<std::size_t>(std::unique(all.begin(), all.begin() + n) - all.begin());
      un.count = std::max(un.count, static_cast<int>(n));
      un.live = un.count;
      std::copy(all.begin(), all.begin() + n, un.th[s]);
      std::fill(un.th[s] + n, un.th[s] + rd::kMaxThresholds, 0x800000u);
      for (std::size_t g = 0; g < group.size(); ++g) {
        // A counter's threshold T is union threshold j; a significand of union code c reaches it iff j < c.
        for (const std::uint64_t t : group[g]->float_table_.sorted_threshold[s]) {
          const auto j = std::lower_bound(all.begin(), all.begin() + n, static_cast<std::uint32_t>(t)) - all.begin();
          for (std::size_t c = static_cast<std::size_t>(j) + 1; c <= rd::kMaxThresholds; ++c) ++targets[g].code[s][c];
        }
      }
    }
    un.count = un.count <= 3 ? 3 : un.count <= 7 ? 7 : 15;
    un.same_signs = std::equal(un.th[0], un.th[0] + rd::kMaxThresholds, un.th[1]);
    un.code_bits = std::bit_width(static_cast<unsigned>(un.count));
    for (std::size_t g = 0; g < group.size(); ++g) targets[g].counts = group[g]->float_table_.counts.data();
    const std::span<const Target> to(targets.data(), group.size());
    const Extremes e = un.count == 3   ? count_floats<3>(values.data(), values.size(), un, to, vector)
                       : un.count == 7 ? count_floats<7>(values.data(), values.size(), un, to, vector)
                                       : count_floats<15>(values.data(), values.size(), un, to, vector);
    for (RangeCounter* c : group) {
      if (e.max_abs != 0) c->amax_ = std::max(c->amax_, static_cast<double>(std::bit_cast<float>(e.max_abs)));
      if (e.min_abs_m1 != 0xffffffffu) {
        const double v = std::bit_cast<float>(e.min_abs_m1 + 1u);
        c->amin_nonzero_ = c->amin_nonzero_ == 0 ? v : std::min(c->amin_nonzero_, v);
      }
    }
  }
}

void RangeCounter::add_each(std::span<RangeCounter* const> counters, std::span<const double> values) {
  for (RangeCounter* c : counters) c->add(values);
}

void RangeCounter::add(std::span<const double> values) {
  Table& t = double_table_;
  if (t.counts.empty()) t.counts.assign(static_cast<std::size_t>(2 * t.keys * 4), 0);
  std::uint64_t* counts = t.counts.data();
  std::uint64_t mx = 0, mn = ~std::uint64_t{0};
  for (const double x : values) {
    const std::uint64_t u = std::bit_cast<std::uint64_t>(x);
    const unsigned e = static_cast<unsigned>((u >> 52) & 0x7ffu);
    const std::uint64_t m = u & (kSig52 - 1);
    const unsigned bw = static_cast<unsigned>(std::bit_width(m));
    unsigned key = e != 0 ? e + 52 : bw;
    key += (e == 0x7ffu) & (m != 0);
    const unsigned s = static_cast<unsigned>(u >> 63);
    const std::uint64_t sig = e != 0 ? m : (m << (53 - bw)) & (kSig52 - 1);
    const auto& th = t.sorted_threshold[s];
    const unsigned code = (sig >= th[0]) + (sig >= th[1]) + (sig >= th[2]);
    ++counts[((s * kDoubleKeys + key) << 2) + code];
    const std::uint64_t a = u & 0x7fffffffffffffffull;
    const bool finite_nonzero = a - 1u < 0x7fefffffffffffffull;
    mx = std::max(mx, finite_nonzero ? a : 0);
    mn = std::min(mn, finite_nonzero ? a : ~std::uint64_t{0});
  }
  if (mx != 0) amax_ = std::max(amax_, std::bit_cast<double>(mx));
  if (mn != ~std::uint64_t{0}) {
    const double v = std::bit_cast<double>(mn);
    amin_nonzero_ = amin_nonzero_ == 0 ? v : std::min(amin_nonzero_, v);
  }
}

RangeCounter& RangeCounter::operator+=(const RangeCounter& o) {
  if (!(o.format_ == format_) || o.rounding_.mode != rounding_.mode)
    throw Error("range counts: cannot add counts for " + o.format_.name + " to counts for " + format_.name);
  for (auto [mine, theirs] : {std::pair{&float_table_, &o.float_table_}, std::pair{&double_table_, &o.double_table_}}) {
    if (theirs->counts.empty()) continue;
    if (mine->counts.empty()) mine->counts.assign(theirs->counts.size(), 0);
    for (std::size_t i = 0; i < mine->counts.size(); ++i) mine->counts[i] += theirs->counts[i];
  }
  amax_ = std::max(amax_, o.amax_);
  if (o.amin_nonzero_ != 0)
    amin_nonzero_ = amin_nonzero_ == 0 ? o.amin_nonzero_ : std::min(amin_nonzero_, o.amin_nonzero_);
  return *this;
}

void RangeCounter::add_counts(RangeCounts& out, const Table& t, int log2_scale) const {
  if (t.counts.empty()) return;
  const int inf_key = t.keys - 2, nan_key = t.keys - 1;
  for (int s = 0; s < 2; ++s) {
    auto at = [&](int key, int code) { return t.counts[static_cast<std::size_t>(((s * t.keys + key) << 2) + code)]; };
    for (int code = 0; code < 4; ++code) {
      out.zero_in += at(0, code);
      out.inf_in += at(inf_key, code);
      out.nan_in += at(nan_key, code);
    }
    for (int key = 1; key < inf_key; ++key) {
      const int b = key - t.key_bias + log2_scale;  // binade of x·S
      for (int code = 0; code < 4; ++code) {
        const std::uint64_t n = at(key, code);
        if (n == 0) continue;
        int rank = 0;
        for (int r = 0; r < 3; ++r) {
          const Boundary& bd = boundary_[s][r];
          rank += b > bd.binade || (b == bd.binade && code > t.position[s][r]);
        }
        out.nonzero_finite += n;
        switch (rank) {
          case 0: out.underflow += n; break;
          case 1: {
            out.subnormal += n;
            const int lost = std::min(format_.emin - b, format_.man_bits);
            out.subnormal_bits_lost_sum += double(lost) * double(n);
            out.subnormal_bits_lost_max = std::max(out.subnormal_bits_lost_max, lost);
            break;
          }
          case 2: out.normal += n; break;
          default: out.overflow += n; break;
        }
      }
    }
  }
}

void RangeCounter::clear() {
  for (Table* t : {&float_table_, &double_table_}) std::fill(t->counts.begin(), t->counts.end(), 0u);
  amax_ = 0;
  amin_nonzero_ = 0;
}

RangeCounts RangeCounter::at_scale(int log2_scale) const {
  RangeCounts out;
  out.log2_scale = log2_scale;
  add_counts(out, float_table_, log2_scale);
  add_counts(out, double_table_, log2_scale);
  out.total = out.zero_in + out.nan_in + out.inf_in + out.nonzero_finite;
  return out;
}

std::uint64_t RangeCounter::total() const {
  std::uint64_t n = 0;
  for (const Table* t : {&float_table_, &double_table_})
    for (const auto c : t->counts) n += c;
  return n;
}

Log2Histogram RangeCounter::histogram() const {
  Log2Histogram h = make_float_histogram();
  for (const Table* t : {&float_table_, &double_table_}) {
    if (t->counts.empty()) continue;
    const int inf_key = t->keys - 2, nan_key = t->keys - 1;
    for (int s = 0; s < 2; ++s) {
      for (int key = 0; key < t->keys; ++key) {
        std::uint64_t n = 0;
        for (int code = 0; code < 4; ++code)
          n += t->counts[static_cast<std::size_t>(((s * t->keys + key) << 2) + code)];
        if (n == 0) continue;
        if (key == 0) h.zero += n;
        else if (key == nan_key) h.nan += n;
        else if (key == inf_key) (s ? h.neg_inf : h.pos_inf) += n;
        else {
          const int b = key - t->key_bias;
          h.widen(std::min(b, h.min_exp), std::max(b, h.max_exp));
          h.bins[static_cast<std::size_t>(b - h.min_exp)] += n;
        }
      }
    }
  }
  return h;
}

}  // namespace mpsim::analysis

namespace mpsim::analysis {

std::size_t RangeCounter::counts_size() const {
  return static_cast<std::size_t>(2 * float_table_.keys * 4 + 2 * double_table_.keys * 4);
}

std::vector<std::int64_t> RangeCounter::counts() const {
  std::vector<std::int64_t> c(counts_size(), 0);
  std::size_t at = 0;
  for (const Table* t : {&float_table_, &double_table_}) {
    for (std::size_t i = 0; i < t->counts.size(); ++i) c[at + i] = static_cast<std::int64_t>(t->counts[i]);
    at += static_cast<std::size_t>(2 * t->keys * 4);
  }
  return c;
}

RangeCounter RangeCounter::from_counts(const Format& target, const Rounding& rounding, std::span<const std::int64_t> c,
                                       double amax, double amin_nonzero) {
  RangeCounter r(target, rounding);
  if (c.size() != r.counts_size())
    throw Error("range counts for " + target.name + ": " + std::to_string(c.size()) + " values, the layout has " +
                std::to_string(r.counts_size()));
  std::size_t at = 0;
  for (Table* t : {&r.float_table_, &r.double_table_}) {
    const auto n = static_cast<std::size_t>(2 * t->keys * 4);
    bool any = false;
    for (std::size_t i = 0; i < n; ++i) {
      if (c[at + i] < 0)
        throw Error("range counts for " + target.name + ": value " + std::to_string(at + i) + " is negative");
      any = any || c[at + i] != 0;
    }
    // The double table stays unallocated while empty, as in a counter that never saw a double.
    if (any || !t->counts.empty()) {
      t->counts.assign(n, 0);
      for (std::size_t i = 0; i < n; ++i) t->counts[i] = static_cast<std::uint64_t>(c[at + i]);
    }
    at += n;
  }
  if (!(amax >= 0) || !(amin_nonzero >= 0))
    throw Error("range counts for " + target.name + ": amax and amin_nonzero must be non-negative numbers");
  r.amax_ = amax;
  r.amin_nonzero_ = amin_nonzero;
  return r;
}

}  // namespace mpsim::analysis
