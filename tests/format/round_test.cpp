// Tests of lib/mpsim/format/round.hpp on hand-worked cases: every boundary of fp16 and the fp8 formats
// in every mode. The exhaustive comparisons against hardware and the reference are in
// round_exhaustive_test.cpp.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "mpsim/format/round.hpp"

#if defined(__x86_64__)
#include <immintrin.h>  // _mm_getcsr / _mm_setcsr
#endif

using namespace mpsim;

namespace {
const double inf = std::numeric_limits<double>::infinity();
// round_bits in mode m, printed (input, format, mode, result) so that the log shows every case checked.
std::uint64_t rb(double x, const Format& f, RoundingMode m) {
  const std::uint64_t bits = round_bits(x, f, Rounding::of(m));
  std::printf("round_bits(%-24.17g %-9s %-22s) = 0x%llx\n", x, f.name.c_str(), std::string(ieee_name(m)).c_str(),
              static_cast<unsigned long long>(bits));
  return bits;
}
}  // namespace

TEST_CASE("fp16 ties, subnormals and overflow in every deterministic mode", "[round]") {
  const Format& h = fp16();
  const double ulp1 = std::ldexp(1.0, -10);
  // 1 + ulp/2 is a tie between 1 (even) and 1 + ulp (odd).
  CHECK(rb(1 + ulp1 / 2, h, RoundingMode::nearest_even) == 0x3c00);
  CHECK(rb(1 + ulp1 / 2, h, RoundingMode::nearest_away) == 0x3c01);
  CHECK(rb(1 + ulp1 / 2, h, RoundingMode::toward_zero) == 0x3c00);
  CHECK(rb(1 + ulp1 / 2, h, RoundingMode::up) == 0x3c01);
  CHECK(rb(1 + ulp1 / 2, h, RoundingMode::down) == 0x3c00);
  CHECK(rb(1 + ulp1 / 2, h, RoundingMode::to_odd) == 0x3c01);
  CHECK(rb(-(1 + ulp1 / 2), h, RoundingMode::up) == 0xbc00);
  CHECK(rb(-(1 + ulp1 / 2), h, RoundingMode::down) == 0xbc01);
  // 1 + 3ulp/2 is a tie between odd and even: nearest-even goes up.
  CHECK(rb(1 + 3 * ulp1 / 2, h, RoundingMode::nearest_even) == 0x3c02);
  // Smallest subnormal 2^-24 and half of it (a tie with zero, which is even).
  CHECK(rb(std::ldexp(1.0, -24), h, RoundingMode::nearest_even) == 0x0001);
  CHECK(rb(std::ldexp(1.0, -25), h, RoundingMode::nearest_even) == 0x0000);
  CHECK(rb(std::ldexp(1.0, -25), h, RoundingMode::nearest_away) == 0x0001);
  CHECK(rb(std::ldexp(1.5, -25), h, RoundingMode::nearest_even) == 0x0001);
  CHECK(rb(std::ldexp(1.0, -60), h, RoundingMode::up) == 0x0001);
  CHECK(rb(-std::ldexp(1.0, -60), h, RoundingMode::up) == 0x8000);
  CHECK(rb(std::ldexp(1.0, -1074), h, RoundingMode::up) == 0x0001);  // smallest double subnormal
  // Largest subnormal rounding up into the smallest normal.
  CHECK(rb(std::ldexp(1.0, -14) - std::ldexp(1.0, -26), h, RoundingMode::nearest_even) == 0x0400);
  // Overflow threshold: 65504 + ulp/2 = 65520 ties to "even" 65536 -> inf; just below stays finite.
  CHECK(rb(65519.99, h, RoundingMode::nearest_even) == 0x7bff);
  CHECK(rb(65520.0, h, RoundingMode::nearest_even) == 0x7c00);
  CHECK(rb(1e9, h, RoundingMode::toward_zero) == 0x7bff);
  CHECK(rb(1e9, h, RoundingMode::to_odd) == 0x7bff);
  CHECK(rb(1e9, h, RoundingMode::up) == 0x7c00);
  CHECK(rb(1e9, h, RoundingMode::down) == 0x7bff);
  CHECK(rb(-1e9, h, RoundingMode::down) == 0xfc00);
  CHECK(rb(-1e9, h, RoundingMode::up) == 0xfbff);
  CHECK(rb(inf, h, RoundingMode::toward_zero) == 0x7c00);
  CHECK(rb(-0.0, h, RoundingMode::nearest_even) == 0x8000);
}

