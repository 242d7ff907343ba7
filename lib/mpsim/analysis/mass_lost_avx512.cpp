// MassLost's float blocks four at a time on AVX-512 (detail/mass_lost_kernel.hpp says why the bits are those of
// the SSE2 loop in mass_lost.cpp): lanes 2b and 2b + 1 of each 512-bit register hold block b's two partial sums,
// and each lane sees the same additions and products, in the same order, as the AVX2 kernel's lane
// (mass_lost_avx2.cpp) and the SSE2 loop's. Where a value is not counted the lane adds +0.0 as those loops do
// (the masked values are zeroed, not skipped), so even the signs of zero sums agree. Compiled with the bulk
// engine's AVX-512 flags and -ffp-contract=off (lib/mpsim/analysis/meson.build); mass_lost.cpp calls it only where
// path_available(Path::avx512) says the CPU has it and the build compiled it.
#include <cstdlib>

#include "mpsim/analysis/detail/mass_lost_kernel.hpp"

#ifndef MPSIM_NO_AVX512
#include <immintrin.h>

#include <limits>

namespace mpsim::analysis::mass_detail {

namespace {

// Elements i, i + 1 of blocks 0..3, as eight floats: block b in floats 2b, 2b + 1.
inline __m256 load(const float* p, std::size_t n, std::size_t i) {
  const __m128i lo =
      _mm_set_epi64x(*reinterpret_cast<const long long*>(p + n + i), *reinterpret_cast<const long long*>(p + i));
  const __m128i hi = _mm_set_epi64x(*reinterpret_cast<const long long*>(p + 3 * n + i),
                                    *reinterpret_cast<const long long*>(p + 2 * n + i));
  return _mm256_castsi256_ps(_mm256_set_m128i(hi, lo));
}

// Block b's sum: lane 2b + lane 2b + 1 (Pairs::sum: lane 0 + lane 1).
inline void finish(__m512d v, double BlockSums::*field, BlockSums out[4]) {
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, v);
  for (int b = 0; b < 4; ++b) out[b].*field = lanes[2 * b] + lanes[2 * b + 1];
}

inline void finish(__m512i v, std::uint64_t BlockSums::*field, BlockSums out[4]) {
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, v);
  for (int b = 0; b < 4; ++b) out[b].*field = lanes[2 * b] + lanes[2 * b + 1];
}

}  // namespace

bool block_quad_sums_avx512_compiled() { return true; }

void block_quad_sums_avx512(const float* g, const float* q, std::size_t n, BlockSums out[4]) {
  const __m512d kAbs = _mm512_castsi512_pd(_mm512_set1_epi64(0x7fffffffffffffffLL));
  const __m512d kMax = _mm512_set1_pd(std::numeric_limits<double>::max());
  const __m512d zero = _mm512_setzero_pd();
  const __m512i one = _mm512_set1_epi64(1);
  __m512d abs = zero, sq = zero, f_abs = zero, f_sq = zero, f_signed = zero, dot = zero, sq_q = zero;
  __m512i nonzero = _mm512_setzero_si512(), flushed = nonzero, overflowed = nonzero;
  for (std::size_t i = 0; i < n; i += 2) {
    const __m512d x = _mm512_cvtps_pd(load(g, n, i));
    const __m512d y = _mm512_cvtps_pd(load(q, n, i));
    // The predicates of Pairs::add (mass_lost.cpp) and of the AVX2 kernel: NEQ_UQ, LE_OS, EQ_OQ.
    const __m512d ax_raw = _mm512_and_pd(x, kAbs);
    const __mmask8 counted = _mm512_cmp_pd_mask(x, zero, _CMP_NEQ_UQ) & _mm512_cmp_pd_mask(ax_raw, kMax, _CMP_LE_OS);
    const __mmask8 lost = counted & _mm512_cmp_pd_mask(y, zero, _CMP_EQ_OQ);
    const __mmask8 kept = counted & _mm512_cmp_pd_mask(_mm512_and_pd(y, kAbs), kMax, _CMP_LE_OS);
    const __m512d ax = _mm512_maskz_mov_pd(counted, ax_raw), xx = _mm512_mul_pd(ax, ax);
    nonzero = _mm512_mask_add_epi64(nonzero, counted, nonzero, one);
    flushed = _mm512_mask_add_epi64(flushed, lost, flushed, one);
    overflowed = _mm512_mask_add_epi64(overflowed, static_cast<__mmask8>(counted & ~kept), overflowed, one);
    abs = _mm512_add_pd(abs, ax);
    sq = _mm512_add_pd(sq, xx);
    f_abs = _mm512_add_pd(f_abs, _mm512_maskz_mov_pd(lost, ax));
    f_sq = _mm512_add_pd(f_sq, _mm512_maskz_mov_pd(lost, xx));
    f_signed = _mm512_add_pd(f_signed, _mm512_maskz_mov_pd(lost, x));
    dot = _mm512_add_pd(dot, _mm512_maskz_mov_pd(kept, _mm512_mul_pd(x, y)));
    sq_q = _mm512_add_pd(sq_q, _mm512_maskz_mov_pd(kept, _mm512_mul_pd(y, y)));
  }
  finish(nonzero, &BlockSums::nonzero, out);
  finish(flushed, &BlockSums::flushed, out);
  finish(overflowed, &BlockSums::overflowed, out);
  finish(abs, &BlockSums::abs, out);
  finish(sq, &BlockSums::sq, out);
  finish(f_abs, &BlockSums::f_abs, out);
  finish(f_sq, &BlockSums::f_sq, out);
  finish(f_signed, &BlockSums::f_signed, out);
  finish(dot, &BlockSums::dot, out);
  finish(sq_q, &BlockSums::sq_q, out);
}

}  // namespace mpsim::analysis::mass_detail

#else

namespace mpsim::analysis::mass_detail {

bool block_quad_sums_avx512_compiled() { return false; }

// Never called: without AVX-512 in the build, path_available(Path::avx512) is false.
void block_quad_sums_avx512(const float*, const float*, std::size_t, BlockSums*) { std::abort(); }

}  // namespace mpsim::analysis::mass_detail

#endif
