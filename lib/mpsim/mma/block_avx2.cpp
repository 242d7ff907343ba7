#include "mpsim/mma/detail/block_avx2.hpp"

#include <immintrin.h>

namespace mpsim::mma::detail {

std::int32_t block_lanes_avx2(const std::int32_t* sa, const std::int32_t* ea, const std::int32_t* sb,
                              const std::int32_t* eb, int n, std::int32_t E_init, int lshift, std::int32_t* sum) {
  __m256i vmax = _mm256_set1_epi32(E_init);
  for (int j = 0; j < n; j += 8) {
    const __m256i e = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ea + j)),
                                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(eb + j)));
    vmax = _mm256_max_epi32(vmax, e);
  }
  __m128i m = _mm_max_epi32(_mm256_castsi256_si128(vmax), _mm256_extracti128_si256(vmax, 1));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0x4e));
  m = _mm_max_epi32(m, _mm_shuffle_epi32(m, 0xb1));
  const std::int32_t E = _mm_cvtsi128_si32(m);
  const __m256i vE = _mm256_set1_epi32(E);
  const __m128i count = _mm_cvtsi32_si128(lshift);
  __m256i acc = _mm256_setzero_si256();
  for (int j = 0; j < n; j += 8) {
    const __m256i e = _mm256_add_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ea + j)),
                                       _mm256_loadu_si256(reinterpret_cast<const __m256i*>(eb + j)));
    const __m256i p = _mm256_mullo_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(sa + j)),
                                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sb + j)));
    const __m256i mag = _mm256_sll_epi32(_mm256_abs_epi32(p), count);
    // vpsrlvd: a count of 32 or more gives 0, the truncation of a term shifted out entirely.
    const __m256i t = _mm256_srlv_epi32(mag, _mm256_sub_epi32(vE, e));
    acc = _mm256_add_epi32(acc, _mm256_sign_epi32(t, p));
  }
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  *sum = _mm_cvtsi128_si32(s);
  return E;
}

}  // namespace mpsim::mma::detail
