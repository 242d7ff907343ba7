#include "mpsim/format/profile.hpp"

#include <algorithm>
#include <bit>
#include <string>

#include "mpsim/error.hpp"

namespace mpsim {

std::string_view to_string(Operation op) { return op == Operation::convert ? "convert" : "arithmetic"; }

Operation parse_operation(std::string_view s) {
  if (s == "convert") return Operation::convert;
  if (s == "arith" || s == "arithmetic") return Operation::arithmetic;
  throw Error("unknown operation '" + std::string(s) + "' (known: convert arith)");
}

const ProfileRule* Profile::find(const Format& fmt, Operation op, RoundingMode mode, InputType input) const {
  for (const auto& r : rules) {
    if (r.format != fmt.name || r.operation != op) continue;
    if (!r.modes.empty() && std::find(r.modes.begin(), r.modes.end(), mode) == r.modes.end()) continue;
    if (r.overflow && *r.overflow != fmt.overflow) continue;
    if (r.input != InputType::any && input != InputType::any && r.input != input) continue;
    return &r;
  }
  return nullptr;
}

namespace {

Profile make_ieee() {
  return {"ieee", "IEEE 754 semantics of round_bits(): subnormals kept, NaN payloads kept and quieted", {}};
}

Profile make_x86() {
  Profile p{"x86",
            "x86-64 with F16C and AVX512-BF16: vcvtps2ph is IEEE (payload kept, quiet bit set); vcvtneps2bf16 "
            "reads float subnormal inputs as zero",
            {}};
  ProfileRule bf16;
  bf16.format = "bf16";
  bf16.operation = Operation::convert;
  // Intel SDM vol. 2, VCVTNEPS2BF16, pseudocode convert_fp32_to_bfloat16(): "IF x is zero or denormal:
  // dest[15] := x[31]; dest[14:0] := 0" (DAZ without MXCSR); a NaN keeps x[31:16] with bit 6 (the quiet
  // bit) set, which is round_bits()'s payload rule. No bf16 result of a normal float is subnormal, so FTZ
  // of results is moot.
  bf16.inputs_subnormal_to_zero = true;
  bf16.nan = NanRule::keep_payload;
  bf16.source = "Intel SDM vol. 2, VCVTNEPS2BF16 (convert_fp32_to_bfloat16 pseudocode)";
  // Confirmed on 2026-11-24 on an AMD EPYC (family 25 model 17, Zen 4) with AVX512-BF16: round_bits()
  // equals vcvtneps2bf16 on all 2^32 floats but the 16711678 float subnormals with a non-zero bf16
  // result (round_exhaustive_test), and this rule equals it on every float subnormal (profile_test,
  // which checks it again on every run where the CPU has the instruction).
  bf16.confirmed_on_hardware = true;
  p.rules.push_back(bf16);
  // fp16 via F16C vcvtps2ph: IEEE conversion with MXCSR's DAZ off, NaN payload kept and quieted (Intel SDM
  // vol. 2, VCVTPS2PH; "convert_fp32_to_fp16"): exactly round_bits(), so no rule is needed.
  return p;
}

// The recording every cuda-sm90 rule was confirmed against (data/hardware/nvidia-h100-80gb-hbm3/README.md).
constexpr const char* kH100Recording =
    "recorded on an NVIDIA H100 80GB HBM3 (sm_90, CUDA 13.0, 2026-11-23) on every input by an external probe: "
    "data/hardware/nvidia-h100-80gb-hbm3/";

ProfileRule cuda_rule(std::string format, Operation op, std::uint64_t nan_bits, std::string source) {
  ProfileRule r;
  r.format = std::move(format);
  r.operation = op;
  r.input = op == Operation::convert ? InputType::float32 : InputType::any;
  r.nan = NanRule::canonical;
  r.canonical_nan_bits = nan_bits;
  r.source = std::move(source) + "; " + kH100Recording;
  // recorded_test recomputes the digests of every recorded run under this profile on every test run.
  r.confirmed_on_hardware = true;
  return r;
}

Profile make_cuda_sm90() {
  Profile p{"cuda-sm90",
            "NVIDIA H100 (sm_90), recorded on every input (CUDA 13.0): subnormals kept (no .ftz on the cvt and "
            "half/bf16 instructions the intrinsics emit); every NaN from a float conversion or fp16/bf16 "
            "arithmetic one canonical positive pattern; tf32 cvt.rna cuts NaN payloads without quieting "
            "(cvt.rna.satfinite then lowers them one unit); the "
            ".sat fp16 forms write +0 for -0; conversions from double are IEEE (payload kept)",
            {}};
  // __float2half_rn/_rz/_rd/_ru: `cvt.{rn,rz,rm,rp}.f16.f32` (no .ftz); every NaN input gives 0x7FFF
  // (16,760,830 of the 16,777,214 NaN inputs differ from IEEE's payload-keeping NaN, nothing else differs).
  // cuda_fp16.hpp's host path __internal_float2half() returns 0x7fffU too. From double (__double2half),
  // the NaN payload is kept: no rule (InputType::float32 only).
  p.rules.push_back(cuda_rule("fp16", Operation::convert, 0x7fff,
                              "__float2half_rn/_rz/_rd/_ru: NaN -> 0x7FFF (cuda_fp16.hpp __internal_float2half)"));
  // __float2bfloat16_rn/_rz/_rd/_ru: `cvt.{rn,rz,rm,rp}.bf16.f32` without .ftz (float subnormal inputs
  // kept, unlike x86's vcvtneps2bf16); NaN -> 0x7FFF (16,646,142 NaN inputs differ from IEEE).
  p.rules.push_back(
      cuda_rule("bf16", Operation::convert, 0x7fff, "__float2bfloat16_rn/_rz/_rd/_ru: NaN -> 0x7FFF (cuda_bf16.hpp)"));
  // __nv_cvt_float_to_fp8(x, sat, __NV_E4M3): a NaN input gives 0x7F (sign dropped: 8,388,607 negative
  // NaNs differ from IEEE); overflow and ±inf with __NV_NOSAT give 0x7F | sign (round_bits()'s NaN of a
  // format without inf), with __NV_SATFINITE ±0x7E (Overflow::saturate).
  p.rules.push_back(cuda_rule("fp8_e4m3", Operation::convert, 0x7f,
                              "__nv_cvt_float_to_fp8(__NV_E4M3): NaN input -> 0x7F (cuda_fp8.hpp)"));
  p.rules.back().canonical_for_nan_inputs_only = true;
  // __NV_E5M2: NaN -> 0x7F (12,582,910 NaN inputs differ); overflow and ±inf -> ±inf with __NV_NOSAT,
  // ±0x7B with __NV_SATFINITE: IEEE / Overflow::saturate.
  p.rules.push_back(
      cuda_rule("fp8_e5m2", Operation::convert, 0x7f, "__nv_cvt_float_to_fp8(__NV_E5M2): NaN -> 0x7F (cuda_fp8.hpp)"));
  // cvt.rna.tf32.f32: NaNs are not quieted, the low 13 bits are cut; a NaN whose payload lies only there
  // becomes ±inf (16,382 inputs, 0x7F800001 -> 0x7F800000), the others keep their cut payload
  // (0x7FA6F000 -> 0x7FA6E000; 2,046 distinct NaN outputs).
  ProfileRule tf32_rna = cuda_rule("tf32", Operation::convert, 0, "cvt.rna.tf32.f32: NaN payload cut, not quieted");
  tf32_rna.nan = NanRule::truncate_payload;
  tf32_rna.modes = {RoundingMode::nearest_away};
  tf32_rna.overflow = Overflow::to_inf;
  p.rules.push_back(tf32_rna);
  // cvt.rna.satfinite.tf32.f32: finite inputs and ±inf as Overflow::saturate (no difference from
  // textbook outside NaN inputs); a NaN is cut to 19 bits, not quieted, and then lowered by one tf32
  // unit: payload only in the cut bits -> ±max finite (16,382 inputs, 0x7F800001 -> 0x7F7FE000), a cut
  // payload of one unit -> ±inf (16,384 inputs, 0x7F802000 -> 0x7F800000), the others the next NaN
  // pattern down (0x7FC00000 -> 0x7FBFE000; 2,044 distinct NaN outputs). Identified from the digests of
  // the two NaN blocks (docs/hardware.md); recorded_test checks them.
  tf32_rna.source =
      "cvt.rna.satfinite.tf32.f32: NaN payload cut, not quieted, then one unit down (only-cut "
      "payloads -> +-max finite); " +
      std::string(kH100Recording);
  tf32_rna.overflow = Overflow::saturate;
  tf32_rna.truncated_nan_minus_one = true;
  p.rules.push_back(tf32_rna);
  // cvt.rn.tf32.f32 / cvt.rz.tf32.f32: every NaN -> 0x7FFFE000 (the tf32 encoding 0x3FFFF held as a float
  // pattern); 16,760,830 NaN inputs differ from IEEE.
  p.rules.push_back(
      cuda_rule("tf32", Operation::convert, 0x7fffe000u >> 13, "cvt.rn.tf32.f32 / cvt.rz.tf32.f32: NaN -> 0x7FFFE000"));
  p.rules.back().modes = {RoundingMode::nearest_even, RoundingMode::toward_zero};
  p.rules.back().overflow = Overflow::to_inf;
  // Arithmetic: __hadd/__hsub/__hmul/__hdiv/__hfma are correctly rounded on every operand pair, subnormals
  // kept; every NaN result 0x7FFF. __hadd_sat/__hmul_sat/__hfma_sat: clamped to [0, 1], NaN -> +0, and a
  // -0 result (exact, or a negative value rounded to zero) -> +0: 1 (add), 29,310,250 (mul), 5,718 (fma)
  // pairs differ from IEEE's -0.
  p.rules.push_back(cuda_rule("fp16", Operation::arithmetic, 0x7fff,
                              "__hadd/__hsub/__hmul/__hdiv/__hfma (+ _sat): NaN -> 0x7FFF, _sat: -0 -> +0"));
  p.rules.back().saturated_zero_positive = true;
  // The __nv_bfloat16 forms likewise; their _sat forms write +0 for a -0 result as the fp16 ones do (an
  // NVIDIA H200, every operand pair, 2026-11-28, data/hardware/nvidia-h200: 1 (add_sat), 1 (sub_sat),
  // 235,648,134 (mul_sat) and 7,841 (fma_sat) pairs differ from IEEE's -0; the H100 recording has no bf16
  // _sat runs).
  p.rules.push_back(
      cuda_rule("bf16", Operation::arithmetic, 0x7fff,
                "__hadd/__hsub/__hmul/__hdiv/__hfma (__nv_bfloat16, + _sat): NaN -> 0x7FFF, _sat: -0 -> +0"));
  p.rules.back().saturated_zero_positive = true;
  return p;
}

}  // namespace

const Profile& profile_ieee() {
  static const Profile p = make_ieee();
  return p;
}
const Profile& profile_x86() {
  static const Profile p = make_x86();
  return p;
}
const Profile& profile_cuda_sm90() {
  static const Profile p = make_cuda_sm90();
  return p;
}

const std::vector<Profile>& profiles() {
  static const std::vector<Profile> all = {profile_ieee(), profile_x86(), profile_cuda_sm90()};
  return all;
}

const Profile& find_profile(std::string_view name) {
  for (const auto& p : profiles())
    if (p.name == name) return p;
  if (name == "cuda" || name == "h100" || name == "sm90" || name == "sm_90") return profile_cuda_sm90();
  throw Error("unknown device profile '" + std::string(name) + "' (known: ieee x86 cuda-sm90)");
}

void apply_profile(const Profile& p, Format& fmt, Rounding& r, Operation op, InputType input) {
  const ProfileRule* rule = p.find(fmt, op, r.mode, input);
  if (!rule) return;
  if (rule->inputs_subnormal_to_zero) r.input_subnormals = InputSubnormals::zero;
  if (rule->results_subnormal_to_zero) fmt.subnormals = Subnormals::flush;
}

DeviceRounding resolve_profile(const Profile& p, const Format& fmt, const Rounding& r, Operation op, InputType input) {
  DeviceRounding d;
  d.format = fmt;
  d.rounding = r;
  d.operation = op;
  d.rule = p.find(fmt, op, r.mode, input);
  apply_profile(p, d.format, d.rounding, op, input);
  return d;
}

bool DeviceRounding::is_plain() const {
  return !rule || (rule->nan == NanRule::keep_payload && !rule->saturated_zero_positive);
}

hd::NanRules nan_rules(const ProfileRule* rule) {
  hd::NanRules n;
  if (!rule) return n;
  if (rule->nan == NanRule::canonical) {
    n.canonical_nan = true;
    n.canonical_made_nan = !rule->canonical_for_nan_inputs_only;
    n.canonical_nan_bits = rule->canonical_nan_bits;
  }
  n.truncate_nan = rule->nan == NanRule::truncate_payload;
  n.truncate_nan_minus_one = n.truncate_nan && rule->truncated_nan_minus_one;
  n.sat_zero_positive = rule->saturated_zero_positive;
  return n;
}

namespace {

// A conversion's result under the rule (hd/nan_rules.hpp), x given by its double bits.
std::uint64_t convert_rule(const ProfileRule* rule, const Format& fmt, std::uint64_t bits, std::uint64_t xbits) {
  if (!rule) return bits;
  const spec::FormatSpec f = format_spec(fmt);
  const bool x_is_nan = (xbits & ~spec::kDoubleSign) > spec::kDoubleExpMask;
  const hd::NanRules n = nan_rules(rule);
  return x_is_nan ? hd::nan_input_result(bits, xbits, f, n) : hd::made_nan_result(bits, f, n);
}

}  // namespace

std::uint64_t DeviceRounding::convert_result(std::uint64_t bits, float x) const {
  return convert_rule(rule, format, bits, spec::widen_float_bits(std::bit_cast<std::uint32_t>(x)));
}

std::uint64_t DeviceRounding::convert_result(std::uint64_t bits, double x) const {
  return convert_rule(rule, format, bits, std::bit_cast<std::uint64_t>(x));
}

namespace {

// The value the device writes for x: its encoding (convert_result of round_bits) decoded in x's type.
float device_value(const DeviceRounding& d, float x, std::uint64_t index) {
  return decode_float(d.convert_result(round_bits(x, d.format, d.rounding, index), x), d.format);
}
double device_value(const DeviceRounding& d, double x, std::uint64_t index) {
  return decode(d.convert_result(round_bits(x, d.format, d.rounding, index), x), d.format);
}

template <class T>
void replace_device_values(const DeviceRounding& d, std::span<const T> x, std::span<T> values, std::uint64_t index0) {
  if (d.is_plain()) return;
  if (x.size() != values.size()) throw Error("convert_values: input and value spans differ in length");
  // Every rule keeps non-NaN results (canonical patterns replace NaNs; truncate_payload acts on NaN
  // inputs, whose round_bits() result is NaN), so only NaN values can change.
  for (std::size_t k = 0; k < x.size(); ++k)
    if (values[k] != values[k]) values[k] = device_value(d, x[k], index0 + k);
}

}  // namespace

void DeviceRounding::convert_values(std::span<const float> x, std::span<float> values, std::uint64_t index0) const {
  replace_device_values(*this, x, values, index0);
}
void DeviceRounding::convert_values(std::span<const double> x, std::span<double> values, std::uint64_t index0) const {
  replace_device_values(*this, x, values, index0);
}

std::uint64_t DeviceRounding::arith_result(std::uint64_t bits, bool nan_operand, bool saturate_unit) const {
  const spec::FormatSpec f = format_spec(format);
  const hd::NanRules n = nan_rules(rule);
  bits = hd::arith_nan_result(bits, nan_operand, f, n);
  return saturate_unit ? hd::saturate_unit(bits, f, n.sat_zero_positive) : bits;
}

std::optional<std::uint64_t> canonical_nan(const Profile& p, const Format& fmt, Operation op) {
  const ProfileRule* rule = p.find(fmt, op);
  if (!rule || rule->nan != NanRule::canonical) return std::nullopt;
  return rule->canonical_nan_bits;
}

std::uint64_t canonicalize_nan_bits(const Profile& p, const Format& fmt, std::uint64_t bits, bool input_is_nan,
                                    Operation op) {
  return hd::arith_nan_result(bits, input_is_nan, format_spec(fmt), nan_rules(p.find(fmt, op)));
}

std::uint64_t round_bits_like(const Profile& p, double x, const Format& fmt, const Rounding& r, std::uint64_t index) {
  const DeviceRounding d = resolve_profile(p, fmt, r, Operation::convert, InputType::float64);
  return d.convert_result(round_bits(x, d.format, d.rounding, index), x);
}

std::uint64_t round_bits_like(const Profile& p, float x, const Format& fmt, const Rounding& r, std::uint64_t index) {
  const DeviceRounding d = resolve_profile(p, fmt, r, Operation::convert, InputType::float32);
  return d.convert_result(round_bits(x, d.format, d.rounding, index), x);
}

float round_like(const Profile& p, float x, const Format& fmt, const Rounding& r, std::uint64_t index) {
  return device_value(resolve_profile(p, fmt, r, Operation::convert, InputType::float32), x, index);
}
double round_like(const Profile& p, double x, const Format& fmt, const Rounding& r, std::uint64_t index) {
  return device_value(resolve_profile(p, fmt, r, Operation::convert, InputType::float64), x, index);
}

std::uint64_t arith_bits_like(const Profile& p, ArithOp op, bool saturate_unit, std::uint64_t a, std::uint64_t b,
                              std::uint64_t c, const Format& fmt, const Rounding& r, std::uint64_t index) {
  const DeviceRounding d = resolve_profile(p, fmt, r, Operation::arithmetic);
  const int n = arity(op);
  const bool nan_operand = is_nan_bits(a, fmt) || (n >= 2 && is_nan_bits(b, fmt)) || (n == 3 && is_nan_bits(c, fmt));
  return d.arith_result(arith_bits(op, a, b, c, d.format, d.rounding, index), nan_operand, saturate_unit);
}

}  // namespace mpsim
