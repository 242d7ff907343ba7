// `mpsim hw ...` runs `mpsim-hw hw ...` (the executable beside this one, tools/meson.build).
// Why two executables: the hw commands link the CUDA runtime and cuBLAS (libcublasLt alone is half a
// gigabyte); loading them costs 0.11-0.15 s and 214 MiB of resident memory per start, GPU or not.
#include <fmt/core.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "command.hpp"
#include "mpsim/error.hpp"

namespace {

void setup(CLI::App& app) {
  auto* hw = app.add_subcommand("hw",
                                "CUDA kernels beside the emulation: device info, bit-exact comparisons, GEMM, "
                                "histogram, benchmarks (needs a CUDA build and device; `mpsim hw --help`)");
  hw->prefix_command();  // everything after `hw`, --help included, is mpsim-hw's to parse
  hw->set_help_flag();
  hw->callback([hw] {
    std::error_code ec;
    const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) throw mpsim::Error(fmt::format("hw: cannot find this executable (/proc/self/exe: {})", ec.message()));
    const std::string exe = (self.parent_path() / "mpsim-hw").string();
    std::vector<std::string> args = {exe, "hw"};
    for (const auto& a : hw->remaining()) args.push_back(a);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    mpsim::cli::restore_standard_output();  // mpsim-hw routes its own `--json -`
    ::execv(exe.c_str(), argv.data());
    throw mpsim::Error(fmt::format("hw: cannot run {}: {} (it is built beside mpsim)", exe, std::strerror(errno)));
  });
}

const bool registered = mpsim::cli::register_command("hw", setup);

}  // namespace
