// What the headers compiled for both the host and the CUDA device need (round_spec.hpp, philox.hpp,
// kernels/emu.hpp): the function marker and bit reinterpretation that works on both sides.
//
// MPSIM_HD is `__host__ __device__ inline` only where nvcc compiles the file (__CUDACC__); everywhere else
// it is plain `inline` and this header includes no CUDA header, so lib/ stays free of CUDA.
#pragma once

#include <bit>
#include <cstdint>

#if !defined(MPSIM_HD)
#if defined(__CUDACC__)
#define MPSIM_HD __host__ __device__ inline
#else
#define MPSIM_HD inline
#endif
#endif

namespace mpsim::hd {

// Device code reinterprets with the CUDA intrinsics (std::bit_cast is not a device function in every
// CUDA version); host code with std::bit_cast.
MPSIM_HD std::uint64_t bits_of(double x) {
#if defined(__CUDA_ARCH__)
  return static_cast<std::uint64_t>(__double_as_longlong(x));
#else
  return std::bit_cast<std::uint64_t>(x);
#endif
}
MPSIM_HD double double_of(std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(b));
#else
  return std::bit_cast<double>(b);
#endif
}
MPSIM_HD std::uint32_t bits_of(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  return std::bit_cast<std::uint32_t>(x);
#endif
}
MPSIM_HD float float_of(std::uint32_t b) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(b);
#else
  return std::bit_cast<float>(b);
#endif
}
// Leading zeros of a non-zero 64-bit word.
MPSIM_HD int clz64(std::uint64_t x) {
#if defined(__CUDA_ARCH__)
  return __clzll(static_cast<long long>(x));
#else
  return std::countl_zero(x);
#endif
}

}  // namespace mpsim::hd
