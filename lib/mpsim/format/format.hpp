// Format: the descriptor of a binary floating-point format (docs/design.md, "one rounding function").
//
// A Format is validated once when it is built (make_format / parse_format) and is then trusted in hot
// loops, the way CPFloat validates its optstruct up front.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpsim {

// How a format encodes NaN.
//  ieee:     exponent all ones with a non-zero mantissa is NaN, all ones with a zero mantissa is ±inf.
//  all_ones: only S.1..1.1..1 is NaN; the rest of the top binade holds finite numbers and there is no inf
//            (OCP fp8 e4m3fn, the "fn" of ml_dtypes' float8_e4m3fn).
//  neg_zero: the pattern of negative zero (1.0..0.0..0) is the only NaN, there is no -0 and no inf
//            (the "fnuz" formats of Graphcore/AMD, ml_dtypes' float8_e4m3fnuz / float8_e5m2fnuz).
//  none:     no NaN and no inf: every pattern is a number (the OCP MX element types fp6 e2m3 / e3m2 and
//            fp4 e2m1, ml_dtypes' float6_*fn / float4_e2m1fn). ±inf and overflow saturate to ±max_finite
//            in every mode; a NaN input becomes a zero, with the sign ml_dtypes 0.6 gives it: the
//            opposite of the NaN's sign (docs/formats.md).
enum class NanEncoding : std::uint8_t { ieee, all_ones, neg_zero, none };

// What happens to results below the smallest normal number.
enum class Subnormals : std::uint8_t { keep, flush };

// What happens to finite results beyond the largest finite number (and, with saturate, to ±inf inputs,
// as NVIDIA's __NV_SATFINITE does for fp8).
enum class Overflow : std::uint8_t { to_inf, saturate };

struct Format {
  std::string name;     // canonical name ("fp16", "float6_e2m3fn", "e6m9", ...)
  int exp_bits = 0;     // width of the exponent field
  int man_bits = 0;     // stored mantissa bits (precision p = man_bits + 1)
  int bias = 0;         // exponent bias
  bool has_inf = true;  // ±inf representable (only with NanEncoding::ieee)
  NanEncoding nan = NanEncoding::ieee;
  Subnormals subnormals = Subnormals::keep;
  Overflow overflow = Overflow::to_inf;
  // Unsigned formats (OCP MX's e8m0 scale, ml_dtypes' float8_e8m0fnu) store no sign bit: a negative
  // input is NaN there, as ml_dtypes converts it.
  bool has_sign = true;
  // Formats without a zero (e8m0): exponent field 0 is the normal number 2^-bias, there are no
  // subnormals, emin = -bias, a zero input is NaN and a non-zero result below the smallest value
  // becomes the smallest value (ml_dtypes 0.6's float8_e8m0fnu).
  bool has_zero = true;

  // ---- derived constants (filled by make_format) ----
  int precision = 0;                  // p = man_bits + 1
  int emin = 0;                       // exponent of the smallest normal number
  int emax = 0;                       // exponent of the largest finite number
  int storage_bits = 0;               // has_sign + exp_bits + man_bits
  double max_finite = 0;              // largest finite value
  double min_normal = 0;              // 2^emin
  double min_subnormal = 0;           // 2^(emin - man_bits); equals min_normal when subnormals are flushed
  double epsilon = 0;                 // machine epsilon 2^(1-p): distance from 1 to the next larger number
  double unit_roundoff = 0;           // u = 2^-p: the largest relative error of round-to-nearest
  std::uint64_t max_finite_bits = 0;  // encoding of +max_finite
  std::uint64_t inf_bits = 0;         // encoding of +inf (0 when the format has none)
  std::uint64_t nan_bits = 0;         // encoding of the canonical quiet NaN (positive sign where it has one)

  bool has_nan() const { return nan != NanEncoding::none; }
  // Whether a finite result beyond max_finite becomes ±max_finite in every mode (Overflow::saturate, or a
  // format with neither inf nor NaN).
  bool saturates() const { return overflow == Overflow::saturate || nan == NanEncoding::none; }
  // Whether an encoding is a zero: magnitude 0 (+0 only in the fnuz formats, where -0's pattern is the
  // NaN); never in a format without zero, whose encoding 0 is its smallest number.
  bool is_zero_bits(std::uint64_t bits) const {
    bits &= storage_mask();
    if (!has_zero) return false;
    return nan == NanEncoding::neg_zero ? bits == 0 : (bits & ~sign_bit()) == 0;
  }
  // Whether a non-zero encoding is a subnormal (exponent field 0 in a format with zero).
  bool is_subnormal_bits(std::uint64_t bits) const {
    return has_zero && ((bits & storage_mask() & ~sign_bit()) >> man_bits) == 0 && !is_zero_bits(bits) &&
           !(nan == NanEncoding::neg_zero && (bits & storage_mask()) == sign_bit());
  }
  bool has_negative_zero() const { return has_sign && has_zero && nan != NanEncoding::neg_zero; }
  // The sign bit's mask; 0 in an unsigned format (so `neg ? sign_bit() : 0` and `& ~sign_bit()` hold).
  std::uint64_t sign_bit() const { return has_sign ? std::uint64_t{1} << (exp_bits + man_bits) : 0; }
  // All ones in the low storage_bits (fp64's 64 bits would make the shift undefined).
  std::uint64_t storage_mask() const {
    return storage_bits >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << storage_bits) - 1;
  }
  // Bytes of the smallest unsigned integer that holds the encoding: 1, 2, 4 or 8.
  int storage_bytes() const { return storage_bits <= 8 ? 1 : storage_bits <= 16 ? 2 : storage_bits <= 32 ? 4 : 8; }

  friend bool operator==(const Format& a, const Format& b) {
    return a.exp_bits == b.exp_bits && a.man_bits == b.man_bits && a.bias == b.bias && a.has_inf == b.has_inf &&
           a.nan == b.nan && a.subnormals == b.subnormals && a.overflow == b.overflow && a.has_sign == b.has_sign &&
           a.has_zero == b.has_zero;
  }
};

