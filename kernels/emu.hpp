// The emulation, compiled for the host AND the device: the rounding specification of
// lib/mpsim/format/hd/round_spec.hpp (which the library's round_bits() is too), a device profile's NaN
// rules around it (lib/mpsim/format/hd/nan_rules.hpp) and correctly rounded fp16/bf16 arithmetic
// (lib/mpsim/format/hd/arith.hpp): the very functions the library's profile.cpp and arith.cpp call, so
// nothing here is a second implementation. The GPU runs it next to the hardware intrinsics so that an
// exhaustive 2^32 comparison never leaves the device; the host tests (tests/kernels/emu_test.cpp) check its
// host build bit for bit against round_bits() and arith_bits_like().
//
// Plain C++20 when not compiled by nvcc: no CUDA header, and no library dependency beyond the
// header-only specification, so host code and the CPU-side digest recomputation use the very same
// functions.
#pragma once

#include <cstdint>

#include "mpsim/format/hd/arith.hpp"
#include "mpsim/format/hd/host_device.hpp"
#include "mpsim/format/hd/nan_rules.hpp"
#include "mpsim/format/hd/round_spec.hpp"

namespace mpsim::emu {

// What round_bits needs from a Format (spec::FormatSpec, a kernel parameter), plus a device profile's NaN
// rules (profile.hpp's nan_rules() fills them; kernels/emu_host.hpp).
struct DevFormat : spec::FormatSpec, hd::NanRules {};

// The rounding mode, DAZ, the stochastic bits and the Philox key (spec::RoundingSpec).
using DevRounding = spec::RoundingSpec;

using hd::bits_of;
using hd::double_of;
using hd::float_of;
using hd::kAdd;
using hd::kDiv;
using hd::kFma;
using hd::kMul;
using hd::kSqrt;
using hd::kSub;
using hd::Op;
using spec::is_nan_enc;
using spec::kDown;
using spec::kNearestAway;
using spec::kNearestEven;
using spec::kStochastic;
using spec::kToOdd;
using spec::kTowardZero;
using spec::kUp;
using spec::Mode;

// round_bits(double, ...) of the library under the device's profile (round_bits_like).
MPSIM_HD std::uint64_t round_double(double x, const DevFormat& f, const DevRounding& r, std::uint64_t index = 0) {
  const std::uint64_t xbits = bits_of(x);
  const std::uint64_t bits = spec::round_double_bits(xbits, f, r, index);
  if ((xbits & ~spec::kDoubleSign) > spec::kDoubleExpMask) return hd::nan_input_result(bits, xbits, f, f);
  return hd::made_nan_result(bits, f, f);
}

// round_bits(float, ...) of the library under the device's profile.
MPSIM_HD std::uint64_t round_float(std::uint32_t b, const DevFormat& f, const DevRounding& r, std::uint64_t index = 0) {
  const std::uint64_t bits = spec::round_float_bits(b, f, r, index);
  if ((b & 0x7fffffffu) > 0x7f800000u) return hd::nan_input_result(bits, spec::widen_float_bits(b), f, f);
  return hd::made_nan_result(bits, f, f);
}

// decode() of the library: the exact value as a double.
MPSIM_HD double decode(std::uint64_t bits, const DevFormat& f) { return double_of(spec::decode_bits(bits, f)); }

// a op b (op c) on encodings of `f` under the device's profile: arith_bits_like() of the library.
MPSIM_HD std::uint64_t arith(Op op, std::uint64_t ab, std::uint64_t bb, std::uint64_t cb, const DevFormat& f,
                             const DevRounding& r, std::uint64_t index = 0) {
  const hd::ArithOutcome o = hd::arith_values(op, decode(ab, f), decode(bb, f), decode(cb, f), f, r, index);
  return hd::arith_nan_result(o.bits, o.nan_operand, f, f);
}

// The PTX ".sat" forms under the device's profile (hd::saturate_unit).
MPSIM_HD std::uint64_t saturate01(std::uint64_t bits, const DevFormat& f) {
  return hd::saturate_unit(bits, f, f.sat_zero_positive);
}

}  // namespace mpsim::emu
