// Philox4x32-10, the keyed counter-based generator behind stochastic rounding, written once for the host
// and the CUDA device (host_device.hpp). Salmon, Moraes, Dror & Shaw, "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011, section 5: a 10-round Feistel-like bijection of a 128-bit counter under a 64-bit
// key, the generator of cuRAND's and PyTorch's CUDA random numbers. tests/format/philox_test.cpp checks it
// against Random123's philox4x32 (the authors' code, Debian librandom123-dev) and its known-answer vectors.
//
// Stochastic rounding's streams (docs/formats.md): the key is the 64-bit seed (low word first).
// - sr_bits 17..32 (the 32-bit stream): the counter of element i is (lo32(i / 4), hi32(i / 4), 0, 0), and
//   element i takes word i % 4 of that block. Four elements per evaluation because a vector kernel then
//   lays one block's four words in four neighbouring lanes and evaluates W / 4 blocks with one 32x32->64
//   multiply instruction per round (detail/bulk_philox.hpp): a quarter of the multiplies of one
//   evaluation per element.
// - sr_bits 1..16 (the 16-bit stream): the counter of element i is (lo32(i / 8), hi32(i / 8), 0, 0), and
//   element i takes word i % 4 of that block, its high half where i % 8 < 4 and its low half otherwise:
//   two elements per word, half the evaluations of the 32-bit stream. Each half-word is the top 16 bits
//   of one output word or the bottom 16 (Philox's words are uniform over 2^32, so each half is uniform
//   over 2^16); the vector kernel takes both halves of a lane from one block vector (a permute and a shift).
//   The element's sr_bits random bits are the top ones of its half.
#pragma once

#include <cstdint>

#include "mpsim/format/hd/host_device.hpp"

namespace mpsim::philox {

// The round multipliers and the Weyl key increments of Philox4x32 (Salmon et al. 2011, table 2;
// Random123 philox.h PHILOX_M4x32_0/1, PHILOX_W32_0/1).
inline constexpr std::uint32_t kM0 = 0xD2511F53u;
inline constexpr std::uint32_t kM1 = 0xCD9E8D57u;
inline constexpr std::uint32_t kW0 = 0x9E3779B9u;  // golden ratio
inline constexpr std::uint32_t kW1 = 0xBB67AE85u;  // sqrt(3) - 1
inline constexpr int kRounds = 10;

struct Block {
  std::uint32_t v[4];
};

// Philox4x32 with `rounds` rounds of counter `ctr` under key (k0, k1): Random123's philox4x32_R.
MPSIM_HD constexpr Block generate(Block ctr, std::uint32_t k0, std::uint32_t k1, int rounds = kRounds) {
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {  // the key schedule: bumped before every round but the first
      k0 += kW0;
      k1 += kW1;
    }
    const std::uint64_t p0 = static_cast<std::uint64_t>(kM0) * ctr.v[0];
    const std::uint64_t p1 = static_cast<std::uint64_t>(kM1) * ctr.v[2];
    ctr = Block{{static_cast<std::uint32_t>(p1 >> 32) ^ ctr.v[1] ^ k0, static_cast<std::uint32_t>(p1),
                 static_cast<std::uint32_t>(p0 >> 32) ^ ctr.v[3] ^ k1, static_cast<std::uint32_t>(p0)}};
  }
  return ctr;
}

// The four random words of the block holding element `index`'s under `seed` (elements 4q .. 4q + 3).
MPSIM_HD constexpr Block sr_block(std::uint64_t seed, std::uint64_t index) {
  const std::uint64_t q = index >> 2;
  return generate(Block{{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), 0u, 0u}},
                  static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
}

// The 32 random bits of element `index` under `seed`.
MPSIM_HD constexpr std::uint32_t sr_random(std::uint64_t seed, std::uint64_t index) {
  return sr_block(seed, index).v[index & 3];
}

// The random bits of element `index` under `seed` for stochastic rounding with `bits` random bits, at the
// top of the word (the caller keeps the top `bits`): sr_random for bits > 16, else the element's half of
// the 16-bit stream (elements 8q .. 8q + 7 share block q: word i % 4, high half for i % 8 < 4).
MPSIM_HD constexpr std::uint32_t sr_word(std::uint64_t seed, std::uint64_t index, int bits) {
  if (bits > 16) return sr_random(seed, index);
  const std::uint64_t q = index >> 3;
  const std::uint32_t w = generate(Block{{static_cast<std::uint32_t>(q), static_cast<std::uint32_t>(q >> 32), 0u, 0u}},
                                   static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32))
                              .v[index & 3];
  return (index & 4) ? w << 16 : w & 0xffff0000u;
}

}  // namespace mpsim::philox
