// Writes float32 tensors in the safetensors format (https://github.com/huggingface/safetensors, README
// "Format"), readable by safetensors.numpy.load_file, torch and mpsim's own analysis commands:
//   u64 (little-endian)  header length H
//   H bytes              JSON header padded with spaces to a multiple of 8 bytes:
//                          {"__metadata__": {"key": "text", ...},
//                           "<name>": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...}
//   the tensors' values, little-endian, in the order given.
// Written atomically (AtomicFile): the file is whole or absent.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace mpsim::io {

struct SafetensorsView {
  std::string name;
  std::vector<std::int64_t> shape;  // empty: 1-D of values.size(); else its product must be values.size()
  std::span<const float> values;
};

// Throws mpsim::Error naming the file on a duplicate or empty tensor name, a shape that does not hold the
// values, or a failed write.
void write_safetensors(const std::filesystem::path& path, const std::map<std::string, std::string>& metadata,
                       std::span<const SafetensorsView> tensors);

}  // namespace mpsim::io
