// Internal to the bulk engine (detail/bulk_kernel.hpp, which says how these files are compiled):
// Stores by output kind and the loops over whole vectors and groups of vectors, tail included.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mpsim/format/detail/bulk_counters.hpp"
#include "mpsim/format/detail/bulk_params.hpp"

namespace mpsim::bulk_detail {
namespace {

// NT: non-temporal stores (KernelParams::stream), for f32 / u32 (f16c_loop stores u16 itself).
template <class S, OutKind KIND, bool NT>
inline void store_out(void* out, std::size_t i, typename S::I res, typename S::I y) {
  static_assert(!NT || KIND == OutKind::f32 || KIND == OutKind::u32, "no streaming 16/8-bit store here");
  if constexpr (KIND == OutKind::f32 || KIND == OutKind::u32) {
    void* const at = static_cast<std::uint32_t*>(out) + i;
    const typename S::I v = KIND == OutKind::f32 ? y : res;
    if constexpr (NT) S::stream32(at, v);
    else S::store32(at, v);
  }
  if constexpr (KIND == OutKind::u16) S::store16(static_cast<std::uint16_t*>(out) + i, res);
  if constexpr (KIND == OutKind::u8) S::store8(static_cast<std::uint8_t*>(out) + i, res);
}

template <OutKind KIND>
constexpr std::size_t out_size() {
  return KIND == OutKind::u8 ? 1 : KIND == OutKind::u16 ? 2 : 4;
}

// Runs `vec(i, in_ptr, out_ptr, j, nt)` over full vectors and once over a zero-padded copy of the tail;
// returns how many padding lanes the tail added (they are +0 inputs: the caller takes them off zero_in).
// nt: Flag<NT>, whether the vector's stores are non-temporal (KernelParams::stream; never the tail's,
// which is written through a buffer).
template <class S, OutKind KIND, bool NT, class Vec>
inline std::size_t for_each_vector(const float* in, void* out, std::size_t n, Vec&& vec) {
  constexpr int W = S::W;
  std::size_t i = 0;
  for (; i + W <= n; i += W) vec(i, in + i, out, i, Flag<NT>{});
  if (i == n) return 0;
  alignas(64) float tin[W];
  alignas(64) unsigned char tout[W * 4];
  const std::size_t r = n - i;
  for (int k = 0; k < W; ++k) tin[k] = 0.0f;
  std::memcpy(tin, in + i, r * sizeof(float));
  vec(i, tin, static_cast<void*>(tout), 0, Flag<false>{});
  std::memcpy(static_cast<unsigned char*>(out) + i * out_size<KIND>(), tout, r * out_size<KIND>());
  return W - r;
}

// Stores G = S::template group<KIND>() vectors of results at once (encodings, or float bits in
// simulate mode): AVX2 packs two vectors of 16-bit encodings, or four of 8-bit ones, into one 256-bit
// store instead of packing and permuting each vector on its own.
// NT: non-temporal stores (KernelParams::stream; dst aligned to the store's width).
template <class S, OutKind KIND, bool NT>
inline void store_group(void* dst, const typename S::I* r) {
  constexpr int G = S::template group<KIND>();
  if constexpr (KIND == OutKind::f32 || KIND == OutKind::u32) {
    for (int g = 0; g < G; ++g) {
      if constexpr (NT) S::stream32(static_cast<std::uint32_t*>(dst) + g * S::W, r[g]);
      else S::store32(static_cast<std::uint32_t*>(dst) + g * S::W, r[g]);
    }
  } else if constexpr (KIND == OutKind::u16) {
    auto* d = static_cast<std::uint16_t*>(dst);
    if constexpr (G == 2 && NT) S::stream16x2(d, r[0], r[1]);
    else if constexpr (G == 2) S::store16x2(d, r[0], r[1]);
    else if constexpr (NT) S::stream16(d, r[0]);
    else S::store16(d, r[0]);
  } else {
    auto* d = static_cast<std::uint8_t*>(dst);
    if constexpr (G == 4 && NT) S::stream8x4(d, r[0], r[1], r[2], r[3]);
    else if constexpr (G == 4) S::store8x4(d, r[0], r[1], r[2], r[3]);
    else if constexpr (NT) S::stream8(d, r[0]);
    else S::store8(d, r[0]);
  }
}

// Runs `vec(i, src)`, which returns the vector to store for the W elements at src (element i of the
// call, i starting at i0), over groups of G vectors and once over a zero-padded copy of the tail;
// returns how many padding lanes the tail added (+0 inputs: the caller takes them off zero_in).
// NT: the full groups' stores are non-temporal (the tail goes through a buffer).
template <class S, OutKind KIND, bool NT, class Vec>
inline std::size_t for_each_group(const float* in, void* out, std::size_t n, std::size_t i0, Vec&& vec) {
  constexpr int W = S::W;
  constexpr int G = S::template group<KIND>();
  using I = typename S::I;
  auto group = [&](const float* src, void* dst, std::size_t at, auto nt) __attribute__((always_inline)) {
    I r[G];
    for (int g = 0; g < G; ++g) r[g] = vec(at + static_cast<std::size_t>(g * W), src + g * W);
    store_group<S, KIND, decltype(nt)::value>(dst, r);
  };
  std::size_t i = 0;
  for (; i + G * W <= n; i += G * W)
    group(in + i, static_cast<unsigned char*>(out) + i * out_size<KIND>(), i0 + i, Flag<NT>{});
  if (i == n) return 0;
  alignas(64) float tin[G * W];
  alignas(64) unsigned char tout[G * W * 4];
  const std::size_t r = n - i;
  for (int k = 0; k < G * W; ++k) tin[k] = 0.0f;
  std::memcpy(tin, in + i, r * sizeof(float));
  group(tin, static_cast<void*>(tout), i0 + i, Flag<false>{});
  std::memcpy(static_cast<unsigned char*>(out) + i * out_size<KIND>(), tout, r * out_size<KIND>());
  return G * W - r;
}

}  // namespace
}  // namespace mpsim::bulk_detail
