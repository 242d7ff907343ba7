// The AVX-512 (F/BW/VL/DQ/CD) kernels of the bulk engine: detail/bulk_kernel.hpp over 16 lanes of __m512i with
// mask registers. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512cd (meson.build); bulk.cpp
// calls it only after __builtin_cpu_supports says the CPU has them. Where the compiler cannot build it,
// meson compiles this file with MPSIM_NO_AVX512 and the path reports itself unavailable.
#include "mpsim/format/detail/bulk_params.hpp"

#ifndef MPSIM_NO_AVX512
#include <immintrin.h>

#include "mpsim/format/detail/bulk_kernel.hpp"

namespace mpsim::bulk_detail {
namespace {

struct Avx512 {
  using I = __m512i;
  using M = __mmask16;
  static constexpr int W = 16;

  static I set1(std::int32_t v) { return _mm512_set1_epi32(v); }
  static I zero() { return _mm512_setzero_si512(); }
  static I iota() { return _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15); }
  static I load(const float* p) { return _mm512_castps_si512(_mm512_loadu_ps(p)); }
  static I load8(const std::uint8_t* p) {
    return _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static I load16(const std::uint16_t* p) {
    return _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static I load32(const std::uint32_t* p) { return _mm512_loadu_si512(p); }
  static void store32(void* p, I v) { _mm512_storeu_si512(p, v); }
  static void store16(std::uint16_t* p, I v) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
  }
  static void store8(std::uint8_t* p, I v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v)); }
  // Non-temporal stores (KernelParams::stream): the address is aligned to the store's width (bulk.cpp).
  static void stream32(void* p, I v) { _mm512_stream_si512(static_cast<__m512i*>(p), v); }
  static void stream16(std::uint16_t* p, I v) {
    _mm256_stream_si256(reinterpret_cast<__m256i*>(p), _mm512_cvtepi32_epi16(v));
  }
  static void stream8(std::uint8_t* p, I v) {
    _mm_stream_si128(reinterpret_cast<__m128i*>(p), _mm512_cvtepi32_epi8(v));
  }
  // vpmovdw / vpmovdb narrow one vector in one instruction: no grouping (store_group, detail/bulk_store.hpp).
  template <OutKind KIND>
  static constexpr int group() {
    return 1;
  }

  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I and_(I a, I b) { return _mm512_and_si512(a, b); }
  static I or_(I a, I b) { return _mm512_or_si512(a, b); }
  static I xor_(I a, I b) { return _mm512_xor_si512(a, b); }
  template <int N>
  static I srli(I a) {
    return _mm512_srli_epi32(a, N);
  }
  template <int N>
  static I slli(I a) {
    return _mm512_slli_epi32(a, N);
  }
  static I sll(I a, int n) { return _mm512_sll_epi32(a, _mm_cvtsi32_si128(n)); }
  static I srl(I a, int n) { return _mm512_srl_epi32(a, _mm_cvtsi32_si128(n)); }
  static I sllv(I a, I n) { return _mm512_sllv_epi32(a, n); }
  static I srlv(I a, I n) { return _mm512_srlv_epi32(a, n); }
  static I max(I a, I b) { return _mm512_max_epi32(a, b); }
  static I min(I a, I b) { return _mm512_min_epi32(a, b); }
  // Philox lanes (detail/bulk_philox.hpp, PhiloxLanes): one block's four words per 128-bit quarter.
  static I set4(std::int32_t w0, std::int32_t w1, std::int32_t w2, std::int32_t w3) {
    return _mm512_set4_epi32(w3, w2, w1, w0);
  }
  static I block_iota() { return _mm512_setr_epi32(0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0); }
  static I add_block_lane0(I c, std::int32_t v) { return _mm512_mask_add_epi32(c, 0x1111, c, _mm512_set1_epi32(v)); }
  static I mul_epu32(I a, I b) { return _mm512_mul_epu32(a, b); }
  static I swap_words(I a) { return _mm512_shuffle_epi32(a, static_cast<_MM_PERM_ENUM>(0x1b)); }
  static I srli64_32(I a) { return _mm512_srli_epi64(a, 32); }
  static I xor3(I a, I b, I c) { return _mm512_ternarylogic_epi32(a, b, c, 0x96); }
  static I concat_shift(I lo, I hi, I idx) { return _mm512_permutex2var_epi32(lo, idx, hi); }
  static I permute(I a, I idx) { return _mm512_permutexvar_epi32(idx, a); }  // lane k from lane idx[k]
  // Soft errors (soft_error_hits): bit b set where block b's (w1 << 32 | w0) < limit (unsigned).
  static I set1_64(std::uint64_t v) { return _mm512_set1_epi64(static_cast<long long>(v)); }
  static unsigned block_hits(I c, I limit) {
    const unsigned k = _mm512_cmplt_epu64_mask(c, limit);
    return (k & 1u) | (k >> 1 & 2u) | (k >> 2 & 4u) | (k >> 3 & 8u);
  }
  // Float addition / subtraction of bit patterns, rounded as MXCSR says (round_loop's Mxcsr).
  static I addf(I a, I b) { return _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b))); }
  static I subf(I a, I b) { return _mm512_castps_si512(_mm512_sub_ps(_mm512_castsi512_ps(a), _mm512_castsi512_ps(b))); }
  static unsigned getcsr() { return _mm_getcsr(); }
  static void setcsr(unsigned c) { _mm_setcsr(c); }

  static M gt(I a, I b) { return _mm512_cmpgt_epi32_mask(a, b); }
  static M eq(I a, I b) { return _mm512_cmpeq_epi32_mask(a, b); }
  static M mand(M a, M b) { return static_cast<M>(a & b); }
  static M mor(M a, M b) { return static_cast<M>(a | b); }
  static M mandnot(M a, M b) { return static_cast<M>(~a & b); }
  static M mnot(M a) { return static_cast<M>(~a); }
  static M mconst(bool b) { return static_cast<M>(b ? 0xffff : 0); }
  static M negmask(I b) { return _mm512_movepi32_mask(b); }
  static I sel(M m, I t, I f) { return _mm512_mask_blend_epi32(m, f, t); }
  static I maskz(M m, I x) { return _mm512_maskz_mov_epi32(m, x); }
  static I maskz_not(M m, I x) { return _mm512_maskz_mov_epi32(static_cast<M>(~m), x); }
  static I minu(I a, I b) { return _mm512_min_epu32(a, b); }
  static bool any(M m) { return m != 0; }
  static I count(I c, M m) { return _mm512_mask_add_epi32(c, m, c, _mm512_set1_epi32(1)); }
  // Lookup counting (detail/bulk_counters.hpp, make_lut): vplzcntd (AVX-512CD) and a 32-entry vpermi2d.
  static constexpr bool kHasLut = true;
  static I lzcnt(I v) { return _mm512_lzcnt_epi32(v); }
  static I xor_mask(I v, M m, I c) { return _mm512_mask_xor_epi32(v, m, v, c); }
  static I lut32(I idx, I t0, I t1) { return _mm512_permutex2var_epi32(t0, idx, t1); }
  static M carry(I f, I r) { return _mm512_cmplt_epu32_mask(_mm512_add_epi32(f, r), f); }
  static I cvt_mul(I v, float s) {
    return _mm512_castps_si512(_mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(s)));
  }
  template <int IMM>
  static __m256i cvt_ph(I b) {
    return _mm512_cvtps_ph(_mm512_castsi512_ps(b), IMM | _MM_FROUND_NO_EXC);
  }
  static I cvt_ph_back(__m256i h) { return _mm512_castps_si512(_mm512_cvtph_ps(h)); }
  // Nearest with ties away (see the AVX2 wrapper): nearest-even, or t + 1 where x is the midpoint.
  static __m256i cvt_ph_away(I b) {
    const __m512 x = _mm512_castsi512_ps(b);
    const __m256i e = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256i t = _mm512_cvtps_ph(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256i u = _mm256_add_epi16(t, _mm256_set1_epi16(1));
    const __m512 mid = _mm512_mul_ps(_mm512_add_ps(_mm512_cvtph_ps(t), _mm512_cvtph_ps(u)), _mm512_set1_ps(0.5f));
    const __mmask16 tie = _mm512_cmp_ps_mask(x, mid, _CMP_EQ_OQ);
    return _mm256_mask_blend_epi16(tie, e, u);
  }
  // To-odd, which F16C lacks: the truncation t with its lowest bit set where t's value is not the input
  // (inexact, overflow included: t = max finite, odd). NaN inputs (unordered) keep the conversion's
  // quiet NaN. (The engine runs under the default MXCSR, bulk.cpp's DefaultFpEnv, so no DAZ here.)
  // `same`: the lanes whose result converts back to the input's bits (eq(cvt_ph_back(result), b)).
  static __m256i cvt_ph_odd(I b, M& same) {
    const __m512 x = _mm512_castsi512_ps(b);
    const __m256i t = _mm512_cvtps_ph(x, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    same = _mm512_cmpeq_epi32_mask(b, _mm512_castps_si512(_mm512_cvtph_ps(t)));
    const __mmask16 inexact = _kandn_mask16(same, _mm512_cmp_ps_mask(x, x, _CMP_ORD_Q));
    return _mm256_mask_blend_epi16(inexact, t, _mm256_or_si256(t, _mm256_set1_epi16(1)));
  }
  static I widen16(__m256i h) { return _mm512_cvtepu16_epi32(h); }
  static __m256i narrow16(I v) { return _mm512_cvtepi32_epi16(v); }
  static void store_ph(std::uint16_t* p, __m256i h) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h); }
  static void stream_ph(std::uint16_t* p, __m256i h) { _mm256_stream_si256(reinterpret_cast<__m256i*>(p), h); }

  static std::uint64_t hsum(I v) {
    alignas(64) std::uint32_t t[16];
    _mm512_store_si512(t, v);
    std::uint64_t s = 0;
    for (int k = 0; k < 16; ++k) s += t[k];
    return s;
  }
  static std::uint32_t hmax(I v) { return static_cast<std::uint32_t>(_mm512_reduce_max_epu32(v)); }
  static std::uint32_t hmin(I v) { return static_cast<std::uint32_t>(_mm512_reduce_min_epu32(v)); }
};

}  // namespace

void round_f32_avx512(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
                      const KernelParams& p, StatsAcc* acc) {
  round_f32<Avx512>(in, out, kind, n, index0, p, acc);
}

void decode_avx512(const void* in, OutKind kind, float* out, std::size_t n, const KernelParams& p) {
  decode_all<Avx512>(in, kind, out, n, p);
}

std::size_t soft_error_hits_avx512(std::uint64_t index0, std::size_t n, const SoftErrorParams& p,
                                   std::uint64_t* hit_words, std::uint8_t* bit_of) {
  return soft_error_hits<Avx512>(index0, n, p, hit_words, bit_of);
}

bool avx512_compiled() { return true; }

}  // namespace mpsim::bulk_detail

#else

namespace mpsim::bulk_detail {
void round_f32_avx512(const float*, void*, OutKind, std::size_t, std::uint64_t, const KernelParams&, StatsAcc*) {}
void decode_avx512(const void*, OutKind, float*, std::size_t, const KernelParams&) {}
std::size_t soft_error_hits_avx512(std::uint64_t, std::size_t, const SoftErrorParams&, std::uint64_t*, std::uint8_t*) {
  return 0;
}
bool avx512_compiled() { return false; }
}  // namespace mpsim::bulk_detail

#endif
