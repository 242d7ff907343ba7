// The one .npy array a command such as `round` or `arith` reads, opened for streaming (memory-mapped,
// read chunk by chunk: see lib/mpsim/io/tensor_source.hpp).
#pragma once

#include <fmt/core.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "mpsim/error.hpp"
#include "mpsim/io/tensor_source.hpp"

namespace mpsim::cli {

// Throws mpsim::Error naming the file if it is not a .npy file (the general reader would also take
// .npz / safetensors / raw data, which these commands do not).
inline io::TensorSource open_npy(const std::string& path) {
  if (std::filesystem::is_regular_file(path)) {
    char magic[6] = {};
    std::ifstream(path, std::ios::binary).read(magic, sizeof magic);
    if (std::string_view(magic, sizeof magic) != "\x93NUMPY")
      throw Error(fmt::format("{}: not a .npy file (bad magic)", path));
  }
  return io::TensorSource::open(path);  // a missing or unreadable file: its own message
}

}  // namespace mpsim::cli
