#include "mpsim/analysis/mass_lost.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "mpsim/analysis/detail/mass_lost_kernel.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"

namespace mpsim::analysis {

namespace {

// The sums of one block in two interleaved partial sums: element k of the block (counted from its first
// element) goes to sum k % 2, and the block's sum is sum 0 + sum 1. The order of every addition is then
// fixed by the block alone (not by the thread count or the machine), and the loop runs on SSE2 pairs of
// doubles with masks instead of branches. The sequential form (one chain of dependent additions per sum,
// and the compiler's branches for the selects, mispredicted on every other element in a tensor worth
// measuring) took about 7 ns per value; docs/performance.md has the figures.
#if defined(__SSE2__)
struct Pairs {
  __m128d abs = _mm_setzero_pd(), sq = _mm_setzero_pd(), f_abs = _mm_setzero_pd(), f_sq = _mm_setzero_pd(),
          f_signed = _mm_setzero_pd(), dot = _mm_setzero_pd(), sq_q = _mm_setzero_pd();
  __m128i nonzero = _mm_setzero_si128(), flushed = _mm_setzero_si128(), overflowed = _mm_setzero_si128();

  // Elements (x0, x1) before and (y0, y1) after rounding. counted: x != 0 and |x| <= max finite (so not
  // NaN or inf); lost: counted and y == 0; kept: counted and |y| <= max finite. Masks are all ones or 0.
  void add(__m128d x, __m128d y) {
    const __m128d kAbs = _mm_castsi128_pd(_mm_set1_epi64x(0x7fffffffffffffffLL));
    const __m128d kMax = _mm_set1_pd(std::numeric_limits<double>::max());
    const __m128d zero = _mm_setzero_pd();
    const __m128d ax_raw = _mm_and_pd(x, kAbs);
    const __m128d counted = _mm_and_pd(_mm_cmpneq_pd(x, zero), _mm_cmple_pd(ax_raw, kMax));
    const __m128d lost = _mm_and_pd(counted, _mm_cmpeq_pd(y, zero));
    const __m128d kept = _mm_and_pd(counted, _mm_cmple_pd(_mm_and_pd(y, kAbs), kMax));
    const __m128d ax = _mm_and_pd(ax_raw, counted), xx = _mm_mul_pd(ax, ax);
    nonzero = _mm_sub_epi64(nonzero, _mm_castpd_si128(counted));  // a mask is -1
    flushed = _mm_sub_epi64(flushed, _mm_castpd_si128(lost));
    overflowed = _mm_sub_epi64(overflowed, _mm_castpd_si128(_mm_andnot_pd(kept, counted)));
    abs = _mm_add_pd(abs, ax);
    sq = _mm_add_pd(sq, xx);
    f_abs = _mm_add_pd(f_abs, _mm_and_pd(ax, lost));
    f_sq = _mm_add_pd(f_sq, _mm_and_pd(xx, lost));
    f_signed = _mm_add_pd(f_signed, _mm_and_pd(x, lost));  // the flushed values with their signs
    dot = _mm_add_pd(dot, _mm_and_pd(_mm_mul_pd(x, y), kept));
    sq_q = _mm_add_pd(sq_q, _mm_and_pd(_mm_mul_pd(y, y), kept));
  }
  static __m128d load(const float* p) {
    return _mm_cvtps_pd(_mm_castpd_ps(_mm_load_sd(reinterpret_cast<const double*>(p))));
  }
  static __m128d load(const double* p) { return _mm_loadu_pd(p); }
  // The last element of an odd block with a zero beside it (not counted: it adds +0 to sum 1).
  static __m128d load_one(float v) { return _mm_set_pd(0.0, v); }
  static __m128d load_one(double v) { return _mm_set_pd(0.0, v); }
  static double sum(__m128d v) { return _mm_cvtsd_f64(v) + _mm_cvtsd_f64(_mm_unpackhi_pd(v, v)); }
  static std::uint64_t sum(__m128i v) {
    return static_cast<std::uint64_t>(_mm_cvtsi128_si64(v)) +
           static_cast<std::uint64_t>(_mm_cvtsi128_si64(_mm_unpackhi_epi64(v, v)));
  }
};
#endif

}  // namespace

// Adds one block's counts and sums to the running totals (blocks in order: the totals' bits depend on it).
template <class Sums>
void MassLost::add_block(const Sums& s) {
  nonzero_ += s.nonzero;
  flushed_ += s.flushed;
  overflowed_ += s.overflowed;
  sum_abs_ += s.abs;
  sum_sq_ += s.sq;
  flushed_abs_ += s.f_abs;
  flushed_sq_ += s.f_sq;
  flushed_signed_ += s.f_signed;
  dot_ += s.dot;
  sum_sq_q_ += s.sq_q;
}

template <class T>
void MassLost::add_impl(std::span<const T> g, std::span<const T> q, Path path) {
  const bool avx2 = path == Path::avx2 || path == Path::avx512;
  if (g.size() != q.size())
    throw Error(fmt::format("MassLost::add: {} values before rounding but {} after", g.size(), q.size()));
  const T* const gp = g.data();
  const T* const qp = q.data();
  std::size_t b = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (path == Path::avx512) {
      // Whole blocks four at a time; what is left two at a time, then one at a time below.
      for (; b + 4 * kBlock <= g.size(); b += 4 * kBlock) {
        mass_detail::BlockSums four[4];
        mass_detail::block_quad_sums_avx512(gp + b, qp + b, kBlock, four);
        for (const auto& s : four) add_block(s);
      }
    }
    if (avx2) {
      // Whole blocks two at a time; the rest (an odd block, the partial last one) one at a time below.
      for (; b + 2 * kBlock <= g.size(); b += 2 * kBlock) {
        mass_detail::BlockSums two[2];
        mass_detail::block_pair_sums_avx2(gp + b, qp + b, kBlock, two);
        add_block(two[0]);
        add_block(two[1]);
      }
    }
  }
  for (; b < g.size(); b += kBlock) {
    const std::size_t e = std::min(g.size(), b + kBlock);
    mass_detail::BlockSums block;
#if defined(__SSE2__)
    Pairs s;
    std::size_t i = b;
    for (; i + 2 <= e; i += 2) s.add(Pairs::load(gp + i), Pairs::load(qp + i));
    if (i < e) s.add(Pairs::load_one(gp[i]), Pairs::load_one(qp[i]));
    block = {Pairs::sum(s.nonzero), Pairs::sum(s.flushed), Pairs::sum(s.overflowed), Pairs::sum(s.abs),
             Pairs::sum(s.sq),      Pairs::sum(s.f_abs),   Pairs::sum(s.f_sq),       Pairs::sum(s.f_signed),
             Pairs::sum(s.dot),     Pairs::sum(s.sq_q)};
#else
    // The same sums without SSE2: element k of the block in sum k % 2, the block's sum sum 0 + sum 1.
    double abs[2] = {}, sq[2] = {}, f_abs[2] = {}, f_sq[2] = {}, f_signed[2] = {}, dot[2] = {}, sq_q[2] = {};
    for (std::size_t i = b; i < e; ++i) {
      const int l = static_cast<int>((i - b) & 1);
      const double x = gp[i], y = qp[i];
      const bool counted = x != 0 && std::isfinite(x);
      const bool lost = counted && y == 0;
      const bool kept = counted && std::isfinite(y);
      const double ax = counted ? std::abs(x) : 0.0, xx = ax * ax;
      block.nonzero += counted;
      block.flushed += lost;
      block.overflowed += counted && !kept;
      abs[l] += ax;
      sq[l] += xx;
      f_abs[l] += lost ? ax : 0.0;
      f_sq[l] += lost ? xx : 0.0;
      f_signed[l] += lost ? x : 0.0;
      dot[l] += kept ? x * y : 0.0;
      sq_q[l] += kept ? y * y : 0.0;
    }
    block.abs = abs[0] + abs[1];
    block.sq = sq[0] + sq[1];
    block.f_abs = f_abs[0] + f_abs[1];
    block.f_sq = f_sq[0] + f_sq[1];
    block.f_signed = f_signed[0] + f_signed[1];
    block.dot = dot[0] + dot[1];
    block.sq_q = sq_q[0] + sq_q[1];
#endif
    add_block(block);
  }
}

