// Internal to the bulk engine (detail/bulk_kernel.hpp, which says how these files are compiled):
// The software kernel: round_loop and its named pieces (constants, the three ways a vector is
// rounded, the result, special lanes, counting, the block drivers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/detail/bulk_counters.hpp"
#include "mpsim/format/detail/bulk_decode.hpp"
#include "mpsim/format/detail/bulk_f16c.hpp"
#include "mpsim/format/detail/bulk_params.hpp"
#include "mpsim/format/detail/bulk_philox.hpp"
#include "mpsim/format/detail/bulk_store.hpp"

namespace mpsim::bulk_detail {
namespace {

// The modes for which round_loop's non-UNIFORM kernel rounds format-subnormal lanes with one float
// addition in that mode: the IEEE directions, and to-odd as toward zero plus a sticky bit. Nearest-away
// (no such MXCSR mode) and stochastic (it needs the discarded bits) keep the per-lane shift.
template <Mode MODE>
constexpr bool kFpuMode = MODE == Mode::nearest_even || MODE == Mode::toward_zero || MODE == Mode::up ||
                          MODE == Mode::down || MODE == Mode::to_odd;
// MXCSR.RC (bits 13-14: 0 nearest-even, 1 toward -inf, 2 toward +inf, 3 toward zero) | all exceptions
// masked (0x1f80); DAZ (bit 6) and FTZ (bit 15) clear. Intel SDM vol. 1, 10.2.3.
template <Mode MODE>
constexpr unsigned kMxcsrRounding = 0x1f80u | ((MODE == Mode::down           ? 1u
                                                : MODE == Mode::up           ? 2u
                                                : MODE == Mode::nearest_even ? 0u
                                                                             : 3u)
                                               << 13);
// Holds MXCSR at `csr` for its lifetime where ON (restoring the caller's control bits and flags).
template <class S, bool ON>
struct Mxcsr {
  unsigned saved = 0;
  explicit Mxcsr(unsigned csr) {
    if constexpr (ON) {
      saved = S::getcsr();
      S::setcsr(csr);
    }
  }
  ~Mxcsr() {
    if constexpr (ON) S::setcsr(saved);
  }
  Mxcsr(const Mxcsr&) = delete;
  Mxcsr& operator=(const Mxcsr&) = delete;
};

// round_loop's pieces. Each is always_inline: round_loop inlines them all into one loop per block, where
// GCC keeps the constants and counters in registers. (A call per vector, its counters in memory, was
// measured 2x slower.)

// round_loop's vector constants, computed once per call, before the loop, from its local copy of
// KernelParams. A local of round_loop that holds no address and is passed only to always_inline code, so
// GCC replaces every member with a plain value: the loops compile as with separate locals. (Building each
// constant inside the piece that uses it instead, left to GCC to hoist out of the loop, changed the
// register allocation: AVX2 fp16 software nearest-even packed, round_loop +7 % instructions under
// callgrind.)
template <class S>
struct RoundConsts {
  using I = typename S::I;
  using M = typename S::M;
  I kAbs, kInf, kZero, kOne, kD0, k32, kShD0, kOne23, kMaxFin, kSign, kOneM, kOvfPos, kOvfNeg, kInfPos, kInfNeg,
      kNanBase, kNanPos, kNanNeg, kMagMask, kMaxFinF32, kFinMax, kCapPos, kCapNeg, kOvfYPos, kOvfYNeg, kSrMask,
      kSrTinyBias, kSrTinyX;
  bool m0;
  I kLow, kHalfM1, kHalf, kRebias, kMinNorm, kC, kSignF, kEkMax, kShiftM;
  M kOvfPosCounts, kOvfNegCounts;
  int sh0, nan_shift;

