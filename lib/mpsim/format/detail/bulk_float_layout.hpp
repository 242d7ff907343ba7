// Internal to the bulk engine (detail/bulk_kernel.hpp, which says how these files are compiled):
// The kernel for formats with float's exponent field (bf16, tf32): an addition and a truncation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/detail/bulk_params.hpp"
#include "mpsim/format/detail/bulk_round.hpp"

namespace mpsim::bulk_detail {
namespace {

// bf16, tf32 and other formats with KernelParams::float_fast: the encoding is the float's bit pattern
// rounded at bit sh0 and shifted down, sign included. Every mode is an integer addition to the signed
// pattern b (adding to the magnitude moves away from zero), then a truncation:
//   nearest-even b + (2^(sh0-1) - 1) + bit sh0 of b;  nearest-away b + 2^(sh0-1);  toward zero b;
//   up / down b + (2^sh0 - 1) on the positive / negative side;  to-odd b | 2^sh0 where bits are lost;
//   stochastic b + ((r & sr_mask) >> (32 - sh0)) with r the element's 32 random bits, which carries
//   past bit sh0 exactly when (frac32 & sr_mask) + (r & sr_mask) carries past 2^32 (round_bits).
// A carry out of max_finite gives the inf pattern, which is the specification's overflow in the modes
// that overflow to inf; the others (toward zero, to-odd, up below zero, down above zero) never carry.
// ±inf inputs stay inf in every mode. Only NaN inputs need a fix: their result is (b | quiet) >> sh0.
// Stats: steps of kStatsStep count zeros, exact results and |x| extremes only; a step whose largest
// |x| exceeds max_finite (inf, NaN or a possible overflow) or whose smallest is a float subnormal is
// rounded and counted again by round_loop. Calls rounding in place go to round_loop with their Stats.
template <class S, Mode MODE, bool STATS, OutKind KIND, bool NT>
void float_layout_loop(const float* in, void* out, std::size_t n, std::uint64_t index0, const KernelParams& params,
                       StatsAcc* acc) {
  const KernelParams p = params;  // see round_loop
  if constexpr (STATS) {
    if (static_cast<const void*>(in) == out)
      return round_loop<S, MODE, true, KIND, true, false, NT>(in, out, n, index0, p, acc);
  }
  using I = typename S::I;
  const int sh0 = p.sh0;
  const I kAbs = S::set1(0x7fffffff), kInf = S::set1(0x7f800000), kZero = S::zero(), kOne = S::set1(1);
  // (float_fast needs IEEE NaNs, so m >= 1: bit sh0 is the kept significand's lowest, see round_loop.)
  const I kLow = S::set1((1 << sh0) - 1), kKeep = S::set1(~((1 << sh0) - 1)), kHalfM1 = S::set1(((1 << sh0) - 1) >> 1);
  const I kHalf = S::set1(1 << (sh0 - 1)), kBit = S::set1(1 << sh0), kQuiet = S::set1(0x00400000);
  const I kSrMask = S::set1(static_cast<std::int32_t>(p.sr_mask));
  PhiloxLanes<S> sr(p.sr_seed_lo, p.sr_seed_hi, index0, p.sr_half);
  // The pattern to truncate at bit sh0 (element i of the call, input bits b).
  auto rounded = [&](std::size_t i, I b) __attribute__((always_inline)) {
    if constexpr (MODE == Mode::nearest_even) return S::add(S::add(b, kHalfM1), S::and_(S::srl(b, sh0), kOne));
    else if constexpr (MODE == Mode::nearest_away) return S::add(b, kHalf);
    else if constexpr (MODE == Mode::toward_zero) return b;
    else if constexpr (MODE == Mode::up) return S::add(b, S::maskz_not(S::negmask(b), kLow));
    else if constexpr (MODE == Mode::down) return S::add(b, S::maskz(S::negmask(b), kLow));
    else if constexpr (MODE == Mode::to_odd) return S::or_(b, S::maskz_not(S::eq(S::and_(b, kLow), kZero), kBit));
    else {
      const I rnd = sr.at(i);
      return S::add(b, S::srl(S::and_(rnd, kSrMask), 32 - sh0));
    }
  };
  auto finish = [&](I v) __attribute__((always_inline)) {
    if constexpr (KIND == OutKind::f32) return S::and_(v, kKeep);
    else return S::srl(v, sh0);
  };
  if constexpr (!STATS) {
    for_each_group<S, KIND, NT>(
        in, out, n, 0, [&](std::size_t i, const float* src) __attribute__((always_inline)) {
          const I b = S::load(src);
          I v = rounded(i, b);
          const I a = S::and_(b, kAbs);
          if (S::any(S::gt(a, kInf))) v = S::sel(S::gt(a, kInf), S::or_(b, kQuiet), v);
          return finish(v);
        });
  } else {
    Counters<S> c;
    for (std::size_t blk = 0; blk < n; blk += kCounterBlock) {
      const std::size_t len = n - blk < kCounterBlock ? n - blk : kCounterBlock;
      std::size_t pad = 0;
      for (std::size_t step = 0; step < len; step += kStatsStep) {
        const std::size_t at = blk + step, m = len - step < kStatsStep ? len - step : kStatsStep;
        const float* src = in + at;
        unsigned char* dst = static_cast<unsigned char*>(out) + at * out_size<KIND>();
        I step_max = kZero, step_min_m1 = S::set1(-1);
        const Counters<S> before = c;
        const std::size_t step_pad = for_each_group<S, KIND, NT>(
            src, dst, m, at, [&](std::size_t i, const float* s) __attribute__((always_inline)) {
              const I b = S::load(s);
              const I a = S::and_(b, kAbs);
              c.u_zero = S::count(c.u_zero, S::eq(a, kZero));
              c.u_kept = S::count(c.u_kept, S::eq(S::and_(b, kLow), kZero));
              step_max = S::max(step_max, a);
              step_min_m1 = S::minu(step_min_m1, S::sub(a, kOne));
              return finish(rounded(i, b));
            });
        if (S::hmax(step_max) > static_cast<std::uint32_t>(p.max_finite_f32) || S::hmin(step_min_m1) < 0x007fffffu) {
          c = before;  // the step again, rounded and counted in full
          round_loop<S, MODE, true, KIND, true, false, NT>(src, dst, m, index0 + at, p, acc);
        } else {
          c.vmax = S::max(c.vmax, step_max);
          c.vmin_m1 = S::minu(c.vmin_m1, step_min_m1);
          pad = step_pad;
        }
      }
      c.fold(*acc);
      acc->zero_in -= pad;
    }
  }
}

}  // namespace
}  // namespace mpsim::bulk_detail
