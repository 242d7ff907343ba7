#include "mpsim/format/format.hpp"

#include <bit>
#include <charconv>
#include <cmath>
#include <string>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/format/block.hpp"

namespace mpsim {

Format make_format(std::string name, int exp_bits, int man_bits, int bias, bool has_inf, NanEncoding nan,
                   Subnormals subnormals, Overflow overflow, bool has_sign, bool has_zero) {
  const std::string who = "format '" + name + "': ";
  if (exp_bits < 2 || exp_bits > 11)
    throw Error(who + "exponent bits must be 2..11 to fit in a double, got " + std::to_string(exp_bits));
  if (man_bits < 0 || man_bits > 52)
    throw Error(who + "mantissa bits must be 0..52 to fit in a double, got " + std::to_string(man_bits));
  if (nan == NanEncoding::ieee && !has_inf) throw Error(who + "an IEEE NaN encoding implies infinities");
  if (nan != NanEncoding::ieee && has_inf) throw Error(who + "only IEEE-encoded formats have infinities");
  if (nan == NanEncoding::ieee && man_bits < 1)
    throw Error(who + "an IEEE-encoded format needs at least one mantissa bit to encode NaN");
  if (nan == NanEncoding::neg_zero && !has_sign) throw Error(who + "a negative-zero NaN encoding needs a sign bit");
  if (!has_zero && man_bits > 0)
    throw Error(who + "only an exponent-only format (no mantissa bits) can go without a zero");

  Format f;
  f.name = std::move(name);
  f.exp_bits = exp_bits;
  f.man_bits = man_bits;
  f.bias = bias;
  f.has_inf = has_inf;
  f.nan = nan;
  f.subnormals = subnormals;
  f.overflow = overflow;
  f.has_sign = has_sign;
  f.has_zero = has_zero;
  f.precision = man_bits + 1;
  f.storage_bits = (has_sign ? 1 : 0) + exp_bits + man_bits;
  // Without a zero, exponent field 0 holds the normal number 2^-bias (e8m0: 2^-127), not subnormals.
  f.emin = has_zero ? 1 - bias : -bias;
  const int top_field = (1 << exp_bits) - 1;
  const std::uint64_t man_mask = (std::uint64_t{1} << man_bits) - 1;
  const std::uint64_t all_ones = (std::uint64_t(top_field) << man_bits) | man_mask;
  switch (nan) {
    case NanEncoding::ieee:
      f.max_finite_bits = (std::uint64_t(top_field - 1) << man_bits) | man_mask;
      f.inf_bits = std::uint64_t(top_field) << man_bits;
      f.nan_bits = f.inf_bits | (std::uint64_t{1} << (man_bits - 1));
      break;
    case NanEncoding::all_ones:
      // With mantissa bits the top binade still holds numbers (e4m3fn: max S.1111.110); without them
      // the all-ones exponent is the NaN and the binade below holds the largest number (e8m0: 2^127).
      f.nan_bits = all_ones;
      f.max_finite_bits = all_ones - 1;
      break;
    case NanEncoding::neg_zero:
      f.max_finite_bits = all_ones;
      f.nan_bits = f.sign_bit();
      break;
    case NanEncoding::none: f.max_finite_bits = all_ones; break;
  }
  f.emax = static_cast<int>(f.max_finite_bits >> man_bits) - bias;
  if (f.emax > 1023) throw Error(who + "largest exponent " + std::to_string(f.emax) + " exceeds double's 1023");
  if (f.emin < -1022 && f.emin - man_bits < -1074)
    throw Error(who + "smallest subnormal 2^" + std::to_string(f.emin - man_bits) + " is below double's 2^-1074");
  if (f.emax < f.emin) throw Error(who + "bias leaves no normal exponent");
  const std::uint64_t max_man = f.max_finite_bits & man_mask;
  f.max_finite = std::ldexp(static_cast<double>(max_man | (man_mask + 1)), f.emax - man_bits);
  f.min_normal = std::ldexp(1.0, f.emin);
  f.min_subnormal = subnormals == Subnormals::keep && has_zero ? std::ldexp(1.0, f.emin - man_bits) : f.min_normal;
  f.epsilon = std::ldexp(1.0, -man_bits);
  f.unit_roundoff = std::ldexp(1.0, -man_bits - 1);
  return f;
}

Format with_options(const Format& base, Subnormals subnormals, Overflow overflow) {
  return make_format(base.name, base.exp_bits, base.man_bits, base.bias, base.has_inf, base.nan, subnormals, overflow,
                     base.has_sign, base.has_zero);
}

namespace {
Format ieee(const char* name, int e, int m) { return make_format(name, e, m, (1 << (e - 1)) - 1); }
}  // namespace

const Format& fp64() {
  static const Format f = ieee("fp64", 11, 52);
  return f;
}
const Format& fp32() {
  static const Format f = ieee("fp32", 8, 23);
  return f;
}
const Format& fp16() {
  static const Format f = ieee("fp16", 5, 10);
  return f;
}
const Format& bf16() {
  static const Format f = ieee("bf16", 8, 7);
  return f;
}
const Format& tf32() {
  static const Format f = ieee("tf32", 8, 10);
  return f;
}
const Format& fp8_e4m3() {
  // OCP 8-bit Floating Point Specification (OFP8) rev 1.0, 2023: E4M3 has bias 7, no infinities, and
  // S.1111.111 as its only NaN pattern, so its largest value is S.1111.110 = 448.
  static const Format f = make_format("fp8_e4m3", 4, 3, 7, false, NanEncoding::all_ones);
  return f;
}
const Format& fp8_e5m2() {
  static const Format f = ieee("fp8_e5m2", 5, 2);
  return f;
}
const Format& fp8_e4m3fnuz() {
  // Graphcore/AMD "fnuz": bias 8, 0x80 is the only NaN, no -0, no inf (as ml_dtypes.float8_e4m3fnuz).
  static const Format f = make_format("fp8_e4m3fnuz", 4, 3, 8, false, NanEncoding::neg_zero);
  return f;
}
const Format& fp8_e5m2fnuz() {
  static const Format f = make_format("fp8_e5m2fnuz", 5, 2, 16, false, NanEncoding::neg_zero);
  return f;
}

// ml_dtypes 0.6 (github.com/jax-ml/ml_dtypes, ml_dtypes/include/float8.h and mxfloat.h) defines these
// element types; each constant below is checked against ml_dtypes.finfo and every float32 conversion by
// tests/format/ml_dtypes_check.py.
const Format& float8_e4m3() {
  static const Format f = ieee("float8_e4m3", 4, 3);
  return f;
}
const Format& float8_e3m4() {
  static const Format f = ieee("float8_e3m4", 3, 4);
  return f;
}
const Format& float8_e4m3b11fnuz() {
  // Graphcore's e4m3 with bias 11 (ml_dtypes.float8_e4m3b11fnuz): fnuz encoding, max 30.
  static const Format f = make_format("float8_e4m3b11fnuz", 4, 3, 11, false, NanEncoding::neg_zero);
  return f;
}
const Format& float8_e8m0fnu() {
  // OCP Microscaling Formats (MX) v1.0, 2023, section 5.4.1: E8M0 is unsigned, bias 127, 0xFF is NaN,
  // no zero and no infinities: 2^-127 .. 2^127.
  static const Format f = make_format("float8_e8m0fnu", 8, 0, 127, false, NanEncoding::all_ones, Subnormals::keep,
                                      Overflow::to_inf, /*has_sign=*/false, /*has_zero=*/false);
  return f;
}
// OCP MX v1.0 section 5.3: FP6 E2M3 (bias 1, max 7.5), FP6 E3M2 (bias 3, max 28), FP4 E2M1 (bias 1, max 6),
// none with infinities or NaN.
const Format& float6_e2m3fn() {
  static const Format f = make_format("float6_e2m3fn", 2, 3, 1, false, NanEncoding::none);
  return f;
}
const Format& float6_e3m2fn() {
  static const Format f = make_format("float6_e3m2fn", 3, 2, 3, false, NanEncoding::none);
  return f;
}
const Format& float4_e2m1fn() {
  static const Format f = make_format("float4_e2m1fn", 2, 1, 1, false, NanEncoding::none);
  return f;
}

const std::vector<FormatName>& format_names() {
  // The first name of each format is canonical: reports and JSON print it. fp8_e4m3 is OCP's E4M3 (e4m3fn:
  // no inf, max 448), as in NVIDIA's __nv_fp8_e4m3 and torch.float8_e4m3fn; ml_dtypes' float8_e4m3 is the
  // IEEE-style e4m3 (inf, max 240), which is also what the custom spelling "e4m3" means.
  static const std::vector<FormatName> names = {
      {"fp64", fp64, true},
      {"float64", fp64, false},
      {"binary64", fp64, false},
      {"fp32", fp32, true},
      {"float32", fp32, false},
      {"binary32", fp32, false},
      {"tf32", tf32, true},
      {"tensorfloat32", tf32, false},
      {"bf16", bf16, true},
      {"bfloat16", bf16, false},
      {"fp16", fp16, true},
      {"float16", fp16, false},
      {"half", fp16, false},
      {"binary16", fp16, false},
      {"fp8_e5m2", fp8_e5m2, true},
      {"float8_e5m2", fp8_e5m2, false},
      {"fp8_e4m3", fp8_e4m3, true},
      {"float8_e4m3fn", fp8_e4m3, false},
      {"fp8_e4m3fn", fp8_e4m3, false},
      {"e4m3fn", fp8_e4m3, false},
      {"fp8_e5m2fnuz", fp8_e5m2fnuz, true},
      {"float8_e5m2fnuz", fp8_e5m2fnuz, false},
      {"fp8_e4m3fnuz", fp8_e4m3fnuz, true},
      {"float8_e4m3fnuz", fp8_e4m3fnuz, false},
      {"float8_e4m3", float8_e4m3, true},
      {"float8_e3m4", float8_e3m4, true},
      {"float8_e4m3b11fnuz", float8_e4m3b11fnuz, true},
      {"fp8_e4m3b11fnuz", float8_e4m3b11fnuz, false},
      {"float8_e8m0fnu", float8_e8m0fnu, true},
      {"fp8_e8m0", float8_e8m0fnu, false},
      {"e8m0", float8_e8m0fnu, false},
      {"float6_e2m3fn", float6_e2m3fn, true},
      {"fp6_e2m3", float6_e2m3fn, false},
      {"float6_e3m2fn", float6_e3m2fn, true},
      {"fp6_e3m2", float6_e3m2fn, false},
      {"float4_e2m1fn", float4_e2m1fn, true},
      {"fp4_e2m1", float4_e2m1fn, false},
  };
  return names;
}

const std::vector<Format>& named_formats() {
  static const std::vector<Format> all = [] {
    std::vector<Format> v;
    for (const auto& n : format_names())
      if (n.canonical) v.push_back(n.format());
    return v;
  }();
  return all;
}

std::string known_format_names() {
  std::string out;
  const auto& names = format_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!names[i].canonical) continue;
    if (!out.empty()) out += ", ";
    out += names[i].name;
    std::string aliases;
    for (std::size_t j = i + 1; j < names.size() && !names[j].canonical; ++j)
      aliases += (aliases.empty() ? "" : " ") + std::string(names[j].name);
    if (!aliases.empty()) out += " (" + aliases + ")";
  }
  return out;
}

