// Tests of lib/mpsim/format/value.hpp and value_io.hpp: the value types mpsim::num::fp16, bf16, tf32,
// fp8_e4m3, fp8_e5m2 — construction, exact conversions, arithmetic, IEEE comparisons,
// std::numeric_limits against independently computed constants, and decimal output that reads back.
#include "catch_compat.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <string>

#include <fmt/format.h>
#include <boost/multiprecision/cpp_int.hpp>

#include "mpsim/format/value.hpp"
#include "mpsim/format/value_io.hpp"

using mpsim::decode;
using mpsim::Format;
using mpsim::Rounding;
using mpsim::RoundingMode;
using mpsim::num::bf16;
using mpsim::num::fp16;
using mpsim::num::fp8_e4m3;
using mpsim::num::fp8_e5m2;
using mpsim::num::tf32;

static_assert(fp16::from_bits(0x3c00).bits() == 0x3c00);
static_assert(sizeof(fp16) == 2 && sizeof(bf16) == 2 && sizeof(fp8_e4m3) == 1 && sizeof(fp8_e5m2) == 1 &&
              sizeof(tf32) == 4);
static_assert(std::numeric_limits<fp16>::max().bits() == 0x7bff);
static_assert(std::numeric_limits<fp8_e4m3>::max().bits() == 0x7e);
static_assert(std::numeric_limits<bf16>::quiet_NaN().bits() == 0x7fc0);

TEST_CASE("value types convert exactly and round to nearest-even", "[value]") {
  CHECK(fp16(1.5).bits() == 0x3e00);
  CHECK(fp16(1.0 + std::ldexp(1.0, -11)).bits() == 0x3c00);  // tie to even
  CHECK(fp16(65520.0).bits() == 0x7c00);
  CHECK(fp16(-0.0).bits() == 0x8000);
  CHECK(bf16(1.0f).bits() == 0x3f80);
  CHECK(fp8_e4m3(448.0).bits() == 0x7e);
  CHECK(fp8_e4m3(1000.0).bits() == 0x7f);  // overflow: no inf, NaN (OCP e4m3fn)
  CHECK(fp8_e5m2(57344.0).bits() == 0x7b);
  CHECK(tf32(1.0).bits() == 0x3f800000u >> 13);  // tf32 encodings are e8m10 in the low 19 bits
  // Every fp16 / bf16 / fp8 value converts to float exactly and back to the same bits (NaNs: quieted).
  long checked = 0, bad = 0;
  for (std::uint32_t i = 0; i < 65536; ++i) {
    const fp16 h = fp16::from_bits(static_cast<std::uint16_t>(i));
    const bf16 b = bf16::from_bits(static_cast<std::uint16_t>(i));
    const std::uint16_t hq = h.is_nan() ? static_cast<std::uint16_t>(i | 0x200) : static_cast<std::uint16_t>(i);
    const std::uint16_t bq = b.is_nan() ? static_cast<std::uint16_t>(i | 0x40) : static_cast<std::uint16_t>(i);
    bad += fp16(h.to_float()).bits() != hq;
    bad += bf16(b.to_float()).bits() != bq;
    bad += static_cast<double>(h.to_float()) != h.to_double() && !h.is_nan();
    checked += 2;
  }
  for (std::uint32_t i = 0; i < 256; ++i) {
    const fp8_e4m3 e4 = fp8_e4m3::from_bits(static_cast<std::uint8_t>(i));
    const fp8_e5m2 e5 = fp8_e5m2::from_bits(static_cast<std::uint8_t>(i));
    bad += fp8_e4m3(e4.to_float()).bits() != i;  // e4m3fn NaNs are S.1111.111 already
    bad += fp8_e5m2(e5.to_float()).bits() != (e5.is_nan() ? (i | 2) : i);
    checked += 2;
  }
  std::printf("value round trips through float: %ld checked, %ld wrong\n", checked, bad);
  CHECK(bad == 0);
}

TEST_CASE("value arithmetic is the correctly rounded nearest-even arithmetic", "[value]") {
  CHECK((fp16(1) + fp16(2)).bits() == fp16(3).bits());
  CHECK((fp16(1) / fp16(3)).bits() == 0x3555);
  CHECK((fp16(2) - fp16(3)).bits() == fp16(-1).bits());
  CHECK((fp16::from_bits(0x3c01) * fp16::from_bits(0x3c01)).bits() == 0x3c02);
  CHECK(mpsim::num::sqrt(fp16(2)).bits() == 0x3da8);
  CHECK(mpsim::num::fma(bf16::from_bits(0x3f81), bf16::from_bits(0x3fc0), bf16::from_bits(0x9780)).bits() == 0x3fc1);
  CHECK((-fp16(1)).bits() == 0xbc00);
  CHECK(mpsim::num::abs(fp16(-2)).bits() == 0x4000);
  fp16 x(1);
  x += fp16(1);
  x *= fp16(3);
  x /= fp16(2);
  x -= fp16(1);
  CHECK(x.bits() == fp16(2).bits());
  CHECK((fp8_e4m3(448.0) + fp8_e4m3(32.0)).is_nan());
  CHECK((fp8_e5m2(1.0) + fp8_e5m2(0.25)).bits() == 0x3d);
  CHECK((tf32(1.0) + tf32(std::ldexp(1.0, -11))).bits() == tf32(1.0).bits());
  CHECK(fp16::round_from(1.0 + std::ldexp(1.0, -11), Rounding::of(RoundingMode::up)).bits() == 0x3c01);
}

