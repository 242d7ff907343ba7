// Tests of lib/mpsim/format/format.hpp: the named formats' constants, computed here from their
// published definitions, and the parser's names and errors.
#include "catch_compat.hpp"

#include <cmath>
#include <cstdio>
#include <limits>

#include "mpsim/error.hpp"
#include "mpsim/format/format.hpp"

using namespace mpsim;

namespace {
// The constants of a format as the checks below see them, so that the log shows what was compared.
void show(const Format& f) {
  std::printf(
      "%-14s max_finite %-24.17g min_normal %-24.17g min_subnormal %-24.17g epsilon %-12.6g bits max 0x%llx "
      "inf 0x%llx nan 0x%llx\n",
      f.name.c_str(), f.max_finite, f.min_normal, f.min_subnormal, f.epsilon,
      static_cast<unsigned long long>(f.max_finite_bits), static_cast<unsigned long long>(f.inf_bits),
      static_cast<unsigned long long>(f.nan_bits));
}
}  // namespace

TEST_CASE("fp16, bf16, fp32 constants match std::numeric_limits-style definitions", "[format]") {
  for (const Format* f : {&fp16(), &bf16(), &fp32(), &fp64(), &tf32()}) show(*f);
  // IEEE 754-2008 binary16: emax 15, p 11.
  CHECK(fp16().max_finite == 65504.0);
  CHECK(fp16().min_normal == std::ldexp(1.0, -14));
  CHECK(fp16().min_subnormal == std::ldexp(1.0, -24));
  CHECK(fp16().epsilon == std::ldexp(1.0, -10));
  CHECK(fp16().unit_roundoff == std::ldexp(1.0, -11));
  CHECK(fp16().max_finite_bits == 0x7bff);
  CHECK(fp16().inf_bits == 0x7c00);
  CHECK(fp16().nan_bits == 0x7e00);
  CHECK(fp32().max_finite == static_cast<double>(std::numeric_limits<float>::max()));
  CHECK(fp32().min_normal == static_cast<double>(std::numeric_limits<float>::min()));
  CHECK(fp32().min_subnormal == static_cast<double>(std::numeric_limits<float>::denorm_min()));
  CHECK(fp32().epsilon == static_cast<double>(std::numeric_limits<float>::epsilon()));
  CHECK(fp64().max_finite == std::numeric_limits<double>::max());
  CHECK(fp64().min_subnormal == std::numeric_limits<double>::denorm_min());
  // bfloat16: float's exponent, 8 bits of precision; largest = (2 - 2^-7) * 2^127.
  CHECK(bf16().max_finite == (2.0 - std::ldexp(1.0, -7)) * std::ldexp(1.0, 127));
  CHECK(bf16().min_subnormal == std::ldexp(1.0, -133));
  CHECK(tf32().storage_bits == 19);
  CHECK(tf32().min_subnormal == std::ldexp(1.0, -136));
}

TEST_CASE("fp8 formats follow the OCP and fnuz definitions", "[format]") {
  for (const Format* f : {&fp8_e4m3(), &fp8_e5m2(), &fp8_e4m3fnuz(), &fp8_e5m2fnuz()}) show(*f);
  // OCP OFP8 rev 1.0, table 1: E4M3 max 448, min normal 2^-6, min subnormal 2^-9; E5M2 max 57344,
  // min normal 2^-14, min subnormal 2^-16.
  CHECK(fp8_e4m3().max_finite == 448.0);
  CHECK(fp8_e4m3().min_normal == std::ldexp(1.0, -6));
  CHECK(fp8_e4m3().min_subnormal == std::ldexp(1.0, -9));
  CHECK(fp8_e4m3().max_finite_bits == 0x7e);
  CHECK(fp8_e4m3().nan_bits == 0x7f);
  CHECK_FALSE(fp8_e4m3().has_inf);
  CHECK(fp8_e5m2().max_finite == 57344.0);
  CHECK(fp8_e5m2().min_subnormal == std::ldexp(1.0, -16));
  CHECK(fp8_e5m2().inf_bits == 0x7c);
  // ml_dtypes float8_e4m3fnuz: max 240, min subnormal 2^-10; float8_e5m2fnuz: max 57344, 2^-17.
  CHECK(fp8_e4m3fnuz().max_finite == 240.0);
  CHECK(fp8_e4m3fnuz().min_subnormal == std::ldexp(1.0, -10));
  CHECK(fp8_e4m3fnuz().nan_bits == 0x80);
  CHECK(fp8_e5m2fnuz().max_finite == 57344.0);
  CHECK(fp8_e5m2fnuz().min_subnormal == std::ldexp(1.0, -17));
}

