// Device profiles: how a real device deviates from the IEEE semantics of round_bits(), so the emulator
// can reproduce that device bit for bit when asked (`--like x86`, `--like cuda-sm90`).
//
// A profile is a list of rules, each for one (format, operation), optionally narrowed to some rounding
// modes, to saturating or non-saturating conversions and to float or double inputs: an adjustment of the
// Format / Rounding the caller asked for (flushed subnormal inputs, flushed subnormal results), the
// device's NaN rule (keep the payload as round_bits does, one canonical pattern, or the payload cut
// without quieting), and for the saturating arithmetic forms the sign of a zero result. Each rule names
// its source and whether it was confirmed on hardware; rules taken from headers or manuals only say so.
//
// Everything here post-processes round_bits() (or the bulk engine, or arith.hpp, which round with it):
// no rule rounds a value itself.
//
// Host code only (no CUDA headers): the CUDA kernels get the same rules through kernels/emu_host.hpp.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "mpsim/format/arith.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/hd/nan_rules.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim {

// What the device is doing when the rule applies.
enum class Operation : std::uint8_t {
  convert,     // rounding a float/double into the format (round, the bulk engine, casts in the policy)
  arithmetic,  // + - * / fma sqrt of two values of the format, result in the format
};
std::string_view to_string(Operation);
Operation parse_operation(std::string_view);  // "convert" | "arith" | "arithmetic"; throws mpsim::Error

// The NaN a device writes.
enum class NanRule : std::uint8_t {
  keep_payload,  // round_bits(): sign and top payload bits kept, quiet bit set (x86 F16C, AVX512-BF16)
  canonical,     // always `canonical_nan_bits`, whatever the input NaN (CUDA)
  // The input NaN's bits cut to the format's width, quiet bit not set: a NaN whose payload lies only in
  // the cut bits becomes ±inf (±max_finite when the conversion saturates), a signalling payload stays
  // signalling (H100 cvt.rna.tf32.f32, recorded). See also ProfileRule::truncated_nan_minus_one.
  truncate_payload,
};

// The input type a conversion rule is about (the device may treat float and double sources differently).
enum class InputType : std::uint8_t { any, float32, float64 };

struct ProfileRule {
  std::string format;  // Format::name the rule applies to ("fp16", "bf16", "fp8_e4m3", "fp8_e5m2", ...)
  Operation operation = Operation::convert;
  // Narrowing (conversions): only in these rounding modes (empty: all), only with this overflow behaviour
  // (saturate: the .satfinite forms), only from this input type. The first matching rule applies.
  std::vector<RoundingMode> modes;
  std::optional<Overflow> overflow;
  InputType input = InputType::any;
  bool inputs_subnormal_to_zero = false;   // DAZ: subnormal float inputs read as ±0
  bool results_subnormal_to_zero = false;  // FTZ: subnormal results written as ±0
  NanRule nan = NanRule::keep_payload;
  std::uint64_t canonical_nan_bits = 0;  // with NanRule::canonical
  // With NanRule::canonical: only NaN *inputs* give the canonical pattern; a NaN the conversion makes
  // itself (overflow or ±inf into a format without inf) keeps round_bits()'s signed pattern.
  bool canonical_for_nan_inputs_only = false;
  // With NanRule::truncate_payload: the cut pattern is then lowered by one unit in the last place (the
  // encoding minus 1): a payload only in the cut bits gives ±max finite (±inf minus one unit), a cut
  // payload of one unit ±inf, every other NaN the next NaN pattern down (H100 cvt.rna.satfinite.tf32.f32).
  // The CUDA port (kernels/emu.hpp) does not carry it: tf32 conversions are recomputed on the host only.
  bool truncated_nan_minus_one = false;
  // Arithmetic, saturating forms (saturate_unit_bits, arith.hpp): a -0 result, exact or a negative value
  // rounded to zero, is written +0 (IEEE keeps -0, which lies in [0, 1]).
  bool saturated_zero_positive = false;
  std::string source;                  // the document / header + function the rule comes from
  bool confirmed_on_hardware = false;  // false: "from headers, unconfirmed on hardware"
};

struct Profile {
  std::string name;  // "x86", "cuda-sm90", "ieee"
  std::string description;
  std::vector<ProfileRule> rules;

  // The rule for (format, operation, mode, input type), or nullptr: the device follows round_bits() there.
  const ProfileRule* find(const Format& fmt, Operation op, RoundingMode mode = RoundingMode::nearest_even,
                          InputType input = InputType::float32) const;
};

// The named profiles: "ieee" (no deviation: round_bits() itself), "x86" (the default of the CLI),
// "cuda-sm90" (H100, from the CUDA 13.0 headers).
const std::vector<Profile>& profiles();
const Profile& profile_ieee();
const Profile& profile_x86();
const Profile& profile_cuda_sm90();
// Looks a profile up by name; throws mpsim::Error naming the input and the known names.
const Profile& find_profile(std::string_view name);

