// The AVX2 loops of RangeCounter (range_counter_kernel.hpp): the pair loop, which counts nearly
// everything, and the fast-table loop for blocks holding a float subnormal, inf or NaN. Both compute
// eight table indices per step with vector instructions, then make eight scalar increments (AVX2 has
// no scatter; gathers and conflict detection would be AVX-512). Compiled with -mavx2 (lib/mpsim/analysis/meson.build);
// range_counter.cpp calls it only when the CPU has AVX2.
#include <immintrin.h>

#include "mpsim/analysis/detail/range_counter_kernel.hpp"

namespace mpsim::analysis::range_detail {

namespace {

// Adds one to the eight bins `key` names. 64-bit moves take two indices each (vpextrd would take one).
inline void increment(std::uint32_t* counts, __m256i key) {
  const __m128i lo = _mm256_castsi256_si128(key), hi = _mm256_extracti128_si256(key, 1);
  const auto a = static_cast<std::uint64_t>(_mm_cvtsi128_si64(lo)),
             b = static_cast<std::uint64_t>(_mm_extract_epi64(lo, 1));
  const auto c = static_cast<std::uint64_t>(_mm_cvtsi128_si64(hi)),
             d = static_cast<std::uint64_t>(_mm_extract_epi64(hi, 1));
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

namespace {

template <bool SameSigns>
std::size_t count_fast(const float* p, std::size_t n, FastState& st) {
  const __m256i mant = _mm256_set1_epi32(0x7fffff), abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i one = _mm256_set1_epi32(1), sub_limit = _mm256_set1_epi32(0x007fffff);
  const __m256i max_finite = _mm256_set1_epi32(0x7f7fffff), minus1 = _mm256_set1_epi32(-1);
  // Lane j increments copy j % kFastCopies of the table.
  static_assert(kFastCopies == 1 || kFastCopies == 2 || kFastCopies == 4 || kFastCopies == 8);
  alignas(32) std::int32_t offsets[8];
  for (int j = 0; j < 8; ++j) offsets[j] = static_cast<std::int32_t>((j % kFastCopies) * copy_stride(st.code_bits));
  const __m256i copy_offset = _mm256_load_si256(reinterpret_cast<const __m256i*>(offsets));
  const __m128i code_shift = _mm_cvtsi32_si128(st.code_bits);
  const int thresholds = st.live;
  __m256i t_pos[kMaxThresholds], t_neg_xor[kMaxThresholds];
  for (int r = 0; r < thresholds; ++r) {
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
    special =
        _mm256_or_si256(special, _mm256_and_si256(_mm256_cmpgt_epi32(sub_limit, am1), _mm256_cmpgt_epi32(am1, minus1)));
    special = _mm256_or_si256(special, _mm256_cmpgt_epi32(a, max_finite));
    mx = _mm256_max_epu32(mx, a);
    mn = _mm256_min_epu32(mn, am1);
    const __m256i neg = _mm256_srai_epi32(u, 31);
    const __m256i m = _mm256_and_si256(u, mant);
    __m256i key = _mm256_add_epi32(_mm256_sll_epi32(_mm256_srli_epi32(u, 23), code_shift), copy_offset);
    for (int r = 0; r < thresholds; ++r) {
      const __m256i t = SameSigns ? t_pos[r] : _mm256_xor_si256(t_pos[r], _mm256_and_si256(neg, t_neg_xor[r]));
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

}  // namespace

std::size_t count_fast_avx2(const float* p, std::size_t n, FastState& st) {
  return st.same_signs ? count_fast<true>(p, n, st) : count_fast<false>(p, n, st);
}

namespace {

// table[idx[j]] += amount for the eight lanes of idx, in lane order: the lanes are taken out two per 64-bit
// extract (AVX2 has no scatter; a lane repeated adds twice, as it must).
template <class T>
__attribute__((always_inline)) inline void add_at_lanes(T* table, __m256i idx, T amount) {
  const __m128i lo = _mm256_castsi256_si128(idx), hi = _mm256_extracti128_si256(idx, 1);
  const auto a = static_cast<std::uint64_t>(_mm_cvtsi128_si64(lo)),
             b = static_cast<std::uint64_t>(_mm_extract_epi64(lo, 1));
  const auto c = static_cast<std::uint64_t>(_mm_cvtsi128_si64(hi)),
             d = static_cast<std::uint64_t>(_mm_extract_epi64(hi, 1));
  table[static_cast<std::uint32_t>(a)] += amount;
  table[a >> 32] += amount;
  table[static_cast<std::uint32_t>(b)] += amount;
  table[b >> 32] += amount;
  table[static_cast<std::uint32_t>(c)] += amount;
  table[c >> 32] += amount;
  table[static_cast<std::uint32_t>(d)] += amount;
  table[d >> 32] += amount;
}

// Symmetric: both signs have the same dominant interval (nearest and toward-zero modes), and the
// lanes need no per-sign choice.
template <bool Symmetric, bool SameSigns>
BlockExtremes count_pairs(const float* p, std::size_t n, const PairState& st, std::int32_t delta) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), mant = _mm256_set1_epi32(0x7fffff);
  const __m256i one = _mm256_set1_epi32(1), zero = _mm256_setzero_si256();
  // A significand m is outside its sign's dominant interval [lo, lo + w) where (m - lo) >= w
  // unsigned, that is (top bits flipped on both sides) where the signed m + (2^31 - lo) exceeds
  // (w - 1) ^ 2^31: an add and a compare. Per lane the sign's bias and limit, chosen by the sign bit
  // (blendv reads the top bit).
  auto splat = [](std::uint32_t x) { return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(x))); };
  const __m256 bias_pos = splat(0x80000000u - st.lo[0]), bias_neg = splat(0x80000000u - st.lo[1]);
  const __m256 limit_pos = splat((st.width[0] - 1) ^ 0x80000000u), limit_neg = splat((st.width[1] - 1) ^ 0x80000000u);
  const auto inc = static_cast<std::uint32_t>(delta);
  std::uint32_t* pairs = st.pairs;
  // The codes of rare lanes, as count_fast_avx2 finds them: per threshold, +1 where m > threshold - 1 (the
  // sign's threshold chosen by xor with the sign mask).
  const int thresholds = st.live;
  __m256i t_pos[kMaxThresholds], t_neg_xor[kMaxThresholds];
  for (int r = 0; r < thresholds; ++r) {
    const auto pos = static_cast<std::int32_t>(st.threshold[0][r]) - 1,
               neg = static_cast<std::int32_t>(st.threshold[1][r]) - 1;
    t_pos[r] = _mm256_set1_epi32(pos);
    t_neg_xor[r] = _mm256_set1_epi32(pos ^ neg);
  }
  const __m128i code_shift = _mm_cvtsi32_si128(st.code_bits);
  constexpr auto kSpare = static_cast<int>(kFastBinsMax);
  const __m256i spare0 =
      _mm256_setr_epi32(kSpare, kSpare + 1, kSpare + 2, kSpare + 3, kSpare + 4, kSpare + 5, kSpare + 6, kSpare + 7);
  const __m256i spare1 = _mm256_add_epi32(spare0, _mm256_set1_epi32(8));
  std::int32_t* corrections = st.corrections;
  // Adds delta at the code of every rare lane of u (its mask `rare`), the others into their spare slots.
  auto correct = [&](__m256i u, __m256i rare, __m256i spare) {
    const __m256i neg = _mm256_srai_epi32(u, 31);
    const __m256i m = _mm256_and_si256(u, mant);
    __m256i code = zero;
    for (int r = 0; r < thresholds; ++r) {
      const __m256i t = SameSigns ? t_pos[r] : _mm256_xor_si256(t_pos[r], _mm256_and_si256(neg, t_neg_xor[r]));
      code = _mm256_sub_epi32(code, _mm256_cmpgt_epi32(m, t));
    }
    const __m256i bin = _mm256_or_si256(_mm256_sll_epi32(_mm256_srli_epi32(u, 23), code_shift), code);
    add_at_lanes(corrections, _mm256_blendv_epi8(spare, bin, rare), delta);
  };
  __m256i mx = zero, mn = _mm256_set1_epi32(-1);
  // |x| bits into the extremes; the lanes whose significand is outside the dominant interval (not ±0).
  auto look = [&](__m256i u) {
    const __m256i a = _mm256_and_si256(u, abs_mask);
    mx = _mm256_max_epu32(mx, a);
    mn = _mm256_min_epu32(mn, _mm256_sub_epi32(a, one));
    const __m256i bias = Symmetric ? _mm256_castps_si256(bias_pos)
                                   : _mm256_castps_si256(_mm256_blendv_ps(bias_pos, bias_neg, _mm256_castsi256_ps(u)));
    const __m256i limit = Symmetric
                              ? _mm256_castps_si256(limit_pos)
                              : _mm256_castps_si256(_mm256_blendv_ps(limit_pos, limit_neg, _mm256_castsi256_ps(u)));
    const __m256i d = _mm256_add_epi32(_mm256_and_si256(u, mant), bias);
    // Outside the interval, where x is not zero.
    return _mm256_andnot_si256(_mm256_cmpeq_epi32(a, zero), _mm256_cmpgt_epi32(d, limit));
  };
  for (std::size_t i = 0; i < n; i += 16) {
    // 4 KiB ahead: the hardware prefetcher does not cross pages, and a memory-mapped file is read
    // page by page (measured here from memory: 0.54 -> 0.42 ns/value). A prefetch never faults.
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 1024), _MM_HINT_T0);
    const __m256i u0 = _mm256_castps_si256(_mm256_loadu_ps(p + i));
    const __m256i u1 = _mm256_castps_si256(_mm256_loadu_ps(p + i + 8));
    const __m256i r0 = look(u0), r1 = look(u1);
    const unsigned rare = static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(r0))) |
                          static_cast<unsigned>(_mm256_movemask_ps(_mm256_castsi256_ps(r1))) << 8;
    if (rare != 0) {
      correct(u0, r0, spare0);
      correct(u1, r1, spare1);
    }
    // Pair j: (q[j], q[8 + j]) at row (top nine bits of q[j]) and column (those of q[8 + j]).
    const __m256i k0 = _mm256_srli_epi32(u0, 23);
    const __m256i idx = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(k0, 9), _mm256_slli_epi32(k0, 4)),
                                         _mm256_srli_epi32(u1, 23));
    static_assert(kPairRow == (1u << 9) + (1u << 4));
    add_at_lanes(pairs, idx, inc);
  }
  alignas(32) std::uint32_t lanes_max[8], lanes_min[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes_max), mx);
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes_min), mn);
  BlockExtremes e{0, 0xffffffffu};
  for (int j = 0; j < 8; ++j) {
    e.max_abs = lanes_max[j] > e.max_abs ? lanes_max[j] : e.max_abs;
    e.min_abs_m1 = lanes_min[j] < e.min_abs_m1 ? lanes_min[j] : e.min_abs_m1;
  }
  return e;
}

}  // namespace

BlockExtremes count_pairs_avx2(const float* p, std::size_t n, const PairState& st, std::int32_t delta) {
  // Equal thresholds per sign give equal dominant intervals (they are found from the thresholds).
  if (st.same_signs) return count_pairs<true, true>(p, n, st, delta);
  if (st.lo[0] == st.lo[1] && st.width[0] == st.width[1]) return count_pairs<true, false>(p, n, st, delta);
  return count_pairs<false, false>(p, n, st, delta);
}

}  // namespace mpsim::analysis::range_detail