TEST_CASE("parse_format accepts our names, ml_dtypes names and custom eXmY", "[format]") {
  CHECK(parse_format("float16") == fp16());
  CHECK(parse_format("bfloat16") == bf16());
  CHECK(parse_format("float8_e4m3fn") == fp8_e4m3());
  CHECK(parse_format("float8_e5m2") == fp8_e5m2());
  CHECK(parse_format("e5m10") == fp16());
  CHECK(parse_format("e8m7") == bf16());
  const Format f = parse_format("e6m9");
  show(f);
  CHECK(f.bias == 31);
  CHECK(f.max_finite == (2.0 - std::ldexp(1.0, -9)) * std::ldexp(1.0, 31));
  CHECK(f.min_subnormal == std::ldexp(1.0, -30 - 9));
}

TEST_CASE("parse_format rejects bad names with a message naming the input", "[format]") {
  for (const char* bad : {"fp17", "e12m3", "e5m53", "e1m2", "e5m", "", "e5m10x"}) {
    INFO(bad);
    try {
      parse_format(bad);
      FAIL("no error for '" << bad << "'");
    } catch (const Error& e) {
      std::printf("parse_format(\"%s\"): %s\n", bad, e.what());
      CHECK(std::string(e.what()).find(std::string("'") + bad + "'") != std::string::npos);
    }
  }
}

TEST_CASE("the ml_dtypes element types: constants from OCP MX v1.0 and ml_dtypes' definitions", "[format]") {
  // OCP Microscaling Formats (MX) v1.0, section 5.3: FP4 E2M1 max 6, min normal 1, min subnormal 0.5;
  // FP6 E2M3 max 7.5, min subnormal 0.125; FP6 E3M2 max 28, min normal 0.25, min subnormal 0.0625.
  CHECK(float4_e2m1fn().max_finite == 6.0);
  CHECK(float4_e2m1fn().min_normal == 1.0);
  CHECK(float4_e2m1fn().min_subnormal == 0.5);
  CHECK(float4_e2m1fn().storage_bits == 4);
  CHECK(float6_e2m3fn().max_finite == 7.5);
  CHECK(float6_e2m3fn().min_subnormal == 0.125);
  CHECK(float6_e3m2fn().max_finite == 28.0);
  CHECK(float6_e3m2fn().min_normal == 0.25);
  CHECK(float6_e3m2fn().min_subnormal == 0.0625);
  for (const Format* f : {&float4_e2m1fn(), &float6_e2m3fn(), &float6_e3m2fn()}) {
    CHECK_FALSE(f->has_nan());
    CHECK_FALSE(f->has_inf);
    CHECK(f->saturates());
  }
  // Section 5.4.1: E8M0 is unsigned, bias 127, 2^-127 .. 2^127, 0xFF NaN, no zero.
  const Format& e8 = float8_e8m0fnu();
  CHECK(e8.storage_bits == 8);
  CHECK(e8.sign_bit() == 0);
  CHECK(e8.min_normal == std::ldexp(1.0, -127));
  CHECK(e8.min_subnormal == std::ldexp(1.0, -127));
  CHECK(e8.max_finite == std::ldexp(1.0, 127));
  CHECK(e8.max_finite_bits == 0xfe);
  CHECK(e8.nan_bits == 0xff);
  CHECK(e8.epsilon == 1.0);
  // IEEE-style e4m3 and e3m4: the top binade is inf/NaN, so max = 1.875 * 2^7 and 1.9375 * 2^3.
  CHECK(float8_e4m3().max_finite == 240.0);
  CHECK(float8_e3m4().max_finite == 15.5);
  CHECK(float8_e3m4().min_normal == 0.25);
  // e4m3 with bias 11, fnuz: top exponent 15 - 11 = 4, all mantissa patterns finite: 1.875 * 16.
  CHECK(float8_e4m3b11fnuz().max_finite == 30.0);
  CHECK(float8_e4m3b11fnuz().min_subnormal == std::ldexp(1.0, -10 - 3));
}

TEST_CASE("one name table: every name parses to its format, e4m3 is IEEE-style everywhere", "[format]") {
  int names = 0, canonical = 0;
  for (const auto& n : format_names()) {
    INFO(n.name);
    CHECK(parse_format(n.name) == n.format());
    if (n.canonical) {
      CHECK(n.format().name == n.name);
      ++canonical;
    }
    ++names;
  }
  CHECK(canonical == static_cast<int>(named_formats().size()));
  CHECK(parse_format("e4m3") == float8_e4m3());
  CHECK_FALSE(parse_format("e4m3") == fp8_e4m3());
  CHECK(parse_format("float8_e4m3fn") == fp8_e4m3());
  CHECK(parse_format("e3m4") == float8_e3m4());
  CHECK(parse_format("fp4_e2m1") == float4_e2m1fn());
  CHECK(parse_format("e8m0") == float8_e8m0fnu());
  std::printf("format name table: %d names, %d formats, each parsed back to its format\n", names, canonical);
  try {
    parse_format("float8_e4m3fnx");
    FAIL("no error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    CHECK(msg.find("float8_e8m0fnu") != std::string::npos);  // the message lists the known names
    CHECK(msg.find("fp4_e2m1") != std::string::npos);
  }
  try {
    parse_format("mxfp8_e4m3");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("is a block format") != std::string::npos);
  }
}
