// Tests of kernels/emu.hpp, the device emulation (the host/device specification hd/round_spec.hpp under a
// device profile) and the correctly rounded fp16/bf16 arithmetic the GPU comparisons run on the device.
// Compiled here for the host: the emulation must give the library's round_bits() bits for every format,
// mode and input (all 2^32 floats in the [exhaustive] cases), and the arithmetic must match exact
// references computed independently (exact double sums/products, exact 128-bit integer fma, neighbour
// checks).
#include "catch_compat.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "emu_host.hpp"
#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/format/arith.hpp"
#include "mpsim/format/round.hpp"

using namespace mpsim;

namespace {

const Format& fmt_by(int k) {
  static const Format sat_e4m3 = [] {
    Format f = fp8_e4m3();
    f.overflow = Overflow::saturate;
    return f;
  }();
  static const Format sat_e5m2 = [] {
    Format f = fp8_e5m2();
    f.overflow = Overflow::saturate;
    return f;
  }();
  static const Format ftz_fp16 = [] {
    Format f = fp16();
    f.subnormals = Subnormals::flush;
    return f;
  }();
  switch (k) {
    case 0: return fp16();
    case 1: return bf16();
    case 2: return fp8_e4m3();
    case 3: return fp8_e5m2();
    case 4: return sat_e4m3;
    case 5: return sat_e5m2;
    case 6: return ftz_fp16;
    case 7: return tf32();
    case 8: return fp8_e4m3fnuz();
    // The other ml_dtypes element types: unsigned and zero-less (e8m0), without NaN (fp6, fp4).
    case 9: return float8_e4m3();
    case 10: return float8_e3m4();
    case 11: return float8_e4m3b11fnuz();
    case 12: return float8_e8m0fnu();
    case 13: return float6_e2m3fn();
    case 14: return float6_e3m2fn();
    default: return float4_e2m1fn();
  }
}
constexpr int kFormats = 16;

std::vector<std::uint32_t> probe_floats() {
  std::vector<std::uint32_t> v;
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 200000; ++i) v.push_back(static_cast<std::uint32_t>(rng()));
  // Every exponent with mantissas near the rounding boundaries of every format here (7, 10, 3, 2 bits).
  for (std::uint32_t e = 0; e < 256; ++e)
    for (int m : {2, 3, 7, 10})
      for (std::uint32_t low : {0u, 1u, 2u, 3u}) {
        const std::uint32_t half = 1u << (22 - m);
        for (std::uint32_t mid : {half - 1, half, half + 1, 2 * half - 1, 3 * half, 0x7fffffu}) {
          const std::uint32_t man = (mid + low * (2 * half)) & 0x7fffffu;
          v.push_back((e << 23) | man);
          v.push_back(0x80000000u | (e << 23) | man);
        }
      }
  for (std::uint32_t s :
       {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff812345u,
        0x00000001u, 0x807fffffu, 0x477fe000u, 0x477ff000u, 0x43e00000u, 0x43f00000u, 0x47700000u})
    v.push_back(s);
  return v;
}

}  // namespace

TEST_CASE("round_float equals round_bits for every format and mode on probe inputs", "[emu]") {
  const auto probes = probe_floats();
  std::uint64_t checked = 0, mismatches = 0;
  for (int k = 0; k < kFormats; ++k) {
    const Format& f = fmt_by(k);
    for (int m = 0; m < 7; ++m)
      for (bool daz : {false, true}) {
        Rounding r = Rounding::of(static_cast<RoundingMode>(m));
        if (r.mode == RoundingMode::stochastic) {
          r.seed = 99;
          r.sr_bits = 1 + 7 * k % 32;
        }
        if (daz) r.input_subnormals = InputSubnormals::zero;
        emu::DevFormat df;
        emu::DevRounding dr;
        emu::make_dev(f, r, profile_ieee(), Operation::convert, df, dr);
        for (std::size_t i = 0; i < probes.size(); ++i) {
          const float x = std::bit_cast<float>(probes[i]);
          const std::uint64_t want = round_bits(x, f, r, i);
          const std::uint64_t got = emu::round_float(probes[i], df, dr, i);
          ++checked;
          if (want != got && ++mismatches <= 10)
            UNSCOPED_INFO(f.name << " mode " << m << " x=0x" << std::hex << probes[i] << " want 0x" << want << " got 0x"
                                 << got << std::dec);
        }
      }
  }
  std::printf("emu round_float vs round_bits: %llu (input, format, mode) checked, %llu mismatches\n",
              (unsigned long long)checked, (unsigned long long)mismatches);
  CHECK(mismatches == 0);
}

