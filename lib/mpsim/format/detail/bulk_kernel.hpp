// Internal to the bulk engine: the vector kernels, written once over a small ISA wrapper `S`
// (bulk_avx2.cpp: 8 lanes of __m256i; bulk_avx512.cpp: 16 lanes of __m512i with mask registers).
// Included only by those two files, each compiled with its own -m flags; everything here has internal
// linkage (anonymous namespace) and uses no std:: inline function, so no AVX-512 instruction can leak
// into code the linker shares with the rest of the program.
//
// The algorithm is the integer one described in bulk_params.hpp: branch-free, every lane carries its
// own rounding shift (vpsrlvd/vpsllvd), the carry out of the mantissa propagates into the exponent
// field by plain addition, and the Stats are counted in per-lane 32-bit counters in the same pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/bulk_params.hpp"
#include "mpsim/format/philox.hpp"

namespace mpsim::bulk_detail {
namespace {

// A compile-time choice passed to a generic lambda (not std::integral_constant: see above).
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
    acc.exact += S::hsum(f_exact) + S::hsum(s_exact) + (same_counts_zeros ? S::hsum(h_same) - fz : 0) +
                 (S::hsum(u_kept) - uz);
    acc.nan += S::hsum(s_nan);
    acc.inf_in += S::hsum(s_inf);
    acc.overflow += S::hsum(s_over);
    const std::uint32_t mx = S::hmax(vmax), mn = S::hmin(vmin_m1);
    if (mx > acc.max_a) acc.max_a = mx;
    if (mn != 0xffffffffu && mn + 1 < acc.min_a) acc.min_a = mn + 1;
    *this = Counters{};
  }
};

// Float bits of the value of encodings `res` (the decode() of the specification, NaN payloads kept
// for IEEE encodings, canonical quiet NaN otherwise).
template <class S>
inline typename S::I decode_vec(typename S::I res, const KernelParams& p) {
  using I = typename S::I;
  using M = typename S::M;
  const I mag = S::and_(res, S::set1(p.mag_mask));
  const int up = 23 - p.man_bits;
  // Moves the format's sign bit to bit 31.
  I sign = S::sll(S::and_(res, S::set1(p.fmt_sign)), p.sign_shift);
  const I normal = S::add(S::sll(mag, up), S::set1(p.dec_add));
  I sub;
  if (p.sub_by_shift)
    sub = S::sll(mag, up);
  else
    sub = S::cvt_mul(mag, p.sub_scale);
  I y = S::sel(S::gt(S::set1(p.one_m), mag), sub, normal);
  if (p.ieee_nan) {
    const M special = S::gt(mag, S::set1(p.inf_bits - 1));
    const I spec = S::or_(S::set1(0x7f800000), S::sll(S::and_(mag, S::set1(p.one_m - 1)), up));
    y = S::sel(special, spec, y);
  } else if (p.all_ones_nan) {
    y = S::sel(S::eq(mag, S::set1(p.nan_mag)), S::set1(0x7fc00000), y);
  } else if (p.neg_zero) {  // the one NaN has the sign bit set and no sign of its own
    const M isnan = S::eq(res, S::set1(p.nan_mag));
    y = S::sel(isnan, S::set1(0x7fc00000), y);
    sign = S::maskz(S::mnot(isnan), sign);
  }  // NanEncoding::none (OCP fp6 / fp4): every encoding is a number
  return S::or_(y, sign);
}

// decode_vec for finite encodings only (the fast path). Formats with float's exponent field and bias
// (bf16, tf32, e8mX) are float bit patterns cut short: a shift. UNIFORM false: the format's emin is
// above float's, so it has neither float's layout nor its subnormals (known at compile time).
template <class S, bool UNIFORM>
inline typename S::I decode_finite_vec(typename S::I res, const KernelParams& p) {
  using I = typename S::I;
  if (UNIFORM && p.float_layout) return S::sll(res, 23 - p.man_bits);
  const I mag = S::and_(res, S::set1(p.mag_mask));
  const int up = 23 - p.man_bits;
  const I sign = S::sll(S::and_(res, S::set1(p.fmt_sign)), p.sign_shift);
  const I normal = S::add(S::sll(mag, up), S::set1(p.dec_add));
  const I sub = UNIFORM && p.sub_by_shift ? S::sll(mag, up) : S::cvt_mul(mag, p.sub_scale);
  return S::or_(S::sel(S::gt(S::set1(p.one_m), mag), sub, normal), sign);
}

