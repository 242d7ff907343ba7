// mpsim: the command line. Parsing and printing only; the work is in lib/mpsim.
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <exception>

#include "command.hpp"
#include "mpsim/error.hpp"

namespace mpsim::cli {

std::vector<Command>& commands() {
  static std::vector<Command> all;
  return all;
}

bool register_command(std::string name, Setup setup) {
  commands().push_back({std::move(name), std::move(setup)});
  return true;
}

int& exit_status() {
  static int status = 0;
  return status;
}

}  // namespace mpsim::cli

int main(int argc, char** argv) {
  using namespace mpsim::cli;
  CLI::App app{"mpsim: numerical analysis of low-precision training (emulated fp16/bf16/tf32/fp8, "
               "rounding, underflow reports, loss-scaling simulator)"};
  app.require_subcommand(1);
  auto& cmds = commands();
  std::sort(cmds.begin(), cmds.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  for (auto& c : cmds) c.setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit with 2 like every other bad input (CLI11 would use 105-ish codes).
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const mpsim::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "mpsim: error: {}\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "mpsim: internal error: {}\n", e.what());
    return 3;
  }
  return exit_status();
}