TEST_CASE("round_double equals round_bits on random doubles", "[emu]") {
  std::mt19937_64 rng(777);
  std::uint64_t checked = 0, mismatches = 0;
  for (int i = 0; i < 300000; ++i) {
    // Exponents concentrated where the formats live, plus raw random bit patterns.
    std::uint64_t b = rng();
    if (i % 2) b = (b & 0x800fffffffffffffull) | (std::uint64_t(1023 - 150 + rng() % 300) << 52);
    const double x = std::bit_cast<double>(b);
    for (int k = 0; k < kFormats; ++k) {
      const Format& f = fmt_by(k);
      const Rounding r = Rounding::of(static_cast<RoundingMode>(i % 6));
      const emu::DevFormat df = emu::dev_format(f);
      const emu::DevRounding dr = emu::dev_rounding(r);
      ++checked;
      if (round_bits(x, f, r) != emu::round_double(x, df, dr)) ++mismatches;
    }
  }
  std::printf("emu round_double vs round_bits: %llu checked, %llu mismatches\n", (unsigned long long)checked,
              (unsigned long long)mismatches);
  CHECK(mismatches == 0);
}

TEST_CASE("emu decode equals decode on every encoding of the 8- and 16-bit formats", "[emu]") {
  std::uint64_t checked = 0, mismatches = 0;
  for (int k = 0; k < kFormats; ++k) {
    const Format& f = fmt_by(k);
    if (f.storage_bits > 16) continue;
    const emu::DevFormat df = emu::dev_format(f);
    for (std::uint64_t b = 0; b < (std::uint64_t{1} << f.storage_bits); ++b) {
      const double want = decode(b, f), got = emu::decode(b, df);
      ++checked;
      const bool same = std::isnan(want) ? std::isnan(got) && std::signbit(want) == std::signbit(got)
                                         : std::bit_cast<std::uint64_t>(want) == std::bit_cast<std::uint64_t>(got);
      if (!same) ++mismatches;
    }
  }
  std::printf("emu decode vs decode: %llu encodings, %llu mismatches\n", (unsigned long long)checked,
              (unsigned long long)mismatches);
  CHECK(mismatches == 0);
}