TEST_CASE("comparisons follow IEEE 754", "[value]") {
  const fp16 nan = std::numeric_limits<fp16>::quiet_NaN();
  CHECK_FALSE(nan == nan);
  CHECK(nan != nan);
  CHECK_FALSE(nan < fp16(1));
  CHECK_FALSE(nan >= fp16(1));
  CHECK(fp16(0.0) == fp16(-0.0));
  CHECK_FALSE(fp16(0.0) < fp16(-0.0));
  CHECK(fp16(1) < fp16(2));
  CHECK(fp16(-2) <= fp16(-2));
  CHECK(std::numeric_limits<fp16>::lowest() < std::numeric_limits<fp16>::max());
  CHECK(-std::numeric_limits<fp16>::infinity() < std::numeric_limits<fp16>::lowest());
  CHECK(mpsim::num::isnan(nan));
  CHECK(mpsim::num::isinf(std::numeric_limits<bf16>::infinity()));
  CHECK(mpsim::num::signbit(fp16(-0.0)));
  CHECK(fp8_e4m3::from_bits(0xff) != fp8_e4m3::from_bits(0xff));
}

namespace {
template <class T>
void check_limits(const Format& f, double max, double min_normal, double denorm, double eps) {
  using L = std::numeric_limits<T>;
  INFO(f.name);
  // Hand-known values and the Format's own constants (format.cpp), which must agree.
  CHECK(L::max().to_double() == max);
  CHECK(L::max().to_double() == f.max_finite);
  CHECK(L::lowest().to_double() == -max);
  CHECK(L::min().to_double() == min_normal);
  CHECK(L::min().to_double() == f.min_normal);
  CHECK(L::denorm_min().to_double() == denorm);
  CHECK(L::denorm_min().to_double() == f.min_subnormal);
  CHECK(L::epsilon().to_double() == eps);
  CHECK(L::epsilon().to_double() == f.epsilon);
  CHECK(L::round_error().to_double() == 0.5);
  CHECK(L::digits == f.precision);
  CHECK(L::min_exponent == f.emin + 1);
  CHECK(L::max_exponent == f.emax + 1);
  CHECK(std::ldexp(1.0, L::min_exponent - 1) == min_normal);
  // The decimal members by their definitions, with the library's log10.
  CHECK(L::digits10 == static_cast<int>(std::floor((L::digits - 1) * std::log10(2.0))));
  CHECK(L::max_digits10 == static_cast<int>(std::ceil(L::digits * std::log10(2.0))) + 1);
  CHECK(L::min_exponent10 == static_cast<int>(std::ceil(std::log10(min_normal))));
  CHECK(L::max_exponent10 == static_cast<int>(std::floor(std::log10(max))));
  CHECK(L::quiet_NaN().is_nan());
  CHECK(L::has_infinity == f.has_inf);
  if (L::has_infinity) {
    CHECK(L::infinity().is_inf());
    CHECK(L::infinity().to_double() == std::numeric_limits<double>::infinity());
    CHECK(L::signaling_NaN().is_nan());
    CHECK((L::signaling_NaN().bits() & (1u << (f.man_bits - 1))) == 0);
  }
  CHECK(L::is_specialized);
  CHECK(L::is_signed);
  CHECK(L::radix == 2);
  CHECK(L::has_denorm == std::denorm_present);
}
}  // namespace

TEST_CASE("numeric_limits against independently computed constants", "[value]") {
  // fp16: max (2 - 2^-10) 2^15, min normal 2^-14, smallest subnormal 2^-24, epsilon 2^-10.
  check_limits<fp16>(mpsim::fp16(), 65504.0, std::ldexp(1.0, -14), std::ldexp(1.0, -24), std::ldexp(1.0, -10));
  check_limits<bf16>(mpsim::bf16(), std::ldexp(2.0 - std::ldexp(1.0, -7), 127), std::ldexp(1.0, -126),
                     std::ldexp(1.0, -133), std::ldexp(1.0, -7));
  check_limits<tf32>(mpsim::tf32(), std::ldexp(2.0 - std::ldexp(1.0, -10), 127), std::ldexp(1.0, -126),
                     std::ldexp(1.0, -136), std::ldexp(1.0, -10));
  // OCP e4m3fn: max 1.75 * 2^8 = 448, min normal 2^-6, subnormal 2^-9; e5m2: max 1.75 * 2^15 = 57344.
  check_limits<fp8_e4m3>(mpsim::fp8_e4m3(), 448.0, std::ldexp(1.0, -6), std::ldexp(1.0, -9), 0.125);
  check_limits<fp8_e5m2>(mpsim::fp8_e5m2(), 57344.0, std::ldexp(1.0, -14), std::ldexp(1.0, -16), 0.25);
  // The same formulas give float's own limits.
  CHECK(std::numeric_limits<fp16>::digits10 == 3);
  CHECK(std::numeric_limits<fp16>::max_digits10 == 5);
  CHECK(std::numeric_limits<bf16>::max_exponent10 == 38);
  CHECK(std::numeric_limits<fp16>::min_exponent10 == -4);
  CHECK_FALSE(std::numeric_limits<fp8_e4m3>::has_infinity);
}

