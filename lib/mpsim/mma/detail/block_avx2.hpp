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

// The same in plain C++ (any n up to 256): what runs without AVX2, and what the AVX2 kernel is tested against.
inline std::int32_t block_lanes_scalar(const std::int32_t* sa, const std::int32_t* ea, const std::int32_t* sb,
                                       const std::int32_t* eb, int n, std::int32_t E_init, int lshift,
                                       std::int32_t* sum) {
  std::int32_t E = E_init;
  for (int j = 0; j < n; ++j) E = ea[j] + eb[j] > E ? ea[j] + eb[j] : E;
  std::int32_t s = 0;
  for (int j = 0; j < n; ++j) {
    const std::int32_t prod = sa[j] * sb[j];
    const auto mag = static_cast<std::uint32_t>(prod < 0 ? -prod : prod) << lshift;
    const std::int32_t sh = E - (ea[j] + eb[j]);
    const auto t = static_cast<std::int32_t>(sh > 31 ? 0u : mag >> sh);
    s += prod < 0 ? -t : t;
  }
  *sum = s;
  return E;
}

}  // namespace mpsim::mma::detail
