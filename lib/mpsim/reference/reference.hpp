// The independent reference for rounding (docs/design.md, "reference/"): rounds an EXACT value to any Format
// in every RoundingMode with Boost.Multiprecision, by a different algorithm from the production
// round_bits() (lib/mpsim/format/round.cpp), and shares no code with it (it reads only Format's fields).
//
// Algorithm: the positive finite encodings of every format we support are ordered like their values,
// and the formula value(e) = significand * 2^exponent read off the fields continues one step past the
// largest finite encoding (to inf's slot in IEEE formats, the NaN slot in e4m3fn, 0x80 in fnuz formats)
// with exactly the next point of the unbounded grid. So the two neighbours lo <= |x| < hi are found by a
// binary search over encodings with exact comparisons, and the mode decides between them by comparing
// the exact distances |x| - lo and hi - |x| as rationals. Nothing looks at the bit layout of the input.
//
// Semantics are those documented in round.hpp (overflow by mode, flush after rounding, NaN payloads,
// -0, fnuz formats without -0); the reference re-derives them from that text.
//
// Stochastic rounding, as round.hpp documents it: with b = sr_bits, frac = (|x| - lo) / (hi - lo) exactly
// (lo the neighbour of smaller magnitude), the magnitude rounds up iff
//     floor(frac * 2^b) + (rnd >> (32 - b)) >= 2^b,    rnd = sr_random(seed, index).
//
// Even and odd (nearest-even ties, to-odd) are the parity of the neighbour's encoding, which is the
// parity of its integral significand for every format with at least one mantissa bit.
#pragma once

#include <boost/multiprecision/cpp_int.hpp>
#include <cstdint>

#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim {

using Rational = boost::multiprecision::cpp_rational;
using BigInt = boost::multiprecision::cpp_int;

// Rounds the exact finite value x to `fmt` under `r` and returns the encoding. `negative_zero` gives the
// sign of a zero x (an exact zero sum of opposite signs is +0 in every mode but down, IEEE 754 §6.3: the
// caller decides). `index` keys the stochastic generator. InputSubnormals does not apply here (x is not
// an input of a source type).
std::uint64_t reference_round(const Rational& x, bool negative_zero, const Format& fmt, const Rounding& r,
                              std::uint64_t index = 0);

// Rounds a double / float input, including ±0, ±inf, NaN and Rounding::input_subnormals, following the
// round.hpp rules. Same contract as round_bits().
std::uint64_t reference_round(double x, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);
std::uint64_t reference_round(float x, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);

// The exact value of a finite double.
Rational exact_value(double x);

// What an encoding is, exactly.
struct ReferenceValue {
  enum class Kind : std::uint8_t { finite, inf, nan } kind = Kind::finite;
  bool negative = false;  // sign bit (for finite zero: true means -0)
  Rational value;         // signed exact value (0 unless finite)
};
ReferenceValue reference_decode(std::uint64_t bits, const Format& fmt);

// Encodings of the specials as round.hpp defines them (for callers that round arithmetic results).
std::uint64_t reference_inf_bits(bool negative, const Format& fmt);  // ±inf, or NaN in a format without inf
std::uint64_t reference_nan_bits(bool negative, const Format& fmt);  // the canonical quiet NaN
// The result of a finite value whose rounded magnitude exceeds max_finite, for the mode and format.
std::uint64_t reference_overflow_bits(bool negative, const Format& fmt, RoundingMode mode);

}  // namespace mpsim
