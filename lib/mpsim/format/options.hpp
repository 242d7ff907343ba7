// The words of the format and rounding options, parsed once for every interface that takes them (`mpsim
// round` and `mpsim arith` on the command line, the Python module): the subnormal results ("keep" |
// "flush"), overflow ("inf" | "saturate"), and a Rounding built from a mode name, the random bits of
// stochastic rounding, a seed and the daz flag, validated as it is built.
//
// A wrong option is an OptionError carrying which option it was and the value given, so that each
// interface names the option in its own spelling ("--subnormals: unknown value 'drop'" on the command line,
// "subnormals='drop': unknown" in Python) and its users read the words they typed.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "mpsim/error.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim {

// The options a wrong word can be given for.
enum class OptionKey : std::uint8_t {
  subnormals,  // a word other than keep / flush
  overflow,    // a word other than inf / saturate
  sr_bits,     // random bits other than the default with a mode other than stochastic rounding
  flip,        // a soft-error probability that is not a number in [0, 1] (soft_error.hpp)
  flip_bits,   // a word other than fraction / any
};

class OptionError : public Error {
 public:
  // `what` is the message in neutral words ("subnormals: unknown value 'drop' (known: keep, flush)").
  OptionError(OptionKey key, std::string value, const std::string& what)
      : Error(what), key(key), value(std::move(value)) {}
  OptionKey key;
  std::string value;  // as given ("drop"; the number for sr_bits)
};

// The accepted words of an option that takes words, as messages list them: "keep, flush", "inf, saturate".
std::string_view option_words(OptionKey key);

Subnormals parse_subnormals(std::string_view word);  // "keep" | "flush"; OptionError otherwise
Overflow parse_overflow(std::string_view word);      // "inf" | "saturate"; OptionError otherwise

// `base` with subnormal results and overflow as the words say (base itself when they are its own).
Format format_with_options(const Format& base, std::string_view subnormals, std::string_view overflow);

// The Rounding the options name: a mode name (parse_rounding_mode), sr_bits random bits (1..32, mpsim::Error
// otherwise; other than the default 32 only with stochastic rounding, OptionError otherwise), the generator's
// seed, and daz (subnormal inputs read as zero).
Rounding rounding_with_options(std::string_view mode, int sr_bits, std::uint64_t seed, bool daz);

}  // namespace mpsim
