// The scalar specification of rounding on a Format: hd/round_spec.hpp's host/device functions (which the
// CUDA emulation calls too), plus the names, checks and exact encodings the host needs. The bulk engine
// is the fast path and is tested bit for bit against this file.
#include "mpsim/format/round.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "mpsim/error.hpp"

namespace mpsim {

void validate(const Rounding& r) {
  if (r.sr_bits < 1 || r.sr_bits > 32)
    throw Error("stochastic rounding: the number of random bits must be 1..32, got " + std::to_string(r.sr_bits));
}

std::string_view short_name(RoundingMode m) {
  switch (m) {
    case RoundingMode::nearest_even: return "rne";
    case RoundingMode::toward_zero: return "rtz";
    case RoundingMode::up: return "ru";
    case RoundingMode::down: return "rd";
    case RoundingMode::nearest_away: return "rna";
    case RoundingMode::to_odd: return "rto";
    case RoundingMode::stochastic: return "sr";
  }
  return "?";
}

std::string_view ieee_name(RoundingMode m) {
  switch (m) {
    case RoundingMode::nearest_even: return "roundTiesToEven";
    case RoundingMode::toward_zero: return "roundTowardZero";
    case RoundingMode::up: return "roundTowardPositive";
    case RoundingMode::down: return "roundTowardNegative";
    case RoundingMode::nearest_away: return "roundTiesToAway";
    case RoundingMode::to_odd: return "roundToOdd";
    case RoundingMode::stochastic: return "roundStochastic";
  }
  return "?";
}

RoundingMode parse_rounding_mode(std::string_view s) {
  static constexpr RoundingMode all[] = {RoundingMode::nearest_even, RoundingMode::toward_zero,  RoundingMode::up,
                                         RoundingMode::down,         RoundingMode::nearest_away, RoundingMode::to_odd,
                                         RoundingMode::stochastic};
  static constexpr std::string_view long_names[] = {"nearest-even", "toward-zero", "up",        "down",
                                                    "nearest-away", "to-odd",      "stochastic"};
  for (int i = 0; i < 7; ++i)
    if (s == short_name(all[i]) || s == ieee_name(all[i]) || s == long_names[i]) return all[i];
  throw Error("unknown rounding mode '" + std::string(s) + "' (known: rne rtz ru rd rna rto sr)");
}

std::uint64_t round_bits(double x, const Format& f, const Rounding& r, std::uint64_t index) {
  return spec::round_double_bits(std::bit_cast<std::uint64_t>(x), format_spec(f), rounding_spec(r), index);
}

std::uint64_t round_bits(float x, const Format& f, const Rounding& r, std::uint64_t index) {
  return spec::round_float_bits(std::bit_cast<std::uint32_t>(x), format_spec(f), rounding_spec(r), index);
}

namespace {

// double -> float for a value float holds exactly, by the bits below float's normal range (not
// cvtsd2ss, which FTZ would make flush a float subnormal result).
float narrow_exact(double d) {
  const double a = std::fabs(d);
  if (a != 0 && a < 0x1p-126) {
    const auto k = static_cast<std::uint32_t>(a * 0x1p149);  // a normal double times 2^149: exact
    return std::bit_cast<float>((std::signbit(d) ? 0x80000000u : 0u) | k);
  }
  return static_cast<float>(d);
}

}  // namespace

bool is_nan_bits(std::uint64_t bits, const Format& f) { return spec::is_nan_enc(bits, format_spec(f)); }

bool is_inf_bits(std::uint64_t bits, const Format& f) { return spec::is_inf_enc(bits, format_spec(f)); }

double decode(std::uint64_t bits, const Format& f) {
  return std::bit_cast<double>(spec::decode_bits(bits, format_spec(f)));
}

double round(double x, const Format& f, const Rounding& r, std::uint64_t index) {
  return decode(round_bits(x, f, r, index), f);
}

float decode_float(std::uint64_t bits, const Format& f) {
  if (is_nan_bits(bits, f) && f.nan == NanEncoding::ieee && f.man_bits <= 23) {
    // Keep the payload exactly in float (a double->float conversion would too, but say it here).
    const std::uint32_t man = static_cast<std::uint32_t>(bits & ((std::uint64_t{1} << f.man_bits) - 1));
    const std::uint32_t sign = (bits & f.sign_bit()) ? 0x80000000u : 0u;
    return std::bit_cast<float>(sign | 0x7f800000u | (man << (23 - f.man_bits)));
  }
  return narrow_exact(decode(bits, f));
}

float round(float x, const Format& f, const Rounding& r, std::uint64_t index) {
  return decode_float(round_bits(x, f, r, index), f);
}

bool is_representable(double x, const Format& f) {
  if (std::isnan(x)) return true;
  Rounding r;
  r.mode = RoundingMode::toward_zero;
  Format g = f;
  g.overflow = Overflow::to_inf;
  // Exact iff rounding toward zero and away from zero agree, and nothing overflowed or flushed.
  const std::uint64_t lo = round_bits(x, g, r);
  r.mode = x < 0 ? RoundingMode::down : RoundingMode::up;
  const std::uint64_t hi = round_bits(x, g, r);
  if (lo != hi) return false;
  const double back = decode(lo, f);
  return back == x && (std::signbit(back) == std::signbit(x) || !f.has_negative_zero());
}

std::uint64_t encode_exact(double x, const Format& f) {
  if (!is_representable(x, f)) throw Error(fmt::format("value {} is not exactly representable in {}", x, f.name));
  return round_bits(x, f);
}

}  // namespace mpsim
