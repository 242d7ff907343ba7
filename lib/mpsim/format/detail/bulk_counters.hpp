// Internal to the bulk engine (detail/bulk_kernel.hpp, which says how these files are compiled):
// Per-lane Stats counters and the ways a vector is counted into them (slow, fast, uniform, lookup).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/detail/bulk_params.hpp"

namespace mpsim::bulk_detail {
namespace {

// A compile-time choice passed to a generic lambda (not std::integral_constant: see bulk_kernel.hpp).
template <bool B>
struct Flag {
  static constexpr bool value = B;
};

// Counters are 32-bit per lane: fold them into 64-bit totals at least every 2^24 elements.
constexpr std::size_t kCounterBlock = std::size_t{1} << 24;

// Per-lane Stats counters. Vectors without a NaN/inf input or an overflow (nearly all of them) take
// the fast path, which counts four things from which the classes follow:
//   f_zero: x == 0;  f_enc0: result magnitude 0;  f_small: result magnitude below the smallest normal;
//   f_exact: nothing discarded and the result non-zero
// (underflow = f_enc0 - f_zero, subnormal = f_small - f_enc0: every zero input gives a zero result).
// Vectors with a special lane count every class directly (s_*).
template <class S>
struct Counters {
  using I = typename S::I;
  I f_zero = S::zero(), f_enc0 = S::zero(), f_small = S::zero(), f_exact = S::zero();
  I s_zero = S::zero(), s_nan = S::zero(), s_inf = S::zero(), s_exact = S::zero(), s_under = S::zero(),
    s_sub = S::zero(), s_over = S::zero();
  // The F16C path's fast counting (f16c_loop): results equal to the input, zeros included (fold()
  // takes f_zero off), so no test of the result for zero is needed.
  I h_same = S::zero();
  // round_loop's fast counting for formats with float's exponent range (UNIFORM), in steps known to
  // hold no float subnormal: there only a zero input gives a zero or subnormal result, so u_zero
  // stands for f_zero, f_enc0 and f_small at once, and u_kept counts exact results with the zeros.
  I u_zero = S::zero(), u_kept = S::zero();
  I vmax = S::zero();       // largest finite |x| (float bits; signed compare is exact below 2^31)
  I vmin_m1 = S::set1(-1);  // smallest non-zero finite |x| minus 1, unsigned (x == 0 wraps to the top)

