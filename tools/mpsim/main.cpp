// mpsim: the command line. Parsing and printing only; the work is in lib/mpsim.
#include <fmt/core.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <string_view>
#include <system_error>
#include <utility>

#include "build_options.hpp"
#include "command.hpp"
#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/io/atomic_file.hpp"
#include "mpsim/version.hpp"

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

// The flag of a config's field (mpsim::FieldError): --block-scale for block_scale, and the fields whose flag is
// named otherwise (ModelConfig::corpus_path is --corpus: tools/mpsim/train.cpp; TrainConfig::previous_run,
// refuse or replace, is --force).
std::string flag_of_field(std::string_view field) {
  static constexpr std::pair<std::string_view, std::string_view> renamed[] = {{"corpus_path", "--corpus"},
                                                                              {"previous_run", "--force"}};
  for (const auto& [name, flag] : renamed)
    if (field == name) return std::string(flag);
  std::string flag = "--" + std::string(field);
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

namespace {

// Where a report named "-" goes: the process's standard output as it was at start (main moves the
// summary's stdout onto stderr when a report takes it).
int report_fd = STDOUT_FILENO;

// The options whose file argument may be "-".
constexpr std::string_view kReportOptions[] = {"--json", "--csv", "--stats-json"};

// How many report options of the command line are "-" (`--json -` or `--json=-`).
int reports_to_stdout(int argc, char** argv) {
  int n = 0;
  for (int i = 1; i < argc; ++i)
    for (std::string_view opt : kReportOptions) {
      const std::string_view a = argv[i];
      if ((a == opt && i + 1 < argc && std::string_view(argv[i + 1]) == "-") ||
          (a.size() == opt.size() + 2 && a.substr(0, opt.size()) == opt && a.substr(opt.size()) == "=-"))
        ++n;
    }
  return n;
}

std::string version_text() {
  return fmt::format("mpsim {}\ngit {}\nbuild {}", kVersion, git_description(), MPSIM_BUILD_OPTIONS);
}

}  // namespace

void write_report(const std::string& path, std::string_view text) {
  if (path != "-") {
    io::write_text_file(path, text);
    return;
  }
  std::fflush(stdout);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(report_fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(fmt::format("standard output: write failed ({})", std::strerror(errno)));
    done += static_cast<std::size_t>(n);
  }
}

void restore_standard_output() {
  if (report_fd == STDOUT_FILENO) return;
  std::fflush(stdout);
  ::dup2(report_fd, STDOUT_FILENO);
  ::close(report_fd);
  report_fd = STDOUT_FILENO;
}

}  // namespace mpsim::cli

int main(int argc, char** argv) {
  using namespace mpsim::cli;
  CLI::App app{
      "mpsim: numerical analysis of low-precision training (emulated fp16/bf16/tf32/fp8, "
      "rounding, underflow reports, loss-scaling simulator)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text(), "Print mpsim's version, git description and build options");
  const int to_stdout = reports_to_stdout(argc, argv);
  if (to_stdout > 1) {
    fmt::print(stderr, "mpsim: error: only one of --json, --csv and --stats-json can be - (standard output)\n");
    return 2;
  }
  if (to_stdout == 1) {
    // The report takes standard output; what the command prints besides goes to standard error.
    std::fflush(stdout);
    report_fd = ::dup(STDOUT_FILENO);
    if (report_fd < 0 || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
      fmt::print(stderr, "mpsim: internal error: cannot redirect standard output ({})\n", std::strerror(errno));
      return 3;
    }
  }
  auto& cmds = commands();
  std::sort(cmds.begin(), cmds.end(), [](const Command& a, const Command& b) { return a.name < b.name; });
  for (auto& c : cmds) c.setup(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // Usage errors exit with 2 like every other bad input (CLI11 would use 105-ish codes). --help and
    // --version print to std::cout and exit 0 only if that text was written (`--help > /dev/full`: 2).
    const int rc = app.exit(e);
    std::cout.flush();
    if (!std::cout || std::fflush(stdout) != 0 || std::ferror(stdout)) {
      fmt::print(stderr, "mpsim: error: standard output: write failed ({})\n", std::strerror(errno ? errno : EIO));
      return 2;
    }
    return rc == 0 ? 0 : 2;
  } catch (const mpsim::FieldError& e) {
    // The library names the field (block_scale); the command line names its flag (--block-scale).
    std::fflush(stdout);
    fmt::print(stderr, "mpsim: error: {}\n", e.message(flag_of_field, " "));
    return 2;
  } catch (const mpsim::BlockFormatNameError& e) {
    // The library says an element format is needed; where a block format is taken is the command line's to say.
    std::fflush(stdout);
    fmt::print(stderr,
               "mpsim: error: {}; `mpsim round --to` and the --format of underflow, hist and rounding-error "
               "take it\n",
               e.what());
    return 2;
  } catch (const mpsim::Error& e) {
    std::fflush(stdout);
    fmt::print(stderr, "mpsim: error: {}\n", e.what());
    return 2;
  } catch (const std::system_error& e) {
    // fmt::print throws this when standard output cannot be written (a full disk, `> /dev/full`): bad
    // output, exit 2 like a bad input, not an internal error.
    if (!std::ferror(stdout)) {
      fmt::print(stderr, "mpsim: internal error: {}\n", e.what());
      return 3;
    }
    fmt::print(stderr, "mpsim: error: standard output: write failed ({})\n", e.code().message());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    fmt::print(stderr, "mpsim: internal error: {}\n", e.what());
    return 3;
  }
  // What is still buffered goes out now, so that a failure to write it is reported (exit 2) rather than lost.
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    fmt::print(stderr, "mpsim: error: standard output: write failed ({})\n", std::strerror(errno ? errno : EIO));
    return 2;
  }
  return exit_status();
}