// Adjusts `fmt` and `r` to what the device does for (fmt, op): DAZ becomes r.input_subnormals = zero,
// FTZ becomes fmt.subnormals = flush. A format without a rule is left unchanged. Everything round_bits()
// and the bulk engine do with the adjusted pair then matches the device, except the NaN pattern (and the
// .sat forms' zero sign): pass each result through resolve_profile()'s convert_result / arith_result.
void apply_profile(const Profile& p, Format& fmt, Rounding& r, Operation op = Operation::convert,
                   InputType input = InputType::float32);

// A profile resolved once for one (format, rounding, operation, input type): the adjusted pair to round
// with, and the rule whose NaN / zero handling the results then get. For loops over many elements (the
// bulk engine's output, the recorded-hardware digests); the free functions below use it per element.
struct DeviceRounding {
  Format format;                      // the requested format, adjusted (FTZ)
  Rounding rounding;                  // the requested rounding, adjusted (DAZ)
  const ProfileRule* rule = nullptr;  // nullptr: round_bits() is the device
  Operation operation = Operation::convert;

  // True when no result ever needs fixing (no rule, or one that keeps payloads and zero signs).
  bool is_plain() const;
  // The device's result of converting x, given round_bits(x, format, rounding) = bits.
  std::uint64_t convert_result(std::uint64_t bits, float x) const;
  std::uint64_t convert_result(std::uint64_t bits, double x) const;
  // The device's result of an arithmetic operation whose correctly rounded result is `bits`; `nan_operand`:
  // some operand was NaN; `saturate_unit`: the PTX .sat form (saturate_unit_bits, arith.hpp).
  std::uint64_t arith_result(std::uint64_t bits, bool nan_operand, bool saturate_unit = false) const;
  // Simulate mode: `values` holds round_bits(x[k], format, rounding, index0 + k) decoded in x's type (the
  // bulk engine's value output); each value the device writes differently is replaced by the decoded
  // convert_result(), so values[k] equals decode(encoding the device writes) bit for bit, NaN payloads,
  // signalling ones included, and the ±inf / ±max finite a cut NaN becomes. The rules only ever change
  // NaN results, so only the elements whose value is NaN are rounded again (by round_bits()), from x:
  // x must still hold the inputs (not the same memory as `values`: a NaN input's payload is read again).
  void convert_values(std::span<const float> x, std::span<float> values, std::uint64_t index0 = 0) const;
  void convert_values(std::span<const double> x, std::span<double> values, std::uint64_t index0 = 0) const;
};
DeviceRounding resolve_profile(const Profile& p, const Format& fmt, const Rounding& r,
                               Operation op = Operation::convert, InputType input = InputType::float32);

// A rule's NaN and zero handling as the plain data hd/nan_rules.hpp applies on the host and the device
// (DeviceRounding here, the CUDA emulation in kernels/emu.hpp); nullptr: no rule, nothing changes.
hd::NanRules nan_rules(const ProfileRule* rule);

// The device's NaN for a result `bits` of `fmt` (a round_bits() output under the adjusted pair):
// a NaN result becomes the profile's canonical pattern where the rule has one (for rules with
// canonical_for_nan_inputs_only, only when `input_is_nan`: a NaN operand or input); every other value
// is returned unchanged.
std::uint64_t canonicalize_nan_bits(const Profile& p, const Format& fmt, std::uint64_t bits, bool input_is_nan,
                                    Operation op = Operation::convert);

// round_bits() as the device does it: resolve_profile(), round_bits() with the adjusted pair, then
// convert_result(). What `mpsim round --like` computes per element.
std::uint64_t round_bits_like(const Profile& p, float x, const Format& fmt, const Rounding& r = {},
                              std::uint64_t index = 0);
std::uint64_t round_bits_like(const Profile& p, double x, const Format& fmt, const Rounding& r = {},
                              std::uint64_t index = 0);

// round() as the device does it: decode(round_bits_like()) in the input's type, NaN payloads kept
// (decode_float for float). What `mpsim round --like` writes per element in simulate mode.
float round_like(const Profile& p, float x, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);
double round_like(const Profile& p, double x, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);

// arith.hpp's a op b (op c) as the device does it: the profile applied to (fmt, r), the correctly rounded
// result, the device's NaN, and with `saturate_unit` the PTX .sat clamp to [0, 1] (__hadd_sat,
// __hmul_sat, __hfma_sat) with the device's sign of zero. What `mpsim arith --like` computes per element.
std::uint64_t arith_bits_like(const Profile& p, ArithOp op, bool saturate_unit, std::uint64_t a, std::uint64_t b,
                              std::uint64_t c, const Format& fmt, const Rounding& r = {}, std::uint64_t index = 0);

// The canonical NaN the profile writes for (fmt, op), if it has one.
std::optional<std::uint64_t> canonical_nan(const Profile& p, const Format& fmt, Operation op = Operation::convert);

}  // namespace mpsim