  __attribute__((always_inline)) explicit RoundConsts(const KernelParams& p) {
    kAbs = S::set1(0x7fffffff), kInf = S::set1(0x7f800000), kZero = S::zero(), kOne = S::set1(1);
    kD0 = S::set1(p.d0), k32 = S::set1(32);
    kShD0 = S::set1(p.sh0 + p.d0), kOne23 = S::set1(1 << 23);
    kMaxFin = S::set1(p.max_finite_bits), kSign = S::set1(p.fmt_sign), kOneM = S::set1(p.one_m);
    kOvfPos = S::set1(p.ovf_pos), kOvfNeg = S::set1(p.ovf_neg);
    kInfPos = S::set1(p.inf_pos), kInfNeg = S::set1(p.inf_neg);
    kNanBase = S::set1(p.nan_base), kNanPos = S::set1(p.nan_pos), kNanNeg = S::set1(p.nan_neg);
    kMagMask = S::set1(p.mag_mask), kMaxFinF32 = S::set1(p.max_finite_f32);
    kFinMax = S::set1(0x7f7fffff);
    kCapPos = S::set1(p.cap_pos), kCapNeg = S::set1(p.cap_neg);
    kOvfYPos = S::set1(p.ovf_y_pos), kOvfYNeg = S::set1(p.ovf_y_neg);
    kSrMask = S::set1(static_cast<std::int32_t>(p.sr_mask));
    // Stochastic rounding, formats with subnormals below float's: a lane has sh >= 32 where its biased
    // exponent Ee <= d0 + sh0 - 32, i.e. where 1 <= |x| bits < (d0 + sh0 - 31) << 23. Tested as the signed
    // compare kSrTinyX > (a + 0x7fffffff), which is (a - 1) < bound - 1 unsigned (zero excluded).
    // (Testing k = 32 - sh <= 0 instead, zero lanes excluded by one vptest against |x|, was slower: AVX2
    // fp16 stochastic packed 0.398 -> 0.428 ns/element in cache.)
    const std::int32_t sr_tiny_e = p.d0 + p.sh0 - 31;
    kSrTinyBias = S::set1(0x7fffffff);
    kSrTinyX = S::set1(sr_tiny_e <= 0
                           ? INT32_MIN
                           : static_cast<std::int32_t>((static_cast<std::uint32_t>(sr_tiny_e) << 23) - 1u) ^ INT32_MIN);
    // Ties (nearest-even) and to-odd look at the lowest bit of the kept significand (round_bits). In the
    // shifted patterns that is bit sh0, except with no mantissa bits (m = 0), where bit sh0 is the
    // exponent's lowest: there the kept significand is the implicit 1 (odd) in the normal range and 0
    // below it, so ties go up and to-odd changes nothing in the normal range, and below it the reverse.
    m0 = p.man_bits == 0;
    kLow = S::set1((1 << p.sh0) - 1), kHalfM1 = S::set1(((1 << p.sh0) - 1) >> 1), kHalf = S::set1(1 << (p.sh0 - 1));
    // kFpuMode (formats with subnormals above float's, round_fpu): the rebase of the format's normal
    // range, its smallest normal (float bits) and the float C whose ulp is the format's subnormal quantum.
    kRebias = S::set1((p.d0 - 1) * (1 << 23)), kMinNorm = S::set1(p.d0 * (1 << 23));
    kC = S::set1((p.d0 + p.sh0) * (1 << 23)), kSignF = S::set1(INT32_MIN);
    // simulate_fpu: 2^E's clamp (float bits of 2^(emax + 1)) and 23 - m in the exponent field.
    kEkMax = S::set1(p.ek_max), kShiftM = S::set1((23 - p.man_bits) * (1 << 23));
    kOvfPosCounts = S::mconst(p.ovf_pos_counts != 0), kOvfNegCounts = S::mconst(p.ovf_neg_counts != 0);
    sh0 = p.sh0;
    nan_shift = 23 - p.man_bits;
  }
};

// Overflows that count, without saturation: those whose result is ±inf/NaN, which the mode alone
// decides (make_params in bulk.cpp checks the specification agrees). Known at compile time: read from
// KernelParams, GCC moved the choice out of line with the mask on the stack, two taken jumps per vector.
template <class S, Mode MODE>
__attribute__((always_inline)) inline typename S::M counted_overflows(typename S::M neg, typename S::M ovf) {
  if constexpr (MODE == Mode::up) return S::mandnot(neg, ovf);
  else if constexpr (MODE == Mode::down) return S::mand(neg, ovf);
  else if constexpr (MODE == Mode::toward_zero || MODE == Mode::to_odd) return S::mconst(false);
  else return ovf;
}

// The fast path's counters (see count_fast): locals of round_loop, one set per block of kCounterBlock
// elements, referred to here so that the pieces can name them. uniform steps count zeros in `zero` and
// kept results in `exact` (Counters::u_zero / u_kept); lookup counting adds into `lut` (and `min_s`
// for stochastic rounding) until lut_flush.
template <class S>
struct FastCounts {
  using I = typename S::I;
  I& zero;
  I& enc0;
  I& small;
  I& exact;
  I& over;
  I& max;
  I& min_m1;
  I& lut;
  I& min_s;