TEST_CASE("profiles reach the device structs: cuda-sm90 NaN, x86 bf16 DAZ", "[emu]") {
  emu::DevFormat df;
  emu::DevRounding dr;
  emu::make_dev(fp16(), Rounding{}, profile_cuda_sm90(), Operation::convert, df, dr);
  CHECK(emu::round_float(0xffc01234u, df, dr) == 0x7fff);
  CHECK(emu::round_float(0x3f800000u, df, dr) == 0x3c00);
  emu::make_dev(bf16(), Rounding{}, profile_x86(), Operation::convert, df, dr);
  CHECK(emu::round_float(0x00400000u, df, dr) == 0x0000);  // float subnormal 2^-127 -> +0 (DAZ)
  CHECK(emu::round_float(0x80400000u, df, dr) == 0x8000);
  CHECK(emu::round_float(0xffc01234u, df, dr) == 0xffc0);  // payload kept, quiet bit set
  emu::make_dev(fp8_e4m3(), Rounding{}, profile_cuda_sm90(), Operation::convert, df, dr);
  CHECK(emu::round_float(0xffc00000u, df, dr) == 0x7f);  // -NaN -> canonical 0x7F
  CHECK(emu::round_float(0xff800000u, df, dr) == 0xff);  // -inf (NOSAT) -> NaN with the sign
  // Every probe agrees with the library's round_bits_like().
  std::uint64_t mismatches = 0, checked = 0;
  for (const Profile* p : {&profile_x86(), &profile_cuda_sm90()})
    for (int k = 0; k < 6; ++k)
      for (std::uint32_t x : probe_floats()) {
        emu::make_dev(fmt_by(k), Rounding{}, *p, Operation::convert, df, dr);
        ++checked;
        if (emu::round_float(x, df, dr) != round_bits_like(*p, std::bit_cast<float>(x), fmt_by(k))) ++mismatches;
      }
  std::printf("emu with profiles vs round_bits_like: %llu checked, %llu mismatches\n", (unsigned long long)checked,
              (unsigned long long)mismatches);
  CHECK(mismatches == 0);
}

TEST_CASE("the device structs carry cuda-sm90's tf32 NaN rules: every NaN float, rna / rna.satfinite / rn / rz",
          "[emu]") {
  // The recorded H100 rules for tf32 (lib/mpsim/format/profile.cpp) act on NaN inputs only: cvt.rna cuts the
  // payload, cvt.rna.satfinite cuts it and lowers the encoding by one, cvt.rn / cvt.rz write 0x7FFFE000.
  struct Case {
    const char* name;
    Rounding r;
    Overflow overflow;
  };
  const Case cases[] = {{"rna", Rounding::of(RoundingMode::nearest_away), Overflow::to_inf},
                        {"rna.satfinite", Rounding::of(RoundingMode::nearest_away), Overflow::saturate},
                        {"rn", Rounding{}, Overflow::to_inf},
                        {"rz", Rounding::of(RoundingMode::toward_zero), Overflow::to_inf}};
  for (const Case& c : cases) {
    Format f = tf32();
    f.overflow = c.overflow;
    emu::DevFormat df;
    emu::DevRounding dr;
    emu::make_dev(f, c.r, profile_cuda_sm90(), Operation::convert, df, dr);
    std::uint64_t checked = 0, mismatches = 0, changed = 0;
    for (std::uint32_t sign : {0u, 0x80000000u})
      for (std::uint32_t m = 1; m < (1u << 23); ++m) {
        const std::uint32_t x = sign | 0x7f800000u | m;
        const std::uint64_t want = round_bits_like(profile_cuda_sm90(), std::bit_cast<float>(x), f, c.r);
        ++checked;
        if (emu::round_float(x, df, dr) != want) ++mismatches;
        if (want != round_bits(std::bit_cast<float>(x), f, c.r)) ++changed;
      }
    std::printf("tf32 %s under cuda-sm90: %llu NaN floats, emu vs library %llu mismatches (%llu differ from IEEE)\n",
                c.name, (unsigned long long)checked, (unsigned long long)mismatches, (unsigned long long)changed);
    CHECK(mismatches == 0);
    CHECK(changed > 0);  // the rule is in force, so the comparison can fail
  }
}

