// Internal to the bulk engine (bulk.cpp and the per-ISA files bulk_avx2.cpp / bulk_avx512.cpp): the
// per-call constants the vector kernels run on, derived once from (Format, Rounding) by bulk.cpp, and
// the kernels' entry points. Plain integers only, so the ISA files (compiled with -mavx2 / -mavx512*)
// need no other mpsim header and instantiate no inline function that the linker could share with
// code compiled for a plain x86-64 CPU.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpsim::bulk_detail {

enum class OutKind : std::uint8_t { f32, u8, u16, u32 };

// Same order as mpsim::RoundingMode (bulk.cpp static_asserts it).
enum class Mode : std::uint8_t { nearest_even, toward_zero, up, down, nearest_away, to_odd, stochastic };

// The float32 -> format algorithm all vector paths share (see detail/bulk_kernel.hpp), for formats with
// man_bits <= 22 and emin >= -126 (every named format but fp32/fp64):
//   E = biased float exponent, Ee = max(E, 1), d = Ee - (127 + emin)
//   sh = (23 - m) + max(-d, 0)            bits of the 24-bit significand below the result's quantum
//   sig = a - ((Ee - 1) << 23)            significand with its implicit bit (float subnormals: none)
//   mag = round(sig / 2^sh)               per rounding mode
//   enc = (max(d, 0) << m) + mag          a carry out of the mantissa lands in the exponent field
// then overflow (enc > max_finite_bits), flush, NaN/inf inputs and the sign.
struct KernelParams {
  Mode mode = Mode::nearest_even;
  std::int32_t man_bits = 0;                            // m
  std::int32_t sh0 = 0;                                 // 23 - m
  std::int32_t d0 = 0;                                  // 127 + emin
  std::int32_t one_m = 0;                               // 1 << m: smallest normal encoding
  std::int32_t max_finite_bits = 0;                     // encoding of +max_finite
  std::int32_t fmt_sign = 0;                            // the format's sign bit
  std::int32_t sign_shift = 0;                          // 31 - (exp_bits + man_bits): moves the sign bit to float's
  std::int32_t mag_mask = 0;                            // storage bits without the sign
  std::int32_t ovf_pos = 0, ovf_neg = 0;                // encodings of an overflowed result (sign included)
  std::int32_t inf_pos = 0, inf_neg = 0;                // encodings of the result of a ±inf input
  bool ieee_nan = true;                                 // NaN keeps sign and payload (IEEE encodings)
  std::int32_t nan_base = 0;                            // ieee: inf_bits | quiet bit
  std::int32_t nan_pos = 0, nan_neg = 0;                // non-IEEE: the NaN encodings
  bool neg_zero = false;                                // "fnuz": no -0, the pattern 1.0..0 is NaN
  bool all_ones_nan = false;                            // e4m3fn-style: S.1..1.1..1 is NaN
  bool flush = false;                                   // Subnormals::flush
  bool daz = false;                                     // InputSubnormals::zero
  bool saturate = false;                                // Overflow::saturate
  std::int32_t max_finite_f32 = 0;                      // float bits of max_finite (0x7f800000 when it exceeds float)
  std::int32_t ovf_pos_counts = 0, ovf_neg_counts = 0;  // -1 where an overflowed result is inf/NaN (Stats)
  // stochastic rounding
  std::uint32_t sr_mask = 0xffffffffu;           // keeps the top sr_bits bits of the fraction and the random number
  std::uint32_t sr_seed_lo = 0, sr_seed_hi = 0;  // the Philox4x32-10 key (hd/philox.hpp): the seed's two words
  bool sr_half = false;  // sr_bits <= 16: the 16-bit stream (hd/philox.hpp, sr_word), two elements per word
  // decoding to float (simulate mode, decode_array)
  std::int32_t dec_add = 0;                   // (127 - bias) << 23
  bool sub_by_shift = false;                  // emin == -126: a format subnormal is the float subnormal man << (23 - m)
  float sub_scale = 0;                        // 2^(emin - m): value of one subnormal step
  std::int32_t inf_bits = 0;                  // ieee: +inf encoding (smallest special magnitude)
  std::int32_t nan_mag = 0;                   // all_ones: NaN magnitude; neg_zero: the NaN encoding
  std::int32_t cap_pos = 0, cap_neg = 0;      // magnitude of the overflow result by sign (>= max_finite_bits)
  bool ovf_special = false;                   // the overflow result is not sign | cap (fnuz NaN): blend it in
  std::int32_t ovf_y_pos = 0, ovf_y_neg = 0;  // float bits of the overflow results (simulate mode)
  bool float_layout_ovf_ok = false;           // float_layout and IEEE: decode_finite_vec is right for overflow too
  bool float_layout = false;                  // exp_bits 8, bias 127: an encoding is a float bit pattern >> (23 - m)
  // round_loop's lookup counting (detail/bulk_counters.hpp, make_lut) applies: both caps below 2^15.
  bool lut_ok = false;
  bool half_layout = false;  // IEEE binary16's encoding (e5m10, bias 15, IEEE inf/NaN): F16C decodes it
  bool uniform = false;      // emin == -126: every finite float rounds at bit 23 - m of its pattern
  // No daz, flush, neg_zero, ovf_special or saturate, and cap_pos == cap_neg outside the directed modes up/down:
  // the kernels instantiated for such formats test none of these per vector (fp16, fp8 e4m3 / e5m2).
  // Outside uniform formats also emax + 24 - m <= 127, so that round_loop's simulate-mode C (detail/bulk_round.hpp,
  // simulate_fpu) is finite.
  bool plain = false;
  std::int32_t ek_max = 0;  // float bits of 2^(emax + 1): simulate_fpu clamps 2^E there
  // plain, float_layout, IEEE NaN and inf, overflow to inf: rounding is integer arithmetic on the signed
  // float bit pattern, a carry past max_finite gives inf in every mode that should overflow, and only
  // NaN inputs need a fix (bf16, tf32; detail/bulk_float_layout.hpp).
  bool float_fast = false;
  // exact hardware instruction
  bool f16c = false;  // fp16 with subnormals kept, mode rne/rtz/ru/rd (vcvtps2ph is exact) or rna (two of them)
  // With f16c, the Stats classes as thresholds on |x| (float bits), per sign (0 +, 1 -): |x| below
  // zero_below gives ±0, below small_below a result under the smallest normal, above finite_upto inf.
  // Rounding is monotone in |x| within a sign, so a class is a range of |x| (bulk.cpp finds the ends
  // with round_bits itself).
  std::int32_t f16c_zero_below[2] = {0, 0}, f16c_small_below[2] = {0, 0}, f16c_finite_upto[2] = {0, 0};
  // Non-temporal stores for the call's full vectors (BulkOptions::streaming_stores): bulk.cpp sets it per
  // kernel call with `out` aligned to 64 bytes, and fences after.
  bool stream = false;
};

