// The two jobs of `mpsim verify` that share its options: the reference checks (verify.cpp) and the
// comparison with recorded hardware results (verify_against.cpp).
#pragma once

#include <string>

namespace mpsim::cli {

struct VerifyArgs {
  bool exhaustive = false;
  bool list = false;
  int threads = 0;
  std::string json_path;
  std::string only;
  bool inject_failure = false;
  std::string against, blocks = "all";
};

// --against DIR: recomputes the recorded runs' block digests and prints, per run, blocks compared and
// equal; exit status 1 if any differs.
void verify_against(const VerifyArgs& args);

}  // namespace mpsim::cli
