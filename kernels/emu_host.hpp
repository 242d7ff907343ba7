// Host side of the emulation port: builds the kernel-parameter structs of emu.hpp from the library's
// Format / Rounding and a device profile. Host only (never compiled into device code).
#pragma once

#include "emu.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::emu {

// The profile is applied here (apply_profile + its NaN rule), so a kernel or a host loop calling
// round_float()/arith() with the result reproduces round_bits_like().
inline void make_dev(const Format& fmt_in, const Rounding& r_in, const Profile& profile, Operation op,
                     DevFormat& f, DevRounding& r) {
  // The port covers signed formats with a zero and a NaN (emu.hpp's DevFormat); the unsigned e8m0 and the
  // NaN-less OCP fp6 / fp4 types round on the host only.
  if (!fmt_in.has_sign || !fmt_in.has_zero || !fmt_in.has_nan())
    throw Error("the CUDA emulation does not cover format " + fmt_in.name +
                " (unsigned, without zero or without NaN); round it on the host");
  Format fmt = fmt_in;
  Rounding rr = r_in;
  apply_profile(profile, fmt, rr, op);
  f = DevFormat{};
  f.man_bits = fmt.man_bits;
  f.emin = fmt.emin;
  f.emax = fmt.emax;
  f.bias = fmt.bias;
  f.has_inf = fmt.has_inf;
  f.nan = static_cast<std::uint8_t>(fmt.nan);
  f.flush_subnormals = fmt.subnormals == Subnormals::flush;
  f.saturate = fmt.overflow == Overflow::saturate;
  f.sign_bit = fmt.sign_bit();
  f.max_finite_bits = fmt.max_finite_bits;
  f.inf_bits = fmt.inf_bits;
  f.nan_bits = fmt.nan_bits;
  if (const ProfileRule* rule = profile.find(fmt, op, rr.mode)) {
    if (rule->nan == NanRule::canonical) {
      f.canonical_nan = true;
      f.canonical_made_nan = !rule->canonical_for_nan_inputs_only;
      f.canonical_nan_bits = rule->canonical_nan_bits;
    }
    f.truncate_nan = rule->nan == NanRule::truncate_payload;
    f.sat_zero_positive = rule->saturated_zero_positive;
  }
  r = DevRounding{};
  r.mode = static_cast<std::uint8_t>(rr.mode);
  r.inputs_subnormal_to_zero = rr.input_subnormals == InputSubnormals::zero;
  r.sr_bits = rr.sr_bits;
  const SrKey key = sr_key(rr.seed);
  r.key_lo = key.lo;
  r.key_hi = key.hi;
}

inline DevFormat dev_format(const Format& fmt, const Profile& profile = profile_ieee(),
                            Operation op = Operation::convert) {
  DevFormat f;
  DevRounding r;
  make_dev(fmt, Rounding{}, profile, op, f, r);
  return f;
}

inline DevRounding dev_rounding(const Rounding& rr) {
  DevRounding r;
  r.mode = static_cast<std::uint8_t>(rr.mode);
  r.inputs_subnormal_to_zero = rr.input_subnormals == InputSubnormals::zero;
  r.sr_bits = rr.sr_bits;
  const SrKey key = sr_key(rr.seed);
  r.key_lo = key.lo;
  r.key_hi = key.hi;
  return r;
}

}  // namespace mpsim::emu
