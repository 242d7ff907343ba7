// libFuzzer target: the .npz (zip) reader of lib/mpsim/io/tensor_source.hpp.
#include "fuzz_tensor_source.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return fuzz_tensor_source(data, size, "fuzz.npz");
}
