// The AVX2 (+F16C) kernels of the bulk engine: detail/bulk_kernel.hpp over 8 lanes of __m256i.
// Compiled with -mavx2 -mfma -mf16c (lib/mpsim/format/meson.build); bulk.cpp calls it only after
// __builtin_cpu_supports says the CPU has them.
#include <immintrin.h>

#include "mpsim/format/detail/bulk_kernel.hpp"

namespace mpsim::bulk_detail {
namespace {

struct Avx2 {
  using I = __m256i;
  using M = __m256i;  // a lane mask is a vector of 0 / -1
  static constexpr int W = 8;

  static I set1(std::int32_t v) { return _mm256_set1_epi32(v); }
  static I zero() { return _mm256_setzero_si256(); }
  static I iota() { return _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7); }
  static I load(const float* p) { return _mm256_castps_si256(_mm256_loadu_ps(p)); }
  static I load8(const std::uint8_t* p) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  }
  static I load16(const std::uint16_t* p) {
    return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I load32(const std::uint32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static void store32(void* p, I v) { _mm256_storeu_si256(static_cast<__m256i*>(p), v); }
  static void store16(std::uint16_t* p, I v) {
    const I t = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(t));
  }
  // Two vectors of 16-bit encodings in one store: packus interleaves the 128-bit halves, the
  // permute puts them back in order.
  static I pack16x2(I a, I b) { return _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8); }
  static void store16x2(std::uint16_t* p, I a, I b) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pack16x2(a, b));
  }
  // Four vectors of 8-bit encodings in one store.
  static I pack8x4(I a, I b, I c, I d) {
    const I t = _mm256_packus_epi16(_mm256_packus_epi32(a, b), _mm256_packus_epi32(c, d));
    return _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  }
  static void store8x4(std::uint8_t* p, I a, I b, I c, I d) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), pack8x4(a, b, c, d));
  }
  // Non-temporal stores (KernelParams::stream): the address is aligned to the store's width (bulk.cpp).
  static void stream32(void* p, I v) { _mm256_stream_si256(static_cast<__m256i*>(p), v); }
  static void stream16x2(std::uint16_t* p, I a, I b) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), pack16x2(a, b));
  }
  static void stream8x4(std::uint8_t* p, I a, I b, I c, I d) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), pack8x4(a, b, c, d));
  }
  template <OutKind KIND>
  static constexpr int group() {
    return KIND == OutKind::u16 ? 2 : KIND == OutKind::u8 ? 4 : 1;
  }
  static void store8(std::uint8_t* p, I v) {
    I t = _mm256_packus_epi32(v, v);
    t = _mm256_packus_epi16(t, t);
    t = _mm256_permutevar8x32_epi32(t, _mm256_setr_epi32(0, 4, 0, 4, 0, 4, 0, 4));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(p), _mm256_castsi256_si128(t));
  }

  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I and_(I a, I b) { return _mm256_and_si256(a, b); }
  static I or_(I a, I b) { return _mm256_or_si256(a, b); }
  static I xor_(I a, I b) { return _mm256_xor_si256(a, b); }
  template <int N>
  static I srli(I a) {
    return _mm256_srli_epi32(a, N);
  }
  template <int N>
  static I slli(I a) {
    return _mm256_slli_epi32(a, N);
  }
  static I sll(I a, int n) { return _mm256_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static I srl(I a, int n) { return _mm256_srl_epi32(a, _mm_cvtsi32_si128(n)); }
  static I sllv(I a, I n) { return _mm256_sllv_epi32(a, n); }
  static I srlv(I a, I n) { return _mm256_srlv_epi32(a, n); }
  static I max(I a, I b) { return _mm256_max_epi32(a, b); }
  static I min(I a, I b) { return _mm256_min_epi32(a, b); }
  // Philox lanes (detail/bulk_philox.hpp, PhiloxLanes): one block's four words per 128-bit half.
  static I set4(std::int32_t w0, std::int32_t w1, std::int32_t w2, std::int32_t w3) {
    return _mm256_setr_epi32(w0, w1, w2, w3, w0, w1, w2, w3);
  }
  static I block_iota() { return _mm256_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0); }  // block b in word 0
  static I add_block_lane0(I c, std::int32_t v) {
    return _mm256_add_epi32(c, _mm256_setr_epi32(v, 0, 0, 0, v, 0, 0, 0));
  }
  static I mul_epu32(I a, I b) { return _mm256_mul_epu32(a, b); }
  static I swap_words(I a) { return _mm256_shuffle_epi32(a, 0x1b); }  // words 3 2 1 0 of each block
  static I srli64_32(I a) { return _mm256_srli_epi64(a, 32); }
  static I xor3(I a, I b, I c) { return _mm256_xor_si256(_mm256_xor_si256(a, b), c); }
  // Soft errors (soft_error_hits): bit b set where block b's (w1 << 32 | w0) < limit (unsigned: AVX2
  // compares signed 64-bit lanes, so both sides have their top bit flipped).
  static I set1_64(std::uint64_t v) { return _mm256_set1_epi64x(static_cast<long long>(v)); }
  static unsigned block_hits(I c, I limit) {
    const I top = _mm256_set1_epi64x(static_cast<long long>(0x8000000000000000ull));
    const I lt = _mm256_cmpgt_epi64(_mm256_xor_si256(limit, top), _mm256_xor_si256(c, top));
    const unsigned k = static_cast<unsigned>(_mm256_movemask_pd(_mm256_castsi256_pd(lt)));
    return (k & 1u) | (k >> 1 & 2u);
  }
  static I permute(I a, I idx) { return _mm256_permutevar8x32_epi32(a, idx); }  // lane k from lane idx[k]
  // Lane k of the 16 lanes lo:hi from lane idx[k] (idx = iota + r, r in 0..7).
  static I concat_shift(I lo, I hi, I idx) {
    const I low3 = _mm256_and_si256(idx, _mm256_set1_epi32(7));
    return _mm256_blendv_epi8(_mm256_permutevar8x32_epi32(lo, low3), _mm256_permutevar8x32_epi32(hi, low3),
                              _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
  }
  // Float addition / subtraction of bit patterns, rounded as MXCSR says (round_loop's Mxcsr).
  static I addf(I a, I b) { return _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b))); }
  static I subf(I a, I b) { return _mm256_castps_si256(_mm256_sub_ps(_mm256_castsi256_ps(a), _mm256_castsi256_ps(b))); }
  static unsigned getcsr() { return _mm_getcsr(); }
  static void setcsr(unsigned c) { _mm_setcsr(c); }

  static M gt(I a, I b) { return _mm256_cmpgt_epi32(a, b); }
  static M eq(I a, I b) { return _mm256_cmpeq_epi32(a, b); }
  static M mand(M a, M b) { return _mm256_and_si256(a, b); }
  static M mor(M a, M b) { return _mm256_or_si256(a, b); }
  static M mandnot(M a, M b) { return _mm256_andnot_si256(a, b); }  // ~a & b
  static M mnot(M a) { return _mm256_xor_si256(a, _mm256_set1_epi32(-1)); }
  static M mconst(bool b) { return _mm256_set1_epi32(b ? -1 : 0); }
  static M negmask(I b) { return _mm256_srai_epi32(b, 31); }
  static I sel(M m, I t, I f) { return _mm256_blendv_epi8(f, t, m); }
  static I maskz(M m, I x) { return _mm256_and_si256(m, x); }
  static I maskz_not(M m, I x) { return _mm256_andnot_si256(m, x); }  // x where m is false
  static I minu(I a, I b) { return _mm256_min_epu32(a, b); }
  static bool any(M m) { return !_mm256_testz_si256(m, m); }
  static I count(I c, M m) { return _mm256_sub_epi32(c, m); }
  // No lookup counting (detail/bulk_counters.hpp, make_lut): AVX2 has neither vplzcntd nor a 32-entry permute.
  static constexpr bool kHasLut = false;
  // Lanes where the unsigned sum f + r carries out of 32 bits.
  static M carry(I f, I r) {
    const I s = _mm256_set1_epi32(static_cast<std::int32_t>(0x80000000u));
    return _mm256_cmpgt_epi32(_mm256_xor_si256(f, s), _mm256_xor_si256(_mm256_add_epi32(f, r), s));
  }
  static I cvt_mul(I v, float s) {
    return _mm256_castps_si256(_mm256_mul_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(s)));
  }
  template <int IMM>
  static __m128i cvt_ph(I b) {
    return _mm256_cvtps_ph(_mm256_castsi256_ps(b), IMM);
  }
  static I cvt_ph_back(__m128i h) { return _mm256_castps_si256(_mm256_cvtph_ps(h)); }
  // Nearest with ties away from zero, which F16C lacks: the nearest-even result, except where x lies
  // exactly halfway between its truncation t and the next encoding t + 1 (the midpoint of two fp16
  // values is exact in float), where it is t + 1. NaN and inf never compare equal to the midpoint.
  static __m128i cvt_ph_away(I b) {
    const __m256 x = _mm256_castsi256_ps(b);
    const __m128i e = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT);
    const __m128i t = _mm256_cvtps_ph(x, _MM_FROUND_TO_ZERO);
    const __m128i u = _mm_add_epi16(t, _mm_set1_epi16(1));
    const __m256 mid = _mm256_mul_ps(_mm256_add_ps(_mm256_cvtph_ps(t), _mm256_cvtph_ps(u)), _mm256_set1_ps(0.5f));
    const __m256i tie = _mm256_castps_si256(_mm256_cmp_ps(x, mid, _CMP_EQ_OQ));
    const __m128i tie16 = _mm_packs_epi32(_mm256_castsi256_si128(tie), _mm256_extracti128_si256(tie, 1));
    return _mm_blendv_epi8(e, u, tie16);
  }
  // To-odd, which F16C lacks: the truncation t with its lowest bit set where t's value is not the input
  // (inexact, overflow included: t = max finite, odd). NaN inputs (unordered) keep the conversion's
  // quiet NaN. (The engine runs under the default MXCSR, bulk.cpp's DefaultFpEnv, so no DAZ here.)
  // `same`: the lanes whose result converts back to the input's bits (eq(cvt_ph_back(result), b)).
  static __m128i cvt_ph_odd(I b, M& same) {
    const __m256 x = _mm256_castsi256_ps(b);
    const __m128i t = _mm256_cvtps_ph(x, _MM_FROUND_TO_ZERO);
    same = _mm256_cmpeq_epi32(b, _mm256_castps_si256(_mm256_cvtph_ps(t)));
    const __m256i inexact = _mm256_andnot_si256(same, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_ORD_Q)));
    const __m128i inexact16 = _mm_packs_epi32(_mm256_castsi256_si128(inexact), _mm256_extracti128_si256(inexact, 1));
    return _mm_or_si128(t, _mm_and_si128(inexact16, _mm_set1_epi16(1)));
  }
  static I widen16(__m128i h) { return _mm256_cvtepu16_epi32(h); }
  // 16-bit encodings (zero-extended in 32-bit lanes) to 8 packed halves.
  static __m128i narrow16(I v) {
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08));
  }
  static void store_ph(std::uint16_t* p, __m128i h) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), h); }
  static void stream_ph(std::uint16_t* p, __m128i h) { _mm_stream_si128(reinterpret_cast<__m128i*>(p), h); }

  static std::uint64_t hsum(I v) {
    alignas(32) std::uint32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), v);
    std::uint64_t s = 0;
    for (int k = 0; k < 8; ++k) s += t[k];
    return s;
  }
  static std::uint32_t hmax(I v) {
    alignas(32) std::uint32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), v);
    std::uint32_t r = t[0];
    for (int k = 1; k < 8; ++k) r = t[k] > r ? t[k] : r;
    return r;
  }
  static std::uint32_t hmin(I v) {
    alignas(32) std::uint32_t t[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t), v);
    std::uint32_t r = t[0];
    for (int k = 1; k < 8; ++k) r = t[k] < r ? t[k] : r;
    return r;
  }
};

}  // namespace

void round_f32_avx2(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
                    const KernelParams& p, StatsAcc* acc) {
  round_f32<Avx2>(in, out, kind, n, index0, p, acc);
}

void decode_avx2(const void* in, OutKind kind, float* out, std::size_t n, const KernelParams& p) {
  decode_all<Avx2>(in, kind, out, n, p);
}

std::size_t soft_error_hits_avx2(std::uint64_t index0, std::size_t n, const SoftErrorParams& p,
                                 std::uint64_t* hit_words, std::uint8_t* bit_of) {
  return soft_error_hits<Avx2>(index0, n, p, hit_words, bit_of);
}

}  // namespace mpsim::bulk_detail
