// The lane work of one matrix-unit block in AVX2 (compiled with -mavx2 in its own library, chosen at run time
// by dot.cpp with __builtin_cpu_supports, as the bulk engine's kernels are): the largest exponent and the
// sum of the truncated aligned products, for n a multiple of 8. Same results as dot.cpp's scalar loops.
#pragma once

#include <cstdint>

namespace mpsim::mma::detail {

// E = max(E_init, ea[j] + eb[j]); *sum = Σ sign(p_j) ((|p_j| << lshift) >> (E - ea[j] - eb[j])), p_j = sa[j] sb[j],
// shifts of 32 or more giving 0. Returns E.
std::int32_t block_lanes_avx2(const std::int32_t* sa, const std::int32_t* ea, const std::int32_t* sb,
                              const std::int32_t* eb, int n, std::int32_t E_init, int lshift, std::int32_t* sum);

}  // namespace mpsim::mma::detail