// Stochastic rounding's random words, W lanes at a time: Philox4x32-10 (philox.hpp) with element e of
// the stream taking word e % 4 of block e / 4. One vector evaluates W / 4 blocks, block b's counter and
// state in lanes 4b .. 4b + 3, so a round is one 32x32->64 multiply of the even lanes (words 0 and 2 by
// M0 and M1), one in-lane word reversal of the products, and one three-way xor with the odd words
// shifted down and the round key:
//   out = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)   (Random123's _philox4x32round)
// A call whose first element index0 is not a multiple of 4 (r = index0 % 4) takes lanes r .. r + W - 1
// of two consecutive block vectors; the second is kept for the next vector of the call, so a call in
// order still evaluates one block vector per vector. Only philox.hpp's constants are used here (see the
// top of this file).
template <class S>
struct PhiloxLanes {
  using I = typename S::I;
  I key[philox::kRounds];  // round j: (k0 + j W0, 0, k1 + j W1, 0) in every block
  I mul;                   // (M0, 0, M1, 0)
  I ctr0;                  // (lo32(q0 + b), hi32(q0), 0, 0) for block b of the call's first vector
  I shift;                 // iota + r: the lanes of two block vectors a misaligned call takes
  int r;
  std::size_t ahead_pos = ~std::size_t{0};
  I ahead;

  // Element i of the call takes word i % 4 of block index0 / 4 + i / 4 (stochastic rounding).
  PhiloxLanes(std::uint32_t seed_lo, std::uint32_t seed_hi, std::uint64_t index0)
      : PhiloxLanes(seed_lo, seed_hi, FirstBlock{index0 >> 2}) {
    r = static_cast<int>(index0 & 3);
    shift = S::add(S::iota(), S::set1(r));
  }

  // blocks(4 j) is the W / 4 blocks q0 + j .. q0 + j + W / 4 - 1 (soft errors: one block per element).
  struct FirstBlock {
    std::uint64_t q0;
  };
  PhiloxLanes(std::uint32_t seed_lo, std::uint32_t seed_hi, FirstBlock first) : r(0), ahead(S::zero()) {
    std::uint32_t k0 = seed_lo, k1 = seed_hi;
    for (int j = 0; j < philox::kRounds; ++j) {
      key[j] = S::set4(static_cast<std::int32_t>(k0), 0, static_cast<std::int32_t>(k1), 0);
      k0 += philox::kW0;
      k1 += philox::kW1;
    }
    mul = S::set4(static_cast<std::int32_t>(philox::kM0), 0, static_cast<std::int32_t>(philox::kM1), 0);
    const std::uint64_t q0 = first.q0;
    ctr0 = S::add(S::set4(static_cast<std::int32_t>(static_cast<std::uint32_t>(q0)),
                          static_cast<std::int32_t>(static_cast<std::uint32_t>(q0 >> 32)), 0, 0),
                  S::block_iota());
    shift = S::add(S::iota(), S::set1(r));
  }

  // The W / 4 blocks starting with block q0 + pos / 4 (pos a multiple of 4). The high counter word stays
  // hi32(q0): bulk.cpp splits calls where it would change.
  __attribute__((always_inline)) I blocks(std::size_t pos) const {
    I c = S::add_block_lane0(ctr0, static_cast<std::int32_t>(static_cast<std::uint32_t>(pos >> 2)));
    for (int j = 0; j < philox::kRounds; ++j) c = S::xor3(S::swap_words(S::mul_epu32(c, mul)), S::srli64_32(c), key[j]);
    return c;
  }

  // The random words of elements pos .. pos + W - 1 of the call (pos a multiple of W).
  __attribute__((always_inline)) I at(std::size_t pos) {
    if (r == 0) return blocks(pos);
    const I cur = pos == ahead_pos ? ahead : blocks(pos);
    ahead = blocks(pos + S::W);
    ahead_pos = pos + S::W;
    return S::concat_shift(cur, ahead, shift);
  }
};

