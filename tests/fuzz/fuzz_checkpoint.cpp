// libFuzzer target: the training checkpoint reader (lib/mpsim/train/checkpoint.hpp, read_checkpoint_bytes:
// the safetensors structure, the metadata's JSON texts, the tensor list, the CRC-32s). Any input must either
// read or throw mpsim::Error; a crash, a sanitizer report or any other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/train/checkpoint.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::byte> bytes(size);
  if (size) std::memcpy(bytes.data(), data, size);
  try {
    const auto ck = mpsim::train::read_checkpoint_bytes(std::move(bytes), "fuzz.safetensors");
    // What was accepted lists its tensors in the metadata, each read whole.
    if (!ck.header.contains("tensors") || ck.header["tensors"].size() != ck.tensors.size()) __builtin_trap();
  } catch (const mpsim::Error&) {}
  return 0;
}