namespace {

// fp16 values are integers times 2^-24; products times 2^-48. The exact a*b + c scaled by 2^48 fits in
// 128 bits; rounded to odd at 53 bits it is a double from which round_bits() gives the correctly
// rounded fp16 in any mode (written apart from emu.hpp's double-residual method).
double exact_fma_fp16_to_odd(std::uint16_t a, std::uint16_t b, std::uint16_t c) {
  auto as_int = [](std::uint16_t h, __int128& v) {  // h = v * 2^-24
    const int e = (h >> 10) & 31;
    const __int128 m = (h & 1023) | (e ? 1024 : 0);
    v = m << (e ? e - 1 : 0);
    if (h & 0x8000) v = -v;
  };
  __int128 va, vb, vc;
  as_int(a, va);
  as_int(b, vb);
  as_int(c, vc);
  const __int128 n = va * vb + (vc << 24);  // * 2^-48
  if (n == 0) return 0.0;                   // sign of zero handled by the caller
  const bool neg = n < 0;
  unsigned __int128 u = neg ? -(unsigned __int128)n : (unsigned __int128)n;
  int shift = 0;
  bool sticky = false;
  while (u >> 53) {
    sticky |= u & 1;
    u >>= 1;
    ++shift;
  }
  std::uint64_t sig = static_cast<std::uint64_t>(u);
  if (sticky) sig |= 1;
  const double v = std::ldexp(static_cast<double>(sig), shift - 48);
  return neg ? -v : v;
}

}  // namespace

TEST_CASE("fp16 arithmetic of the emulation is correctly rounded in every mode", "[emu]") {
  std::mt19937_64 rng(4242);
  std::vector<std::uint16_t> specials = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0xbc00, 0x3c01,
                                         0x7bff, 0xfbff, 0x7c00, 0xfc00, 0x7e00, 0xfe01, 0x3555, 0x4000, 0x1400};
  std::uint64_t checked = 0, mismatches = 0;
  const Format& f = fp16();
  for (int mode = 0; mode < 6; ++mode) {
    const Rounding r = Rounding::of(static_cast<RoundingMode>(mode));
    const emu::DevFormat df = emu::dev_format(f);
    const emu::DevRounding dr = emu::dev_rounding(r);
    for (int i = 0; i < 120000; ++i) {
      std::uint16_t a = static_cast<std::uint16_t>(rng()), b = static_cast<std::uint16_t>(rng()),
                    c = static_cast<std::uint16_t>(rng());
      if (i < 18 * 18) {
        a = specials[i / 18];
        b = specials[i % 18];
      }
      const double da = decode(a, f), db = decode(b, f), dc = decode(c, f);
      const bool any_nan = std::isnan(da) || std::isnan(db);
      auto check = [&](emu::Op op, std::uint64_t want) {
        ++checked;
        const std::uint64_t got = emu::arith(op, a, b, c, df, dr);
        if (got != want && ++mismatches <= 10)
          UNSCOPED_INFO("op " << int(op) << " mode " << mode << " a=" << a << " b=" << b << " c=" << c << " want "
                              << want << " got " << got);
      };
      if (!any_nan) {
        // fp16 sums and products are exact in double: one rounding by round_bits() is the answer.
        double sum = da + db, diff = da - db;
        if (sum == 0 && !(da == 0 && db == 0 && std::signbit(da) == std::signbit(db)))
          sum = r.mode == RoundingMode::down ? -0.0 : 0.0;
        if (diff == 0 && !(da == 0 && db == 0 && std::signbit(da) != std::signbit(db)))
          diff = r.mode == RoundingMode::down ? -0.0 : 0.0;
        if (!std::isnan(sum)) check(emu::kAdd, round_bits(sum, f, r));
        if (!std::isnan(diff)) check(emu::kSub, round_bits(diff, f, r));
        const double prod = da * db;
        if (!std::isnan(prod)) check(emu::kMul, round_bits(prod, f, r));
        if (std::isfinite(da) && std::isfinite(db) && std::isfinite(dc) && !std::isnan(dc)) {
          double e = exact_fma_fp16_to_odd(a, b, c);
          if (e == 0) {
            const bool pn = std::signbit(da) != std::signbit(db);
            const bool zero_terms = (da == 0 || db == 0) && dc == 0;
            const bool neg = zero_terms && pn == std::signbit(dc) ? pn : r.mode == RoundingMode::down;
            e = neg ? -0.0 : 0.0;
          }
          check(emu::kFma, round_bits(e, f, r));
        }
      }
    }
  }
  std::printf("emu fp16 add/sub/mul/fma vs exact references: %llu checked, %llu mismatches\n",
              (unsigned long long)checked, (unsigned long long)mismatches);
  CHECK(mismatches == 0);
}