// Soft errors' draws (soft_error.hpp): element index0 + k evaluates the block at counter index0 + k,
// so W / 4 elements per block vector, four vectors per W elements (four times the multiplies of W elements
// of stochastic rounding, which takes one word per element). Elements 0 .. n' - 1, n' = n rounded down to a multiple of W: hit ones get their
// bit set in hit_words (zeroed by the caller) and bit_of[k] = the drawn bit, floor(w2 * m / 2^32) = the
// high word of the product of lane 4b + 2. Returns n'. The low counter word must not wrap within the call
// (lo32(index0) + n <= 2^32): the caller splits there.
template <class S>
inline std::size_t soft_error_hits(std::uint64_t index0, std::size_t n, const SoftErrorParams& p,
                                   std::uint64_t* hit_words, std::uint8_t* bit_of) {
  using I = typename S::I;
  constexpr int kBlocks = S::W / 4;  // blocks (elements) per vector
  const PhiloxLanes<S> philox(p.key_lo, p.key_hi, typename PhiloxLanes<S>::FirstBlock{index0});
  const I limit = S::set1_64(p.limit);
  const I bits = S::set1(static_cast<std::int32_t>(p.bits));
  const std::size_t whole = n / S::W * S::W;
  alignas(64) std::uint32_t prod[S::W];
  for (std::size_t i = 0; i < whole; i += S::W) {
    I c[4];
    for (int t = 0; t < 4; ++t) c[t] = philox.blocks(4 * (i + static_cast<std::size_t>(t * kBlocks)));
    for (int t = 0; t < 4; ++t) {
      unsigned hits = p.all ? (1u << kBlocks) - 1 : S::block_hits(c[t], limit);
      if (hits == 0) continue;
      S::store32(prod, S::mul_epu32(c[t], bits));
      for (; hits != 0; hits &= hits - 1) {
        const int b = __builtin_ctz(hits);
        const std::size_t k = i + static_cast<std::size_t>(t * kBlocks + b);
        hit_words[k >> 6] |= std::uint64_t{1} << (k & 63);
        bit_of[k] = static_cast<std::uint8_t>(prod[4 * b + 3]);
      }
    }
  }
  return whole;
}

// NT: non-temporal stores (KernelParams::stream), for f32 / u32 (f16c_loop stores u16 itself).
template <class S, OutKind KIND, bool NT>
inline void store_out(void* out, std::size_t i, typename S::I res, typename S::I y) {
  static_assert(!NT || KIND == OutKind::f32 || KIND == OutKind::u32, "no streaming 16/8-bit store here");
  if constexpr (KIND == OutKind::f32 || KIND == OutKind::u32) {
    void* const at = static_cast<std::uint32_t*>(out) + i;
    const typename S::I v = KIND == OutKind::f32 ? y : res;
    if constexpr (NT) S::stream32(at, v);
    else S::store32(at, v);
  }
  if constexpr (KIND == OutKind::u16) S::store16(static_cast<std::uint16_t*>(out) + i, res);
  if constexpr (KIND == OutKind::u8) S::store8(static_cast<std::uint8_t*>(out) + i, res);
}

template <OutKind KIND>
constexpr std::size_t out_size() {
  return KIND == OutKind::u8 ? 1 : KIND == OutKind::u16 ? 2 : 4;
}

// Runs `vec(i, in_ptr, out_ptr, j, nt)` over full vectors and once over a zero-padded copy of the tail;
// returns how many padding lanes the tail added (they are +0 inputs: the caller takes them off zero_in).
// nt: Flag<NT>, whether the vector's stores are non-temporal (KernelParams::stream; never the tail's,
// which is written through a buffer).
template <class S, OutKind KIND, bool NT, class Vec>
inline std::size_t for_each_vector(const float* in, void* out, std::size_t n, Vec&& vec) {
  constexpr int W = S::W;
  std::size_t i = 0;
  for (; i + W <= n; i += W) vec(i, in + i, out, i, Flag<NT>{});
  if (i == n) return 0;
  alignas(64) float tin[W];
  alignas(64) unsigned char tout[W * 4];
  const std::size_t r = n - i;
  for (int k = 0; k < W; ++k) tin[k] = 0.0f;
  std::memcpy(tin, in + i, r * sizeof(float));
  vec(i, tin, static_cast<void*>(tout), 0, Flag<false>{});
  std::memcpy(static_cast<unsigned char*>(out) + i * out_size<KIND>(), tout, r * out_size<KIND>());
  return W - r;
}

