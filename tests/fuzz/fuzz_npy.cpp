// libFuzzer target: the .npy parser (lib/mpsim/io/npy.hpp). Any input must either parse or throw
// mpsim::Error; a crash, a sanitizer report or any other exception is a bug.
#include <cstddef>
#include <cstdint>
#include <span>

#include "mpsim/error.hpp"
#include "mpsim/io/npy.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  try {
    const mpsim::io::NpyArray a = mpsim::io::parse_npy(bytes, "fuzz.npy");
    const auto values = mpsim::io::to_double(a);
    if (values.size() != a.count()) __builtin_trap();
    // What we read must write back and read again to the same array.
    const auto again = mpsim::io::parse_npy(mpsim::io::npy_bytes(a), "again.npy");
    if (again.data != a.data || again.shape != a.shape) __builtin_trap();
  } catch (const mpsim::Error&) {}
  return 0;
}