TEST_CASE("fp16 division and square root of the emulation are correctly rounded (RNE, all inputs)", "[emu]") {
  // Neighbour test: q = RN(a/b) iff a/b lies within [q - ulp/2, q + ulp/2] with ties to even; with the
  // midpoints m exactly representable, a/b vs m compares as a vs m*b (exact in double: 12 x 11 bits).
  const Format& f = fp16();
  const emu::DevFormat df = emu::dev_format(f);
  const emu::DevRounding dr{};
  std::mt19937_64 rng(99);
  std::uint64_t checked = 0, mismatches = 0;
  auto midpoints = [&](std::uint16_t q, double& lo, double& hi) {
    const double v = decode(q, f);
    const double up = (q & 0x7fff) == 0x7bff ? 65536.0 : decode(q + 1, f),
                 down = q & 0x7fff ? decode(q - 1, f) : -decode(q + 1, f);
    lo = (v + down) / 2;  // exact in double
    hi = (v + up) / 2;
  };
  for (int i = 0; i < 400000; ++i) {
    const std::uint16_t a = rng() & 0x7bff, b = (rng() & 0x7bff) | 1;  // positive finite, b != 0
    const std::uint64_t q = emu::arith(emu::kDiv, a, b, 0, df, dr);
    const double da = decode(a, f), db = decode(b, f);
    ++checked;
    if (q == 0x7c00) {  // overflow: a/b must reach the midpoint 65520 above max finite
      if (!(da >= 65520.0 * db)) ++mismatches;
      continue;
    }
    double lo, hi;
    midpoints(static_cast<std::uint16_t>(q), lo, hi);
    const double mlo = lo * db, mhi = hi * db;  // exact
    const bool even = (q & 1) == 0;
    const bool ok = (da > mlo || (da == mlo && even)) && (da < mhi || (da == mhi && even));
    if (!ok && ++mismatches <= 5) UNSCOPED_INFO("div a=" << a << " b=" << b << " q=" << q);
  }
  for (std::uint16_t a = 0; a < 0x7c00; ++a) {
    const std::uint64_t q = emu::arith(emu::kSqrt, a, 0, 0, df, dr);
    const double da = decode(a, f);
    ++checked;
    if (a == 0) {
      if (q != 0) ++mismatches;
      continue;
    }
    double lo, hi;
    midpoints(static_cast<std::uint16_t>(q), lo, hi);
    const bool even = (q & 1) == 0;
    const bool ok = (da > lo * lo || (da == lo * lo && even)) && (da < hi * hi || (da == hi * hi && even));
    if (!ok) ++mismatches;
  }
  std::printf("emu fp16 div (random) and sqrt (all non-negative finite) vs midpoints: %llu checked, %llu mismatches\n",
              (unsigned long long)checked, (unsigned long long)mismatches);
  CHECK(mismatches == 0);
}