// Stores G = S::template group<KIND>() vectors of results at once (encodings, or float bits in
// simulate mode): AVX2 packs two vectors of 16-bit encodings, or four of 8-bit ones, into one 256-bit
// store instead of packing and permuting each vector on its own.
// NT: non-temporal stores (KernelParams::stream; dst aligned to the store's width).
template <class S, OutKind KIND, bool NT>
inline void store_group(void* dst, const typename S::I* r) {
  constexpr int G = S::template group<KIND>();
  if constexpr (KIND == OutKind::f32 || KIND == OutKind::u32) {
    for (int g = 0; g < G; ++g) {
      if constexpr (NT) S::stream32(static_cast<std::uint32_t*>(dst) + g * S::W, r[g]);
      else S::store32(static_cast<std::uint32_t*>(dst) + g * S::W, r[g]);
    }
  } else if constexpr (KIND == OutKind::u16) {
    auto* d = static_cast<std::uint16_t*>(dst);
    if constexpr (G == 2 && NT) S::stream16x2(d, r[0], r[1]);
    else if constexpr (G == 2) S::store16x2(d, r[0], r[1]);
    else if constexpr (NT) S::stream16(d, r[0]);
    else S::store16(d, r[0]);
  } else {
    auto* d = static_cast<std::uint8_t*>(dst);
    if constexpr (G == 4 && NT) S::stream8x4(d, r[0], r[1], r[2], r[3]);
    else if constexpr (G == 4) S::store8x4(d, r[0], r[1], r[2], r[3]);
    else if constexpr (NT) S::stream8(d, r[0]);
    else S::store8(d, r[0]);
  }
}