TEST_CASE("NaN payloads are kept and quieted the way F16C does", "[round]") {
  const Format& h = fp16();
  // A signalling float NaN with payload bits at the top and bottom of the mantissa.
  const float snan = std::bit_cast<float>(0xff812001u);
  CHECK(round_bits(snan, h) == (0xfc00u | 0x200u | (0x012001u >> 13)));
  CHECK(round_bits(std::bit_cast<float>(0x7f800001u), h) == 0x7e00u);
  CHECK(round_bits(std::bit_cast<float>(0x7fc00000u), bf16()) == 0x7fc0u);
  CHECK(round_bits(std::bit_cast<float>(0xffffffffu), bf16()) == 0xffffu);
}

TEST_CASE("fp8 e4m3fn: no inf, NaN is S.1111.111, max 448, saturation", "[round]") {
  const Format& f = fp8_e4m3();
  CHECK(rb(448.0, f, RoundingMode::nearest_even) == 0x7e);
  CHECK(rb(464.0, f, RoundingMode::nearest_even) == 0x7e);  // tie between 448 (even) and 480 (the NaN slot)
  CHECK(rb(464.5, f, RoundingMode::nearest_even) == 0x7f);  // rounds past max: overflow -> NaN
  CHECK(rb(-1e6, f, RoundingMode::nearest_even) == 0xff);
  CHECK(rb(inf, f, RoundingMode::nearest_even) == 0x7f);
  CHECK(rb(std::nan(""), f, RoundingMode::nearest_even) == 0x7f);
  Format sat = f;
  sat.overflow = Overflow::saturate;
  CHECK(round_bits(1e6, sat) == 0x7e);
  CHECK(round_bits(-inf, sat) == 0xfe);
  CHECK(round_bits(std::nan(""), sat) == 0x7f);  // saturation never turns NaN into a number
  CHECK(decode(0x01, f) == std::ldexp(1.0, -9));
  CHECK(std::isnan(decode(0x7f, f)));
  CHECK(decode(0x7e, f) == 448.0);
}

TEST_CASE("fp8 fnuz: no -0, one NaN", "[round]") {
  const Format& f = fp8_e4m3fnuz();
  CHECK(round_bits(-0.0, f) == 0x00);
  CHECK(round_bits(-std::ldexp(1.0, -30), f) == 0x00);
  CHECK(round_bits(std::nan(""), f) == 0x80);
  CHECK(round_bits(240.0, f) == 0x7f);
  CHECK(round_bits(1e9, f) == 0x80);
  CHECK(std::isnan(decode(0x80, f)));
}

TEST_CASE("double input rounds once, not through float", "[round]") {
  // x = 1 + 2^-11 + 2^-40: as float it becomes the tie 1 + 2^-11 and would round to 1 in fp16; rounded
  // directly it is above the tie and must go up.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  CHECK(round_bits(x, fp16()) == 0x3c01);
  CHECK(round_bits(static_cast<float>(x), fp16()) == 0x3c00);
}

TEST_CASE("flush and subnormal-input options", "[round]") {
  Format f = fp16();
  f.subnormals = Subnormals::flush;
  CHECK(round_bits(std::ldexp(1.0, -20), f) == 0);
  CHECK(round_bits(-std::ldexp(1.0, -20), f) == 0x8000);
  CHECK(round_bits(std::ldexp(1.0, -14) - std::ldexp(1.0, -26), f) == 0x0400);  // rounds up to min normal
  Rounding daz;
  daz.input_subnormals = InputSubnormals::zero;
  CHECK(round_bits(std::bit_cast<float>(0x00400000u), bf16(), daz) == 0);
  CHECK(round_bits(std::bit_cast<float>(0x00400000u), bf16()) == 0x0040);
}

