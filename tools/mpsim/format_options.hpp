// The format and rounding options shared by `mpsim round` and `mpsim arith`: a format name plus
// --subnormals keep|flush and --overflow inf|saturate; --mode, --sr-bits, --seed, --daz; round's --flip. The words are
// parsed in lib/mpsim/format/options.hpp; here a wrong one is named as the command line spells it.
#pragma once

#include <cstdint>
#include <string>

#include "mpsim/error.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/options.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/format/soft_error.hpp"

namespace mpsim::cli {

// The message of a wrong option in the command line's words.
inline Error option_error(const OptionError& e) {
  switch (e.key) {
    case OptionKey::subnormals:
    case OptionKey::overflow: {
      const std::string flag = e.key == OptionKey::subnormals ? "--subnormals" : "--overflow";
      return Error(flag + ": unknown value '" + e.value + "' (known: " + std::string(option_words(e.key)) + ")");
    }
    case OptionKey::sr_bits: return Error("--sr-bits applies only to --mode sr");
    case OptionKey::flip: return Error("--flip: the probability must be a number in [0, 1], got '" + e.value + "'");
    case OptionKey::flip_bits:
      return Error("--flip-bits: unknown value '" + e.value + "' (known: " + std::string(option_words(e.key)) + ")");
  }
  return Error(e.what());
}

inline Format format_with_options(const std::string& name, const std::string& subnormals, const std::string& overflow) {
  const Format base = parse_format(name);
  try {
    return mpsim::format_with_options(base, subnormals, overflow);
  } catch (const OptionError& e) {
    throw option_error(e);
  }
}

// The Rounding the options name, validated; --sr-bits other than the default needs --mode sr.
inline Rounding rounding_with_options(const std::string& mode, int sr_bits, std::uint64_t seed, bool daz) {
  try {
    return mpsim::rounding_with_options(mode, sr_bits, seed, daz);
  } catch (const OptionError& e) {
    throw option_error(e);
  }
}

// --flip P --flip-seed S --flip-bits fraction|any (soft errors after rounding), validated.
inline SoftErrors soft_errors_with_options(const std::string& p, std::uint64_t seed, const std::string& bits) {
  try {
    return mpsim::soft_errors_with_options(std::string_view(p), seed, bits);
  } catch (const OptionError& e) {
    throw option_error(e);
  }
}

}  // namespace mpsim::cli
