// The AVX2 loop of RangeCounter (range_counter_kernel.hpp): eight fast-table indices per step with
// vector instructions, then eight scalar increments (AVX2 has no scatter; gathers and conflict
// detection would be AVX-512). Compiled with -mavx2 (lib/mpsim/analysis/meson.build);
// range_counter.cpp calls it only when the CPU has AVX2.
#include <immintrin.h>

#include "mpsim/analysis/range_counter_kernel.hpp"

namespace mpsim::analysis::range_detail {

namespace {

// Adds one to the eight bins `key` names. 64-bit moves take two indices each (vpextrd would take one).
inline void increment(std::uint32_t* counts, __m256i key) {
  const __m128i lo = _mm256_castsi256_si128(key), hi = _mm256_extracti128_si256(key, 1);
  const auto a = static_cast<std::uint64_t>(_mm_cvtsi128_si64(lo)), b = static_cast<std::uint64_t>(_mm_extract_epi64(lo, 1));
  const auto c = static_cast<std::uint64_t>(_mm_cvtsi128_si64(hi)), d = static_cast<std::uint64_t>(_mm_extract_epi64(hi, 1));
  ++counts[static_cast<std::uint32_t>(a)];
  ++counts[a >> 32];
  ++counts[static_cast<std::uint32_t>(b)];
  ++counts[b >> 32];
  ++counts[static_cast<std::uint32_t>(c)];
  ++counts[c >> 32];
  ++counts[static_cast<std::uint32_t>(d)];
  ++counts[d >> 32];
}

}  // namespace

std::size_t count_fast_avx2(const float* p, std::size_t n, FastState& st) {
  const __m256i mant = _mm256_set1_epi32(0x7fffff), abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i one = _mm256_set1_epi32(1), sub_limit = _mm256_set1_epi32(0x007fffff);
  const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff), minus1 = _mm256_set1_epi32(-1);
  // Lane j increments copy j % kFastCopies of the table.
  static_assert(kFastCopies == 1 || kFastCopies == 2 || kFastCopies == 4 || kFastCopies == 8);
  alignas(32) std::int32_t offsets[8];
  for (int j = 0; j < 8; ++j) offsets[j] = static_cast<std::int32_t>((j % kFastCopies) * kCopyStride);
  const __m256i copy_offset = _mm256_load_si256(reinterpret_cast<const __m256i*>(offsets));
  __m256i t_pos[3], t_neg_xor[3];
  for (int r = 0; r < 3; ++r) {
    t_pos[r] = _mm256_set1_epi32(st.threshold_minus1[0][r]);
    t_neg_xor[r] = _mm256_set1_epi32(st.threshold_minus1[0][r] ^ st.threshold_minus1[1][r]);
  }
  __m256i mx = _mm256_setzero_si256(), mn = minus1, special = _mm256_setzero_si256();
  // The bins of eight values; `special` gathers the float subnormal, inf and NaN lanes.
  auto keys = [&](const float* q) {
    const __m256i u = _mm256_castps_si256(_mm256_loadu_ps(q));
    const __m256i a = _mm256_and_si256(u, abs_mask);
    const __m256i am1 = _mm256_sub_epi32(a, one);
    // 0 <= a - 1 < 0x7fffff (a subnormal; a - 1 is -1 for zero) or a > max finite.
    special = _mm256_or_si256(special, _mm256_and_si256(_mm256_cmpgt_epi32(sub_limit, am1), _mm256_cmpgt_epi32(am1, minus1)));
    special = _mm256_or_si256(special, _mm256_cmpgt_epi32(a, max_finite));
    mx = _mm256_max_epu32(mx, a);
    mn = _mm256_min_epu32(mn, am1);
    const __m256i neg = _mm256_srai_epi32(u, 31);
    const __m256i m = _mm256_and_si256(u, mant);
    __m256i key = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(u, 23), 2), copy_offset);
    for (int r = 0; r < 3; ++r) {
      const __m256i t = _mm256_xor_si256(t_pos[r], _mm256_and_si256(neg, t_neg_xor[r]));
      key = _mm256_sub_epi32(key, _mm256_cmpgt_epi32(m, t));  // +1 where m >= threshold
    }
    return key;
  };
  std::uint32_t* counts = st.counts;
  std::size_t i = 0;
  // Sixteen values a step; a step holding a special value is left (with its max / min) to the caller.
  __m256i mx_before = mx, mn_before = mn;
  for (; i + 16 <= n; i += 16) {
    const __m256i k1 = keys(p + i), k2 = keys(p + i + 8);
    if (!_mm256_testz_si256(special, special)) {
      mx = mx_before;
      mn = mn_before;
      break;
    }
    mx_before = mx;
    mn_before = mn;
    increment(counts, k1);
    increment(counts, k2);
  }
  alignas(32) std::uint32_t lanes_max[8], lanes_min[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes_max), mx);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes_min), mn);
  for (int j = 0; j < 8; ++j) {
    if (lanes_max[j] > st.max_abs) st.max_abs = lanes_max[j];
    if (lanes_min[j] < st.min_abs_m1) st.min_abs_m1 = lanes_min[j];
  }
  return i;
}

}  // namespace mpsim::analysis::range_detail
