// Tests of lib/mpsim/reference/reference.hpp: the Boost.Multiprecision reference on values worked out by
// hand, then against the production round_bits() on boundary samples of every named format.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>

#include "mpsim/reference/reference.hpp"
#include "mpsim/reference/verify.hpp"
#include "sanitized.hpp"

using namespace mpsim;

namespace {
Rounding mode(RoundingMode m) { return Rounding::of(m); }
Rational pow2(int e) { return e >= 0 ? Rational(BigInt(1) << e) : Rational(BigInt(1), BigInt(BigInt(1) << -e)); }
}  // namespace

TEST_CASE("reference rounds exact rationals to fp16 as worked by hand", "[reference]") {
  const Format& h = fp16();
  // 1/3 = 0.0101..._2: fp16 keeps 1.0101010101 * 2^-2 = 0x3555 (1365 * 2^-12 = 0.333251953125),
  // the discarded tail 0.0101... < 1/2 ulp, so nearest and toward zero give 0x3555, up 0x3556.
  const Rational third(1, 3);
  CHECK(reference_round(third, false, h, mode(RoundingMode::nearest_even)) == 0x3555);
  CHECK(reference_round(third, false, h, mode(RoundingMode::toward_zero)) == 0x3555);
  CHECK(reference_round(third, false, h, mode(RoundingMode::up)) == 0x3556);
  CHECK(reference_round(third, false, h, mode(RoundingMode::to_odd)) == 0x3555);
  CHECK(reference_round(-third, false, h, mode(RoundingMode::down)) == 0xb556);
  CHECK(reference_round(-third, false, h, mode(RoundingMode::up)) == 0xb555);
  // 2/3 = 1.0101..._2 * 2^-1: 0x3955 truncated; the tail 0.0101... again below half.
  CHECK(reference_round(Rational(2, 3), false, h, mode(RoundingMode::nearest_even)) == 0x3955);
  // Ties: 1 + 2^-11 between 0x3c00 (even) and 0x3c01; 1 + 3 * 2^-11 between 0x3c01 and 0x3c02 (even).
  CHECK(reference_round(1 + pow2(-11), false, h, mode(RoundingMode::nearest_even)) == 0x3c00);
  CHECK(reference_round(1 + pow2(-11), false, h, mode(RoundingMode::nearest_away)) == 0x3c01);
  CHECK(reference_round(1 + 3 * pow2(-11), false, h, mode(RoundingMode::nearest_even)) == 0x3c02);
  CHECK(reference_round(1 + pow2(-11) + pow2(-200), false, h, mode(RoundingMode::nearest_even)) == 0x3c01);
  // Overflow threshold 65520 = 65504 + ulp/2: a tie that goes to the even 2^16, i.e. inf.
  CHECK(reference_round(Rational(65520), false, h, mode(RoundingMode::nearest_even)) == 0x7c00);
  CHECK(reference_round(Rational(65520) - pow2(-30), false, h, mode(RoundingMode::nearest_even)) == 0x7bff);
  CHECK(reference_round(Rational(1'000'000), false, h, mode(RoundingMode::toward_zero)) == 0x7bff);
  CHECK(reference_round(Rational(-1'000'000), false, h, mode(RoundingMode::up)) == 0xfbff);
  CHECK(reference_round(Rational(-1'000'000), false, h, mode(RoundingMode::down)) == 0xfc00);
  // Subnormals: 2^-24 is the smallest; 2^-25 ties with 0 (even); 3 * 2^-26 is above the tie.
  CHECK(reference_round(pow2(-24), false, h, mode(RoundingMode::nearest_even)) == 0x0001);
  CHECK(reference_round(pow2(-25), false, h, mode(RoundingMode::nearest_even)) == 0x0000);
  CHECK(reference_round(-pow2(-25), false, h, mode(RoundingMode::nearest_even)) == 0x8000);
  CHECK(reference_round(3 * pow2(-26), false, h, mode(RoundingMode::nearest_even)) == 0x0001);
  CHECK(reference_round(pow2(-1000), false, h, mode(RoundingMode::up)) == 0x0001);
  // Zeros keep the sign the caller gives.
  CHECK(reference_round(Rational(0), true, h, mode(RoundingMode::nearest_even)) == 0x8000);
  CHECK(reference_round(Rational(0), false, h, mode(RoundingMode::down)) == 0x0000);
}

