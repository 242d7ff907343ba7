// Per-block digests of a (possibly 2^32-element) output array, so a full hardware run is stored in
// kilobytes and any block can be recomputed on the CPU from the emulation and compared.
//
// digest(block) = sum over the block's elements i of splitmix64((i << 32) | bits_i)  (mod 2^64)
//
// where i is the element's index in the whole array (< 2^32) and bits_i its output encoding
// (zero-extended, at most 32 bits). The key (i << 32) | bits is injective and splitmix64 is a
// bijection, so each element contributes a distinct pseudo-random word; the sum is order-free, so
// a GPU reduces it with atomics and a CPU with any number of threads and both get the same bits.
// This is the digest of the external H100 probe (data/hardware/nvidia-h100-80gb-hbm3/, "digest_formula"):
// splitmix64 with its golden-ratio increment, so recordings of either origin compare with one function.
// Host-only, plain C++ (the kernels compute the same function in kernels/compare.cu).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "emu.hpp"

namespace mpsim::hw {

inline constexpr int kDigestBlockLog2 = 24;  // 2^24 elements per block: 256 digests for 2^32 outputs
inline constexpr std::uint64_t kDigestBlock = std::uint64_t{1} << kDigestBlockLog2;

// splitmix64 (Steele, Lea & Flood, "Fast splittable pseudorandom number generators", OOPSLA 2014):
// the golden-ratio increment, then the output function.
MPSIM_HD std::uint64_t digest_mix(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
MPSIM_HD std::uint64_t digest_term(std::uint64_t index, std::uint32_t bits) { return digest_mix((index << 32) | bits); }

// Digests of an array held in memory (first element has index `index0`; blocks are aligned to
// multiples of kDigestBlock of the global index). Throws mpsim::Error if an index reaches 2^32.
std::vector<std::uint64_t> block_digests(std::span<const std::uint16_t> bits, std::uint64_t index0 = 0);
std::vector<std::uint64_t> block_digests(std::span<const std::uint8_t> bits, std::uint64_t index0 = 0);
std::vector<std::uint64_t> block_digests(std::span<const std::uint32_t> bits, std::uint64_t index0 = 0);

// The digest of block `block` of a virtual array whose element i is produce(i): the CPU recomputation
// of one block of an exhaustive run, on `threads` threads (0: all).
std::uint64_t block_digest(std::uint64_t block, const std::function<std::uint32_t(std::uint64_t)>& produce,
                           int threads = 0);

// "0123456789abcdef" (16 lowercase hex digits) and back; parse throws mpsim::Error naming `what`.
std::string digest_hex(std::uint64_t d);
std::uint64_t parse_digest_hex(const std::string& s, const std::string& what);

}  // namespace mpsim::hw
