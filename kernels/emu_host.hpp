// Host side of the device emulation: builds the kernel-parameter structs of emu.hpp from the library's
// Format / Rounding and a device profile. Host only (never compiled into device code).
#pragma once

#include "emu.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::emu {

// The profile is applied here (apply_profile + its NaN rule), so a kernel or a host loop calling
// round_float()/arith() with the result reproduces round_bits_like().
inline void make_dev(const Format& fmt_in, const Rounding& r_in, const Profile& profile, Operation op, DevFormat& f,
                     DevRounding& r) {
  Format fmt = fmt_in;
  Rounding rr = r_in;
  apply_profile(profile, fmt, rr, op);
  f = DevFormat{};
  static_cast<spec::FormatSpec&>(f) = format_spec(fmt);
  static_cast<hd::NanRules&>(f) = nan_rules(profile.find(fmt, op, rr.mode));
  r = rounding_spec(rr);
}

inline DevFormat dev_format(const Format& fmt, const Profile& profile = profile_ieee(),
                            Operation op = Operation::convert) {
  DevFormat f;
  DevRounding r;
  make_dev(fmt, Rounding{}, profile, op, f, r);
  return f;
}

inline DevRounding dev_rounding(const Rounding& rr) { return rounding_spec(rr); }

}  // namespace mpsim::emu
