// Tests of kernels/digest.hpp against a digest written out here independently, from round.hpp's
// splitmix64 (the recorded H100 probe's formula, data/hardware/nvidia-h100-80gb-hbm3/).
#include "catch_compat.hpp"

#include <cstdio>
#include <random>
#include <vector>

#include "digest.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/round.hpp"

using namespace mpsim;

namespace {
std::uint64_t reference_term(std::uint64_t index, std::uint32_t bits) {
  return mpsim::splitmix64((index << 32) | bits);
}
}  // namespace

TEST_CASE("digest term is splitmix64 of (index << 32 | bits)", "[digest]") {
  // splitmix64(0): the first output of the reference generator seeded with 0 (Vigna's splitmix64.c).
  CHECK(hw::digest_term(0, 0) == 0xE220A8397B1DCDAFull);
  std::mt19937_64 rng(1);
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t idx = rng() >> 32;
    const auto bits = static_cast<std::uint32_t>(rng());
    REQUIRE(hw::digest_term(idx, bits) == reference_term(idx, bits));
  }
}

TEST_CASE("block digests of small arrays match a direct sum, across block boundaries", "[digest]") {
  std::mt19937_64 rng(2);
  std::vector<std::uint16_t> v(5000);
  for (auto& x : v) x = static_cast<std::uint16_t>(rng());
  // The array straddles the boundary between blocks 2 and 3 (element 3 * 2^24).
  const std::uint64_t index0 = 3 * hw::kDigestBlock - 1234;
  const auto d = hw::block_digests(std::span<const std::uint16_t>(v), index0);
  REQUIRE(d.size() == 2);
  std::uint64_t lo = 0, hi = 0;
  for (std::size_t k = 0; k < v.size(); ++k) (k < 1234 ? lo : hi) += reference_term(index0 + k, v[k]);
  CHECK(d[0] == lo);
  CHECK(d[1] == hi);
  // One changed element changes its block's digest and only that one.
  v[4000] ^= 1;
  const auto d2 = hw::block_digests(std::span<const std::uint16_t>(v), index0);
  CHECK(d2[0] == d[0]);
  CHECK(d2[1] != d[1]);
  std::printf("digest: %zu elements across a block boundary compared with a direct sum\n", v.size());
}

TEST_CASE("virtual block digest equals the digest of the materialised block, whatever the threads", "[digest]") {
  auto produce = [](std::uint64_t i) { return static_cast<std::uint32_t>((i * 2654435761u) >> 7) & 0xffffu; };
  std::vector<std::uint16_t> block(hw::kDigestBlock);
  const std::uint64_t b = 5;
  for (std::uint64_t k = 0; k < block.size(); ++k)
    block[k] = static_cast<std::uint16_t>(produce(b * hw::kDigestBlock + k));
  const auto want = hw::block_digests(std::span<const std::uint16_t>(block), b * hw::kDigestBlock);
  REQUIRE(want.size() == 1);
  CHECK(hw::block_digest(b, produce, 1) == want[0]);
  CHECK(hw::block_digest(b, produce, 3) == want[0]);
}

TEST_CASE("digest hex round trip and bad input", "[digest]") {
  CHECK(hw::digest_hex(0x0123456789abcdefull) == "0123456789abcdef");
  CHECK(hw::parse_digest_hex("0123456789ABCDEF", "x") == 0x0123456789abcdefull);
  CHECK_THROWS_AS(hw::parse_digest_hex("0123", "x"), Error);
  CHECK_THROWS_AS(hw::parse_digest_hex("012345678gabcdef", "x"), Error);
  std::vector<std::uint8_t> v(10);
  CHECK_THROWS_AS(hw::block_digests(std::span<const std::uint8_t>(v), (std::uint64_t{1} << 32) - 5), Error);
  CHECK_THROWS_AS(hw::block_digest(256, [](std::uint64_t) { return 0u; }), Error);
}
