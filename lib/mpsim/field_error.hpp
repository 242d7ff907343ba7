// mpsim::FieldError: an Error about one field of a config or option, which each front end names in its own
// words (a flag on the command line, a keyword in Python); BlockFormatNameError, whose advice each front end
// adds in its own words.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpsim/error.hpp"

namespace mpsim {

// An Error in one field of a config or one option given to the library (TrainConfig's steps, a block
// format's block_scale): the library names the field as its struct does; each front end names it as its
// users wrote it, the command line as a flag (--block-scale, tools/mpsim/main.cpp), Python as a keyword
// (block_scale=, python/src/module.cpp). what() is the library's own spelling, "block_scale 'x': unknown ...".
//
// A problem that advises another field ("choose another folder, or replace that run's files (--force)")
// writes it "{previous_run}" and lists it in `also`, so that the front end spells it too; only the names in
// `also` are replaced, so braces in a value or a path quoted by the problem stay as they are. An error about
// an input rather than a field (a file that needs a dtype) has an empty `field`: the message is the problem.
class FieldError : public Error {
 public:
  FieldError(std::string field, std::string value, std::string problem, std::vector<std::string> also = {})
      : Error(words(field, " ", value, problem, also, [](std::string_view f) { return std::string(f); })),
        field(std::move(field)),
        value(std::move(value)),
        problem(std::move(problem)),
        also(std::move(also)) {}
  std::string field;              // snake_case, as the config struct names it: "block_scale", "clip_norm"
  std::string value;              // the value as the message shows it ("'x'", "-1"); "" where it shows none
  std::string problem;            // what is wrong with it; "{name}" for each field of `also` it names
  std::vector<std::string> also;  // the other fields the problem names

  // The message with every field named by `spell` (a flag, a keyword) and `sep` between the field and its value.
  template <class Spell>
  std::string message(Spell&& spell, std::string_view sep) const {
    return words(field, sep, value, problem, also, spell);
  }

  // "<name><sep><value>: <problem>", or "<name>: <problem>" without a value: the command line's
  // spelled("--block-scale", " ", ...), Python's spelled("block_scale", "=", ...).
  static std::string spelled(std::string_view name, std::string_view sep, std::string_view value,
                             std::string_view problem) {
    std::string s(name);
    if (!value.empty()) s.append(sep).append(value);
    return s.append(": ").append(problem);
  }

 private:
  template <class Spell>
  static std::string words(std::string_view field, std::string_view sep, std::string_view value,
                           std::string_view problem, const std::vector<std::string>& also, Spell&& spell) {
    std::string text(problem);
    for (const auto& name : also) {
      const std::string mark = "{" + name + "}";
      const std::string spelled_name = spell(name);
      for (auto at = text.find(mark); at != std::string::npos; at = text.find(mark, at + spelled_name.size()))
        text.replace(at, mark.size(), spelled_name);
    }
    return field.empty() ? text : spelled(spell(field), sep, value, text);
  }
};

// parse_format given a block format's name (mxfp8_e4m3, nvfp4) where an element format is needed. The
// message says so; where a block format is taken instead is each front end's to add, in its own words
// (tools/mpsim/main.cpp: `mpsim round --to`; python/src/module.cpp: mpsim.round).
class BlockFormatNameError : public Error {
 public:
  using Error::Error;
};

}  // namespace mpsim
