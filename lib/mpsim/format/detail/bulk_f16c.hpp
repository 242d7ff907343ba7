// Internal to the bulk engine (detail/bulk_kernel.hpp, which says how these files are compiled):
// The F16C loop (vcvtps2ph) for fp16 in the modes the instruction has, Stats counted from |x|.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/detail/bulk_counters.hpp"
#include "mpsim/format/detail/bulk_params.hpp"
#include "mpsim/format/detail/bulk_store.hpp"

namespace mpsim::bulk_detail {
namespace {

// fp16 with subnormals kept in nearest-even, toward zero, up or down: vcvtps2ph with that rounding is
// exactly the specification (an IEEE conversion: overflow as IEEE 754 section 7.4 says for the mode,
// NaN sign and top payload bits kept with the quiet bit set; Intel SDM, VCVTPS2PH). Nearest-away is
// built from two of them (S::cvt_ph_away).
//
// Stats: the hardware gives the result, so the classes are counted from |x| alone against the
// thresholds of KernelParams::f16c_* (no widening of the result, no test of it), and "exact" as
// "converts back to the input". NaN and inf inputs are not tested for per vector: a step of
// kStatsStep values is counted optimistically and, if its largest |x| turns out to be inf or NaN,
// counted again in full (the outputs do not depend on the counting).
constexpr std::size_t kStatsStep = 4096;
// f16c_loop's IMM for nearest with ties away (S::cvt_ph_away), which has no rounding-control value.
constexpr int kAwayImm = -1;
// f16c_loop's IMM for to-odd (S::cvt_ph_odd): truncation, then the sticky bit.
constexpr int kOddImm = -2;

template <class S, int IMM, bool STATS, OutKind KIND, bool NT>
void f16c_loop(const float* in, void* out, std::size_t n, const KernelParams& p, StatsAcc* acc) {
  using I = typename S::I;
  using M = typename S::M;
  Counters<S> c;
  const I kAbs = S::set1(0x7fffffff), kZero = S::zero(), kOneI = S::set1(1);
  const I kInfBits = S::set1(0x7c00);
  const bool by_sign = p.f16c_zero_below[0] != p.f16c_zero_below[1] || p.f16c_small_below[0] != p.f16c_small_below[1] ||
                       p.f16c_finite_upto[0] != p.f16c_finite_upto[1];
  const I kZeroBelowP = S::set1(p.f16c_zero_below[0]), kZeroBelowN = S::set1(p.f16c_zero_below[1]);
  const I kSmallBelowP = S::set1(p.f16c_small_below[0]), kSmallBelowN = S::set1(p.f16c_small_below[1]);
  const I kFiniteUptoP = S::set1(p.f16c_finite_upto[0]), kFiniteUptoN = S::set1(p.f16c_finite_upto[1]);
  // To-odd knows which lanes convert back to the input (`same`) from its truncation; the others test
  // the result converted back, which packed calls compute for Stats only.
  constexpr bool kSameKnown = IMM == kOddImm;
  auto convert = [&](const float* src, void* dst, std::size_t j, auto nt, I& b, I& y, M& same) {
    b = S::load(src);
    const auto h = [&] {
      if constexpr (IMM == kAwayImm) return S::cvt_ph_away(b);
      else if constexpr (IMM == kOddImm) return S::cvt_ph_odd(b, same);
      else return S::template cvt_ph<IMM>(b);
    }();
    if constexpr (KIND == OutKind::f32 || (STATS && !kSameKnown)) y = S::cvt_ph_back(h);
    if constexpr (STATS && !kSameKnown) same = S::eq(y, b);
    if constexpr (KIND == OutKind::u16) {
      if constexpr (decltype(nt)::value) S::stream_ph(static_cast<std::uint16_t*>(dst) + j, h);
      else S::store_ph(static_cast<std::uint16_t*>(dst) + j, h);
    } else {
      store_out<S, KIND, decltype(nt)::value>(dst, j, S::widen16(h), y);
    }
    return h;
  };
  if constexpr (!STATS) {
    for_each_vector<S, KIND, NT>(in, out, n, [&](std::size_t, const float* src, void* dst, std::size_t j, auto nt) {
      I b, y;
      M same;
      convert(src, dst, j, nt, b, y, same);
    });
    return;
  } else {
    auto fast = [&](std::size_t, const float* src, void* dst, std::size_t j, auto nt) {
      I b, y = S::zero();
      M same;
      convert(src, dst, j, nt, b, y, same);
      const I a = S::and_(b, kAbs);
      I zero_below = kZeroBelowP, small_below = kSmallBelowP, finite_upto = kFiniteUptoP;
      if (by_sign) {
        const M neg = S::negmask(b);
        zero_below = S::sel(neg, kZeroBelowN, kZeroBelowP);
        small_below = S::sel(neg, kSmallBelowN, kSmallBelowP);
        finite_upto = S::sel(neg, kFiniteUptoN, kFiniteUptoP);
      }
      c.f_zero = S::count(c.f_zero, S::eq(a, kZero));
      c.f_enc0 = S::count(c.f_enc0, S::gt(zero_below, a));
      c.f_small = S::count(c.f_small, S::gt(small_below, a));
      c.s_over = S::count(c.s_over, S::gt(a, finite_upto));
      c.h_same = S::count(c.h_same, same);
      c.vmax = S::max(c.vmax, a);
      c.vmin_m1 = S::minu(c.vmin_m1, S::sub(a, kOneI));
    };
    auto full = [&](std::size_t, const float* src, void* dst, std::size_t j, auto nt) {
      I b, y = S::zero();
      M same;
      const auto h = convert(src, dst, j, nt, b, y, same);
      const I res = S::widen16(h);
      const I rmag = S::and_(res, S::set1(0x7fff));
      count_slow<S>(c, S::and_(b, kAbs), res, S::mnot(same), S::eq(rmag, kInfBits), p);
    };
    for (std::size_t blk = 0; blk < n; blk += kCounterBlock) {
      const std::size_t len = n - blk < kCounterBlock ? n - blk : kCounterBlock;
      std::size_t pad = 0;
      // Rounding in place overwrites the inputs a recount needs: such a step is copied first.
      const bool in_place = static_cast<const void*>(in) == out;
      alignas(64) float saved[kStatsStep];
      for (std::size_t step = 0; step < len; step += kStatsStep) {
        const std::size_t at = blk + step, m = len - step < kStatsStep ? len - step : kStatsStep;
        const Counters<S> before = c;
        unsigned char* dst = static_cast<unsigned char*>(out) + at * out_size<KIND>();
        const float* src = in + at;
        if (in_place) {
          std::memcpy(saved, src, m * sizeof(float));
          src = saved;
        }
        pad = for_each_vector<S, KIND, NT>(src, dst, m, fast);
        if (S::hmax(c.vmax) > 0x7f7fffffu) {  // an inf or NaN in this step: count it again in full
          c = before;
          pad = for_each_vector<S, KIND, NT>(src, dst, m, full);
        }
      }
      c.fold(*acc, true);
      acc->zero_in -= pad;
    }
  }
}

}  // namespace
}  // namespace mpsim::bulk_detail