void MassLost::add(std::span<const float> g, std::span<const float> q, Path path) {
  if (path == Path::avx2 && !path_available(Path::avx2))
    throw Error("MassLost::add: the avx2 path was asked for and this CPU lacks AVX2");
  if (path == Path::avx512 && !(path_available(Path::avx512) && mass_detail::block_quad_sums_avx512_compiled()))
    throw Error("MassLost::add: the avx512 path was asked for and this CPU or build lacks AVX-512");
  if (path == Path::automatic)
    path = path_available(Path::avx512) && mass_detail::block_quad_sums_avx512_compiled() ? Path::avx512
           : path_available(Path::avx2)                                                   ? Path::avx2
                                                                                          : Path::scalar;
  add_impl(g, q, path);
}
void MassLost::add(std::span<const double> g, std::span<const double> q) { add_impl(g, q, Path::scalar); }

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
  s.push_down =
      (!signed_known_ || flushed_abs_ == 0) ? std::nan("") : (flushed_abs_ + flushed_signed_) / (2 * flushed_abs_);
  s.lost_bias = !signed_known_ ? std::nan("") : sum_abs_ > 0 ? flushed_signed_ / sum_abs_ : 0.0;
  return s;
}

nlohmann::json MassLost::state() const {
  nlohmann::json j = {{"nonzero", nonzero_},       {"flushed", flushed_}, {"overflowed", overflowed_},
                      {"sum_abs", sum_abs_},       {"sum_sq", sum_sq_},   {"flushed_abs", flushed_abs_},
                      {"flushed_sq", flushed_sq_}, {"dot", dot_},         {"sum_sq_q", sum_sq_q_}};
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

// Elements rounded at a time (bounded scratch; a call of round_array has a fixed cost, so not much fewer).
// A multiple of MassLost::kBlock, so the blocks and hence the sums are those of one add() over the tensor.
constexpr std::size_t kChunk = std::size_t{1} << 16;
static_assert(kChunk % MassLost::kBlock == 0);

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

void add_rounded_double(MassLost& into, std::span<const double> g, const Format& fmt, const Rounding& r, int log2_scale,
                        std::uint64_t index0, std::vector<double>& x, std::vector<double>& q) {
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
    if (exact && log2_scale == 0) {  // no scaling: round the caller's values themselves
      qf.resize(n);
      round_array(chunk, std::span<float>(qf), fmt, r, nullptr, one_thread(index0 + b));
      into.add(chunk, std::span<const float>(qf));
      continue;
    }
    if (exact) {
      xf.resize(n);
      // The float product of a finite non-zero g and 2^k is 2^k * g exactly iff it is a normal float (it
      // neither overflowed nor fell below 2^-126, where it may have been rounded or flushed): tested on the
      // magnitude bits for the whole chunk, without branches (the loop vectorises).
      std::uint32_t inexact = 0;
      for (std::size_t i = 0; i < n; ++i) {
        xf[i] = chunk[i] * scale;
        const std::uint32_t m = std::bit_cast<std::uint32_t>(chunk[i]) & 0x7fffffffu;
        const std::uint32_t y = std::bit_cast<std::uint32_t>(xf[i]) & 0x7fffffffu;
        inexact |= static_cast<std::uint32_t>((m != 0) & (m < 0x7f800000u) & ((y < 0x00800000u) | (y >= 0x7f800000u)));
      }
      exact = inexact == 0;
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
