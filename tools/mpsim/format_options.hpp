// The format and rounding options shared by `mpsim round` and `mpsim arith`: a format name plus
// --subnormals keep|flush and --overflow inf|saturate; --mode, --sr-bits, --seed, --daz.
#pragma once

#include <cstdint>
#include <string>

#include "mpsim/error.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim::cli {

inline Format format_with_options(const std::string& name, const std::string& subnormals,
                                  const std::string& overflow) {
  const Format base = parse_format(name);
  Subnormals sub;
  if (subnormals == "keep") sub = Subnormals::keep;
  else if (subnormals == "flush") sub = Subnormals::flush;
  else throw Error("--subnormals: unknown value '" + subnormals + "' (known: keep, flush)");
  Overflow ovf;
  if (overflow == "inf") ovf = Overflow::to_inf;
  else if (overflow == "saturate") ovf = Overflow::saturate;
  else throw Error("--overflow: unknown value '" + overflow + "' (known: inf, saturate)");
  return with_options(base, sub, ovf);
}

// The Rounding the options name, validated; --sr-bits other than the default needs --mode sr.
inline Rounding rounding_with_options(const std::string& mode, int sr_bits, std::uint64_t seed, bool daz) {
  Rounding r;
  r.mode = parse_rounding_mode(mode);
  r.sr_bits = sr_bits;
  r.seed = seed;
  r.input_subnormals = daz ? InputSubnormals::zero : InputSubnormals::keep;
  validate(r);
  if (sr_bits != 32 && r.mode != RoundingMode::stochastic) throw Error("--sr-bits applies only to --mode sr");
  return r;
}

}  // namespace mpsim::cli
