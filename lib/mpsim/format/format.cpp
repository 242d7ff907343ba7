#include "mpsim/format/format.hpp"

#include <bit>
#include <charconv>
#include <cmath>
#include <string>

#include "mpsim/error.hpp"

namespace mpsim {

Format make_format(std::string name, int exp_bits, int man_bits, int bias, bool has_inf, NanEncoding nan,
                   Subnormals subnormals, Overflow overflow) {
  const std::string who = "format '" + name + "': ";
  if (exp_bits < 2 || exp_bits > 11)
    throw Error(who + "exponent bits must be 2..11 to fit in a double, got " + std::to_string(exp_bits));
  if (man_bits < 0 || man_bits > 52)
    throw Error(who + "mantissa bits must be 0..52 to fit in a double, got " + std::to_string(man_bits));
  if (nan == NanEncoding::ieee && !has_inf)
    throw Error(who + "an IEEE NaN encoding implies infinities");
  if (nan != NanEncoding::ieee && has_inf)
    throw Error(who + "only IEEE-encoded formats have infinities");
  if (nan == NanEncoding::ieee && man_bits < 1)
    throw Error(who + "an IEEE-encoded format needs at least one mantissa bit to encode NaN");
  if (nan == NanEncoding::all_ones && man_bits < 1)
    throw Error(who + "an all-ones NaN encoding needs at least one mantissa bit");

  Format f;
  f.name = std::move(name);
  f.exp_bits = exp_bits;
  f.man_bits = man_bits;
  f.bias = bias;
  f.has_inf = has_inf;
  f.nan = nan;
  f.subnormals = subnormals;
  f.overflow = overflow;
  f.precision = man_bits + 1;
  f.storage_bits = 1 + exp_bits + man_bits;
  f.emin = 1 - bias;
  const int top_field = (1 << exp_bits) - 1;
  const std::uint64_t man_mask = (std::uint64_t{1} << man_bits) - 1;
  switch (nan) {
    case NanEncoding::ieee:
      f.emax = top_field - 1 - bias;
      f.max_finite_bits = (std::uint64_t(top_field - 1) << man_bits) | man_mask;
      f.inf_bits = std::uint64_t(top_field) << man_bits;
      f.nan_bits = f.inf_bits | (std::uint64_t{1} << (man_bits - 1));
      break;
    case NanEncoding::all_ones:
      f.emax = top_field - bias;
      f.max_finite_bits = (std::uint64_t(top_field) << man_bits) | (man_mask - 1);
      f.nan_bits = (std::uint64_t(top_field) << man_bits) | man_mask;
      break;
    case NanEncoding::neg_zero:
      f.emax = top_field - bias;
      f.max_finite_bits = (std::uint64_t(top_field) << man_bits) | man_mask;
      f.nan_bits = f.sign_bit();
      break;
  }
  if (f.emax > 1023) throw Error(who + "largest exponent " + std::to_string(f.emax) + " exceeds double's 1023");
  if (f.emin < -1022 && f.emin - man_bits < -1074)
    throw Error(who + "smallest subnormal 2^" + std::to_string(f.emin - man_bits) + " is below double's 2^-1074");
  if (f.emax < f.emin) throw Error(who + "bias leaves no normal exponent");
  const std::uint64_t max_man = f.max_finite_bits & man_mask;
  f.max_finite = std::ldexp(static_cast<double>(max_man | (man_mask + 1)), f.emax - man_bits);
  f.min_normal = std::ldexp(1.0, f.emin);
  f.min_subnormal = subnormals == Subnormals::keep ? std::ldexp(1.0, f.emin - man_bits) : f.min_normal;
  f.epsilon = std::ldexp(1.0, -man_bits);
  f.unit_roundoff = std::ldexp(1.0, -man_bits - 1);
  return f;
}

namespace {
Format ieee(const char* name, int e, int m) { return make_format(name, e, m, (1 << (e - 1)) - 1); }
}  // namespace

const Format& fp64() { static const Format f = ieee("fp64", 11, 52); return f; }
const Format& fp32() { static const Format f = ieee("fp32", 8, 23); return f; }
const Format& fp16() { static const Format f = ieee("fp16", 5, 10); return f; }
const Format& bf16() { static const Format f = ieee("bf16", 8, 7); return f; }
const Format& tf32() { static const Format f = ieee("tf32", 8, 10); return f; }
const Format& fp8_e4m3() {
  // OCP 8-bit Floating Point Specification (OFP8) rev 1.0, 2023: E4M3 has bias 7, no infinities, and
  // S.1111.111 as its only NaN pattern, so its largest value is S.1111.110 = 448.
  static const Format f = make_format("fp8_e4m3", 4, 3, 7, false, NanEncoding::all_ones);
  return f;
}
const Format& fp8_e5m2() { static const Format f = ieee("fp8_e5m2", 5, 2); return f; }
const Format& fp8_e4m3fnuz() {
  // Graphcore/AMD "fnuz": bias 8, 0x80 is the only NaN, no -0, no inf (as ml_dtypes.float8_e4m3fnuz).
  static const Format f = make_format("fp8_e4m3fnuz", 4, 3, 8, false, NanEncoding::neg_zero);
  return f;
}
const Format& fp8_e5m2fnuz() {
  static const Format f = make_format("fp8_e5m2fnuz", 5, 2, 16, false, NanEncoding::neg_zero);
  return f;
}

const std::vector<Format>& named_formats() {
  static const std::vector<Format> all = {fp64(), fp32(), tf32(), bf16(), fp16(), fp8_e5m2(), fp8_e4m3(),
                                          fp8_e5m2fnuz(), fp8_e4m3fnuz()};
  return all;
}

Format parse_format(std::string_view name) {
  struct Alias { std::string_view name; const Format& (*get)(); };
  static const Alias aliases[] = {
      {"fp64", fp64}, {"float64", fp64}, {"binary64", fp64},
      {"fp32", fp32}, {"float32", fp32}, {"binary32", fp32},
      {"fp16", fp16}, {"float16", fp16}, {"half", fp16}, {"binary16", fp16},
      {"bf16", bf16}, {"bfloat16", bf16},
      {"tf32", tf32}, {"tensorfloat32", tf32},
      {"fp8_e4m3", fp8_e4m3}, {"float8_e4m3fn", fp8_e4m3}, {"e4m3fn", fp8_e4m3}, {"fp8_e4m3fn", fp8_e4m3},
      {"fp8_e5m2", fp8_e5m2}, {"float8_e5m2", fp8_e5m2},
      {"fp8_e4m3fnuz", fp8_e4m3fnuz}, {"float8_e4m3fnuz", fp8_e4m3fnuz},
      {"fp8_e5m2fnuz", fp8_e5m2fnuz}, {"float8_e5m2fnuz", fp8_e5m2fnuz},
  };
  for (const auto& a : aliases)
    if (a.name == name) return a.get();
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
          throw Error("format '" + std::string(name) + "': a custom eXmY format needs 2 <= X <= 11 and 1 <= Y <= 52 to fit in a double");
        return make_format(std::string(name), e, m, (1 << (e - 1)) - 1);
      }
    }
  }
  throw Error("unknown format '" + std::string(name) +
              "' (known: fp64 fp32 tf32 bf16 fp16 fp8_e5m2 fp8_e4m3 fp8_e5m2fnuz fp8_e4m3fnuz, their ml_dtypes names "
              "such as float16 bfloat16 float8_e4m3fn, or a custom eXmY such as e6m9)");
}

std::string_view to_string(NanEncoding n) {
  switch (n) {
    case NanEncoding::ieee: return "ieee";
    case NanEncoding::all_ones: return "all_ones";
    case NanEncoding::neg_zero: return "neg_zero";
  }
  return "?";
}
std::string_view to_string(Subnormals s) { return s == Subnormals::keep ? "keep" : "flush"; }
std::string_view to_string(Overflow o) { return o == Overflow::to_inf ? "inf" : "saturate"; }

}  // namespace mpsim
