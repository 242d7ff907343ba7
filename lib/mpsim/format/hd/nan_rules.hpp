// A device profile's NaN rules (profile.hpp's ProfileRule: NanRule, canonical_for_nan_inputs_only,
// truncated_nan_minus_one, saturated_zero_positive) as plain data, and what they do to an encoding, for
// the host and the CUDA device alike: DeviceRounding (profile.cpp) and the device emulation
// (kernels/emu.hpp) both call these functions, so the rule is written once.
//
// Every rule post-processes the encoding round_bits() (spec::round_double_bits) or the correctly rounded
// arithmetic (hd/arith.hpp) gave: NaN results may change pattern, nothing else does.
#pragma once

#include <cstdint>

#include "mpsim/format/hd/host_device.hpp"
#include "mpsim/format/hd/round_spec.hpp"

namespace mpsim::hd {

struct NanRules {
  bool canonical_nan = false;           // NanRule::canonical: NaN inputs give canonical_nan_bits
  bool canonical_made_nan = false;      // ... and so do NaNs the operation makes (!canonical_for_nan_inputs_only)
  bool truncate_nan = false;            // NanRule::truncate_payload: NaN inputs cut to the format, not quieted
  bool truncate_nan_minus_one = false;  // ... then lowered by one unit (ProfileRule::truncated_nan_minus_one)
  bool sat_zero_positive = false;       // the .sat arithmetic forms write +0 for a -0 result
  std::uint64_t canonical_nan_bits = 0;
};

// A conversion of a NaN input (double bits `xbits`) that round_bits() encoded as `bits`: the cut payload
// under truncate_payload (IEEE-encoded formats only: the others have one NaN pattern), the canonical
// pattern under a canonical rule, else `bits` (sign and top payload kept, quieted).
MPSIM_HD std::uint64_t nan_input_result(std::uint64_t bits, std::uint64_t xbits, const spec::FormatSpec& f,
                                        const NanRules& n) {
  if (n.truncate_nan) return f.nan == spec::kNanIeee ? spec::truncated_nan(xbits, f, n.truncate_nan_minus_one) : bits;
  return n.canonical_nan && spec::is_nan_enc(bits, f) ? n.canonical_nan_bits : bits;
}

// A NaN the operation made itself from non-NaN inputs (overflow or ±inf into a format without inf, an
// invalid operation such as inf - inf): canonical unless the rule is for NaN inputs only.
MPSIM_HD std::uint64_t made_nan_result(std::uint64_t bits, const spec::FormatSpec& f, const NanRules& n) {
  return n.canonical_made_nan && spec::is_nan_enc(bits, f) ? n.canonical_nan_bits : bits;
}

// An arithmetic result `bits` (hd/arith.hpp); `nan_operand`: some operand was NaN. Payload truncation is a
// conversion rule only (no device arithmetic rule cuts payloads).
MPSIM_HD std::uint64_t arith_nan_result(std::uint64_t bits, bool nan_operand, const spec::FormatSpec& f,
                                        const NanRules& n) {
  if (!spec::is_nan_enc(bits, f)) return bits;
  return (nan_operand ? n.canonical_nan : n.canonical_made_nan) ? n.canonical_nan_bits : bits;
}

// The PTX ".sat" arithmetic forms (add.sat.f16 ...): the result clamped to [0, 1], a NaN result to +0 (PTX
// ISA, "Half Precision Floating Point Instructions: add"); -0 stays -0 (it lies in [0, 1]) unless the
// rule says +0, as the H100 does (profile.cpp's cuda-sm90 arithmetic rule).
MPSIM_HD std::uint64_t saturate_unit(std::uint64_t bits, const spec::FormatSpec& f, bool negative_zero_to_positive) {
  if (spec::is_nan_enc(bits, f)) return 0;
  if (bits & f.sign_bit) {
    const bool minus_zero = (bits & f.storage_mask & ~f.sign_bit) == 0;
    return minus_zero && !negative_zero_to_positive ? bits : 0;
  }
  const std::uint64_t one = spec::round_double_bits(bits_of(1.0), f, spec::RoundingSpec{}, 0);
  return double_of(spec::decode_bits(bits, f)) > 1.0 ? one : bits;
}

}  // namespace mpsim::hd