TEST_CASE("reference: flush, saturate, formats without inf or -0", "[reference]") {
  Format ftz = fp16();
  ftz.subnormals = Subnormals::flush;
  CHECK(reference_round(pow2(-20), false, ftz, mode(RoundingMode::nearest_even)) == 0x0000);
  CHECK(reference_round(-pow2(-20), false, ftz, mode(RoundingMode::nearest_even)) == 0x8000);
  // Just below the smallest normal 2^-14, rounding up to it: flushing happens after rounding.
  CHECK(reference_round(pow2(-14) - pow2(-30), false, ftz, mode(RoundingMode::nearest_even)) == 0x0400);
  const Format& e4m3 = fp8_e4m3();
  // 448 = 1.110 * 2^8 is the largest; 464 ties between 448 (even) and the 480 slot (odd, the NaN code).
  CHECK(reference_round(Rational(464), false, e4m3, mode(RoundingMode::nearest_even)) == 0x7e);
  CHECK(reference_round(Rational(465), false, e4m3, mode(RoundingMode::nearest_even)) == 0x7f);
  CHECK(reference_round(Rational(449), false, e4m3, mode(RoundingMode::to_odd)) == 0x7e);  // overflow -> max
  CHECK(reference_round(Rational(-1000), false, e4m3, mode(RoundingMode::down)) == 0xff);
  Format sat = e4m3;
  sat.overflow = Overflow::saturate;
  CHECK(reference_round(Rational(1000), false, sat, mode(RoundingMode::up)) == 0x7e);
  CHECK(reference_round(std::numeric_limits<double>::infinity(), sat) == 0x7e);
  CHECK(reference_round(std::numeric_limits<double>::quiet_NaN(), sat) == 0x7f);
  const Format& fnuz = fp8_e4m3fnuz();
  CHECK(reference_round(-pow2(-30), false, fnuz, mode(RoundingMode::nearest_even)) == 0x00);  // no -0
  CHECK(reference_round(Rational(0), true, fnuz, mode(RoundingMode::nearest_even)) == 0x00);
  CHECK(reference_round(Rational(240), false, fnuz, mode(RoundingMode::nearest_even)) == 0x7f);
  CHECK(reference_round(Rational(1000), false, fnuz, mode(RoundingMode::nearest_even)) == 0x80);
  CHECK(reference_round(-std::numeric_limits<double>::infinity(), fnuz) == 0x80);
}

TEST_CASE("reference: NaN payloads and input subnormals", "[reference]") {
  // A signalling float NaN 0xff812001: sign kept, quiet bit set, top 10 payload bits kept (F16C).
  CHECK(reference_round(std::bit_cast<float>(0xff812001u), fp16()) == 0xfe09);
  CHECK(reference_round(std::bit_cast<float>(0x7f800001u), fp16()) == 0x7e00);
  CHECK(reference_round(std::bit_cast<float>(0xffffffffu), bf16()) == 0xffff);
  CHECK(reference_round(std::bit_cast<float>(0xffc00000u), fp8_e4m3()) == 0xff);
  CHECK(reference_round(std::bit_cast<double>(0x7ff4000000000001ull), fp16()) == 0x7f00);
  Rounding daz;
  daz.input_subnormals = InputSubnormals::zero;
  CHECK(reference_round(std::bit_cast<float>(0x80400000u), bf16(), daz) == 0x8000);
  CHECK(reference_round(std::bit_cast<float>(0x00400000u), bf16()) == 0x0040);
  CHECK(reference_round(std::ldexp(1.0, -1060), fp16(), daz) == 0x0000);  // a subnormal double
  CHECK(reference_round(std::ldexp(1.0, -1060), fp16(), Rounding::of(RoundingMode::up)) == 0x0001);
}

