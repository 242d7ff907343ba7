// Element arithmetic on the encodings of any Format, correctly rounded in any Rounding mode:
// add, sub, mul, div, fma, sqrt. Each result is rounded once, by THE rounding function round_bits().
//
// How: the exact result x is turned into a double that rounds exactly like x, and round_bits() rounds
// that double. The double is x itself when x fits in 53 bits, otherwise RO53(x), x rounded to odd at 53
// bits, built with error-free transformations (TwoSum for sums, an fma residual for products, quotients
// and square roots). Boldo & Melquiond ("When double rounding is odd", 2005; "Emulation of a FMA and
// correctly rounded sums: proved algorithms using rounding to odd", IEEE TC 57(4), 2008): for a format
// of precision p <= 51, rounding RO53(x) to p bits in any deterministic mode gives the same result as
// rounding x. Stochastic rounding sees the exact fraction of an ulp to 52 - p bits (round_bits uses
// the top sr_bits of it): exact for sr_bits <= 52 - p, i.e. every sr_bits <= 32 for fp16, bf16, tf32
// and the fp8 formats; for fp32 (p = 24) sr_bits <= 28 are exact, and with 29..32 random bits the bits
// below the 28th are replaced by a sticky bit (a bias below 2^-28 ulp).
//
// Supported formats: man_bits <= 50 and an exponent range for which products and quotients of two
// format numbers stay in double's normal range (every named format but fp64; custom eXmY with X <= 9).
// Other formats throw mpsim::Error (check_arith_format).
//
// IEEE 754 special cases: inf - inf, 0 * inf, 0 / 0, inf / inf and sqrt of a negative number are
// invalid and give the default NaN; x / 0 is ±inf for finite non-zero x; an exact zero sum of operands
// of opposite signs is +0, except -0 when rounding down (IEEE 754-2019 6.3); sqrt(-0) = -0.
// NaN operands: the result is the first NaN operand (in argument order a, b, c), quieted with its sign
// and payload kept — what x86 SSE/AVX does (Intel SDM vol. 1, 4.8.3.5, table 4-7: "first source
// operand"); invalid operations give the x86 default NaN, "QNaN floating-point indefinite": sign set,
// quiet bit only (fp16 0xFE00, bf16 0xFFC0; fp8_e4m3 0xFF). Formats without inf turn an inf result
// into NaN, or into ±max_finite with Overflow::saturate, as round_bits does.
//
// Rounding::input_subnormals == zero treats subnormal operands as zero (x86 DAZ) before the operation;
// the format's Subnormals::flush flushes subnormal results (in round_bits).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim {

enum class ArithOp : std::uint8_t { add, sub, mul, div, fma, sqrt };

std::string_view to_string(ArithOp);
// "add", "sub", "mul", "div", "fma", "sqrt"; throws mpsim::Error naming the input otherwise.
ArithOp parse_arith_op(std::string_view);
// Number of operands: 1 for sqrt, 3 for fma, else 2.
int arity(ArithOp);

// True if arithmetic in `f` is supported (see above); check_arith_format throws mpsim::Error saying why not.
bool arith_supported(const Format& f);
void check_arith_format(const Format& f);

// ---- on encodings ---------------------------------------------------------------------------------
// a, b, c are encodings of `f` (low storage_bits used); the result is an encoding of `f`.
// `index` keys the stochastic generator (the element index in array forms).
std::uint64_t add_bits(std::uint64_t a, std::uint64_t b, const Format& f, const Rounding& r = {},
                       std::uint64_t index = 0);
std::uint64_t sub_bits(std::uint64_t a, std::uint64_t b, const Format& f, const Rounding& r = {},
                       std::uint64_t index = 0);
std::uint64_t mul_bits(std::uint64_t a, std::uint64_t b, const Format& f, const Rounding& r = {},
                       std::uint64_t index = 0);
std::uint64_t div_bits(std::uint64_t a, std::uint64_t b, const Format& f, const Rounding& r = {},
                       std::uint64_t index = 0);
// a * b + c with one rounding.
std::uint64_t fma_bits(std::uint64_t a, std::uint64_t b, std::uint64_t c, const Format& f, const Rounding& r = {},
                       std::uint64_t index = 0);
std::uint64_t sqrt_bits(std::uint64_t a, const Format& f, const Rounding& r = {}, std::uint64_t index = 0);
// One of the above by `op` (operands the op does not take are ignored).
std::uint64_t arith_bits(ArithOp op, std::uint64_t a, std::uint64_t b, std::uint64_t c, const Format& f,
                         const Rounding& r = {}, std::uint64_t index = 0);

// The PTX ".sat" forms of fp16 arithmetic (add.sat.f16, mul.sat.f16, fma.rn.sat.f16; CUDA __hadd_sat,
// __hmul_sat, __hfma_sat): the correctly rounded result `bits` clamped to [0, 1], a NaN result to +0
// (PTX ISA, "Half Precision Floating Point Instructions": ".sat ... clamps the result to [0.0, 1.0]. NaN
// results are flushed to +0.0f"). A -0 result stays -0 (it lies in [0, 1]) unless
// `negative_zero_to_positive`: the H100 writes +0 (recorded; profile.hpp's saturated_zero_positive).
std::uint64_t saturate_unit_bits(std::uint64_t bits, const Format& f, bool negative_zero_to_positive = false);

// ---- on values --------------------------------------------------------------------------------------
// The same on the decoded values (a, b, c must be values of `f`, e.g. decode() of encodings, or NaN):
// the fast path for callers that already hold doubles. Returns the encoding of the result.
std::uint64_t add_values(double a, double b, const Format& f, const Rounding& r = {}, std::uint64_t index = 0);
std::uint64_t sub_values(double a, double b, const Format& f, const Rounding& r = {}, std::uint64_t index = 0);
std::uint64_t mul_values(double a, double b, const Format& f, const Rounding& r = {}, std::uint64_t index = 0);
std::uint64_t div_values(double a, double b, const Format& f, const Rounding& r = {}, std::uint64_t index = 0);
std::uint64_t fma_values(double a, double b, double c, const Format& f, const Rounding& r = {},
                         std::uint64_t index = 0);
std::uint64_t sqrt_values(double a, const Format& f, const Rounding& r = {}, std::uint64_t index = 0);

// ---- on arrays ----------------------------------------------------------------------------------------
// out[i] = op(a[i], b[i], c[i]) on encodings, with the stochastic index first_index + i. Operands the
// op does not take are ignored (pass empty spans); the spans it takes must have out.size() elements
// (mpsim::Error otherwise). Checks the format once.
void arith_array(ArithOp op, std::span<const std::uint64_t> a, std::span<const std::uint64_t> b,
                 std::span<const std::uint64_t> c, std::span<std::uint64_t> out, const Format& f,
                 const Rounding& r = {}, std::uint64_t first_index = 0);

}  // namespace mpsim
