// MassLost's sums of float blocks two at a time (mass_lost_avx2.cpp, compiled with -mavx2): why this does not
// change a bit. MassLost sums each block of kBlock elements in two interleaved partial sums (element k of the
// block in sum k % 2, then sum 0 + sum 1; mass_lost.hpp), the SSE2 loop keeping the two sums in the two lanes
// of a register. The blocks do not depend on each other until their sums are added to the running totals, in
// block order. So a 256-bit register holds the two sums of block b in its low half and those of block b + 1 in
// its high half: every lane sees the same additions and products in the same order as the SSE2 loop's lane,
// and the caller adds block b's sums, then block b + 1's, to the totals as it adds them one block at a time.
// The kernel is compiled without -mfma and with -ffp-contract=off (lib/mpsim/analysis/meson.build): a product
// fused into an addition would round once where the SSE2 loop rounds twice.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpsim::analysis::mass_detail {

// One block's counts and sums, as the SSE2 loop ends a block (each double sum its lane 0 + lane 1).
struct BlockSums {
  std::uint64_t nonzero = 0, flushed = 0, overflowed = 0;
  double abs = 0, sq = 0, f_abs = 0, f_sq = 0, f_signed = 0, dot = 0, sq_q = 0;
};

// The sums of the two blocks g[0, n), g[n, 2n) (before rounding) and q likewise (after): out[0] and out[1].
// n even. Only on CPUs with AVX2.
void block_pair_sums_avx2(const float* g, const float* q, std::size_t n, BlockSums out[2]);

// The same for the four blocks g[0, n), ..., g[3n, 4n): out[0..3] (mass_lost_avx512.cpp). Only on CPUs with
// AVX-512 and in builds that compiled it (block_quad_sums_avx512_compiled()).
void block_quad_sums_avx512(const float* g, const float* q, std::size_t n, BlockSums out[4]);
bool block_quad_sums_avx512_compiled();

}  // namespace mpsim::analysis::mass_detail
