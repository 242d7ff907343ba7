// Subcommand registry of the `mpsim` command line. Each subcommand lives in its own file and
// registers itself with a static `const bool registered = register_command(...)`, so adding a command
// touches no shared file but tools/meson.build.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <string_view>
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
// The flag that names a config's field (mpsim::FieldError): --block-scale for block_scale (main.cpp).
std::string flag_of_field(std::string_view field);

// Writes a report (--json, --csv, --stats-json) to `path` atomically, or to standard output when `path` is
// "-". main() sees a "-" among those options before the command runs and sends everything else the command
// prints (the human summary) to standard error, so standard output holds the report alone.
void write_report(const std::string& path, std::string_view text);
// Gives the process its standard output back as it was at start (before exec'ing a program that sorts
// out its own outputs: `mpsim hw` runs mpsim-hw with the same arguments).
void restore_standard_output();

// `git describe` of the source tree at build time (tools/mpsim/git_description.cpp.in).
const char* git_description();

}  // namespace mpsim::cli