// Counts of one kernel call; bulk.cpp turns them into Stats.
struct StatsAcc {
  std::uint64_t zero_in = 0, nan = 0, inf_in = 0, exact = 0, underflow = 0, subnormal = 0, overflow = 0;
  std::uint32_t max_a = 0;            // largest finite |x| as float bits
  std::uint32_t min_a = 0x7fffffffu;  // smallest non-zero finite |x| as float bits (0x7fffffff: none)
};

// Rounds n floats; element i uses stochastic index index0 + i. The caller splits ranges so that
// index0 .. index0 + n - 1 share their bits from 34 up (the high word of the Philox block counter
// index / 4, hd/philox.hpp). acc == nullptr: no statistics.
void round_f32_avx2(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
                    const KernelParams& p, StatsAcc* acc);
void round_f32_avx512(const float* in, void* out, OutKind kind, std::size_t n, std::uint64_t index0,
                      const KernelParams& p, StatsAcc* acc);
// Decodes n encodings (in: uint8/uint16/uint32 per kind) to float.
void decode_avx2(const void* in, OutKind kind, float* out, std::size_t n, const KernelParams& p);
void decode_avx512(const void* in, OutKind kind, float* out, std::size_t n, const KernelParams& p);

// Soft errors (soft_error.cpp; the rule in soft_error.hpp): the Philox key, and the hit test as an
// integer one: u = ((w1 << 32 | w0) >> 11) / 2^53 < p  <=>  (w1 << 32 | w0) < limit = ceil(p 2^53) 2^11
// (exact: u53 is an integer, p 2^53 a double), or every element where p = 1 (limit would be 2^64).
struct SoftErrorParams {
  std::uint32_t key_lo = 0, key_hi = 0;
  std::uint64_t limit = 0;
  bool all = false;
  std::uint32_t bits = 0;  // m, the number of eligible bits
};
// The draws of elements index0 .. index0 + n' - 1 (detail/bulk_philox.hpp, soft_error_hits); returns n'.
std::size_t soft_error_hits_avx2(std::uint64_t index0, std::size_t n, const SoftErrorParams& p,
                                 std::uint64_t* hit_words, std::uint8_t* bit_of);
std::size_t soft_error_hits_avx512(std::uint64_t index0, std::size_t n, const SoftErrorParams& p,
                                   std::uint64_t* hit_words, std::uint8_t* bit_of);

bool avx512_compiled();  // false when the compiler could not build bulk_avx512.cpp

}  // namespace mpsim::bulk_detail
