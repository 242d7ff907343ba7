#include "mpsim/format/options.hpp"

namespace mpsim {

namespace {
OptionError unknown_word(OptionKey key, std::string_view option, std::string_view word) {
  return OptionError(key, std::string(word),
                     std::string(option) + ": unknown value '" + std::string(word) +
                         "' (known: " + std::string(option_words(key)) + ")");
}
}  // namespace

std::string_view option_words(OptionKey key) {
  switch (key) {
    case OptionKey::subnormals: return "keep, flush";
    case OptionKey::overflow: return "inf, saturate";
    case OptionKey::flip_bits: return "fraction, any";
    case OptionKey::sr_bits:
    case OptionKey::flip: return "";
  }
  return "";
}

Subnormals parse_subnormals(std::string_view word) {
  for (const Subnormals s : {Subnormals::keep, Subnormals::flush})
    if (word == to_string(s)) return s;
  throw unknown_word(OptionKey::subnormals, "subnormals", word);
}

Overflow parse_overflow(std::string_view word) {
  for (const Overflow o : {Overflow::to_inf, Overflow::saturate})
    if (word == to_string(o)) return o;
  throw unknown_word(OptionKey::overflow, "overflow", word);
}

Format format_with_options(const Format& base, std::string_view subnormals, std::string_view overflow) {
  const Subnormals sub = parse_subnormals(subnormals);
  const Overflow ovf = parse_overflow(overflow);
  if (sub == base.subnormals && ovf == base.overflow) return base;
  return with_options(base, sub, ovf);
}

Rounding rounding_with_options(std::string_view mode, int sr_bits, std::uint64_t seed, bool daz) {
  Rounding r;
  r.mode = parse_rounding_mode(mode);
  const int default_sr_bits = r.sr_bits;
  r.sr_bits = sr_bits;
  r.seed = seed;
  r.input_subnormals = daz ? InputSubnormals::zero : InputSubnormals::keep;
  validate(r);
  if (sr_bits != default_sr_bits && r.mode != RoundingMode::stochastic)
    throw OptionError(OptionKey::sr_bits, std::to_string(sr_bits),
                      "sr_bits " + std::to_string(sr_bits) + " applies only to stochastic rounding (mode sr)");
  return r;
}

}  // namespace mpsim
