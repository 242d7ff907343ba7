// Internal to the tensor readers: the safetensors side of TensorSource (https://github.com/huggingface/safetensors:
// an 8-byte little-endian header length, a JSON header, the data). Not installed.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "mpsim/io/tensor_source.hpp"

namespace mpsim::io::detail {

// The tensors of a safetensors file, in data order; refuses duplicate names, overlapping data and entries
// whose shape and offsets disagree.
std::vector<TensorRef> read_safetensors_directory(std::span<const std::byte> b, const std::string& file,
                                                  const SourceOptions& o);

}  // namespace mpsim::io::detail