TEST_CASE("stochastic rounding gives only the two neighbours and depends only on (seed, index)", "[round]") {
  const Format& h = fp16();
  const double lo = 1.0, hi = 1.0 + std::ldexp(1.0, -10);
  const double x = 1.0 + std::ldexp(1.0, -12);  // a quarter of the way up
  const Rounding r = Rounding::stochastic(42);
  int ups = 0;
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) {
    const double y = round(x, h, r, i);
    REQUIRE((y == lo || y == hi));
    ups += y == hi;
    REQUIRE(round(x, h, r, i) == y);
  }
  // Binomial(n, 1/4): sd = sqrt(n * 3/16) = 110.9; 7 sd gives a false failure below 1e-11.
  CHECK(std::abs(ups - n / 4) < 7 * 111);
}

TEST_CASE("fp64 encodings use all 64 bits (NaN and decode)", "[round]") {
  const std::uint64_t nan_bits = round_bits(std::bit_cast<float>(0x7f800001u), fp64());
  CHECK(is_nan_bits(nan_bits, fp64()));
  CHECK(std::isnan(decode(nan_bits, fp64())));
  CHECK(decode(round_bits(-1.5, fp64()), fp64()) == -1.5);
  CHECK(round_bits(-1.5, fp64()) == std::bit_cast<std::uint64_t>(-1.5));
}

#if defined(__x86_64__)
// round_bits(float), round(float) and decode_float() widen and narrow floats by their bits, so a
// caller's MXCSR with DAZ (float subnormal inputs read as zero by cvtss2sd) and FTZ (float subnormal
// results flushed by cvtsd2ss) changes nothing; -ffast-math programs run so. Expected values worked
// out by hand: 2^-149 rounds up to fp16's smallest subnormal 2^-24 (0x0001); 2^-127 is the bf16
// subnormal 0x0040 and comes back as the float 0x00400000; bf16 0x0001 is 2^-133, float 0x00010000.
TEST_CASE("float input and output do not depend on the caller's DAZ, FTZ or rounding mode", "[round]") {
  const auto f32 = [](std::uint32_t b) { return std::bit_cast<float>(b); };
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(0x1f80u | (3u << 13) | 0x8000u | 0x0040u);  // toward zero, FTZ, DAZ
  const std::uint64_t up_min = round_bits(f32(0x00000001u), fp16(), Rounding::of(RoundingMode::up));
  const std::uint64_t down_min = round_bits(f32(0x80000001u), fp16(), Rounding::of(RoundingMode::down));
  const std::uint64_t bf16_sub = round_bits(f32(0x00400000u), bf16());
  const float bf16_sub_value = round(f32(0x00400000u), bf16());
  const float decoded = decode_float(0x0001, bf16());
  const float tf32_sub = round(f32(0x80012345u), tf32(), Rounding::of(RoundingMode::toward_zero));
  const unsigned during = _mm_getcsr();
  _mm_setcsr(saved);
  CHECK(up_min == 0x0001);
  CHECK(down_min == 0x8001);
  CHECK(bf16_sub == 0x0040);
  CHECK(std::bit_cast<std::uint32_t>(bf16_sub_value) == 0x00400000u);
  CHECK(std::bit_cast<std::uint32_t>(decoded) == 0x00010000u);
  // tf32 keeps 10 mantissa bits of float's 23: toward zero clears the low 13 of the subnormal's pattern.
  CHECK(std::bit_cast<std::uint32_t>(tf32_sub) == (0x80012345u & ~0x1fffu));
  CHECK((during & ~0x3fu) == (0x1f80u | (3u << 13) | 0x8000u | 0x0040u));  // control bits left as they were
}
#endif