Format parse_format(std::string_view name) {
  for (const auto& n : format_names())
    if (n.name == name) return n.format();
  // Custom IEEE-style eXmY.
  if (name.size() >= 4 && name[0] == 'e') {
    const char* p = name.data() + 1;
    const char* end = name.data() + name.size();
    int e = 0, m = 0;
    auto r1 = std::from_chars(p, end, e);
    if (r1.ec == std::errc() && r1.ptr < end && *r1.ptr == 'm') {
      auto r2 = std::from_chars(r1.ptr + 1, end, m);
      if (r2.ec == std::errc() && r2.ptr == end) {
        if (e < 2 || e > 11 || m < 1 || m > 52)
          throw Error("format '" + std::string(name) +
                      "': a custom eXmY format needs 2 <= X <= 11 and 1 <= Y <= 52 to fit in a double");
        return make_format(std::string(name), e, m, (1 << (e - 1)) - 1);
      }
    }
  }
  if (is_block_format_name(name))
    throw BlockFormatNameError("format '" + std::string(name) +
                               "' is a block format (element codes sharing a scale per block); this needs an "
                               "element format (" +
                               known_format_names() + ")");
  throw Error("unknown format '" + std::string(name) + "' (known: " + known_format_names() +
              ", or a custom IEEE-style eXmY such as e6m9)");
}

std::string_view to_string(NanEncoding n) {
  switch (n) {
    case NanEncoding::ieee: return "ieee";
    case NanEncoding::all_ones: return "all_ones";
    case NanEncoding::neg_zero: return "neg_zero";
    case NanEncoding::none: return "none";
  }
  return "?";
}
std::string_view to_string(Subnormals s) { return s == Subnormals::keep ? "keep" : "flush"; }
std::string_view to_string(Overflow o) { return o == Overflow::to_inf ? "inf" : "saturate"; }

}  // namespace mpsim