// Builds and validates a format; throws mpsim::Error naming the problem if it does not fit in a double
// (exp_bits 2..11, man_bits 0..52, exponent range inside double's normal range).
Format make_format(std::string name, int exp_bits, int man_bits, int bias, bool has_inf = true,
                   NanEncoding nan = NanEncoding::ieee, Subnormals subnormals = Subnormals::keep,
                   Overflow overflow = Overflow::to_inf, bool has_sign = true, bool has_zero = true);
// The same format with other subnormal and overflow options (the CLI's --subnormals / --overflow).
Format with_options(const Format& base, Subnormals subnormals, Overflow overflow);

// The named formats.
const Format& fp64();
const Format& fp32();
const Format& fp16();          // IEEE 754 binary16
const Format& bf16();          // bfloat16
const Format& tf32();          // NVIDIA TensorFloat-32 (e8m10), held in 32 bits
const Format& fp8_e4m3();      // OCP 8-bit e4m3fn: bias 7, no inf, NaN = S.1111.111, max 448
const Format& fp8_e5m2();      // OCP 8-bit e5m2: IEEE-like, bias 15, max 57344
const Format& fp8_e4m3fnuz();  // Graphcore/AMD e4m3fnuz: bias 8, NaN = 0x80, no -0, max 240
const Format& fp8_e5m2fnuz();  // Graphcore/AMD e5m2fnuz: bias 16, NaN = 0x80, no -0, max 57344
// The other element types of ml_dtypes 0.6, under their ml_dtypes names (docs/formats.md).
const Format& float8_e4m3();         // IEEE-style e4m3: bias 7, inf and NaN, max 240
const Format& float8_e3m4();         // IEEE-style e3m4: bias 3, inf and NaN, max 15.5
const Format& float8_e4m3b11fnuz();  // e4m3 with bias 11, NaN = 0x80, no -0, no inf, max 30
const Format& float8_e8m0fnu();      // OCP MX scale: unsigned, no zero, bias 127, NaN = 0xFF, 2^-127 .. 2^127
const Format& float6_e2m3fn();       // OCP MX FP6 E2M3: bias 1, no inf or NaN, max 7.5
const Format& float6_e3m2fn();       // OCP MX FP6 E3M2: bias 3, no inf or NaN, max 28
const Format& float4_e2m1fn();       // OCP MX FP4 E2M1: bias 1, no inf or NaN, max 6

// Parses a format name through the one name table every option that takes a format (or an element
// type, --dtype) reads: our names ("fp16", "bf16", "tf32", "fp8_e4m3", "fp8_e5m2", "fp32", "fp64"), every
// ml_dtypes name ("float16", "bfloat16", "float8_e4m3fn", "float8_e4m3", "float8_e8m0fnu",
// "float4_e2m1fn", ...), short aliases, or a custom IEEE-style "eXmY" (bias 2^(X-1)-1, inf and NaN as
// IEEE; "e4m3" is therefore ml_dtypes' float8_e4m3, not OCP's e4m3fn). Throws mpsim::Error naming the
// input and listing the known names on anything else.
Format parse_format(std::string_view name);

// One row of the name table: a name, the format it means, and whether it is the format's canonical
// name (the one reports print) or an alias.
struct FormatName {
  std::string_view name;
  const Format& (*format)();
  bool canonical;
};
const std::vector<FormatName>& format_names();
// "name (alias, alias)" for every named format, for error messages and `mpsim formats`.
std::string known_format_names();

// All named formats, in table order (for `mpsim formats`).
const std::vector<Format>& named_formats();

// Readable names of the enums, used in reports and CLI parsing.
std::string_view to_string(NanEncoding);
std::string_view to_string(Subnormals);
std::string_view to_string(Overflow);

}  // namespace mpsim