TEST_CASE("bf16 arithmetic of the emulation: exact cases and NaN/sat rules", "[emu]") {
  const Format& f = bf16();
  const emu::DevFormat df = emu::dev_format(f);
  std::mt19937_64 rng(5);
  std::uint64_t checked = 0, mismatches = 0;
  for (int mode = 0; mode < 6; ++mode) {
    const Rounding r = Rounding::of(static_cast<RoundingMode>(mode));
    const emu::DevRounding dr = emu::dev_rounding(r);
    for (int i = 0; i < 100000; ++i) {
      const std::uint16_t a = static_cast<std::uint16_t>(rng()), b = static_cast<std::uint16_t>(rng());
      const double da = decode(a, f), db = decode(b, f);
      if (!std::isfinite(da) || !std::isfinite(db)) continue;
      // bf16 products have 16 significant bits: exact in double.
      ++checked;
      if (emu::arith(emu::kMul, a, b, 0, df, dr) != round_bits(da * db, f, r)) ++mismatches;
      // Sums are exact in double when the exponents are within 40 of each other.
      int ea, eb;
      std::frexp(da, &ea);
      std::frexp(db, &eb);
      if (da != 0 && db != 0 && std::abs(ea - eb) < 40 && da + db != 0) {
        ++checked;
        if (emu::arith(emu::kAdd, a, b, 0, df, dr) != round_bits(da + db, f, r)) ++mismatches;
      }
    }
  }
  // NaN rules: IEEE profile keeps the first NaN operand's payload; the CUDA profile writes 0x7FFF; the
  // PTX .sat forms clamp to [0, 1] with NaN -> +0.
  const emu::DevRounding rne{};
  CHECK(emu::arith(emu::kAdd, 0x3f80, 0xffa1, 0, df, rne) == 0xffe1);
  CHECK(emu::arith(emu::kMul, 0x7f80, 0x0000, 0, df, rne) == 0xffc0);  // inf * 0: x86's negative default NaN
  const emu::DevFormat cuda = emu::dev_format(f, profile_cuda_sm90(), Operation::arithmetic);
  CHECK(emu::arith(emu::kAdd, 0x3f80, 0xffa1, 0, cuda, rne) == 0x7fff);
  CHECK(emu::saturate01(emu::arith(emu::kAdd, 0x3f80, 0x3f80, 0, df, rne), df) == 0x3f80);  // 1+1 -> 1
  CHECK(emu::saturate01(0xffc0, df) == 0);
  CHECK(emu::saturate01(0xbf80, df) == 0);
  // -0 lies in [0, 1] and stays -0 by IEEE; the H100 writes +0 for fp16 (recorded, profile.cpp).
  CHECK(emu::saturate01(0x8000, df) == 0x8000);
  CHECK(emu::saturate01(0x8000, emu::dev_format(fp16(), profile_cuda_sm90(), Operation::arithmetic)) == 0);
  // tf32 cvt.rna on the H100: a NaN's low 13 bits are cut, not quieted (0x7F800001 -> +inf).
  emu::DevFormat tf;
  emu::DevRounding tr;
  emu::make_dev(tf32(), Rounding::of(RoundingMode::nearest_away), profile_cuda_sm90(), Operation::convert, tf, tr);
  CHECK(emu::round_float(0x7f800001u, tf, tr) == 0x7f800000u >> 13);
  CHECK(emu::round_float(0x7fa6f000u, tf, tr) == 0x7fa6e000u >> 13);
  std::printf("emu bf16 mul/add vs exact double: %llu checked, %llu mismatches\n", (unsigned long long)checked,
              (unsigned long long)mismatches);
  CHECK(mismatches == 0);
}

namespace {

// x86 F16C (vcvtps2ph, nearest-even): round_bits() equals it on all 2^32 floats
// (tests/format/round_exhaustive_test.cpp), so comparing the port with it compares it with the
// specification at a fraction of the cost.
#if defined(__x86_64__)
bool have_f16c() { return mpsim::cpu_features().f16c && mpsim::cpu_features().avx2; }
__attribute__((target("avx2,f16c"))) void f16c_block(std::uint32_t first, std::uint16_t* out, std::size_t n) {
  for (std::size_t j = 0; j < n; j += 8) {
    const __m256i idx =
        _mm256_add_epi32(_mm256_set1_epi32(static_cast<int>(first + j)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j),
                     _mm256_cvtps_ph(_mm256_castsi256_ps(idx), _MM_FROUND_TO_NEAREST_INT));
  }
}
#else
bool have_f16c() { return false; }
void f16c_block(std::uint32_t, std::uint16_t*, std::size_t) {}
#endif

}  // namespace

