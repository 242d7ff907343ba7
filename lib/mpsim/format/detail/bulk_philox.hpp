// Internal to the bulk engine (detail/bulk_kernel.hpp, which says how these files are compiled):
// The Philox4x32-10 lanes of stochastic rounding and the soft errors' draws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/detail/bulk_params.hpp"
#include "mpsim/format/hd/philox.hpp"

namespace mpsim::bulk_detail {
namespace {

// Stochastic rounding's random words, W lanes at a time: Philox4x32-10 (hd/philox.hpp) with element e of
// the stream taking word e % 4 of block e / 4. One vector evaluates W / 4 blocks, block b's counter and
// state in lanes 4b .. 4b + 3, so a round is one 32x32->64 multiply of the even lanes (words 0 and 2 by
// M0 and M1), one in-lane word reversal of the products, and one three-way xor with the odd words
// shifted down and the round key:
//   out = (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0)   (Random123's _philox4x32round)
// A call whose first element index0 is not a multiple of 4 (r = index0 % 4) takes lanes r .. r + W - 1
// of two consecutive block vectors; the second is kept for the next vector of the call, so a call in
// order still evaluates one block vector per vector. Only hd/philox.hpp's constants are used here (see the
// top of bulk_kernel.hpp).
//
// The 16-bit stream (sr_bits <= 16, KernelParams::sr_half; hd/philox.hpp sr_word): element e takes word e % 4
// of block e / 8, its high half where e % 8 < 4, its low half moved to the top otherwise. One block vector
// then serves two element vectors: the first takes quarters 0 .. W / 8 - 1 of it, lane j from lane
// 4 (j / 8) + j % 4 shifted left by 16 where j % 8 >= 4 (one vpermd and one vpsllvd), the second the
// same from quarter W / 8 on. The low 16 bits left in the high-half lanes belong to the next element;
// the kernels' sr_mask (top sr_bits <= 16 bits) clears them. A misaligned call (r = index0 % 8) takes
// lanes r .. r + W - 1 of two consecutive element vectors, as above.
template <class S>
struct PhiloxLanes {
  using I = typename S::I;
  I key[philox::kRounds];  // round j: (k0 + j W0, 0, k1 + j W1, 0) in every block
  I mul;                   // (M0, 0, M1, 0)
  I ctr0;                  // (lo32(q0 + b), hi32(q0), 0, 0) for block b of the call's first vector
  I shift;                 // iota + r: the lanes of two block vectors a misaligned call takes
  int r;
  bool half = false;  // the 16-bit stream
  std::size_t ahead_pos = ~std::size_t{0};
  I ahead;
  // The 16-bit stream: the lanes and shifts of the first element vector of a block vector (the second
  // adds W / 2 to the lanes), and the block vector last evaluated, for elements pair_pos .. + 2W - 1.
  I half_idx, half_cnt;
  std::size_t pair_pos = ~std::size_t{0};
  I pair;

  // Element i of the call takes word i % 4 of block index0 / 4 + i / 4 (stochastic rounding), or with
  // `half` its half of word i % 4 of block index0 / 8 + i / 8 (the 16-bit stream).
  PhiloxLanes(std::uint32_t seed_lo, std::uint32_t seed_hi, std::uint64_t index0, bool half_words = false)
      : PhiloxLanes(seed_lo, seed_hi, FirstBlock{half_words ? index0 >> 3 : index0 >> 2}) {
    half = half_words;
    r = static_cast<int>(index0 & (half ? 7 : 3));
    shift = S::add(S::iota(), S::set1(r));
    half_idx = S::or_(S::template slli<2>(S::template srli<3>(S::iota())), S::and_(S::iota(), S::set1(3)));
    half_cnt = S::template slli<2>(S::and_(S::iota(), S::set1(4)));
  }

  // blocks(4 j) is the W / 4 blocks q0 + j .. q0 + j + W / 4 - 1 (soft errors: one block per element).
  struct FirstBlock {
    std::uint64_t q0;
  };
  PhiloxLanes(std::uint32_t seed_lo, std::uint32_t seed_hi, FirstBlock first) : r(0), ahead(S::zero()) {
    std::uint32_t k0 = seed_lo, k1 = seed_hi;
    for (int j = 0; j < philox::kRounds; ++j) {
      key[j] = S::set4(static_cast<std::int32_t>(k0), 0, static_cast<std::int32_t>(k1), 0);
      k0 += philox::kW0;
      k1 += philox::kW1;
    }
    mul = S::set4(static_cast<std::int32_t>(philox::kM0), 0, static_cast<std::int32_t>(philox::kM1), 0);
    const std::uint64_t q0 = first.q0;
    ctr0 = S::add(S::set4(static_cast<std::int32_t>(static_cast<std::uint32_t>(q0)),
                          static_cast<std::int32_t>(static_cast<std::uint32_t>(q0 >> 32)), 0, 0),
                  S::block_iota());
    shift = S::add(S::iota(), S::set1(r));
    half_idx = half_cnt = pair = S::zero();
  }