TEST_CASE("reference: stochastic rounding follows the documented rule", "[reference]") {
  // x = 1 + 2^-12 in fp16 is a quarter of an ulp above 1: with b random bits, floor(frac * 2^b) = 2^(b-2),
  // so it rounds up iff (rnd >> (32 - b)) >= 3 * 2^(b-2).
  // The random bits of element i are the documented streams (lib/mpsim/format/hd/philox.hpp), restated here
  // from 32-bit words: for b > 16 element i's word; for b <= 16 the high (i % 8 < 4) or low half of word
  // i % 4 of block i / 8, i.e. of the 32-bit stream's element 4 (i / 8) + i % 4.
  const auto rnd = [](std::uint64_t i, int b) -> std::uint32_t {
    if (b > 16) return sr_random(7, i);
    const std::uint32_t w = sr_random(7, (i >> 3) * 4 + (i & 3));
    return (i & 4) ? w << 16 : w & 0xffff0000u;
  };
  const Rational x = 1 + pow2(-12);
  for (int b : {2, 5, 16, 32}) {
    const Rounding r = Rounding::stochastic(7, b);
    int ups = 0;
    for (std::uint64_t i = 0; i < 2000; ++i) {
      const std::uint64_t want = (rnd(i, b) >> (32 - b)) >= (3ull << (b - 2)) ? 0x3c01 : 0x3c00;
      const std::uint64_t got = reference_round(x, false, fp16(), r, i);
      REQUIRE(got == want);
      ups += got == 0x3c01;
    }
    std::printf("reference SR b=%d: %d of 2000 up (expect ~500)\n", b, ups);
  }
  // With one random bit, frac = 1/4 truncates to 0: never up.
  for (std::uint64_t i = 0; i < 100; ++i)
    CHECK(reference_round(x, false, fp16(), Rounding::stochastic(7, 1), i) == 0x3c00);
}

TEST_CASE("reference_decode and exact_value are exact", "[reference]") {
  CHECK(exact_value(0.1) == Rational(BigInt(3602879701896397), BigInt(BigInt(1) << 55)));
  CHECK(exact_value(-std::ldexp(1.0, -1074)) == -pow2(-1074));
  CHECK(reference_decode(0x3555, fp16()).value == Rational(1365) * pow2(-12));
  CHECK(reference_decode(0x8001, fp16()).value == -pow2(-24));
  CHECK(reference_decode(0x7e, fp8_e4m3()).value == 448);
  CHECK(reference_decode(0x7f, fp8_e4m3()).kind == ReferenceValue::Kind::nan);
  CHECK(reference_decode(0xfc00, fp16()).kind == ReferenceValue::Kind::inf);
  CHECK(reference_decode(0xfc00, fp16()).negative);
  CHECK(reference_decode(0x80, fp8_e5m2fnuz()).kind == ReferenceValue::Kind::nan);
  // Every fp16 and e4m3 encoding round-trips through the reference.
  for (std::uint64_t e = 0; e < 0x10000; ++e) {
    const ReferenceValue v = reference_decode(e, fp16());
    if (v.kind != ReferenceValue::Kind::finite) continue;
    REQUIRE(reference_round(v.value, v.negative, fp16(), Rounding::of(RoundingMode::to_odd)) == e);
  }
  for (std::uint64_t e = 0; e < 0x100; ++e) {
    const ReferenceValue v = reference_decode(e, fp8_e4m3());
    if (v.kind != ReferenceValue::Kind::finite) continue;
    REQUIRE(reference_round(v.value, v.negative, fp8_e4m3(), Rounding::of(RoundingMode::up)) == e);
  }
}

TEST_CASE("production round_bits agrees with the Boost reference on boundary samples of every format", "[reference]") {
  const auto modes = verify::all_modes(11);
  std::uint64_t checked = 0, mismatches = 0;
  for (const Format& f : named_formats()) {
    for (bool as_float : {false, true}) {
      // 3000 random inputs a (format, mode) besides the boundary samples; 300 under the sanitizers (-O0
      // Boost arithmetic: 61 s at 3000).
      for (const auto& row : verify::compare_with_boost("boost", f, modes, kSanitized ? 300 : 3000, as_float, 11)) {
        checked += row.checked;
        mismatches += row.mismatches;
        if (row.mismatches)
          FAIL_CHECK(row.format << " " << row.mode << ": " << row.mismatches << " mismatches, first "
                                << row.first->input << " expected 0x" << std::hex << row.first->expected << " got 0x"
                                << row.first->got);
      }
    }
  }
  std::printf("round_bits vs Boost reference: %llu inputs x modes checked, %llu mismatches\n",
              static_cast<unsigned long long>(checked), static_cast<unsigned long long>(mismatches));
  CHECK(mismatches == 0);
}
