// The one exception type of the library. Its message names the input and what was wrong with it
// ("weights.npy: header says shape (3, 4) but the file holds 10 values"); the CLI prints it and
// exits with status 2.
#pragma once

#include <stdexcept>
#include <string>

namespace mpsim {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace mpsim
