// Subcommand registry of the `mpsim` command line. Each subcommand lives in its own file and
// registers itself with a static `const bool registered = register_command(...)`, so adding a command
// touches no shared file but tools/meson.build.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace mpsim::cli {

// Adds the subcommand to `app` and returns it; the callback it installs does the work and may throw
// mpsim::Error (printed as "mpsim: error: ...", exit status 2).
using Setup = std::function<void(CLI::App& app)>;

struct Command {
  std::string name;
  Setup setup;
};

bool register_command(std::string name, Setup setup);
std::vector<Command>& commands();

// Exit status the callback wants main to return (0 unless it sets it, e.g. `verify` on a mismatch).
int& exit_status();

}  // namespace mpsim::cli
