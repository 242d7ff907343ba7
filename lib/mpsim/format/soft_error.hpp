// Soft errors after rounding: with probability p an element's rounded result has one bit of its encoding
// flipped, to study how a computation tolerates corrupted values. The option of chop (Higham & Pranesh,
// SIAM J. Sci. Comput. 41(5), 2019; chop.m options.flip / options.p, roundit.m) and of CPFloat (Fasi &
// Mikaitis, ACM TOMS 49(2), 2023; cpfloat_definitions.h fpopts->flip / fpopts->p). Sources read: github.com/
// higham/chop at 906c31e (chop.m, roundit.m) and github.com/north-numerical-computing/cpfloat at 3583976
// (src/cpfloat_definitions.h, src/cpfloat_template.h).
//
// Which bits: the format's fraction field (the man_bits trailing significand bits, the implicit bit
// excluded), each equally likely: chop's rule (roundit.m flips bit b - 1 of the integer significand,
// b = randi(t - 1), so one of the t - 1 fraction bits) and what CPFloat documents for
// CPFLOAT_SOFTERR_FRAC ("the target-format fraction (significand without the implicit bit)"). CPFloat's
// code draws from [DEFPREC - t, DEFPREC) of the storage word (cpfloat_template.h, ADD_BITFLIP_CODE),
// which is the top t - 1 fraction bits and the lowest exponent bit of the storage format; mpsim follows
// the documented rule. SoftErrorBits::any is CPFloat's other mode (CPFLOAT_SOFTERR_FP, "any bit in the
// target-format representation"): one of the format's storage_bits (sign, exponent and fraction), each
// equally likely (CPFloat's code draws from its binary32/64 storage word above the trailing bits the target
// lacks, so its exponent bits are the storage format's). Every element is eligible, zeros, infinities and
// NaNs included: the flip models a bit upset in the stored code, whatever it holds (a flipped fraction bit
// turns +inf into a NaN, a zero into a subnormal; in fp8_e4m3 it can turn 448 into the NaN 0x7F).
//
// The draws (deterministic; independent of thread count and chunking): element i (index0 + its position,
// as stochastic rounding numbers elements) evaluates Philox4x32-10 (hd/philox.hpp) once, at counter
// (lo32(i), hi32(i), 0, 0) under the key seed ^ kSoftErrorKeySalt (low word first). Words 0 and 1 give
// u = (w1 * 2^32 + w0) / 2^64 truncated to 53 bits, in [0, 1): the element is hit when u < p, so p = 0
// never flips and p = 1 always does. Word 2 gives the bit: floor(w2 * m / 2^32) for m eligible bits, m =
// man_bits (fraction) or storage_bits (any) (a multiply-shift in place of a modulo; its bias is below
// m / 2^32, under 10^-8 for 32 bits).
//
// Simulate mode (values) flips the same bit of the value's encoding and decodes it back, so a value is
// always the decoded flipped encoding of --bits output.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "mpsim/format/bulk.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/hd/philox.hpp"

namespace mpsim {

// XORed into the seed to key the soft-error draws: "soft_err" in ASCII, so that the same seed gives
// stochastic rounding and the soft errors unrelated streams (rounding keys Philox with the seed itself).
inline constexpr std::uint64_t kSoftErrorKeySalt = 0x736F66745F657272ull;

// Which bits a soft error can strike: the fraction field (chop; CPFLOAT_SOFTERR_FRAC) or any bit of the
// encoding (CPFLOAT_SOFTERR_FP).
enum class SoftErrorBits : std::uint8_t { fraction, any };
std::string_view to_string(SoftErrorBits);
SoftErrorBits parse_soft_error_bits(std::string_view word);  // "fraction" | "any"; OptionError otherwise

struct SoftErrors {
  double p = 0;            // probability that an element has one bit flipped, in [0, 1]
  std::uint64_t seed = 0;  // keys the draws (seed ^ kSoftErrorKeySalt), not the rounding's seed
  SoftErrorBits bits = SoftErrorBits::fraction;
  bool active() const { return p > 0; }
};

// The number of bits a soft error chooses from in fmt's encodings (bit 0 .. m - 1): man_bits or storage_bits.
int eligible_bits(const Format& fmt, SoftErrorBits bits);

// The draw of element `index`: whether it is hit, and which of the eligible bits (0 = lowest).
struct SoftErrorDraw {
  bool hit = false;
  int bit = 0;
};
constexpr SoftErrorDraw soft_error_draw(const SoftErrors& se, std::uint64_t index, int eligible_bits) {
  const std::uint64_t key = se.seed ^ kSoftErrorKeySalt;
  const philox::Block w = philox::generate(
      philox::Block{{static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0u, 0u}},
      static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32));
  const std::uint64_t u53 = ((static_cast<std::uint64_t>(w.v[1]) << 32) | w.v[0]) >> 11;
  const double u = static_cast<double>(u53) * 0x1p-53;
  return SoftErrorDraw{
      u < se.p,
      static_cast<int>((static_cast<std::uint64_t>(w.v[2]) * static_cast<std::uint64_t>(eligible_bits)) >> 32)};
}

// The probability as given (a number in [0, 1]; NaN is not one): OptionError(OptionKey::flip) otherwise;
// the bits by their word (OptionError(OptionKey::flip_bits) for another).
SoftErrors soft_errors_with_options(double p, std::uint64_t seed, std::string_view bits = "fraction");
// The same from text (the command line): a decimal number, all of it.
SoftErrors soft_errors_with_options(std::string_view p_text, std::uint64_t seed, std::string_view bits = "fraction");

// Flips the drawn bit of every hit element of `codes` (encodings of fmt, element k has index
// opt.index0 + k) and returns how many were hit. opt.threads and opt.path as the bulk engine (0: all
// hardware threads for large arrays; the AVX2 / AVX-512 paths evaluate 8 / 16 draws at a time,
// mpsim::Error for a path the CPU lacks); the result never depends on either. mpsim::Error if fmt has no
// eligible bits (fraction bits of a format without any, e8m0).
std::uint64_t flip_bits(std::span<std::uint8_t> codes, const Format& fmt, const SoftErrors& se,
                        const BulkOptions& opt = {});
std::uint64_t flip_bits(std::span<std::uint16_t> codes, const Format& fmt, const SoftErrors& se,
                        const BulkOptions& opt = {});
std::uint64_t flip_bits(std::span<std::uint32_t> codes, const Format& fmt, const SoftErrors& se,
                        const BulkOptions& opt = {});

// Simulate mode: each hit value (a value of fmt, as round_array gives it) replaced by the decoded flipped
// encoding. Float output needs a format that fits in float, as round_array does.
std::uint64_t flip_values(std::span<float> values, const Format& fmt, const SoftErrors& se,
                          const BulkOptions& opt = {});
std::uint64_t flip_values(std::span<double> values, const Format& fmt, const SoftErrors& se,
                          const BulkOptions& opt = {});

}  // namespace mpsim
