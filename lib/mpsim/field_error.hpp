// mpsim::FieldError: an Error about one field of a config or option, which each front end names in its own
// words (a flag on the command line, a keyword in Python).
#pragma once

#include <string>
#include <string_view>

#include "mpsim/error.hpp"

namespace mpsim {

// An Error in one field of a config or one option given to the library (TrainConfig's steps, a block
// format's block_scale): the library names the field as its struct does; each front end names it as its
// users wrote it, the command line as a flag (--block-scale, tools/mpsim/main.cpp), Python as a keyword
// (block_scale=, python/src/module.cpp). what() is the library's own spelling, "block_scale 'x': unknown ...".
class FieldError : public Error {
 public:
  FieldError(std::string field, std::string value, std::string problem)
      : Error(spelled(field, " ", value, problem)),
        field(std::move(field)),
        value(std::move(value)),
        problem(std::move(problem)) {}
  std::string field;    // snake_case, as the config struct names it: "block_scale", "clip_norm"
  std::string value;    // the value as the message shows it ("'x'", "-1"); "" where it shows none
  std::string problem;  // what is wrong with it

  // "<name><sep><value>: <problem>", or "<name>: <problem>" without a value: the command line's
  // spelled("--block-scale", " ", ...), Python's spelled("block_scale", "=", ...).
  static std::string spelled(std::string_view name, std::string_view sep, std::string_view value,
                             std::string_view problem) {
    std::string s(name);
    if (!value.empty()) s.append(sep).append(value);
    return s.append(": ").append(problem);
  }
};

}  // namespace mpsim
