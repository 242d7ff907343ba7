// The one rounding function (docs/design.md). Everything that rounds — the bulk engine, the value types,
// the training simulator, the analysis reports, the CLI — calls round_bits()/round() here or a path
// that is tested bit for bit against them. round_bits() and decode() are the host/device specification
// of hd/round_spec.hpp applied to a Format; the CUDA emulation (kernels/emu.hpp) calls the same functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "mpsim/format/format.hpp"
#include "mpsim/format/hd/philox.hpp"
#include "mpsim/format/hd/round_spec.hpp"

namespace mpsim {

enum class RoundingMode : std::uint8_t {
  nearest_even,  // IEEE roundTiesToEven
  toward_zero,   // IEEE roundTowardZero
  up,            // IEEE roundTowardPositive
  down,          // IEEE roundTowardNegative
  nearest_away,  // IEEE roundTiesToAway
  to_odd,        // round to odd (Boldo & Melquiond): truncate, set the last bit if anything was lost
  stochastic,    // away from zero with probability proportional to the distance from the neighbour nearer zero
};

// What happens to subnormal *inputs* (of the source type, float or double).
enum class InputSubnormals : std::uint8_t { keep, zero };

struct Rounding {
  RoundingMode mode = RoundingMode::nearest_even;
  // Stochastic rounding: how many random bits decide (1..32). The fraction of the distance to the
  // lower neighbour is truncated to sr_bits bits and compared with an sr_bits-bit random number, as
  // hardware SR units do; with sr_bits at least the number of discarded bits the rounding is unbiased.
  int sr_bits = 32;
  // Stochastic rounding: key of the counter-based generator (Philox4x32-10). The random number used for
  // element i is sr_random(seed, i): the result never depends on thread count or call order.
  std::uint64_t seed = 0;
  InputSubnormals input_subnormals = InputSubnormals::keep;

  static Rounding nearest_even() { return {}; }
  static Rounding of(RoundingMode m) {
    Rounding r;
    r.mode = m;
    return r;
  }
  static Rounding stochastic(std::uint64_t seed, int bits = 32) {
    Rounding r;
    r.mode = RoundingMode::stochastic;
    r.seed = seed;
    r.sr_bits = bits;
    return r;
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
// 32 random bits for element `index` under `seed`: Philox4x32-10 (hd/philox.hpp) keyed by the seed, counter
// (index / 4, 0), word index % 4. Every seed is its own stream of 2^64 words (docs/formats.md).
constexpr std::uint32_t sr_random(std::uint64_t seed, std::uint64_t index) { return philox::sr_random(seed, index); }

// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014): a
// 64-bit mixing function for seeding and hashing (digests, test data), not part of rounding.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The plain structs of the host/device specification (hd/round_spec.hpp) for a Format / Rounding.
inline spec::FormatSpec format_spec(const Format& f) {
  spec::FormatSpec s;
  s.man_bits = f.man_bits;
  s.emin = f.emin;
  s.emax = f.emax;
  s.bias = f.bias;
  s.nan = static_cast<std::uint8_t>(f.nan);
  s.has_inf = f.has_inf;
  s.has_sign = f.has_sign;
  s.has_zero = f.has_zero;
  s.flush_subnormals = f.subnormals == Subnormals::flush;
  s.saturate = f.overflow == Overflow::saturate;
  s.sign_bit = f.sign_bit();
  s.storage_mask = f.storage_mask();
  s.max_finite_bits = f.max_finite_bits;
  s.inf_bits = f.inf_bits;
  s.nan_bits = f.nan_bits;
  return s;
}
inline spec::RoundingSpec rounding_spec(const Rounding& r) {
  spec::RoundingSpec s;
  s.mode = static_cast<std::uint8_t>(r.mode);
  s.inputs_subnormal_to_zero = r.input_subnormals == InputSubnormals::zero;
  s.sr_bits = r.sr_bits;
  s.seed = r.seed;
  return s;
}
static_assert(spec::kNanNone == static_cast<int>(NanEncoding::none) &&
              spec::kNanNegZero == static_cast<int>(NanEncoding::neg_zero) &&
              spec::kNanAllOnes == static_cast<int>(NanEncoding::all_ones));
static_assert(spec::kStochastic == static_cast<int>(RoundingMode::stochastic) &&
              spec::kToOdd == static_cast<int>(RoundingMode::to_odd) &&
              spec::kNearestAway == static_cast<int>(RoundingMode::nearest_away) &&
              spec::kDown == static_cast<int>(RoundingMode::down) && spec::kUp == static_cast<int>(RoundingMode::up) &&
              spec::kTowardZero == static_cast<int>(RoundingMode::toward_zero));

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
