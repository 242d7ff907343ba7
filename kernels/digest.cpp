#include "digest.hpp"

#include <algorithm>
#include <cstdio>

#include "mpsim/error.hpp"
#include "mpsim/parallel.hpp"

namespace mpsim::hw {

namespace {

template <class T>
std::vector<std::uint64_t> digests_of(std::span<const T> bits, std::uint64_t index0) {
  if (bits.empty()) return {};
  if (index0 + bits.size() > (std::uint64_t{1} << 32))
    throw Error("digest: element indices reach 2^32 (index0 " + std::to_string(index0) + ", " +
                std::to_string(bits.size()) + " elements); the digest key holds 32-bit indices");
  const std::uint64_t first_block = index0 >> kDigestBlockLog2;
  const std::uint64_t last_block = (index0 + bits.size() - 1) >> kDigestBlockLog2;
  std::vector<std::uint64_t> out(last_block - first_block + 1, 0);
  for (std::size_t k = 0; k < bits.size(); ++k) {
    const std::uint64_t i = index0 + k;
    out[(i >> kDigestBlockLog2) - first_block] += digest_term(i, static_cast<std::uint32_t>(bits[k]));
  }
  return out;
}

}  // namespace

std::vector<std::uint64_t> block_digests(std::span<const std::uint16_t> bits, std::uint64_t index0) {
  return digests_of(bits, index0);
}
std::vector<std::uint64_t> block_digests(std::span<const std::uint8_t> bits, std::uint64_t index0) {
  return digests_of(bits, index0);
}
std::vector<std::uint64_t> block_digests(std::span<const std::uint32_t> bits, std::uint64_t index0) {
  return digests_of(bits, index0);
}

std::uint64_t block_digest(std::uint64_t block, const std::function<std::uint32_t(std::uint64_t)>& produce,
                           int threads) {
  if (block >= (std::uint64_t{1} << (32 - kDigestBlockLog2)))
    throw Error("digest: block " + std::to_string(block) + " lies beyond 2^32 elements");
  const int n = std::min(threads > 0 ? threads : hardware_threads(), 64);
  const std::uint64_t begin = block << kDigestBlockLog2;
  std::vector<std::uint64_t> partial(static_cast<std::size_t>(n), 0);
  parallel_for(kDigestBlock, n, "digest", [&](int w, std::size_t lo, std::size_t hi) {
    std::uint64_t sum = 0;
    for (std::uint64_t i = begin + lo; i < begin + hi; ++i) sum += digest_term(i, produce(i));
    partial[static_cast<std::size_t>(w)] = sum;
  });
  std::uint64_t sum = 0;
  for (auto p : partial) sum += p;  // addition mod 2^64 is associative: the thread count does not matter
  return sum;
}

std::string digest_hex(std::uint64_t d) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(d));
  return buf;
}

std::uint64_t parse_digest_hex(const std::string& s, const std::string& what) {
  if (s.size() != 16) throw Error(what + ": digest '" + s + "' is not 16 hex digits");
  std::uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
    else throw Error(what + ": digest '" + s + "' is not 16 hex digits");
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}

}  // namespace mpsim::hw
