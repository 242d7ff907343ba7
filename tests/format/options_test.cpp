// Tests of lib/mpsim/format/options.hpp: every word the subnormal and overflow options accept, the Rounding
// built from the rounding options, and the OptionError (key, value, message) of every wrong word. Each
// check prints the word and what it gave.
#include "catch_compat.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/options.hpp"
#include "mpsim/format/round.hpp"

using namespace mpsim;

namespace {
const char* key_name(OptionKey k) {
  return k == OptionKey::subnormals ? "subnormals" : k == OptionKey::overflow ? "overflow" : "sr_bits";
}
}  // namespace

TEST_CASE("options: every subnormals and overflow word, applied to fp16 and fp8_e4m3", "[options]") {
  struct Case {
    const char* subnormals;
    const char* overflow;
    Subnormals sub;
    Overflow ovf;
  };
  const std::vector<Case> cases = {{"keep", "inf", Subnormals::keep, Overflow::to_inf},
                                   {"keep", "saturate", Subnormals::keep, Overflow::saturate},
                                   {"flush", "inf", Subnormals::flush, Overflow::to_inf},
                                   {"flush", "saturate", Subnormals::flush, Overflow::saturate}};
  int checked = 0;
  for (const Format* base : {&fp16(), &fp8_e4m3()}) {
    for (const auto& c : cases) {
      const Format f = format_with_options(*base, c.subnormals, c.overflow);
      std::printf("%s subnormals=%s overflow=%s -> subnormals %s overflow %s min_subnormal %.9g saturates %d\n",
                  base->name.c_str(), c.subnormals, c.overflow, std::string(to_string(f.subnormals)).c_str(),
                  std::string(to_string(f.overflow)).c_str(), f.min_subnormal, f.saturates());
      CHECK(parse_subnormals(c.subnormals) == c.sub);
      CHECK(parse_overflow(c.overflow) == c.ovf);
      CHECK(f.subnormals == c.sub);
      CHECK(f.overflow == c.ovf);
      CHECK(f.name == base->name);
      CHECK(f.exp_bits == base->exp_bits);
      CHECK(f.man_bits == base->man_bits);
      // What the options mean for the values: the smallest positive value is 2^(emin - man_bits) with
      // subnormals kept and 2^emin with them flushed (IEEE 754 binary16: 2^-24 / 2^-14; OFP8 E4M3: 2^-9 / 2^-6).
      const double smallest = std::ldexp(1.0, c.sub == Subnormals::keep ? base->emin - base->man_bits : base->emin);
      CHECK(f.min_subnormal == smallest);
      // fp16 (which has infinities) saturates only when told to.
      if (base->has_inf) CHECK(f.saturates() == (c.ovf == Overflow::saturate));
      ++checked;
    }
  }
  std::printf("format options: %d (format, subnormals, overflow) combinations checked\n", checked);
}

TEST_CASE("options: a wrong subnormals or overflow word is an OptionError naming the key and the value", "[options]") {
  int checked = 0;
  for (const std::string word : {"drop", "Keep", "FLUSH", "", "keep ", "saturating", "inf ", "nan", "0"}) {
    for (const OptionKey key : {OptionKey::subnormals, OptionKey::overflow}) {
      const bool is_word =
          key == OptionKey::subnormals ? (word == "keep" || word == "flush") : (word == "inf" || word == "saturate");
      REQUIRE_FALSE(is_word);
      try {
        if (key == OptionKey::subnormals) format_with_options(fp16(), word, "inf");
        else format_with_options(fp16(), "keep", word);
        FAIL("no error for " << key_name(key) << " '" << word << "'");
      } catch (const OptionError& e) {
        std::printf("%s='%s' -> OptionError key %s value '%s': %s\n", key_name(key), word.c_str(), key_name(e.key),
                    e.value.c_str(), e.what());
        CHECK(e.key == key);
        CHECK(e.value == word);
        const std::string expected = std::string(key_name(key)) + ": unknown value '" + word +
                                     "' (known: " + (key == OptionKey::subnormals ? "keep, flush" : "inf, saturate") +
                                     ")";
        CHECK(std::string(e.what()) == expected);
      }
      ++checked;
    }
  }
  CHECK(option_words(OptionKey::subnormals) == "keep, flush");
  CHECK(option_words(OptionKey::overflow) == "inf, saturate");
  std::printf("wrong words: %d checked\n", checked);
}