TEST_CASE("round_float equals round_bits over all 2^32 floats (fp16, RNE)", "[emu][exhaustive]") {
  // fp16 only: the other formats and modes share every code path and are probed in the unit cases.
  const Format& f = fp16();
  const emu::DevFormat df = emu::dev_format(f);
  const emu::DevRounding dr{};
  const bool f16c = have_f16c();
  std::atomic<std::uint64_t> mismatches{0};
  std::atomic<std::uint32_t> next{0};
  constexpr std::uint32_t kBlock = 1u << 16;
  const int n = std::max(2u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (int t = 0; t < n; ++t)
    pool.emplace_back([&] {
      std::uint64_t bad = 0;
      std::vector<std::uint16_t> want(kBlock);
      for (std::uint32_t blk; (blk = next.fetch_add(1)) < (1u << 16);) {
        const std::uint32_t first = blk * kBlock;
        if (f16c) f16c_block(first, want.data(), kBlock);
        for (std::uint32_t j = 0; j < kBlock; ++j) {
          const std::uint32_t x = first + j;
          const std::uint64_t w = f16c ? want[j] : round_bits(std::bit_cast<float>(x), f);
          bad += emu::round_float(x, df, dr) != w;
        }
      }
      mismatches += bad;
    });
  for (auto& th : pool) th.join();
  std::printf("emu round_float vs %s, fp16 RNE: all 2^32 floats, %llu mismatches\n",
              f16c ? "F16C (= round_bits, see round_exhaustive_test)" : "round_bits",
              (unsigned long long)mismatches.load());
  CHECK(mismatches == 0);
}

TEST_CASE("emu arithmetic under each profile equals the library's arith_bits_like, .sat forms and NaNs included",
          "[emu]") {
  // The arithmetic and the NaN / .sat rules are one implementation (lib/mpsim/format/hd/), wrapped twice: the
  // library applies a profile through DeviceRounding (profile.cpp), the device through DevFormat built by
  // make_dev (kernels/emu_host.hpp). This checks the two wrappings agree bit for bit under every profile; the
  // correctness of the arithmetic itself is checked against exact references above and in arith_test.
  std::mt19937_64 rng(31337);
  std::uint64_t checked = 0, mismatches = 0, nan_results = 0;
  for (const Profile* p : {&profile_ieee(), &profile_x86(), &profile_cuda_sm90()}) {
    for (const Format* f : {&fp16(), &bf16()}) {
      for (int mode = 0; mode < 6; ++mode) {
        const Rounding r = Rounding::of(static_cast<RoundingMode>(mode));
        emu::DevFormat df;
        emu::DevRounding dr;
        emu::make_dev(*f, r, *p, Operation::arithmetic, df, dr);
        for (int i = 0; i < 6000; ++i) {
          std::uint64_t a = rng() & 0xffff, b = rng() & 0xffff, c = rng() & 0xffff;
          if (i % 8 == 0) a = (a & 0x8000) | (f->inf_bits + (i % 3));  // inf / NaN operands now and then
          if (i % 8 == 1) b = (b & 0x8000) | (i % 3 ? 0 : f->inf_bits);
          const ArithOp ops[6] = {ArithOp::add, ArithOp::sub, ArithOp::mul, ArithOp::div, ArithOp::fma, ArithOp::sqrt};
          for (const ArithOp op : ops) {
            for (const bool sat : {false, true}) {
              if (sat && (op == ArithOp::div || op == ArithOp::sqrt)) continue;  // PTX has no div.sat / sqrt.sat
              ++checked;
              const std::uint64_t want = arith_bits_like(*p, op, sat, a, b, c, *f, r);
              std::uint64_t got = emu::arith(static_cast<emu::Op>(op), a, b, c, df, dr);
              if (sat) got = emu::saturate01(got, df);
              nan_results += is_nan_bits(want, *f);
              if (got != want && ++mismatches <= 10)
                UNSCOPED_INFO(p->name << " " << f->name << " " << to_string(op) << (sat ? "_sat" : "") << " mode "
                                      << mode << std::hex << " a=" << a << " b=" << b << " c=" << c
                                      << " arith_bits_like " << want << " emu " << got << std::dec);
            }
          }
        }
      }
    }
  }
  std::printf(
      "emu arithmetic vs arith_bits_like under ieee, x86, cuda-sm90: %llu (profile, op, mode, operands) "
      "checked, %llu NaN results, %llu mismatches\n",
      (unsigned long long)checked, (unsigned long long)nan_results, (unsigned long long)mismatches);
  CHECK(nan_results > 0);
  CHECK(mismatches == 0);
}

TEST_CASE(
    "the host build of the device emulation equals the library on float inputs, every format and mode "
    "(every 8191st float; all 2^32 for the device's formats with MPSIM_EXHAUSTIVE_FULL=1)",
    "[emu][exhaustive]") {
  // Element i of a run is the float with bits i, rounded with stochastic index i, as the device's
  // exhaustive runs do (kernels/runs.hpp emulate_convert). The library side is round_bits(); the
  // emulation is emu::round_float over the DevFormat / DevRounding that make_dev builds (profile ieee).
  // 8191 is odd and prime: the sample meets every residue of the low mantissa bits and every exponent.
  const bool full = std::getenv("MPSIM_EXHAUSTIVE_FULL") != nullptr;
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t checked_all = 0, mismatches_all = 0;
  for (int k = 0; k < kFormats; ++k)
    for (int mode = 0; mode < 7; ++mode) {
      const Format& f = fmt_by(k);
      // The formats the device converts to (kernels/runs_host.hpp) in full; the others sampled.
      const bool device_format = f == fp16() || f == bf16() || f == fp8_e4m3() || f == fp8_e5m2() || f == tf32();
      const std::uint64_t stride = full && device_format ? 1 : 8191;
      Rounding r = Rounding::of(static_cast<RoundingMode>(mode));
      if (r.mode == RoundingMode::stochastic) r = Rounding::stochastic(0x9e3779b97f4a7c15ull + k, 1 + (5 * k) % 32);
      emu::DevFormat df;
      emu::DevRounding dr;
      emu::make_dev(f, r, profile_ieee(), Operation::convert, df, dr);
      std::atomic<std::uint64_t> mismatches{0}, checked{0};
      std::atomic<std::uint64_t> next{0};
      constexpr std::uint64_t kChunk = std::uint64_t{1} << 22;
      const int n = std::max(2u, std::thread::hardware_concurrency());
      std::vector<std::thread> pool;
      for (int t = 0; t < n; ++t)
        pool.emplace_back([&] {
          std::uint64_t bad = 0, done = 0;
          for (std::uint64_t c; (c = next.fetch_add(kChunk)) < (std::uint64_t{1} << 32);) {
            // The first multiple of the stride at or after c.
            for (std::uint64_t i = (c + stride - 1) / stride * stride; i < c + kChunk; i += stride) {
              const auto x = static_cast<std::uint32_t>(i);
              ++done;
              bad += emu::round_float(x, df, dr, i) != round_bits(std::bit_cast<float>(x), f, r, i);
            }
          }
          mismatches += bad;
          checked += done;
        });
      for (auto& th : pool) th.join();
      checked_all += checked;
      mismatches_all += mismatches;
      if (mismatches != 0) UNSCOPED_INFO(f.name << " " << short_name(r.mode) << ": " << mismatches << " mismatches");
    }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("emu round_float vs round_bits, %d formats x 7 modes, %s: %llu inputs, %llu mismatches (%.1f s)\n",
              kFormats,
              full ? "all 2^32 floats for fp16/bf16/fp8/tf32, every 8191st for the others" : "every 8191st float",
              (unsigned long long)checked_all, (unsigned long long)mismatches_all, secs);
  CHECK(mismatches_all == 0);
}