// Runs `vec(i, src)`, which returns the vector to store for the W elements at src (element i of the
// call, i starting at i0), over groups of G vectors and once over a zero-padded copy of the tail;
// returns how many padding lanes the tail added (+0 inputs: the caller takes them off zero_in).
// NT: the full groups' stores are non-temporal (the tail goes through a buffer).
template <class S, OutKind KIND, bool NT, class Vec>
inline std::size_t for_each_group(const float* in, void* out, std::size_t n, std::size_t i0, Vec&& vec) {
  constexpr int W = S::W;
  constexpr int G = S::template group<KIND>();
  using I = typename S::I;
  auto group = [&](const float* src, void* dst, std::size_t at, auto nt) __attribute__((always_inline)) {
    I r[G];
    for (int g = 0; g < G; ++g) r[g] = vec(at + static_cast<std::size_t>(g * W), src + g * W);
    store_group<S, KIND, decltype(nt)::value>(dst, r);
  };
  std::size_t i = 0;
  for (; i + G * W <= n; i += G * W) group(in + i, static_cast<unsigned char*>(out) + i * out_size<KIND>(), i0 + i, Flag<NT>{});
  if (i == n) return 0;
  alignas(64) float tin[G * W];
  alignas(64) unsigned char tout[G * W * 4];
  const std::size_t r = n - i;
  for (int k = 0; k < G * W; ++k) tin[k] = 0.0f;
  std::memcpy(tin, in + i, r * sizeof(float));
  group(tin, static_cast<void*>(tout), i0 + i, Flag<false>{});
  std::memcpy(static_cast<unsigned char*>(out) + i * out_size<KIND>(), tout, r * out_size<KIND>());
  return G * W - r;
}

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
                      typename S::I& min_s, typename S::I a, typename S::I encc, typename S::M equal,
                      typename S::M ovc, typename S::I t0, typename S::I t1) {
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
  const bool by_sign = p.f16c_zero_below[0] != p.f16c_zero_below[1] ||
                       p.f16c_small_below[0] != p.f16c_small_below[1] || p.f16c_finite_upto[0] != p.f16c_finite_upto[1];
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

// The modes for which round_loop's non-UNIFORM kernel rounds format-subnormal lanes with one float
// addition in that mode: the IEEE directions, and to-odd as toward zero plus a sticky bit. Nearest-away
// (no such MXCSR mode) and stochastic (it needs the discarded bits) keep the per-lane shift.
template <Mode MODE>
constexpr bool kFpuMode = MODE == Mode::nearest_even || MODE == Mode::toward_zero || MODE == Mode::up ||
                          MODE == Mode::down || MODE == Mode::to_odd;
// MXCSR.RC (bits 13-14: 0 nearest-even, 1 toward -inf, 2 toward +inf, 3 toward zero) | all exceptions
// masked (0x1f80); DAZ (bit 6) and FTZ (bit 15) clear. Intel SDM vol. 1, 10.2.3.
template <Mode MODE>
constexpr unsigned kMxcsrRounding = 0x1f80u | ((MODE == Mode::down ? 1u : MODE == Mode::up ? 2u
                                                : MODE == Mode::nearest_even ? 0u : 3u) << 13);
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
  I kAbs, kInf, kZero, kOne, kD0, k32, kShD0, kOne23, kMaxFin, kSign, kOneM, kOvfPos, kOvfNeg, kInfPos, kInfNeg, kNanBase,
    kNanPos, kNanNeg, kMagMask, kMaxFinF32, kFinMax, kCapPos, kCapNeg, kOvfYPos, kOvfYNeg, kSrMask, kSrTinyBias, kSrTinyX;
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
    kSrTinyX = S::set1(sr_tiny_e <= 0 ? INT32_MIN
                                      : static_cast<std::int32_t>((static_cast<std::uint32_t>(sr_tiny_e) << 23) - 1u) ^
                                            INT32_MIN);
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
  if constexpr (MODE == Mode::up)
    return S::mandnot(neg, ovf);
  else if constexpr (MODE == Mode::down)
    return S::mand(neg, ovf);
  else if constexpr (MODE == Mode::toward_zero || MODE == Mode::to_odd)
    return S::mconst(false);
  else
    return ovf;
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
__attribute__((always_inline)) inline typename S::I with_sticky(typename S::I e, typename S::I discarded, typename S::I ar,
                                                                const RoundConsts<S>& k) {
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
                                                            std::size_t pos, const RoundConsts<S>& k, typename S::I& enc,
                                                            typename S::I& rem) {
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
                                                           const RoundConsts<S>& k, typename S::I& encc, typename S::I& res,
                                                           typename S::M& ovf, typename S::I& sgn_raw) {
  using I = typename S::I;
  if (!PLAIN && p.flush) enc = S::maskz_not(S::gt(k.kOneM, enc), enc);
  // Overflow: the result's magnitude is capped at the overflow result's (max_finite, inf or the
  // all-ones NaN, all >= max_finite_bits), which depends on the sign only in directed modes.
  ovf = S::gt(enc, k.kMaxFin);
  sgn_raw = S::maskz(neg, k.kSign);
  I sgn = sgn_raw;
  if (!PLAIN && p.neg_zero) sgn = S::maskz_not(S::eq(enc, k.kZero), sgn);
  I cap;
  if constexpr (PLAIN)
    cap = MODE == Mode::up || MODE == Mode::down ? S::sel(neg, k.kCapNeg, k.kCapPos) : k.kCapPos;
  else
    cap = p.cap_pos == p.cap_neg ? k.kCapPos : S::sel(neg, k.kCapNeg, k.kCapPos);
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
                                                         const KernelParams& p, const RoundConsts<S>& k, typename S::I& res,
                                                         typename S::I& y) {
  using I = typename S::I;
  using M = typename S::M;
  const M isinf = S::eq(a, k.kInf);
  const M isnan = S::gt(a, k.kInf);
  res = S::sel(isinf, S::sel(neg, k.kInfNeg, k.kInfPos), res);
  I nanres;
  if (p.ieee_nan)
    nanres = S::or_(S::or_(sgn_raw, k.kNanBase), S::srl(S::and_(a, S::set1(0x7fffff)), k.nan_shift));
  else
    nanres = S::sel(neg, k.kNanNeg, k.kNanPos);
  res = S::sel(isnan, nanres, res);
  if constexpr (KIND == OutKind::f32) y = decode_vec<S>(res, p);
  if constexpr (STATS) {
    M ovc;
    const I rmag = S::and_(res, k.kMagMask);
    if (p.saturate)
      ovc = S::mand(S::eq(rmag, k.kMaxFin), S::gt(a, k.kMaxFinF32));
    else
      ovc = S::mand(ovf, S::mor(S::mand(neg, k.kOvfNegCounts), S::mandnot(neg, k.kOvfPosCounts)));
    count_slow<S>(c, a, res, S::mor(S::mnot(S::eq(rem, k.kZero)), ovf), ovc, p);
  }
}

// special_lanes as a call, for round_vector's kSpecialCall.
template <class S, bool STATS, OutKind KIND>
__attribute__((noinline, cold)) void special_lanes_call(Counters<S>& c, typename S::I a, typename S::M neg,
                                                        typename S::I sgn_raw, typename S::I rem, typename S::M ovf,
                                                        const KernelParams& p, const RoundConsts<S>& k, typename S::I& res,
                                                        typename S::I& y) {
  special_lanes<S, STATS, KIND>(c, a, neg, sgn_raw, rem, ovf, p, k, res, y);
}

// Simulate mode, a vector without an inf or NaN input: the float values of the encodings `res`.
template <class S, bool UNIFORM>
__attribute__((always_inline)) inline typename S::I finite_values(typename S::I res, typename S::M ovf, typename S::M neg,
                                                                  const KernelParams& p, const RoundConsts<S>& k) {
  if (!UNIFORM && p.half_layout) return S::cvt_ph_back(S::narrow16(res));  // vcvtph2ps: exact, overflow results included
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
                                                        const KernelParams& p, const RoundConsts<S>& k, typename S::I lut0,
                                                        typename S::I lut1) {
  using M = typename S::M;
  // Overflows that count (counted_overflows; saturation: every |x| above max_finite).
  const M ovc = !PLAIN && p.saturate ? S::gt(a, k.kMaxFinF32) : counted_overflows<S, MODE>(neg, ovf);
  if constexpr (LUT) {
    // "Equal": the result's value is the input's (zeros and exact results). In simulate
    // mode the float result is compared with the input; packed, nothing was discarded and
    // no overflow. (Decoding packed fp16 by vcvtph2ps to compare was slower: 0.42 against
    // 0.38 ns/element in cache.)
    M equal;
    if constexpr (KIND == OutKind::f32)
      equal = S::eq(y, b);
    else
      equal = S::mandnot(ovf, S::eq(rem, k.kZero));
    count_lut<S, MODE == Mode::stochastic>(l.lut, l.over, l.max, l.min_m1, l.min_s, a, encc, equal, ovc, lut0, lut1);
  } else {
    const M kept_all = S::mandnot(ovf, S::eq(rem, k.kZero));
    if constexpr (UNIFORM_COUNT)
      count_fast_uniform<S>(l.zero, l.exact, l.over, l.max, l.min_m1, a, kept_all, ovc);
    else
      count_fast<S>(l.zero, l.enc0, l.small, l.exact, l.over, l.max, l.min_m1, a, enc, kept_all, ovc, p);
  }
}

// One vector of round_loop: the W elements at src, element `pos` of the call's block (stochastic
// rounding's index), rounded; returns what to store (float bits in simulate mode, else encodings).
// Counts into l, or c for a vector holding an inf or NaN. lut0 / lut1: the lookup table (make_lut).
template <class S, Mode MODE, bool STATS, OutKind KIND, bool UNIFORM, bool PLAIN, bool LUT, bool UNIFORM_COUNT>
__attribute__((always_inline)) inline typename S::I round_vector(const float* src, std::size_t pos, const KernelParams& p,
                                                                 const RoundConsts<S>& k, PhiloxLanes<S>& sr,
                                                                 FastCounts<S> l, Counters<S>& c, typename S::I lut0,
                                                                 typename S::I lut1) {
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
  if constexpr (UNIFORM)
    round_uniform<S, MODE>(ar, neg, sr, pos, k, enc, rem);
  else if constexpr (kFpuMode<MODE>)
    round_fpu<S, MODE, PLAIN>(b, ar, neg, k, enc, rem);
  else
    round_lane_shift<S, MODE>(a, ar, sr, pos, k, enc, rem);
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
__attribute__((always_inline)) inline std::size_t round_block_plain(const float* in, void* out, std::size_t len, Vec& vec) {
  return for_each_group<S, KIND, NT>(in, out, len, 0, [&](std::size_t i, const float* s) __attribute__((always_inline)) {
    return vec(Flag<false>{}, i, s);
  });
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
    pad = for_each_group<S, KIND, NT>(src, dst, m_step, step, [&](std::size_t i, const float* s) __attribute__((always_inline)) {
      return vec(Flag<true>{}, i, s);
    });
    if (S::hmin(l.min_m1) < 0x007fffffu) {
      c = before;
      l.reset();
      pad = for_each_group<S, KIND, NT>(src, dst, m_step, step, [&](std::size_t i, const float* s) __attribute__((always_inline)) {
        return vec(Flag<false>{}, i, s);
      });
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
  constexpr std::size_t kChunk = static_cast<std::size_t>((255 / S::template group<KIND>()) * S::template group<KIND>() * S::W);
  std::size_t pad = 0;
  for (std::size_t off = 0; off < len; off += kChunk) {
    const std::size_t m_chunk = len - off < kChunk ? len - off : kChunk;
    pad = for_each_group<S, KIND, NT>(in + off, static_cast<unsigned char*>(out) + off * out_size<KIND>(), m_chunk, off,
                                      [&](std::size_t i, const float* s) __attribute__((always_inline)) {
                                        return vec(Flag<false>{}, i, s);
                                      });
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
  // Stochastic rounding: element index0 + blk + i draws word (index0 + blk + i) % 4 of its Philox block.
  PhiloxLanes<S> sr(p.sr_seed_lo, p.sr_seed_hi, index0);

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
      return round_vector<S, MODE, STATS, KIND, UNIFORM, PLAIN, LUT, decltype(uniform_count)::value>(src, blk + i, p, k, sr, l,
                                                                                                    c, kLut0, kLut1);
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
    if (static_cast<const void*>(in) == out) return round_loop<S, MODE, true, KIND, true, false, NT>(in, out, n, index0, p, acc);
  }
  using I = typename S::I;
  const int sh0 = p.sh0;
  const I kAbs = S::set1(0x7fffffff), kInf = S::set1(0x7f800000), kZero = S::zero(), kOne = S::set1(1);
  // (float_fast needs IEEE NaNs, so m >= 1: bit sh0 is the kept significand's lowest, see round_loop.)
  const I kLow = S::set1((1 << sh0) - 1), kKeep = S::set1(~((1 << sh0) - 1)), kHalfM1 = S::set1(((1 << sh0) - 1) >> 1);
  const I kHalf = S::set1(1 << (sh0 - 1)), kBit = S::set1(1 << sh0), kQuiet = S::set1(0x00400000);
  const I kSrMask = S::set1(static_cast<std::int32_t>(p.sr_mask));
  PhiloxLanes<S> sr(p.sr_seed_lo, p.sr_seed_hi, index0);
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
    for_each_group<S, KIND, NT>(in, out, n, 0, [&](std::size_t i, const float* src) __attribute__((always_inline)) {
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
        const std::size_t step_pad =
            for_each_group<S, KIND, NT>(src, dst, m, at, [&](std::size_t i, const float* s) __attribute__((always_inline)) {
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

template <class S, Mode MODE, bool STATS, OutKind KIND, bool NT>
void round_uniform_or_not(const float* in, void* out, std::size_t n, std::uint64_t index0, const KernelParams& p,
                          StatsAcc* acc) {
  if (p.uniform) {
    // 8-bit storage cannot hold float's exponent field: float_fast never holds for u8.
    if constexpr (KIND != OutKind::u8) {
      if (p.float_fast) return float_layout_loop<S, MODE, STATS, KIND, NT>(in, out, n, index0, p, acc);
    }
    round_loop<S, MODE, STATS, KIND, true, false, NT>(in, out, n, index0, p, acc);
  }
  else if (p.plain && (!STATS || !S::kHasLut || p.lut_ok))
    round_loop<S, MODE, STATS, KIND, false, true, NT>(in, out, n, index0, p, acc);
  else
    round_loop<S, MODE, STATS, KIND, false, false, NT>(in, out, n, index0, p, acc);
}

template <class S, Mode MODE, bool STATS, bool NT>
void round_dispatch_kind(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
                         const KernelParams& p, StatsAcc* acc) {
  if constexpr (MODE == Mode::nearest_even || MODE == Mode::toward_zero || MODE == Mode::up || MODE == Mode::down) {
    // _MM_FROUND_TO_NEAREST_INT 0, _TO_NEG_INF 1, _TO_POS_INF 2, _TO_ZERO 3 (immintrin.h)
    constexpr int imm = MODE == Mode::nearest_even ? 0 : MODE == Mode::down ? 1 : MODE == Mode::up ? 2 : 3;
    if (p.f16c && kind == OutKind::f32) return f16c_loop<S, imm, STATS, OutKind::f32, NT>(in, out, n, p, acc);
    if (p.f16c && kind == OutKind::u16) return f16c_loop<S, imm, STATS, OutKind::u16, NT>(in, out, n, p, acc);
  }
  if constexpr (MODE == Mode::nearest_away) {
    if (p.f16c && kind == OutKind::f32) return f16c_loop<S, kAwayImm, STATS, OutKind::f32, NT>(in, out, n, p, acc);
    if (p.f16c && kind == OutKind::u16) return f16c_loop<S, kAwayImm, STATS, OutKind::u16, NT>(in, out, n, p, acc);
  }
  if constexpr (MODE == Mode::to_odd) {
    if (p.f16c && kind == OutKind::f32) return f16c_loop<S, kOddImm, STATS, OutKind::f32, NT>(in, out, n, p, acc);
    if (p.f16c && kind == OutKind::u16) return f16c_loop<S, kOddImm, STATS, OutKind::u16, NT>(in, out, n, p, acc);
  }
  switch (kind) {
    case OutKind::f32: return round_uniform_or_not<S, MODE, STATS, OutKind::f32, NT>(in, out, n, index0, p, acc);
    case OutKind::u8: return round_uniform_or_not<S, MODE, STATS, OutKind::u8, NT>(in, out, n, index0, p, acc);
    case OutKind::u16: return round_uniform_or_not<S, MODE, STATS, OutKind::u16, NT>(in, out, n, index0, p, acc);
    case OutKind::u32: return round_uniform_or_not<S, MODE, STATS, OutKind::u32, NT>(in, out, n, index0, p, acc);
  }
}

template <class S, Mode MODE>
void round_dispatch_stats(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
                          const KernelParams& p, StatsAcc* acc) {
  // Streaming stores (KernelParams::stream) are a template parameter too: a test per vector, or two loops
  // in one instantiation, made GCC spill in the AVX2 Stats loops (in cache, fp16 software nearest-even +
  // Stats 0.47 -> 0.71 and 0.48 ns/element, F16C + Stats 0.188 -> 0.195).
  if (acc && p.stream)
    round_dispatch_kind<S, MODE, true, true>(in, out, kind, n, index0, p, acc);
  else if (acc)
    round_dispatch_kind<S, MODE, true, false>(in, out, kind, n, index0, p, acc);
  else if (p.stream)
    round_dispatch_kind<S, MODE, false, true>(in, out, kind, n, index0, p, acc);
  else
    round_dispatch_kind<S, MODE, false, false>(in, out, kind, n, index0, p, acc);
}

template <class S>
void round_f32(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
               const KernelParams& p, StatsAcc* acc) {
  switch (p.mode) {
    case Mode::nearest_even: return round_dispatch_stats<S, Mode::nearest_even>(in, out, kind, n, index0, p, acc);
    case Mode::toward_zero: return round_dispatch_stats<S, Mode::toward_zero>(in, out, kind, n, index0, p, acc);
    case Mode::up: return round_dispatch_stats<S, Mode::up>(in, out, kind, n, index0, p, acc);
    case Mode::down: return round_dispatch_stats<S, Mode::down>(in, out, kind, n, index0, p, acc);
    case Mode::nearest_away: return round_dispatch_stats<S, Mode::nearest_away>(in, out, kind, n, index0, p, acc);
    case Mode::to_odd: return round_dispatch_stats<S, Mode::to_odd>(in, out, kind, n, index0, p, acc);
    case Mode::stochastic: return round_dispatch_stats<S, Mode::stochastic>(in, out, kind, n, index0, p, acc);
  }
}

template <class S>
void decode_all(const void* in, OutKind kind, float* out, std::size_t n, const KernelParams& p) {
  constexpr int W = S::W;
  using I = typename S::I;
  std::size_t i = 0;
  auto one = [&](I res, float* dst) { S::store32(dst, decode_vec<S>(res, p)); };
  for (; i + W <= n; i += W) {
    I res;
    if (kind == OutKind::u8) res = S::load8(static_cast<const std::uint8_t*>(in) + i);
    else if (kind == OutKind::u16) res = S::load16(static_cast<const std::uint16_t*>(in) + i);
    else res = S::load32(static_cast<const std::uint32_t*>(in) + i);
    one(res, out + i);
  }
  if (i == n) return;
  alignas(64) std::uint32_t t[W];
  alignas(64) float o[W];
  for (int k = 0; k < W; ++k) {
    std::uint32_t v = 0;
    if (i + k < n) {
      if (kind == OutKind::u8) v = static_cast<const std::uint8_t*>(in)[i + k];
      else if (kind == OutKind::u16) v = static_cast<const std::uint16_t*>(in)[i + k];
      else v = static_cast<const std::uint32_t*>(in)[i + k];
    }
    t[k] = v;
  }
  one(S::load32(t), o);
  std::memcpy(out + i, o, (n - i) * sizeof(float));
}

}  // namespace
}  // namespace mpsim::bulk_detail
