// MassLost's float blocks two at a time on AVX2 (detail/mass_lost_kernel.hpp says why the bits are those of
// the SSE2 loop in mass_lost.cpp). Compiled with -mavx2 -ffp-contract=off (lib/mpsim/analysis/meson.build);
// mass_lost.cpp calls it only when the CPU has AVX2.
#include <immintrin.h>

#include <limits>

#include "mpsim/analysis/detail/mass_lost_kernel.hpp"

namespace mpsim::analysis::mass_detail {

namespace {

// Elements i, i + 1 of block 0 (low half) and of block 1 (high half), as floats.
inline __m128 load(const float* p0, const float* p1) {
  const __m128d lo = _mm_load_sd(reinterpret_cast<const double*>(p0));
  return _mm_castpd_ps(_mm_loadh_pd(lo, reinterpret_cast<const double*>(p1)));
}

inline void finish(__m256d v, double& lo, double& hi) {
  const __m128d a = _mm256_castpd256_pd128(v), b = _mm256_extractf128_pd(v, 1);
  lo = _mm_cvtsd_f64(a) + _mm_cvtsd_f64(_mm_unpackhi_pd(a, a));  // Pairs::sum: lane 0 + lane 1
  hi = _mm_cvtsd_f64(b) + _mm_cvtsd_f64(_mm_unpackhi_pd(b, b));
}

inline void finish(__m256i v, std::uint64_t& lo, std::uint64_t& hi) {
  const __m128i a = _mm256_castsi256_si128(v), b = _mm256_extracti128_si256(v, 1);
  lo = static_cast<std::uint64_t>(_mm_cvtsi128_si64(a)) + static_cast<std::uint64_t>(_mm_extract_epi64(a, 1));
  hi = static_cast<std::uint64_t>(_mm_cvtsi128_si64(b)) + static_cast<std::uint64_t>(_mm_extract_epi64(b, 1));
}

}  // namespace

void block_pair_sums_avx2(const float* g, const float* q, std::size_t n, BlockSums out[2]) {
  const __m256d kAbs = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  const __m256d kMax = _mm256_set1_pd(std::numeric_limits<double>::max());
  const __m256d zero = _mm256_setzero_pd();
  __m256d abs = zero, sq = zero, f_abs = zero, f_sq = zero, f_signed = zero, dot = zero, sq_q = zero;
  __m256i nonzero = _mm256_setzero_si256(), flushed = nonzero, overflowed = nonzero;
  for (std::size_t i = 0; i < n; i += 2) {
    const __m128 xf = load(g + i, g + n + i);
    const __m256d x = _mm256_cvtps_pd(xf);
    const __m256d y = _mm256_cvtps_pd(load(q + i, q + n + i));
    // The predicates of Pairs::add (mass_lost.cpp): _mm_cmpneq_pd is NEQ_UQ, _mm_cmple_pd LE_OS, _mm_cmpeq_pd
    // EQ_OQ.
    const __m256d ax_raw = _mm256_and_pd(x, kAbs);
    const __m256d counted = _mm256_and_pd(_mm256_cmp_pd(x, zero, _CMP_NEQ_UQ), _mm256_cmp_pd(ax_raw, kMax, _CMP_LE_OS));
    const __m256d lost = _mm256_and_pd(counted, _mm256_cmp_pd(y, zero, _CMP_EQ_OQ));
    const __m256d kept = _mm256_and_pd(counted, _mm256_cmp_pd(_mm256_and_pd(y, kAbs), kMax, _CMP_LE_OS));
    const __m256d ax = _mm256_and_pd(ax_raw, counted), xx = _mm256_mul_pd(ax, ax);
    nonzero = _mm256_sub_epi64(nonzero, _mm256_castpd_si256(counted));  // a mask is -1
    flushed = _mm256_sub_epi64(flushed, _mm256_castpd_si256(lost));
    overflowed = _mm256_sub_epi64(overflowed, _mm256_castpd_si256(_mm256_andnot_pd(kept, counted)));
    abs = _mm256_add_pd(abs, ax);
    sq = _mm256_add_pd(sq, xx);
    f_abs = _mm256_add_pd(f_abs, _mm256_and_pd(ax, lost));
    f_sq = _mm256_add_pd(f_sq, _mm256_and_pd(xx, lost));
    f_signed = _mm256_add_pd(f_signed, _mm256_and_pd(x, lost));
    dot = _mm256_add_pd(dot, _mm256_and_pd(_mm256_mul_pd(x, y), kept));
    sq_q = _mm256_add_pd(sq_q, _mm256_and_pd(_mm256_mul_pd(y, y), kept));
  }
  finish(nonzero, out[0].nonzero, out[1].nonzero);
  finish(flushed, out[0].flushed, out[1].flushed);
  finish(overflowed, out[0].overflowed, out[1].overflowed);
  finish(abs, out[0].abs, out[1].abs);
  finish(sq, out[0].sq, out[1].sq);
  finish(f_abs, out[0].f_abs, out[1].f_abs);
  finish(f_sq, out[0].f_sq, out[1].f_sq);
  finish(f_signed, out[0].f_signed, out[1].f_signed);
  finish(dot, out[0].dot, out[1].dot);
  finish(sq_q, out[0].sq_q, out[1].sq_q);
}

}  // namespace mpsim::analysis::mass_detail
