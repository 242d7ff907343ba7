// The one rounding function (DESIGN.md). Everything that rounds — the bulk engine, the value types,
// the training simulator, the analysis reports, the CLI — calls round_bits()/round() here or a path
// that is tested bit for bit against them.
#pragma once

#include <cstdint>
#include <string_view>

#include "mpsim/format/format.hpp"

namespace mpsim {

enum class RoundingMode : std::uint8_t {
  nearest_even,   // IEEE roundTiesToEven
  toward_zero,    // IEEE roundTowardZero
  up,             // IEEE roundTowardPositive
  down,           // IEEE roundTowardNegative
  nearest_away,   // IEEE roundTiesToAway
  to_odd,         // round to odd (Boldo & Melquiond): truncate, set the last bit if anything was lost
  stochastic,     // away from zero with probability proportional to the distance from the neighbour nearer zero
};

// What happens to subnormal *inputs* (of the source type, float or double).
enum class InputSubnormals : std::uint8_t { keep, zero };

struct Rounding {
  RoundingMode mode = RoundingMode::nearest_even;
  // Stochastic rounding: how many random bits decide (1..32). The fraction of the distance to the
  // lower neighbour is truncated to sr_bits bits and compared with an sr_bits-bit random number, as
  // hardware SR units do; with sr_bits at least the number of discarded bits the rounding is unbiased.
  int sr_bits = 32;
  // Stochastic rounding: key of the counter-based generator. The random number used for element i is
  // sr_random(seed, i): the result never depends on thread count or call order.
  std::uint64_t seed = 0;
  InputSubnormals input_subnormals = InputSubnormals::keep;

  static Rounding nearest_even() { return {}; }
  static Rounding of(RoundingMode m) { Rounding r; r.mode = m; return r; }
  static Rounding stochastic(std::uint64_t seed, int bits = 32) {
    Rounding r; r.mode = RoundingMode::stochastic; r.seed = seed; r.sr_bits = bits; return r;
  }
};

// Validates a Rounding (sr_bits in 1..32); throws mpsim::Error naming the problem.
void validate(const Rounding&);

// Short names as the CLI takes them ("rne", "rtz", "ru", "rd", "rna", "rto", "sr") and IEEE-style
// names for reports ("roundTiesToEven", ...). parse_rounding_mode accepts both (and "nearest-even",
// "toward-zero", "up", "down", "nearest-away", "to-odd", "stochastic").
std::string_view short_name(RoundingMode);
std::string_view ieee_name(RoundingMode);
RoundingMode parse_rounding_mode(std::string_view);

// ---- the counter-based generator for stochastic rounding -------------------------------------------
// 32 random bits for element `index` under `seed`. Built so that vector code can evaluate it 8 or 16
// lanes at a time with 32-bit multiplies: a per-seed key (splitmix64 of the seed, Steele et al. 2014)
// mixed with the high half of the index, added to the low half, then Wellons' "lowbias32" integer hash
// (a bijection on 32 bits with low avalanche bias).
struct SrKey {
  std::uint32_t lo;  // added to the low 32 bits of the index
  std::uint32_t hi;  // mixed with the high 32 bits
};
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
constexpr std::uint32_t lowbias32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352dU;
  x ^= x >> 15;
  x *= 0x846ca68bU;
  x ^= x >> 16;
  return x;
}
constexpr SrKey sr_key(std::uint64_t seed) {
  const std::uint64_t k = splitmix64(seed);
  return {static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)};
}
// The offset for a block of 2^32 indices sharing the same high half: vector code computes it once.
constexpr std::uint32_t sr_block_offset(SrKey key, std::uint32_t index_hi) {
  return key.lo + lowbias32(index_hi ^ key.hi);
}
constexpr std::uint32_t sr_random(SrKey key, std::uint64_t index) {
  return lowbias32(static_cast<std::uint32_t>(index) + sr_block_offset(key, static_cast<std::uint32_t>(index >> 32)));
}
constexpr std::uint32_t sr_random(std::uint64_t seed, std::uint64_t index) { return sr_random(sr_key(seed), index); }

// ---- the specification -------------------------------------------------------------------------
// Rounds x to `fmt` under `r` and returns the encoding (the format's bits, in the low storage_bits).
// `index` is the element index that keys the stochastic generator (ignored by the other modes).
// Input double is rounded directly: there is no intermediate rounding through float.
//
// Semantics (all modes): the exact value is rounded with an unbounded exponent range above and the
// format's quantum 2^(emin - man_bits) below; then
//  * a result whose magnitude exceeds max_finite overflows: with Overflow::saturate it becomes
//    ±max_finite; with Overflow::to_inf it becomes what IEEE 754 gives for the mode (nearest modes and
//    stochastic: ±inf; toward zero and to-odd: ±max_finite; up: +inf / -max_finite; down: +max_finite /
//    -inf); in a format without inf, an inf result becomes NaN (as OCP e4m3fn conversion does);
//  * with Subnormals::flush a non-zero result below min_normal becomes ±0 (after rounding, so a value
//    that rounds up to min_normal survives);
//  * ±inf inputs: ±inf, or ±max_finite with Overflow::saturate, or NaN in a format without inf;
//  * NaN inputs: NaN; in IEEE formats the sign and the top mantissa bits of the payload are kept and
//    the quiet bit is set (what x86 F16C and AVX512-BF16 do); in all_ones formats S.1..1; in neg_zero
//    formats the single NaN 0x80..;
//  * -0 stays -0 (in neg_zero formats there is no -0: results that would be -0 are +0).
std::uint64_t round_bits(double x, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);
std::uint64_t round_bits(float x, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);

// The value of an encoding, exactly (every format that fits in a double decodes exactly).
double decode(std::uint64_t bits, const Format& fmt);
// The value as float, for formats that fit in float, NaN payloads kept (IEEE encodings): what
// round(float) and simulate mode return.
float decode_float(std::uint64_t bits, const Format& fmt);

// round_bits(float), round(float) and decode_float() give the same bits whatever the caller's MXCSR:
// floats are widened and narrowed by their bits, because cvtss2sd reads a float subnormal as zero under
// DAZ and cvtsd2ss flushes a float subnormal result under FTZ (a program linked with -ffast-math runs
// with both on). The bulk engine (bulk.hpp) holds the same promise.

// round() = decode(round_bits()): the rounded value, held in the input's type (simulate mode).
// For float input the rounded value is returned as float; formats wider than float (fp64, custom
// formats with more precision or range) are rejected for float output by the bulk engine, and here
// the double overload should be used.
double round(double x, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);
float round(float x, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);

// Encodes a double that is exactly representable in fmt (throws mpsim::Error if it is not).
std::uint64_t encode_exact(double x, const Format& fmt);
// True if x is exactly representable in fmt (NaN counts as representable where fmt has NaN).
bool is_representable(double x, const Format& fmt);

// Classification of an encoding.
bool is_nan_bits(std::uint64_t bits, const Format& fmt);
bool is_inf_bits(std::uint64_t bits, const Format& fmt);

}  // namespace mpsim