  // The W / 4 blocks starting with block q0 + pos / 4 (pos a multiple of 4). The high counter word stays
  // hi32(q0): bulk.cpp splits calls where it would change.
  __attribute__((always_inline)) I blocks(std::size_t pos) const {
    I c = S::add_block_lane0(ctr0, static_cast<std::int32_t>(static_cast<std::uint32_t>(pos >> 2)));
    for (int j = 0; j < philox::kRounds; ++j) c = S::xor3(S::swap_words(S::mul_epu32(c, mul)), S::srli64_32(c), key[j]);
    return c;
  }

  // The 16-bit stream's words of elements pos .. pos + W - 1 counted from block q0's first element (pos a
  // multiple of W): from the block vector of blocks q0 + pos / 8 rounded down to a multiple of W / 4.
  __attribute__((always_inline)) I halves(std::size_t pos) {
    const std::size_t p2 = pos & ~(2 * std::size_t{S::W} - 1);
    if (p2 != pair_pos) {
      pair = blocks(p2 >> 1);  // blocks(4 j) starts at block q0 + j: element p2 is in block q0 + p2 / 8
      pair_pos = p2;
    }
    const I idx = pos == p2 ? half_idx : S::add(half_idx, S::set1(S::W / 2));
    return S::sllv(S::permute(pair, idx), half_cnt);
  }

  __attribute__((always_inline)) I words(std::size_t pos) { return half ? halves(pos) : blocks(pos); }

  // The random words of elements pos .. pos + W - 1 of the call (pos a multiple of W).
  __attribute__((always_inline)) I at(std::size_t pos) {
    if (r == 0) return words(pos);
    const I cur = pos == ahead_pos ? ahead : words(pos);
    ahead = words(pos + S::W);
    ahead_pos = pos + S::W;
    return S::concat_shift(cur, ahead, shift);
  }
};

// Soft errors' draws (soft_error.hpp): element index0 + k evaluates the block at counter index0 + k,
// so W / 4 elements per block vector, four vectors per W elements (four times the multiplies of W elements
// of stochastic rounding, which takes one word per element). Elements 0 .. n' - 1, n' = n rounded down to a multiple of
// W: hit ones get their bit set in hit_words (zeroed by the caller) and bit_of[k] = the drawn bit, floor(w2 * m / 2^32)
// = the high word of the product of lane 4b + 2. Returns n'. The low counter word must not wrap within the call
// (lo32(index0) + n <= 2^32): the caller splits there.
template <class S>
inline std::size_t soft_error_hits(std::uint64_t index0, std::size_t n, const SoftErrorParams& p,
                                   std::uint64_t* hit_words, std::uint8_t* bit_of) {
  using I = typename S::I;
  constexpr int kBlocks = S::W / 4;  // blocks (elements) per vector
  const PhiloxLanes<S> philox(p.key_lo, p.key_hi, typename PhiloxLanes<S>::FirstBlock{index0});
  const I limit = S::set1_64(p.limit);
  const I bits = S::set1(static_cast<std::int32_t>(p.bits));
  const std::size_t whole = n / S::W * S::W;
  alignas(64) std::uint32_t prod[S::W];
  for (std::size_t i = 0; i < whole; i += S::W) {
    I c[4];
    for (int t = 0; t < 4; ++t) c[t] = philox.blocks(4 * (i + static_cast<std::size_t>(t * kBlocks)));
    for (int t = 0; t < 4; ++t) {
      unsigned hits = p.all ? (1u << kBlocks) - 1 : S::block_hits(c[t], limit);
      if (hits == 0) continue;
      S::store32(prod, S::mul_epu32(c[t], bits));
      for (; hits != 0; hits &= hits - 1) {
        const int b = __builtin_ctz(hits);
        const std::size_t k = i + static_cast<std::size_t>(t * kBlocks + b);
        hit_words[k >> 6] |= std::uint64_t{1} << (k & 63);
        bit_of[k] = static_cast<std::uint8_t>(prod[4 * b + 3]);
      }
    }
  }
  return whole;
}

}  // namespace
}  // namespace mpsim::bulk_detail