  // same_counts_zeros: f16c_loop's counting, where h_same includes the f_zero inputs.
  void fold(StatsAcc& acc, bool same_counts_zeros = false) {
    const std::uint64_t uz = S::hsum(u_zero);
    const std::uint64_t fz = S::hsum(f_zero), fe0 = S::hsum(f_enc0) + uz, fs = S::hsum(f_small) + uz;
    acc.zero_in += fz + uz + S::hsum(s_zero);
    acc.underflow += (fe0 - fz - uz) + S::hsum(s_under);
    acc.subnormal += (fs - fe0) + S::hsum(s_sub);
    acc.exact +=
        S::hsum(f_exact) + S::hsum(s_exact) + (same_counts_zeros ? S::hsum(h_same) - fz : 0) + (S::hsum(u_kept) - uz);
    acc.nan += S::hsum(s_nan);
    acc.inf_in += S::hsum(s_inf);
    acc.overflow += S::hsum(s_over);
    const std::uint32_t mx = S::hmax(vmax), mn = S::hmin(vmin_m1);
    if (mx > acc.max_a) acc.max_a = mx;
    if (mn != 0xffffffffu && mn + 1 < acc.min_a) acc.min_a = mn + 1;
    *this = Counters{};
  }
};

// Full classification of one vector into the slow-path counters: `res` the encodings, `inexact`
// the lanes where the result differs from the input unless it is zero.
template <class S>
inline void count_slow(Counters<S>& c, typename S::I a, typename S::I res, typename S::M inexact,
                       typename S::M ovf_counted, const KernelParams& p) {
  using I = typename S::I;
  using M = typename S::M;
  const I kInf = S::set1(0x7f800000), kZero = S::zero();
  const I rmag = S::and_(res, S::set1(p.mag_mask));
  const M fin = S::gt(kInf, a);
  const M isz = S::eq(a, kZero);
  const M fnz = S::mandnot(isz, fin);
  const M rz = p.neg_zero ? S::eq(res, kZero) : S::eq(rmag, kZero);
  c.s_zero = S::count(c.s_zero, isz);
  c.s_nan = S::count(c.s_nan, S::gt(a, kInf));
  c.s_inf = S::count(c.s_inf, S::eq(a, kInf));
  c.s_exact = S::count(c.s_exact, S::mandnot(S::mor(inexact, rz), fnz));
  c.s_under = S::count(c.s_under, S::mand(fnz, rz));
  c.s_sub = S::count(c.s_sub, S::mand(fnz, S::mand(S::gt(rmag, kZero), S::gt(S::set1(p.one_m), rmag))));
  c.s_over = S::count(c.s_over, S::mand(fnz, ovf_counted));
  c.vmax = S::max(c.vmax, S::maskz(fin, a));
  c.vmin_m1 = S::minu(c.vmin_m1, S::sel(fnz, S::sub(a, S::set1(1)), S::set1(-1)));
}

// The fast path's counters (Counters::f_* / u_*, s_over and the |x| extremes), held by round_loop as
// separate local vectors and added into its Counters per step or block (FastCounts::add_to): GCC keeps
// a struct of 16 vectors in memory, and a load, add and store per counter per vector made the Stats
// loop latency-bound (AVX-512 fp16 software nearest-even + Stats in cache 0.45 ns/element, 0.21 without).
// Fast-path counting: every lane finite. `enc` the result magnitudes before the overflow cap,
// `kept_all` the lanes where the result equals the input unless zero, `ovf_counted` the overflows.
template <class S>
inline void count_fast(typename S::I& f_zero, typename S::I& f_enc0, typename S::I& f_small, typename S::I& f_exact,
                       typename S::I& s_over, typename S::I& vmax, typename S::I& vmin_m1, typename S::I a,
                       typename S::I enc, typename S::M kept_all, typename S::M ovf_counted, const KernelParams& p) {
  using I = typename S::I;
  using M = typename S::M;
  const I kZero = S::zero();
  const M enc0 = S::eq(enc, kZero);
  f_zero = S::count(f_zero, S::eq(a, kZero));
  f_enc0 = S::count(f_enc0, enc0);
  f_small = S::count(f_small, S::gt(S::set1(p.one_m), enc));
  f_exact = S::count(f_exact, S::mandnot(enc0, kept_all));
  s_over = S::count(s_over, ovf_counted);
  vmax = S::max(vmax, a);
  vmin_m1 = S::minu(vmin_m1, S::sub(a, S::set1(1)));
}

// count_fast for UNIFORM formats in a step without float subnormals (see Counters::u_zero).
template <class S>
inline void count_fast_uniform(typename S::I& u_zero, typename S::I& u_kept, typename S::I& s_over, typename S::I& vmax,
                               typename S::I& vmin_m1, typename S::I a, typename S::M kept_all,
                               typename S::M ovf_counted) {
  u_zero = S::count(u_zero, S::eq(a, S::zero()));
  u_kept = S::count(u_kept, kept_all);
  s_over = S::count(s_over, ovf_counted);
  vmax = S::max(vmax, a);
  vmin_m1 = S::minu(vmin_m1, S::sub(a, S::set1(1)));
}

// Lookup counting (round_loop with PLAIN, formats narrower than float's range, ISAs with S::kHasLut):
// the fast path's zero, underflow, subnormal and exact classes come from one table lookup per vector
// instead of a compare and a masked add each. The key is lzcnt of the capped result magnitude (32 for
// 0, 32 - m .. 31 for a subnormal, lzcnt(cap) .. 31 - m for a normal or the cap, all >= 17 where
// KernelParams::lut_ok holds), xor 16 where the result equals the input; vpermi2d reads it mod 32, so
// every (lzcnt, equal) pair has its own entry. An entry holds four 8-bit counts, added into one vector:
//   bits 0-7 zero input (result 0, equal), 8-15 underflow (result 0, not equal),
//   16-23 subnormal result, 24-31 exact non-zero result.
// A lane adds at most 1 per field per vector: lut_flush empties the fields at least every 255 vectors.
// In cache (2^14 log-uniform floats, AVX-512 on Zen 4), ns/element before / after, all with Stats: fp16
// software nearest-even 0.407 / 0.391, fp8 e4m3 nearest-even 0.405 / 0.389, fp16 to-odd (software) 0.383 / 0.373,
// fp16 stochastic 0.586 / 0.565. Still 1.5 to 1.9 x the call without Stats.
struct LutTables {
  std::uint32_t t[32] = {};
};
inline LutTables make_lut(const KernelParams& p) {
  LutTables l;
  for (int i = 0; i < 32; ++i) {
    int lz;
    bool equal;
    if (i == 0 || i == 16) {
      lz = 32;
      equal = i == 16;
    } else if (i < 16) {
      lz = i + 16;
      equal = true;
    } else {
      lz = i;
      equal = false;
    }
    std::uint32_t v;
    if (lz == 32) v = equal ? 1u : 1u << 8;
    else {
      // Encodings with this lzcnt: [2^(31 - lz), 2^(32 - lz)); subnormal when all lie below one_m.
      const bool sub = (std::uint64_t{1} << (32 - lz)) <= static_cast<std::uint64_t>(p.one_m);
      v = (sub ? 1u << 16 : 0u) + (equal ? 1u << 24 : 0u);
    }
    l.t[i] = v;
  }
  return l;
}

// Lookup counting of one vector whose lanes are all finite (make_lut): `encc` the capped result
// magnitudes, `equal` the lanes whose result's value is the input's, `ovc` the overflows that count.
// SR (stochastic rounding): the smallest |x| as the signed minimum of |x| + 0x7fffffff, which the
// tiny-lane test computes anyway (round_block_lut folds min_s into vmin_m1); otherwise vmin_m1 directly.
// (A free function: as a lambda in round_loop capturing its counters by reference, AVX2 fp16 stochastic
// packed + Stats went from 0.68 to 0.88 ns/element in cache, though AVX2 never called it.)
template <class S, bool SR>
inline void count_lut(typename S::I& lut, typename S::I& over, typename S::I& vmax, typename S::I& vmin_m1,
                      typename S::I& min_s, typename S::I a, typename S::I encc, typename S::M equal, typename S::M ovc,
                      typename S::I t0, typename S::I t1) {
  lut = S::add(lut, S::lut32(S::xor_mask(S::lzcnt(encc), equal, S::set1(16)), t0, t1));
  over = S::count(over, ovc);
  vmax = S::max(vmax, a);
  if constexpr (SR) min_s = S::min(min_s, S::add(a, S::set1(0x7fffffff)));
  else vmin_m1 = S::minu(vmin_m1, S::sub(a, S::set1(1)));
}

// Empties the lookup counts' fields into the fast-path counters (see make_lut).
template <class S>
inline void lut_flush(typename S::I& lut, typename S::I& f_zero, typename S::I& f_enc0, typename S::I& f_small,
                      typename S::I& f_exact) {
  using I = typename S::I;
  const I kByte = S::set1(0xff);
  const I z = S::and_(lut, kByte);
  const I e0 = S::add(z, S::and_(S::template srli<8>(lut), kByte));
  f_zero = S::add(f_zero, z);
  f_enc0 = S::add(f_enc0, e0);
  f_small = S::add(f_small, S::add(e0, S::and_(S::template srli<16>(lut), kByte)));
  f_exact = S::add(f_exact, S::template srli<24>(lut));
  lut = S::zero();
}

}  // namespace
}  // namespace mpsim::bulk_detail
