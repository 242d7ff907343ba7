// The CPU recomputation of recorded exhaustive runs (data/hardware/<device>/convert.json, arith.json):
// the outputs of any range of a run's elements, and the digest of any block, computed by the library's
// emulation under a device profile — conversions through the bulk engine (round_array) and the
// profile's DeviceRounding, arithmetic through lib/mpsim/format/arith.hpp — on several threads.
// Used by tests/kernels/recorded_test.cpp and `mpsim verify --against`. Host only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "digest.hpp"
#include "runs_host.hpp"

namespace mpsim::hw {

// The number of digest blocks of a run (256 for 2^32 elements, 16 for the 2^28-element fp64 sample).
std::uint64_t block_count(const ConvertRun& run);
inline std::uint64_t block_count(const ArithRun&) { return std::uint64_t{1} << (32 - kDigestBlockLog2); }

// out[k] = the device's output for element begin + k, as the hardware writes it (tf32: the float
// pattern), computed by the emulation under `profile`. Single-threaded; ranges must lie inside the run.
void convert_outputs(const ConvertRun& run, const Profile& profile, std::uint64_t begin, std::span<std::uint32_t> out);
void arith_outputs(const ArithRun& run, const Profile& profile, std::uint64_t begin, std::span<std::uint32_t> out);

// The input of element i, readable: "0x7f800001 (nan)" for conversions from float, the double's bits for
// the fp64 sample, "a=0x3c00 b=0x8001 [c=...]" for arithmetic.
std::string describe_convert_input(const ConvertRun& run, std::uint64_t i);
std::string describe_arith_input(const ArithRun& run, std::uint64_t i);

// The digest of block `block` (digest.hpp) of the emulated outputs, on `threads` threads (0: all).
std::uint64_t recompute_block(const ConvertRun& run, const Profile& profile, std::uint64_t block, int threads = 0);
std::uint64_t recompute_block(const ArithRun& run, const Profile& profile, std::uint64_t block, int threads = 0);

// Elements of block `block` where the emulation under `a` and under `b` differ (the first `limit`, in
// index order): where a block's digest differs from the hardware's, this names the inputs the two
// candidate behaviours (e.g. the device profile and IEEE) disagree on.
struct ElementDifference {
  std::uint64_t index;
  std::uint32_t a, b;
};
std::vector<ElementDifference> differing_elements(const ConvertRun& run, const Profile& a, const Profile& b,
                                                  std::uint64_t block, std::size_t limit, int threads = 0);
std::vector<ElementDifference> differing_elements(const ArithRun& run, const Profile& a, const Profile& b,
                                                  std::uint64_t block, std::size_t limit, int threads = 0);

}  // namespace mpsim::hw
