// Runs the real `mpsim` binary ($MPSIM_BIN, set by tests/meson.build) for the CLI tests: the exit status
// and stdout + stderr together; the command and its output go into the test's failure message.
#pragma once

#include <sys/wait.h>
#include "catch_compat.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../io/test_files.hpp"

namespace mpsim::test {

struct RunResult {
  int status;
  std::string output;  // stdout and stderr together
};

// A single-quoted shell word.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// `mpsim ARGS`, its output captured in a log beside the scratch folder (so the folder holds only what
// the command wrote).
inline RunResult run_mpsim(const ScratchDir& dir, const std::string& args) {
  const char* bin = std::getenv("MPSIM_BIN");
  REQUIRE(bin != nullptr);
  const auto log = dir.path().parent_path() / (dir.path().filename().string() + ".log");
  const std::string cmd = quote(bin) + " " + args + " > " + quote(log.string()) + " 2>&1";
  const int raw = std::system(cmd.c_str());
  std::ifstream f(log);
  std::stringstream ss;
  ss << f.rdbuf();
  std::filesystem::remove(log);
  UNSCOPED_INFO("command: " << cmd << "\noutput: " << ss.str().substr(0, 3000));
  REQUIRE(WIFEXITED(raw));
  return {WEXITSTATUS(raw), ss.str()};
}

}  // namespace mpsim::test