  __attribute__((always_inline)) void reset() const {
    zero = enc0 = small = exact = over = max = S::zero();
    min_m1 = S::set1(-1);
  }
  // Adds them into c (per step or block) and starts again.
  __attribute__((always_inline)) void add_to(Counters<S>& c, bool uniform_counted) const {
    if (uniform_counted) {
      c.u_zero = S::add(c.u_zero, zero);
      c.u_kept = S::add(c.u_kept, exact);
    } else {
      c.f_zero = S::add(c.f_zero, zero);
      c.f_enc0 = S::add(c.f_enc0, enc0);
      c.f_small = S::add(c.f_small, small);
      c.f_exact = S::add(c.f_exact, exact);
    }
    c.s_over = S::add(c.s_over, over);
    c.vmax = S::max(c.vmax, max);
    c.vmin_m1 = S::minu(c.vmin_m1, min_m1);
    reset();
  }
};

// Simulate mode for PLAIN formats in a mode the FPU has (round_vector's kFpuY), one vector `b` without an
// inf or NaN lane: its float results.
// Every lane is rounded by one float addition, s = x + copysign(C, x) with C = 2^(max(E, emin) +
// 23 - m), E the exponent of |x|. s lies in [C, 2C], whose ulp is the format's quantum at |x|
// (2^(E - m) in the normal range, 2^(emin - m) below it), so the FPU rounds |x| to the format in
// the mode MXCSR holds and |s| - C is the result's magnitude, exactly (Sterbenz). To-odd:
// truncated, then the lowest bit of s (the quantum's) set where that was inexact. E is clamped
// at emax + 1 to keep C finite (make_params: emax + 24 - m <= 127 for PLAIN formats), which
// leaves every overflowing lane above max_finite. No encoding is needed, and decoding it was
// most of the call: in cache, fp8 e4m3 nearest-even simulate 0.34 -> 0.17 ns/element (packed
// 0.21). (The same form for packed output, the encoding as |s| - C plus (E - emin) << m, gained
// nothing: fp8 e4m3 nearest-even 0.210 -> 0.212, + Stats 0.376 -> 0.374, round-down + Stats 0.37
// -> 0.40.) Vectors with an inf or NaN take the general code (round_vector).
template <class S, Mode MODE, bool STATS, bool LUT>
__attribute__((always_inline)) inline typename S::I simulate_fpu(typename S::I b, const KernelParams& p,
                                                                 const RoundConsts<S>& k, FastCounts<S> l,
                                                                 typename S::I lut0, typename S::I lut1) {
  using I = typename S::I;
  using M = typename S::M;
  const I a = S::and_(b, k.kAbs);
  const I ek = S::min(S::max(S::and_(a, k.kInf), k.kMinNorm), k.kEkMax);  // float bits of 2^max(E, emin)
  const I cl = S::add(ek, k.kShiftM);
  I s_abs = S::and_(S::addf(b, S::or_(S::and_(b, k.kSignF), cl)), k.kAbs);
  I y_abs = S::subf(s_abs, cl);
  if constexpr (MODE == Mode::down) y_abs = S::and_(y_abs, k.kAbs);  // C - C is -0 rounding down
  if constexpr (MODE == Mode::to_odd) {
    s_abs = S::or_(s_abs, S::maskz_not(S::eq(y_abs, a), k.kOne));
    y_abs = S::subf(s_abs, cl);
  }
  const M ovf = S::gt(y_abs, k.kMaxFinF32);
  const M neg = S::negmask(b);
  const I y = S::sel(ovf, S::sel(neg, k.kOvfYNeg, k.kOvfYPos), S::or_(y_abs, S::and_(b, k.kSignF)));
  if constexpr (STATS) {
    // What the counts need of the encoding: |s| - C, the result in quanta, is 0 for a zero result,
    // below 1 << m for a subnormal one, and 1 << m or more (the implicit bit) above emin. (The
    // encoding itself would add (E - emin) << m, which no count looks at.)
    const I enc = S::sub(s_abs, cl);
    const M ovc = counted_overflows<S, MODE>(neg, ovf);
    const M equal = S::eq(y, b);  // zeros and exact results (an overflow never equals its input)
    if constexpr (LUT) {
      const I cap = MODE == Mode::up || MODE == Mode::down ? S::sel(neg, k.kCapNeg, k.kCapPos) : k.kCapPos;
      count_lut<S, false>(l.lut, l.over, l.max, l.min_m1, l.min_s, a, S::min(enc, cap), equal, ovc, lut0, lut1);
    } else {
      count_fast<S>(l.zero, l.enc0, l.small, l.exact, l.over, l.max, l.min_m1, a, enc, equal, ovc, p);
    }
  }
  return y;
}

// A pattern x rounded at bit sh0 in MODE (to-odd: truncated; its sticky bit comes from with_sticky),
// for the modes that are an addition to the pattern. `ar` (|x|) says which lanes lie below the format's
// normal range (the m = 0 rule, see RoundConsts::m0).
template <class S, Mode MODE>
__attribute__((always_inline)) inline typename S::I round_at_sh0(typename S::I x, typename S::I ar, typename S::M neg,
                                                                 const RoundConsts<S>& k) {
  if constexpr (MODE == Mode::nearest_even) {
    const typename S::I odd = k.m0 ? S::maskz_not(S::gt(k.kMinNorm, ar), k.kOne) : S::and_(S::srl(x, k.sh0), k.kOne);
    return S::srl(S::add(S::add(x, k.kHalfM1), odd), k.sh0);
  } else if constexpr (MODE == Mode::nearest_away) {
    return S::srl(S::add(x, k.kHalf), k.sh0);
  } else if constexpr (MODE == Mode::up) {
    return S::srl(S::add(x, S::maskz_not(neg, k.kLow)), k.sh0);
  } else if constexpr (MODE == Mode::down) {
    return S::srl(S::add(x, S::maskz(neg, k.kLow)), k.sh0);
  } else {  // toward zero, to-odd
    return S::srl(x, k.sh0);
  }
}

// To-odd: the lowest kept bit set where bits were discarded (m = 0: below the normal range only).
template <class S>
__attribute__((always_inline)) inline typename S::I with_sticky(typename S::I e, typename S::I discarded,
                                                                typename S::I ar, const RoundConsts<S>& k) {
  const typename S::I odd = k.m0 ? S::maskz(S::gt(k.kMinNorm, ar), k.kOne) : k.kOne;
  return S::or_(e, S::maskz_not(S::eq(discarded, k.kZero), odd));
}

// The rounding of a vector's finite lanes |x| = ar (sign in `neg`, the element's index `pos` for
// stochastic rounding), one function per family of kernels: `enc` the result magnitudes before the
// overflow cap, `rem` the discarded bits (in any position), zero iff the rounding was exact.

// UNIFORM formats: every lane rounds at bit sh0 of its own pattern.
template <class S, Mode MODE>
__attribute__((always_inline)) inline void round_uniform(typename S::I ar, typename S::M neg, PhiloxLanes<S>& sr,
                                                         std::size_t pos, const RoundConsts<S>& k, typename S::I& enc,
                                                         typename S::I& rem) {
  using I = typename S::I;
  rem = S::and_(ar, k.kLow);
  if constexpr (MODE != Mode::stochastic) {
    enc = round_at_sh0<S, MODE>(ar, ar, neg, k);
    if constexpr (MODE == Mode::to_odd) enc = with_sticky<S>(enc, rem, ar, k);
  } else {
    const I frac32 = S::sll(rem, 32 - k.sh0);
    const I rnd = sr.at(pos);
    enc = S::count(S::srl(ar, k.sh0), S::carry(S::and_(frac32, k.kSrMask), S::and_(rnd, k.kSrMask)));
  }
}

// Formats with subnormals above float's (fp16, fp8, ...) in a mode the FPU has (see kFpuMode): no
// per-lane shift. A lane in the format's normal range is the UNIFORM case once its exponent is
// rebased so that emin's binade starts at 1 << 23; a lane below it is rounded by the float addition
// x + copysign(C, x), C = 2^(emin + 23 - m), whose ulp is the format's subnormal quantum 2^(emin - m):
// the FPU rounds |x| to a multiple of it in the mode round_loop put in MXCSR (to-odd: toward zero,
// then the sticky lane bit), and |s| - C (float bits) is the encoding, a carry into 2^emin giving
// 1 << m. Both results are computed for every lane and selected.
template <class S, Mode MODE, bool PLAIN>
__attribute__((always_inline)) inline void round_fpu(typename S::I b, typename S::I ar, typename S::M neg,
                                                     const RoundConsts<S>& k, typename S::I& enc, typename S::I& rem) {
  using I = typename S::I;
  const I an = S::sub(ar, k.kRebias);
  const I xs = PLAIN ? b : S::or_(ar, S::and_(b, k.kSignF));
  const I s_abs = S::and_(S::addf(xs, S::or_(S::and_(b, k.kSignF), k.kC)), k.kAbs);
  const I enc_sub = S::sub(s_abs, k.kC);
  // Discarded bits (zero iff exact): the lane's own below 2^emin, the rounded-off sum there.
  // Rounding down, a zero input's C - C is -0: its sign bit is not a discarded bit.
  I rem_sub = S::xor_(S::subf(s_abs, k.kC), ar);
  if constexpr (MODE == Mode::down) rem_sub = S::and_(rem_sub, k.kAbs);
  rem = S::sel(S::gt(k.kMinNorm, ar), rem_sub, S::and_(an, k.kLow));
  enc = S::sel(S::gt(k.kMinNorm, ar), enc_sub, round_at_sh0<S, MODE>(an, ar, neg, k));
  if constexpr (MODE == Mode::to_odd) enc = with_sticky<S>(enc, rem, ar, k);
}

// The modes kFpuMode leaves, nearest-away and stochastic rounding, for formats with subnormals above
// float's: every lane its own shift. `a` is |x| before daz (stochastic rounding's tiny-lane test).
template <class S, Mode MODE>
__attribute__((always_inline)) inline void round_lane_shift(typename S::I a, typename S::I ar, PhiloxLanes<S>& sr,
                                                            std::size_t pos, const RoundConsts<S>& k,
                                                            typename S::I& enc, typename S::I& rem) {
  static_assert(MODE == Mode::nearest_away || MODE == Mode::stochastic);
  using I = typename S::I;
  // The lane's kept bits are counted from exponent Ek = min(max(E, 1), d0): its own below the
  // format's normal range, emin's above it. sig is the significand (implicit bit included) plus
  // (Ee - d0) << 23 in the normal range, so that sig >> sh is already the encoding (a carry out of
  // the mantissa lands in the exponent by the addition) and needs no exponent added back: 4
  // operations fewer than significand, shift and exponent separately. In cache (2^14
  // log-uniform, Zen 4), fp16 stochastic packed 0.387 -> 0.343 ns/element on AVX-512, 0.440 ->
  // 0.398 on AVX2; fp8 e5m2 stochastic 0.453 -> 0.413, 0.598 -> 0.551.
  const I Ek = S::min(S::max(S::template srli<23>(ar), k.kOne), k.kD0);
  const I sh = S::sub(k.kShD0, Ek);  // sh0 + (d0 - Ek)
  // Shift counts of 32 or more give 0 in vpsllvd/vpsrlvd, which is both modes' result for such
  // lanes without a clamp: lowmask all ones, rem = sig, and 0 from every shift by sh (a tiny lane
  // rounds to zero, or up by the stochastic carry form below).
  const I sig = S::sub(S::add(ar, k.kOne23), S::template slli<23>(Ek));
  const I lowmask = S::sub(S::sllv(k.kOne, sh), k.kOne);
  rem = S::and_(sig, lowmask);
  if constexpr (MODE == Mode::nearest_away) {
    enc = S::srlv(S::add(sig, S::add(S::template srli<1>(lowmask), k.kOne)), sh);
  } else {  // stochastic
    // Round up where (frac32 & sr_mask) + (r & sr_mask) carries past 2^32, frac32 the discarded
    // fraction in units of 2^-32 truncated as round_bits does. Where sh <= 31 that is where
    // sig + ((r & sr_mask) >> (32 - sh)) carries past bit sh (the low bits dropped from r meet
    // zeros in frac32, and frac32 & sr_mask drops only bits whose counterparts in r are masked
    // off), and the sum fits in 32 bits. Lanes with sh >= 32 (|x| below 2^(emin - m - 8)) get 0
    // from the shifted r: a vector holding such a non-zero input takes the carry form.
    const I rnd = sr.at(pos);
    const I rm = S::and_(rnd, k.kSrMask);
    const I kk = S::sub(k.k32, sh);  // 32 - sh
    enc = S::srlv(S::add(sig, S::srlv(rm, kk)), sh);
    // Stats' exactness test: the discarded bits moved to the top, sig << (32 - sh), one operation
    // where sig & lowmask takes three. It is zero for every lane with sh >= 32 (count >= 32):
    // right for zero inputs, and the carry form below, which any other such lane takes, sets
    // rem = sig & lowmask again. With the signed minimum below, in cache: fp16 stochastic packed +
    // Stats 0.489 -> 0.451 ns/element (AVX-512), simulate + Stats 0.515 -> 0.485, AVX2 packed + Stats
    // 0.694 -> 0.672.
    const I rem_all = rem;
    rem = S::sllv(sig, kk);
    // Lanes with sh >= 32: see RoundConsts::kSrTinyX.
    if (S::any(S::gt(k.kSrTinyX, S::add(a, k.kSrTinyBias)))) {
      // Shift counts of 32 or more give 0 in vpsllvd/vpsrlvd, which is what the specification's
      // cases give.
      rem = rem_all;
      const I frac32 = S::or_(S::sllv(rem, kk), S::srlv(rem, S::sub(sh, k.k32)));
      enc = S::count(S::srlv(sig, sh), S::carry(S::and_(frac32, k.kSrMask), rm));
    }
  }
}

// The encodings of a vector from its rounded magnitudes `enc` (flushed here where KernelParams::flush
// says, for the counts too): `encc` the magnitudes capped, `res` the encodings, `ovf` the lanes that
// overflowed, `sgn_raw` the format's sign bit of every negative lane.
template <class S, Mode MODE, bool PLAIN>
__attribute__((always_inline)) inline void assemble_result(typename S::I& enc, typename S::M neg, const KernelParams& p,
                                                           const RoundConsts<S>& k, typename S::I& encc,
                                                           typename S::I& res, typename S::M& ovf,
                                                           typename S::I& sgn_raw) {
  using I = typename S::I;
  if (!PLAIN && p.flush) enc = S::maskz_not(S::gt(k.kOneM, enc), enc);
  // Overflow: the result's magnitude is capped at the overflow result's (max_finite, inf or the
  // all-ones NaN, all >= max_finite_bits), which depends on the sign only in directed modes.
  ovf = S::gt(enc, k.kMaxFin);
  sgn_raw = S::maskz(neg, k.kSign);
  I sgn = sgn_raw;
  if (!PLAIN && p.neg_zero) sgn = S::maskz_not(S::eq(enc, k.kZero), sgn);
  I cap;
  if constexpr (PLAIN) cap = MODE == Mode::up || MODE == Mode::down ? S::sel(neg, k.kCapNeg, k.kCapPos) : k.kCapPos;
  else cap = p.cap_pos == p.cap_neg ? k.kCapPos : S::sel(neg, k.kCapNeg, k.kCapPos);
  encc = S::min(enc, cap);
  res = S::or_(encc, sgn);
  if (!PLAIN && p.ovf_special) res = S::sel(ovf, S::sel(neg, k.kOvfNeg, k.kOvfPos), res);  // fnuz NaN
}

// A vector holding an inf or NaN input (rare): `res` with those lanes' encodings blended in, `y` its
// float values in simulate mode, and the whole vector classified into the slow-path counters.
// `rem` and `ovf` as round_vector has them.
template <class S, bool STATS, OutKind KIND>
__attribute__((always_inline)) inline void special_lanes(Counters<S>& c, typename S::I a, typename S::M neg,
                                                         typename S::I sgn_raw, typename S::I rem, typename S::M ovf,
                                                         const KernelParams& p, const RoundConsts<S>& k,
                                                         typename S::I& res, typename S::I& y) {
  using I = typename S::I;
  using M = typename S::M;
  const M isinf = S::eq(a, k.kInf);
  const M isnan = S::gt(a, k.kInf);
  res = S::sel(isinf, S::sel(neg, k.kInfNeg, k.kInfPos), res);
  I nanres;
  if (p.ieee_nan) nanres = S::or_(S::or_(sgn_raw, k.kNanBase), S::srl(S::and_(a, S::set1(0x7fffff)), k.nan_shift));
  else nanres = S::sel(neg, k.kNanNeg, k.kNanPos);
  res = S::sel(isnan, nanres, res);
  if constexpr (KIND == OutKind::f32) y = decode_vec<S>(res, p);
  if constexpr (STATS) {
    M ovc;
    const I rmag = S::and_(res, k.kMagMask);
    if (p.saturate) ovc = S::mand(S::eq(rmag, k.kMaxFin), S::gt(a, k.kMaxFinF32));
    else ovc = S::mand(ovf, S::mor(S::mand(neg, k.kOvfNegCounts), S::mandnot(neg, k.kOvfPosCounts)));
    count_slow<S>(c, a, res, S::mor(S::mnot(S::eq(rem, k.kZero)), ovf), ovc, p);
  }
}

// special_lanes as a call, for round_vector's kSpecialCall.
template <class S, bool STATS, OutKind KIND>
__attribute__((noinline, cold)) void special_lanes_call(Counters<S>& c, typename S::I a, typename S::M neg,
                                                        typename S::I sgn_raw, typename S::I rem, typename S::M ovf,
                                                        const KernelParams& p, const RoundConsts<S>& k,
                                                        typename S::I& res, typename S::I& y) {
  special_lanes<S, STATS, KIND>(c, a, neg, sgn_raw, rem, ovf, p, k, res, y);
}

// Simulate mode, a vector without an inf or NaN input: the float values of the encodings `res`.
template <class S, bool UNIFORM>
__attribute__((always_inline)) inline typename S::I finite_values(typename S::I res, typename S::M ovf,
                                                                  typename S::M neg, const KernelParams& p,
                                                                  const RoundConsts<S>& k) {
  if (!UNIFORM && p.half_layout)
    return S::cvt_ph_back(S::narrow16(res));  // vcvtph2ps: exact, overflow results included
  const typename S::I y = decode_finite_vec<S, UNIFORM>(res, p);
  if (UNIFORM && p.float_layout_ovf_ok) return y;
  return S::sel(ovf, S::sel(neg, k.kOvfYNeg, k.kOvfYPos), y);
}

// The Stats of a vector without an inf or NaN input, into the fast path's counters: `b` the input, `a`
// |x|, `y` the float results (simulate mode), `enc` / `encc` the magnitudes before / after the cap,
// `rem` the discarded bits. UNIFORM_COUNT: count_fast_uniform (a step without float subnormals).
template <class S, Mode MODE, OutKind KIND, bool PLAIN, bool LUT, bool UNIFORM_COUNT>
__attribute__((always_inline)) inline void count_finite(FastCounts<S> l, typename S::I b, typename S::I a,
                                                        typename S::I y, typename S::I enc, typename S::I encc,
                                                        typename S::I rem, typename S::M neg, typename S::M ovf,
                                                        const KernelParams& p, const RoundConsts<S>& k,
                                                        typename S::I lut0, typename S::I lut1) {
  using M = typename S::M;
  // Overflows that count (counted_overflows; saturation: every |x| above max_finite).
  const M ovc = !PLAIN && p.saturate ? S::gt(a, k.kMaxFinF32) : counted_overflows<S, MODE>(neg, ovf);
  if constexpr (LUT) {
    // "Equal": the result's value is the input's (zeros and exact results). In simulate
    // mode the float result is compared with the input; packed, nothing was discarded and
    // no overflow. (Decoding packed fp16 by vcvtph2ps to compare was slower: 0.42 against
    // 0.38 ns/element in cache.)
    M equal;
    if constexpr (KIND == OutKind::f32) equal = S::eq(y, b);
    else equal = S::mandnot(ovf, S::eq(rem, k.kZero));
    count_lut<S, MODE == Mode::stochastic>(l.lut, l.over, l.max, l.min_m1, l.min_s, a, encc, equal, ovc, lut0, lut1);
  } else {
    const M kept_all = S::mandnot(ovf, S::eq(rem, k.kZero));
    if constexpr (UNIFORM_COUNT) count_fast_uniform<S>(l.zero, l.exact, l.over, l.max, l.min_m1, a, kept_all, ovc);
    else count_fast<S>(l.zero, l.enc0, l.small, l.exact, l.over, l.max, l.min_m1, a, enc, kept_all, ovc, p);
  }
}

// One vector of round_loop: the W elements at src, element `pos` of the call's block (stochastic
// rounding's index), rounded; returns what to store (float bits in simulate mode, else encodings).
// Counts into l, or c for a vector holding an inf or NaN. lut0 / lut1: the lookup table (make_lut).
template <class S, Mode MODE, bool STATS, OutKind KIND, bool UNIFORM, bool PLAIN, bool LUT, bool UNIFORM_COUNT>
__attribute__((always_inline)) inline typename S::I round_vector(const float* src, std::size_t pos,
                                                                 const KernelParams& p, const RoundConsts<S>& k,
                                                                 PhiloxLanes<S>& sr, FastCounts<S> l, Counters<S>& c,
                                                                 typename S::I lut0, typename S::I lut1) {
  using I = typename S::I;
  using M = typename S::M;
  // Simulate mode for PLAIN formats in those modes: one float addition per lane (simulate_fpu).
  constexpr bool kFpuY = !UNIFORM && kFpuMode<MODE> && PLAIN && KIND == OutKind::f32;
  if constexpr (kFpuY) {
    const I b = S::load(src);
    if (__builtin_expect(!S::any(S::gt(S::and_(b, k.kAbs), k.kFinMax)), 1))
      return simulate_fpu<S, MODE, STATS, LUT>(b, p, k, l, lut0, lut1);
  }
  const I b = S::load(src);
  const I a = S::and_(b, k.kAbs);
  I ar = a;
  if (!PLAIN && p.daz) ar = S::maskz_not(S::eq(S::and_(a, k.kInf), k.kZero), a);
  const M neg = S::negmask(b);
  I enc, rem;
  if constexpr (UNIFORM) round_uniform<S, MODE>(ar, neg, sr, pos, k, enc, rem);
  else if constexpr (kFpuMode<MODE>) round_fpu<S, MODE, PLAIN>(b, ar, neg, k, enc, rem);
  else round_lane_shift<S, MODE>(a, ar, sr, pos, k, enc, rem);
  I encc, res, sgn_raw;
  M ovf;
  assemble_result<S, MODE, PLAIN>(enc, neg, p, k, encc, res, ovf, sgn_raw);
  I y = res;
  // NaN and inf inputs are rare: only vectors holding one take the blends and the full
  // classification.
  // Marked unlikely. In cache, AVX2, log-uniform, ns/element without / with the mark: fp16
  // nearest-even + Stats 0.55 / 0.47, fp8 e4m3 + Stats 0.56 / 0.47, fp16 stochastic simulate 0.67 / 0.54.
  // AVX2 stochastic rounding with Stats into packed storage (kSpecialCall) has the fewest registers to
  // spare: there the blends are a call (special_lanes_call), which keeps them from taking registers in
  // the loop. Inline, GCC spilled more (fp16 stochastic packed + Stats 0.77 / 0.82 ns/element without /
  // with the mark, fp8 e5m2 0.85 / 0.95); against that unmarked inline code, callgrind on 2^16
  // log-uniform floats counts instructions for the whole call -3.2 % (fp16) and -4.7 % (fp8 e5m2) with
  // the call, +0.7 % inline and marked.
  const bool special = S::any(S::gt(a, k.kFinMax));
  constexpr bool kSpecialCall = MODE == Mode::stochastic && S::W == 8 && STATS && KIND != OutKind::f32;
  if (__builtin_expect(special, 0)) {
    if constexpr (kSpecialCall) special_lanes_call<S, STATS, KIND>(c, a, neg, sgn_raw, rem, ovf, p, k, res, y);
    else special_lanes<S, STATS, KIND>(c, a, neg, sgn_raw, rem, ovf, p, k, res, y);
  } else {
    if constexpr (KIND == OutKind::f32) y = finite_values<S, UNIFORM>(res, ovf, neg, p, k);
    if constexpr (STATS)
      count_finite<S, MODE, KIND, PLAIN, LUT, UNIFORM_COUNT>(l, b, a, y, enc, encc, rem, neg, ovf, p, k, lut0, lut1);
  }
  if constexpr (KIND == OutKind::f32) return y;
  else return res;
}

// round_loop's drivers for one block of `len` elements (in, out: the block's), each returning how many
// padding lanes the tail added (for_each_group). `vec(uniform_count, i, src)` rounds one vector,
// element i of the block (round_vector); uniform_count is a Flag.

// Every vector the same way.
template <class S, OutKind KIND, bool NT, class Vec>
__attribute__((always_inline)) inline std::size_t round_block_plain(const float* in, void* out, std::size_t len,
                                                                    Vec& vec) {
  return for_each_group<S, KIND, NT>(
      in, out, len,
      0, [&](std::size_t i, const float* s) __attribute__((always_inline)) { return vec(Flag<false>{}, i, s); });
}

// STATS && UNIFORM: steps of kStatsStep counted with count_fast_uniform; a step whose smallest |x| turns
// out to be a float subnormal is counted again in full (its outputs are the same both times). Not for
// calls rounding in place, which overwrite the inputs such a recount needs (round_loop counts those in
// full throughout).
template <class S, OutKind KIND, bool NT, class Vec>
__attribute__((always_inline)) inline std::size_t round_block_uniform_steps(const float* in, void* out, std::size_t len,
                                                                            Counters<S>& c, FastCounts<S> l, Vec& vec) {
  std::size_t pad = 0;
  for (std::size_t step = 0; step < len; step += kStatsStep) {
    const std::size_t m_step = len - step < kStatsStep ? len - step : kStatsStep;
    const float* src = in + step;
    unsigned char* dst = static_cast<unsigned char*>(out) + step * out_size<KIND>();
    const Counters<S> before = c;  // special_lanes (vectors with an inf or NaN) counts into c directly
    pad = for_each_group<S, KIND, NT>(
        src, dst, m_step,
        step, [&](std::size_t i, const float* s) __attribute__((always_inline)) { return vec(Flag<true>{}, i, s); });
    if (S::hmin(l.min_m1) < 0x007fffffu) {
      c = before;
      l.reset();
      pad = for_each_group<S, KIND, NT>(
          src, dst, m_step,
          step, [&](std::size_t i, const float* s) __attribute__((always_inline)) { return vec(Flag<false>{}, i, s); });
      l.add_to(c, false);
    } else {
      l.add_to(c, true);
    }
  }
  return pad;
}

// Lookup counting (LUT): chunks of at most 255 vectors per lane field, each flushed into l (lut_flush).
template <class S, OutKind KIND, bool NT, class Vec>
__attribute__((always_inline)) inline std::size_t round_block_lut(const float* in, void* out, std::size_t len,
                                                                  FastCounts<S> l, Vec& vec) {
  constexpr std::size_t kChunk =
      static_cast<std::size_t>((255 / S::template group<KIND>()) * S::template group<KIND>() * S::W);
  std::size_t pad = 0;
  for (std::size_t off = 0; off < len; off += kChunk) {
    const std::size_t m_chunk = len - off < kChunk ? len - off : kChunk;
    pad = for_each_group<S, KIND, NT>(
        in + off, static_cast<unsigned char*>(out) + off * out_size<KIND>(), m_chunk,
        off, [&](std::size_t i, const float* s) __attribute__((always_inline)) { return vec(Flag<false>{}, i, s); });
    lut_flush<S>(l.lut, l.zero, l.enc0, l.small, l.exact);
  }
  l.min_m1 = S::minu(l.min_m1, S::xor_(l.min_s, S::set1(INT32_MIN)));
  return pad;
}

// The software kernel. UNIFORM: the format has float's smallest normal exponent (emin == -126), so
// every finite float rounds at the same bit (23 - m) of its own bit pattern and the encoding is the
// rounded pattern shifted down; otherwise each lane computes its own shift (format subnormals).
// PLAIN: KernelParams::plain holds, and the per-vector tests of daz, flush, neg_zero, ovf_special,
// saturate and the sign-dependent cap go away at compile time. (Tested at run time they cost a branch
// each per vector; in cache, fp8 e4m3 nearest-even went from 0.45 to 0.44 ns/element, fp16 stochastic
// 0.81 to 0.71. The Stats test of saturate became a k-mask -> GPR -> cmov -> k-mask round trip.)
template <class S, Mode MODE, bool STATS, OutKind KIND, bool UNIFORM, bool PLAIN, bool NT>
void round_loop(const float* in, void* out, std::size_t n, std::uint64_t index0, const KernelParams& params,
                StatsAcc* acc) {
  // A local copy: the stores through `out` could alias the caller's KernelParams, so with a reference
  // GCC reloads and tests every flag (daz, flush, ...) per vector.
  const KernelParams p = params;
  using I = typename S::I;
  const RoundConsts<S> k(p);
  // The addition in round_fpu and simulate_fpu rounds in the mode MXCSR holds: set it for this call
  // (exceptions masked, no DAZ/FTZ, which would treat float subnormal inputs as zero), restored on
  // return with its flags.
  const Mxcsr<S, !UNIFORM && kFpuMode<MODE>> mxcsr(kMxcsrRounding<MODE>);
  // Stochastic rounding: element index0 + blk + i draws word (index0 + blk + i) % 4 of its Philox block
  // (with sr_half, its half of that word in the 16-bit stream: PhiloxLanes).
  PhiloxLanes<S> sr(p.sr_seed_lo, p.sr_seed_hi, index0, p.sr_half);

  // Lookup counting (make_lut): round_uniform_or_not sends PLAIN calls here only where lut_ok holds.
  constexpr bool LUT = STATS && !UNIFORM && PLAIN && S::kHasLut;
  alignas(64) LutTables lut_tables;
  if constexpr (LUT) lut_tables = make_lut(p);
  const I kLut0 = S::load32(lut_tables.t), kLut1 = S::load32(lut_tables.t + (S::W == 16 ? 16 : 8));

  Counters<S> c;
  for (std::size_t blk = 0; blk < n; blk += kCounterBlock) {
    const std::size_t len = n - blk < kCounterBlock ? n - blk : kCounterBlock;
    // The fast path's counters (FastCounts), added into c per step or block.
    I l_lut = S::zero(), l_min_s = S::set1(INT32_MAX);
    I l_zero = S::zero(), l_enc0 = S::zero(), l_small = S::zero(), l_exact = S::zero(), l_over = S::zero(),
      l_max = S::zero(), l_min_m1 = S::set1(-1);
    const FastCounts<S> l{l_zero, l_enc0, l_small, l_exact, l_over, l_max, l_min_m1, l_lut, l_min_s};
    // (always_inline: GCC otherwise calls it per vector, its counters in memory; measured 2x slower.)
    auto vec = [&](auto uniform_count, std::size_t i, const float* src) __attribute__((always_inline)) {
      return round_vector<S, MODE, STATS, KIND, UNIFORM, PLAIN, LUT, decltype(uniform_count)::value>(
          src, blk + i, p, k, sr, l, c, kLut0, kLut1);
    };
    std::size_t pad = 0;
    const float* const in_blk = in + blk;
    unsigned char* const out_blk = static_cast<unsigned char*>(out) + blk * out_size<KIND>();
    if constexpr (STATS && UNIFORM) {
      if (static_cast<const void*>(in) == out) {  // in place: no recount possible (round_block_uniform_steps)
        pad = round_block_plain<S, KIND, NT>(in_blk, out_blk, len, vec);
        l.add_to(c, false);
      } else {
        pad = round_block_uniform_steps<S, KIND, NT>(in_blk, out_blk, len, c, l, vec);
      }
    } else if constexpr (LUT) {
      pad = round_block_lut<S, KIND, NT>(in_blk, out_blk, len, l, vec);
      l.add_to(c, false);
    } else {
      pad = round_block_plain<S, KIND, NT>(in_blk, out_blk, len, vec);
      if constexpr (STATS) l.add_to(c, false);
    }
    if constexpr (STATS) {
      c.fold(*acc);
      acc->zero_in -= pad;
    }
  }
}

}  // namespace
}  // namespace mpsim::bulk_detail
