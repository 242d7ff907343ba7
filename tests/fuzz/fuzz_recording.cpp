// libFuzzer target: the hardware recordings `mpsim verify --against DIR` reads (data/hardware/<device>/
// convert.json, arith.json; kernels/recording.hpp, check_recording: kind, profile, run names, digests, listed
// mismatches). Any JSON text must either pass or throw mpsim::Error; a crash, a sanitizer report or any other
// exception is a bug. The blocks themselves (2^24 elements each) are not recomputed here.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "mpsim/error.hpp"
#include "recording.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto doc = nlohmann::json::parse(data, data + size, nullptr, false);
  if (doc.is_discarded()) return 0;  // read_json reports invalid JSON before the check
  try {
    mpsim::hw::check_recording(doc, "fuzz/convert.json");
  } catch (const mpsim::Error&) {}
  return 0;
}