namespace {
using boost::multiprecision::cpp_int;
using boost::multiprecision::cpp_rational;

// The exact value of a decimal string such as "-1.234e-05" or "65500".
cpp_rational parse_decimal(const std::string& s) {
  cpp_int digits = 0;
  int exp10 = 0;
  bool neg = false, after_point = false;
  std::size_t i = 0;
  if (s[i] == '-') neg = true, ++i;
  for (; i < s.size() && s[i] != 'e'; ++i) {
    if (s[i] == '.') {
      after_point = true;
      continue;
    }
    digits = digits * 10 + (s[i] - '0');
    if (after_point) --exp10;
  }
  if (i < s.size()) exp10 += std::stoi(s.substr(i + 1));
  cpp_rational v(digits);
  cpp_int p = 1;
  for (int k = 0; k < std::abs(exp10); ++k) p *= 10;
  if (exp10 >= 0) v *= p;
  else v /= p;
  return neg ? -v : v;
}

// True if the decimal's exact value rounds (nearest-even) to the finite non-zero encoding `bits`.
bool reads_back(const std::string& s, std::uint64_t bits, const Format& f) {
  const cpp_rational x = parse_decimal(s);
  const bool neg = bits & f.sign_bit();
  const std::uint64_t mag = bits & ~f.sign_bit();
  const cpp_rational ax = neg ? cpp_rational(-x) : x;
  if (ax <= 0) return false;
  const cpp_rational r(decode(mag, f));
  const bool odd = mag & 1;
  // The neighbour above the largest finite number is where the next binade would start.
  const bool top = mag == f.max_finite_bits;
  const cpp_rational next =
      top ? cpp_rational(decode(mag, f)) + (cpp_rational(decode(mag, f)) - cpp_rational(decode(mag - 1, f)))
          : cpp_rational(decode(mag + 1, f));
  const cpp_rational hi = (r + next) / 2;
  if (ax > hi || (ax == hi && odd)) return false;
  const cpp_rational lo = mag == 0 ? cpp_rational(0) : (cpp_rational(decode(mag - 1, f)) + r) / 2;
  return ax > lo || (ax == lo && !odd);
}

template <class T>
void check_all_decimals(std::uint32_t count, std::uint32_t step) {
  const Format& f = T::format();
  long checked = 0, bad = 0;
  std::size_t longest = 0;
  for (std::uint32_t i = 0; i < count; i += step) {
    const T v = T::from_bits(static_cast<typename T::storage_type>(i));
    if (v.is_nan() || v.is_inf() || v.to_double() == 0) continue;
    const std::string s = fmt::format("{}", v);
    longest = std::max(longest, s.size());
    ++checked;
    if (!reads_back(s, i, f) && bad++ < 5)
      std::printf("  %s 0x%x printed as %s does not read back\n", f.name.c_str(), i, s.c_str());
  }
  std::printf("%s: %ld finite non-zero values printed and read back exactly, %ld wrong (longest \"%zu\" chars)\n",
              f.name.c_str(), checked, bad, longest);
  CHECK(bad == 0);
}
}  // namespace

TEST_CASE("decimal output is short and reads back to the same value", "[value]") {
  CHECK(fmt::format("{}", fp16(0.1)) == "0.1");
  CHECK(fmt::format("{}", fp16(65504.0)) == "65500");
  CHECK(fmt::format("{}", fp16(1) / fp16(3)) == "0.3333");
  CHECK(fmt::format("{}", std::numeric_limits<fp16>::denorm_min()) == "6e-08");
  CHECK(fmt::format("{}", bf16(3.140625)) == "3.14");
  CHECK(fmt::format("{}", fp16(-0.0)) == "-0");
  CHECK(fmt::format("{}", std::numeric_limits<fp16>::infinity()) == "inf");
  CHECK(fmt::format("{}", -std::numeric_limits<fp16>::infinity()) == "-inf");
  CHECK(fmt::format("{}", std::numeric_limits<fp16>::quiet_NaN()) == "nan");
  CHECK(fmt::format("{}", fp8_e4m3(448.0)) == "450");
  CHECK(fmt::format("[{:>8}]", fp16(1.5)) == "[     1.5]");
  std::ostringstream os;
  os << fp16(0.1) << ' ' << bf16(-2.0);
  CHECK(os.str() == "0.1 -2");
  check_all_decimals<fp16>(65536, 1);
  check_all_decimals<bf16>(65536, 1);
  check_all_decimals<fp8_e4m3>(256, 1);
  check_all_decimals<fp8_e5m2>(256, 1);
  check_all_decimals<tf32>(1u << 19, 37);
}
