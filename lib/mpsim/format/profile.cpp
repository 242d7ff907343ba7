#include "mpsim/format/profile.hpp"

#include <string>

#include "mpsim/error.hpp"

namespace mpsim {

std::string_view to_string(Operation op) { return op == Operation::convert ? "convert" : "arithmetic"; }

Operation parse_operation(std::string_view s) {
  if (s == "convert") return Operation::convert;
  if (s == "arith" || s == "arithmetic") return Operation::arithmetic;
  throw Error("unknown operation '" + std::string(s) + "' (known: convert arith)");
}

const ProfileRule* Profile::find(std::string_view format, Operation op) const {
  for (const auto& r : rules)
    if (r.format == format && r.operation == op) return &r;
  return nullptr;
}

namespace {

constexpr const char* kUnconfirmed = "from headers, unconfirmed on hardware";

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

ProfileRule cuda_rule(std::string format, Operation op, std::uint64_t nan_bits, std::string source) {
  ProfileRule r;
  r.format = std::move(format);
  r.operation = op;
  r.nan = NanRule::canonical;
  r.canonical_nan_bits = nan_bits;
  r.source = std::move(source) + " (" + kUnconfirmed + ")";
  r.confirmed_on_hardware = false;
  return r;
}

Profile make_cuda_sm90() {
  Profile p{"cuda-sm90",
            "NVIDIA H100 (sm_90) as the CUDA 13.0 headers describe it: subnormals kept (no .ftz on the cvt and "
            "half/bf16 instructions the intrinsics emit), every NaN result one canonical positive pattern; "
            "from headers, unconfirmed on hardware",
            {}};
  // cuda_fp16.hpp, __float2half_rn/_rz/_rd/_ru: device code is `cvt.{rn,rz,rm,rp}.f16.f32` (no .ftz, so
  // subnormals are kept); the host path __internal_float2half() returns 0x7fffU for every NaN input
  // (sign and payload dropped), and CUDART_NAN_FP16 is 0x7FFF.
  p.rules.push_back(cuda_rule("fp16", Operation::convert, 0x7fff,
                              "cuda_fp16.hpp __float2half_rn / __internal_float2half: NaN -> 0x7fffU"));
  // cuda_bf16.hpp, __float2bfloat16_rn/_rz (sm_80+) and _rd/_ru (sm_90): `cvt.{rn,rz,rm,rp}.bf16.f32`
  // without .ftz (float subnormal inputs kept, unlike x86's vcvtneps2bf16); the host path
  // __internal_float2bfloat16() returns 0x7fffU for NaN; CUDART_NAN_BF16 is 0x7FFF.
  p.rules.push_back(cuda_rule("bf16", Operation::convert, 0x7fff,
                              "cuda_bf16.hpp __float2bfloat16_rn / __internal_float2bfloat16: NaN -> 0x7fffU"));
  // cuda_fp8.hpp, __nv_cvt_float_to_fp8(x, sat, __NV_E4M3): a NaN input is first replaced by 0x7FFFFFFF
  // ("Canonical NaN"), then __nv_cvt_double_to_fp8 writes 0x7F (sign of the canonical NaN: +). Overflow
  // and ±inf with __NV_NOSAT give 0x7F | sign (NaN with the input's sign: round_bits() does the same in a
  // format without inf), with __NV_SATFINITE ±0x7E (= Overflow::saturate). On sm_89+ the SATFINITE path is
  // `cvt.rn.satfinite.e4m3x2.f32`, whose NaN output the header cannot show: assumed 0x7F.
  p.rules.push_back(cuda_rule("fp8_e4m3", Operation::convert, 0x7f,
                              "cuda_fp8.hpp __nv_cvt_float_to_fp8 / __nv_cvt_double_to_fp8: NaN -> 0x7F"));
  p.rules.back().canonical_for_nan_inputs_only = true;
  // Same function, __NV_E5M2: NaN -> 0x7E | top mantissa bits of the canonical NaN = 0x7F; overflow and
  // ±inf -> 0x7C | sign (inf) with __NV_NOSAT, ±0x7B with __NV_SATFINITE.
  p.rules.push_back(cuda_rule("fp8_e5m2", Operation::convert, 0x7f,
                              "cuda_fp8.hpp __nv_cvt_float_to_fp8 / __nv_cvt_double_to_fp8: NaN -> 0x7F"));
  // Arithmetic: __hadd/__hsub/__hmul/__hfma (and _sat) are `add/sub/mul/fma.rn{.sat}.f16` on sm_53+
  // without .ftz; bf16 ones `add/sub/mul/fma.rn.bf16` on sm_90. The headers' host paths compute in float
  // and convert with __float2half / __float2bfloat16, so a NaN result is 0x7FFF there; the hardware NaN of
  // the PTX instructions is assumed to be the same canonical pattern.
  p.rules.push_back(cuda_rule("fp16", Operation::arithmetic, 0x7fff,
                              "cuda_fp16.hpp __hadd (host path __float2half(fa + fb)): NaN -> 0x7FFF"));
  p.rules.push_back(cuda_rule("bf16", Operation::arithmetic, 0x7fff,
                              "cuda_bf16.hpp __hadd (host path __float2bfloat16(fa + fb)): NaN -> 0x7FFF"));
  return p;
}

}  // namespace

const Profile& profile_ieee() { static const Profile p = make_ieee(); return p; }
const Profile& profile_x86() { static const Profile p = make_x86(); return p; }
const Profile& profile_cuda_sm90() { static const Profile p = make_cuda_sm90(); return p; }

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

void apply_profile(const Profile& p, Format& fmt, Rounding& r, Operation op) {
  const ProfileRule* rule = p.find(fmt.name, op);
  if (!rule) return;
  if (rule->inputs_subnormal_to_zero) r.input_subnormals = InputSubnormals::zero;
  if (rule->results_subnormal_to_zero) fmt.subnormals = Subnormals::flush;
}

std::optional<std::uint64_t> canonical_nan(const Profile& p, const Format& fmt, Operation op) {
  const ProfileRule* rule = p.find(fmt.name, op);
  if (!rule || rule->nan != NanRule::canonical) return std::nullopt;
  return rule->canonical_nan_bits;
}

std::uint64_t canonicalize_nan_bits(const Profile& p, const Format& fmt, std::uint64_t bits, bool input_is_nan,
                                    Operation op) {
  const ProfileRule* rule = p.find(fmt.name, op);
  if (!rule || rule->nan != NanRule::canonical || !is_nan_bits(bits, fmt)) return bits;
  if (rule->canonical_for_nan_inputs_only && !input_is_nan) return bits;
  return rule->canonical_nan_bits;
}

std::uint64_t round_bits_like(const Profile& p, double x, const Format& fmt, const Rounding& r, std::uint64_t index) {
  Format f = fmt;
  Rounding rr = r;
  apply_profile(p, f, rr, Operation::convert);
  return canonicalize_nan_bits(p, f, round_bits(x, f, rr, index), x != x, Operation::convert);
}

std::uint64_t round_bits_like(const Profile& p, float x, const Format& fmt, const Rounding& r, std::uint64_t index) {
  Format f = fmt;
  Rounding rr = r;
  apply_profile(p, f, rr, Operation::convert);
  return canonicalize_nan_bits(p, f, round_bits(x, f, rr, index), x != x, Operation::convert);
}

}  // namespace mpsim
