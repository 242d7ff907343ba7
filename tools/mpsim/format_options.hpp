// The format options shared by `mpsim round` and `mpsim arith`: a format name plus
// --subnormals keep|flush and --overflow inf|saturate.
#pragma once

#include <string>

#include "mpsim/error.hpp"
#include "mpsim/format/format.hpp"

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
  return make_format(base.name, base.exp_bits, base.man_bits, base.bias, base.has_inf, base.nan, sub, ovf);
}

}  // namespace mpsim::cli