TEST_CASE("options: the Rounding of every mode name, sr_bits, seed and daz", "[options]") {
  struct Mode {
    const char* name;
    RoundingMode mode;
  };
  // The names round.hpp documents: the CLI's short names, the IEEE-style names and the long spellings.
  const std::vector<Mode> modes = {{"rne", RoundingMode::nearest_even},
                                   {"rtz", RoundingMode::toward_zero},
                                   {"ru", RoundingMode::up},
                                   {"rd", RoundingMode::down},
                                   {"rna", RoundingMode::nearest_away},
                                   {"rto", RoundingMode::to_odd},
                                   {"sr", RoundingMode::stochastic},
                                   {"roundTiesToEven", RoundingMode::nearest_even},
                                   {"roundTowardZero", RoundingMode::toward_zero},
                                   {"nearest-even", RoundingMode::nearest_even},
                                   {"toward-zero", RoundingMode::toward_zero},
                                   {"up", RoundingMode::up},
                                   {"down", RoundingMode::down},
                                   {"nearest-away", RoundingMode::nearest_away},
                                   {"to-odd", RoundingMode::to_odd},
                                   {"stochastic", RoundingMode::stochastic}};
  int checked = 0;
  for (const auto& m : modes) {
    for (const bool daz : {false, true}) {
      const Rounding r = rounding_with_options(m.name, 32, 1234, daz);
      CHECK(r.mode == m.mode);
      CHECK(r.sr_bits == 32);
      CHECK(r.seed == 1234);
      CHECK(r.input_subnormals == (daz ? InputSubnormals::zero : InputSubnormals::keep));
      ++checked;
    }
    std::printf("mode '%s' -> %s\n", m.name, std::string(short_name(m.mode)).c_str());
  }
  // Stochastic rounding takes 1..32 random bits.
  for (int bits = 1; bits <= 32; ++bits) {
    const Rounding r = rounding_with_options("sr", bits, 7, false);
    CHECK(r.sr_bits == bits);
    ++checked;
  }
  std::printf("roundings: %d built and checked (sr_bits 1..32 included)\n", checked);
}

TEST_CASE("options: wrong rounding options", "[options]") {
  int checked = 0;
  // sr_bits other than the default with a deterministic mode: OptionError keyed sr_bits.
  for (const char* mode : {"rne", "rtz", "ru", "rd", "rna", "rto"}) {
    for (const int bits : {1, 8, 31}) {
      try {
        rounding_with_options(mode, bits, 0, false);
        FAIL("no error for mode " << mode << " sr_bits " << bits);
      } catch (const OptionError& e) {
        std::printf("mode %s sr_bits %d -> OptionError key %s value '%s': %s\n", mode, bits, key_name(e.key),
                    e.value.c_str(), e.what());
        CHECK(e.key == OptionKey::sr_bits);
        CHECK(e.value == std::to_string(bits));
      }
      ++checked;
    }
  }
  // sr_bits outside 1..32: the Rounding's own validation (mpsim::Error, not an OptionError), in any mode.
  for (const char* mode : {"sr", "rne"}) {
    for (const int bits : {0, -1, 33, 64}) {
      bool option_error = false, error = false;
      std::string message;
      try {
        rounding_with_options(mode, bits, 0, false);
      } catch (const OptionError& e) {
        option_error = true;
        message = e.what();
      } catch (const Error& e) {
        error = true;
        message = e.what();
      }
      std::printf("mode %s sr_bits %d -> %s: %s\n", mode, bits,
                  error          ? "Error"
                  : option_error ? "OptionError"
                                 : "none",
                  message.c_str());
      CHECK(error);
      CHECK_FALSE(option_error);
      CHECK_THAT(message, Catch::Contains("1..32"));
      ++checked;
    }
  }
  // An unknown mode name: parse_rounding_mode's error.
  for (const char* mode : {"nearest", "RNE", "", "sr8"}) {
    bool error = false;
    try {
      rounding_with_options(mode, 32, 0, false);
    } catch (const OptionError&) {
    } catch (const Error& e) {
      error = true;
      std::printf("mode '%s' -> Error: %s\n", mode, e.what());
    }
    CHECK(error);
    ++checked;
  }
  std::printf("wrong rounding options: %d checked\n", checked);
}
