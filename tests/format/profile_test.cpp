// Tests of lib/mpsim/format/profile.hpp. Expected encodings come from the documents each rule cites
// (Intel SDM's VCVTNEPS2BF16 pseudocode; the CUDA 13.0 headers cuda_fp16.hpp, cuda_bf16.hpp,
// cuda_fp8.hpp) and from the H100 recording's listed mismatches (data/hardware/nvidia-h100-80gb-hbm3/,
// `first_mismatches`: input, hardware output), worked out by hand, not from the code under test. The
// whole recording is recomputed by tests/kernels/recorded_test.cpp.
#include "catch_compat.hpp"

#include <bit>
#include <cstdio>
#include <limits>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/profile.hpp"
#include "mpsim/reference/verify.hpp"
#include "recorded_conversions.hpp"
#include "sanitized.hpp"

using namespace mpsim;

namespace {
float f32(std::uint32_t b) { return std::bit_cast<float>(b); }
}  // namespace

TEST_CASE("profiles are found by name and unknown names are rejected", "[profile]") {
  CHECK(find_profile("x86").name == "x86");
  CHECK(find_profile("cuda-sm90").name == "cuda-sm90");
  CHECK(find_profile("ieee").rules.empty());
  CHECK_THROWS_WITH(find_profile("tpu"), Catch::Contains("tpu") && Catch::Contains("cuda-sm90"));
  CHECK(parse_operation("arith") == Operation::arithmetic);
  CHECK_THROWS_AS(parse_operation("gemm"), Error);
  for (const auto& p : profiles())
    for (const auto& r : p.rules) {
      CHECK(!r.source.empty());
      // The x86 bf16 rule met AVX512-BF16 (the test below); the cuda-sm90 rules the H100 recording
      // (recorded_test.cpp).
      CHECK(r.confirmed_on_hardware == ((p.name == "x86" && r.format == "bf16") || p.name == "cuda-sm90"));
      if (p.name == "cuda-sm90") CHECK(r.source.find("data/hardware/nvidia-h100-80gb-hbm3") != std::string::npos);
    }
}

// The rule against the instruction it describes, where the CPU has it: every float subnormal (the
// inputs the rule is about: 2^24 patterns; every 97th under the sanitizers, where they took 40 s), the
// patterns around max finite and inf, and every 97th other pattern (odd, so every residue of the low bits
// occurs; every 9973rd under the sanitizers). No documented exceptions here: the profile must be the
// hardware.
TEST_CASE("x86 profile: bf16 equals AVX512-BF16 vcvtneps2bf16 on every float subnormal and a stride of the rest",
          "[profile]") {
  const verify::Hardware hw = verify::avx512bf16_bf16();
  if (!hw.available) {
    WARN("SKIPPED: " << hw.unavailable_reason);
    return;
  }
  const Profile& p = profile_x86();
  std::uint64_t checked = 0, bad = 0, subnormals_nonzero_spec = 0;
  auto check = [&](std::uint32_t b) {
    const std::uint64_t want = hw.convert(b);
    const std::uint64_t got = round_bits_like(p, f32(b), bf16());
    ++checked;
    if (got != want) {
      if (bad < 3) UNSCOPED_INFO("input bits " << b << ": profile " << got << ", vcvtneps2bf16 " << want);
      ++bad;
    }
  };
  for (std::uint32_t sign : {0u, 0x80000000u})
    for (std::uint32_t m = 0; m < (1u << 23); m += kSanitized ? 97 : 1) {
      check(sign | m);
      subnormals_nonzero_spec += (round_bits(f32(sign | m), bf16()) & 0x7fff) != 0;
    }
#if defined(__SANITIZE_ADDRESS__)
  const std::uint64_t stride = 9973;  // the -O0 sanitizer build: memory safety, not coverage
#else
  const std::uint64_t stride = 97;
#endif
  for (std::uint64_t b = 0x00800000u; b <= 0xffffffffu; b += stride) check(static_cast<std::uint32_t>(b));
  for (std::uint32_t b = 0x7f7ffff0u; b <= 0x7f800010u; ++b) check(b), check(b | 0x80000000u);
  WARN("x86 profile vs vcvtneps2bf16: " << checked << " inputs, " << bad << " differ; " << subnormals_nonzero_spec
                                        << " float subnormals round_bits() alone would give a non-zero bf16");
  CHECK(bad == 0);
  // The rule matters: without it these inputs would differ (round_exhaustive_test counts the same set).
  if (!kSanitized) CHECK(subnormals_nonzero_spec == 2 * ((1u << 23) - 1 - (1u << 15)));
}

TEST_CASE("x86 profile: bf16 conversion reads float subnormals as zero, keeps NaN payloads", "[profile]") {
  const Profile& p = profile_x86();
  // 2^-127 is a float subnormal (0x00400000); IEEE keeps it as the bf16 subnormal 0x0040.
  CHECK(round_bits(f32(0x00400000u), bf16()) == 0x0040);
  CHECK(round_bits_like(p, f32(0x00400000u), bf16()) == 0x0000);
  CHECK(round_bits_like(p, f32(0x80400000u), bf16()) == 0x8000);
  // The smallest normal float is untouched: 0x00800000 -> 0x0080.
  CHECK(round_bits_like(p, f32(0x00800000u), bf16()) == 0x0080);
  // NaN: x[31:16] with the quiet bit (bit 6) set: 0xff812345 -> 0xffc1.
  CHECK(round_bits_like(p, f32(0xff812345u), bf16()) == 0xffc1);
  // fp16 (F16C) has no rule: a float subnormal still goes through as IEEE (here to +0 by rounding).
  Format f = fp16();
  Rounding r;
  apply_profile(p, f, r);
  CHECK(r.input_subnormals == InputSubnormals::keep);
  Format b = bf16();
  apply_profile(p, b, r);
  CHECK(r.input_subnormals == InputSubnormals::zero);
  CHECK(b.subnormals == Subnormals::keep);
}

TEST_CASE("cuda-sm90 profile: canonical NaNs of the CUDA headers, IEEE elsewhere", "[profile]") {
  const Profile& p = profile_cuda_sm90();
  // __internal_float2half: any NaN -> 0x7fff (x86 would give 0xfe00 | payload for a negative one).
  CHECK(round_bits_like(p, f32(0xffc01234u), fp16()) == 0x7fff);
  CHECK(round_bits_like(profile_x86(), f32(0xffc01234u), fp16()) == 0xfe00);
  CHECK(round_bits_like(p, f32(0x7f800001u), bf16()) == 0x7fff);
  // Subnormals kept (no .ftz): 2^-24 -> fp16 0x0001; float subnormal 2^-127 -> bf16 0x0040.
  CHECK(round_bits_like(p, 0x1p-24f, fp16()) == 0x0001);
  CHECK(round_bits_like(p, f32(0x00400000u), bf16()) == 0x0040);
  // Directed modes keep IEEE overflow: 1e6 with RZ -> 0x7bff, RU -> inf.
  CHECK(round_bits_like(p, 1e6f, fp16(), Rounding::of(RoundingMode::toward_zero)) == 0x7bff);
  CHECK(round_bits_like(p, 1e6f, fp16(), Rounding::of(RoundingMode::up)) == 0x7c00);
  // __nv_cvt_float_to_fp8, e4m3, __NV_NOSAT: NaN -> 0x7F whatever its sign; -inf and -1000 (beyond the
  // overflow threshold 464) -> 0x7F | sign = 0xFF; 464 itself is a tie that stays 448 (0x7E).
  const float nan_neg = f32(0xffc00000u);
  CHECK(round_bits_like(p, nan_neg, fp8_e4m3()) == 0x7f);
  CHECK(round_bits_like(p, -std::numeric_limits<float>::infinity(), fp8_e4m3()) == 0xff);
  CHECK(round_bits_like(p, -1000.0f, fp8_e4m3()) == 0xff);
  CHECK(round_bits_like(p, 464.0f, fp8_e4m3()) == 0x7e);
  // __NV_SATFINITE: -1000 and -inf -> -448 (0xFE).
  Format e4sat = fp8_e4m3();
  e4sat.overflow = Overflow::saturate;
  CHECK(round_bits_like(p, -1000.0f, e4sat) == 0xfe);
  CHECK(round_bits_like(p, -std::numeric_limits<float>::infinity(), e4sat) == 0xfe);
  // e5m2: NaN -> 0x7E | top two mantissa bits of 0x7FFFFFFF = 0x7F; overflow -> inf 0x7C | sign; the tie
  // at 61440 (0x1.Ep15) overflows (threshold minus one in the header).
  CHECK(round_bits_like(p, nan_neg, fp8_e5m2()) == 0x7f);
  CHECK(round_bits_like(p, -1e6f, fp8_e5m2()) == 0xfc);
  CHECK(round_bits_like(p, 61440.0f, fp8_e5m2()) == 0x7c);
  CHECK(round_bits_like(p, 61439.0f, fp8_e5m2()) == 0x7b);
  // Underflow: half the smallest e4m3 subnormal (2^-10) is a tie to +0; just above it rounds to 0x01.
  CHECK(round_bits_like(p, -0x1p-10f, fp8_e4m3()) == 0x80);
  CHECK(round_bits_like(p, 0x1.000002p-10f, fp8_e4m3()) == 0x01);
}

TEST_CASE("cuda-sm90 profile: the H100's recorded tf32, fp64 and saturating-arithmetic rules", "[profile]") {
  const Profile& p = profile_cuda_sm90();
  const Format& t = tf32();  // encodings in 19 bits: the float pattern >> 13
  Format tsat = tf32();
  tsat.overflow = Overflow::saturate;
  const Rounding rna = Rounding::of(RoundingMode::nearest_away);
  // cvt.rna.tf32.f32, recorded: 0x7F800001 -> 0x7F800000 (+inf), 0x7FA6F000 -> 0x7FA6E000 (signalling
  // payload cut, not quieted); IEEE would quiet both (0x7FC00000, 0x7FE6E000).
  CHECK(round_bits_like(p, f32(0x7f800001u), t, rna) == 0x7f800000u >> 13);
  CHECK(round_bits_like(p, f32(0x7fa6f000u), t, rna) == 0x7fa6e000u >> 13);
  CHECK(round_bits_like(profile_ieee(), f32(0x7fa6f000u), t, rna) == 0x7fe6e000u >> 13);
  CHECK(round_bits_like(p, f32(0xff800001u), t, rna) == 0xff800000u >> 13);
  // cvt.rna.satfinite: 0x7F800001 -> 0x7F7FE000 (+max finite), recorded; finite values as IEEE. Other
  // NaNs: cut, then one tf32 unit down (the rule the recording's NaN-block digests identify): a cut
  // payload of one unit gives +-inf, 0x7FC00000 (quiet, no payload) the signalling 0x7FBFE000.
  CHECK(round_bits_like(p, f32(0x7f800001u), tsat, rna) == 0x7f7fe000u >> 13);
  CHECK(round_bits_like(p, f32(0xff801fffu), tsat, rna) == 0xff7fe000u >> 13);
  CHECK(round_bits_like(p, f32(0x7f802000u), tsat, rna) == 0x7f800000u >> 13);
  CHECK(round_bits_like(p, f32(0xff803fffu), tsat, rna) == 0xff800000u >> 13);
  CHECK(round_bits_like(p, f32(0x7fc00000u), tsat, rna) == 0x7fbfe000u >> 13);
  CHECK(round_bits_like(p, f32(0xffa6f000u), tsat, rna) == 0xffa6c000u >> 13);
  CHECK(round_bits_like(p, f32(0x7fffffffu), tsat, rna) == 0x7fffc000u >> 13);
  CHECK(round_bits_like(p, 1.0f, tsat, rna) == 0x3f800000u >> 13);
  // cvt.rn / cvt.rz: every NaN -> 0x7FFFE000, recorded.
  CHECK(round_bits_like(p, f32(0xff812345u), t) == 0x7fffe000u >> 13);
  CHECK(round_bits_like(p, f32(0x7f800001u), t, Rounding::of(RoundingMode::toward_zero)) == 0x7fffe000u >> 13);
  // From double the H100 keeps the NaN payload (__double2half: 0 differences from IEEE, NaN patterns
  // 0x7e00, 0x7e01, ...): no canonical NaN there, unlike from float.
  const double nan_payload = std::bit_cast<double>(0x7ff8040000000000ull);  // payload bit 42 -> fp16 bit 0
  CHECK(round_bits_like(p, nan_payload, fp16()) == 0x7e01);
  CHECK(round_bits_like(p, static_cast<float>(nan_payload), fp16()) == 0x7fff);
  // __hmul_sat, recorded: 0x0000 * 0x8000 -> 0x0000 (IEEE -0 = 0x8000 lies in [0, 1]); 0x0001 * 0x8001
  // (a negative product below half the smallest subnormal) -> 0x0000; __hadd_sat(-0, -0) -> 0x0000.
  CHECK(arith_bits_like(p, ArithOp::mul, true, 0x0000, 0x8000, 0, fp16()) == 0x0000);
  CHECK(arith_bits_like(profile_ieee(), ArithOp::mul, true, 0x0000, 0x8000, 0, fp16()) == 0x8000);
  CHECK(arith_bits_like(p, ArithOp::mul, true, 0x0001, 0x8001, 0, fp16()) == 0x0000);
  CHECK(arith_bits_like(profile_ieee(), ArithOp::mul, true, 0x0001, 0x8001, 0, fp16()) == 0x8000);
  CHECK(arith_bits_like(p, ArithOp::add, true, 0x8000, 0x8000, 0, fp16()) == 0x0000);
  // The bf16 forms do the same (an H200, data/hardware/nvidia-h200 arith.json, first mismatches of the
  // device emulation before this rule: __hadd_sat(-0, -0) at i = 0x80008000, __hsub_sat(-0, +0) at
  // 0x80000000, __hmul_sat(+0, 0x8080) at 0x00008080, each 0x0000 on the hardware).
  CHECK(arith_bits_like(p, ArithOp::add, true, 0x8000, 0x8000, 0, bf16()) == 0x0000);
  CHECK(arith_bits_like(p, ArithOp::sub, true, 0x8000, 0x0000, 0, bf16()) == 0x0000);
  CHECK(arith_bits_like(p, ArithOp::mul, true, 0x0000, 0x8080, 0, bf16()) == 0x0000);
  CHECK(arith_bits_like(profile_ieee(), ArithOp::mul, true, 0x0000, 0x8080, 0, bf16()) == 0x8000);
  CHECK(arith_bits_like(p, ArithOp::mul, false, 0x0000, 0x8080, 0, bf16()) == 0x8000);  // the plain form keeps -0
  // The clamp itself: 2 -> 1.0 (0x3C00), -1 -> +0, NaN -> +0, 0.5 unchanged; the plain form is not clamped.
  CHECK(arith_bits_like(p, ArithOp::add, true, 0x3c00, 0x3c00, 0, fp16()) == 0x3c00);
  CHECK(arith_bits_like(p, ArithOp::add, false, 0x3c00, 0x3c00, 0, fp16()) == 0x4000);
  CHECK(arith_bits_like(p, ArithOp::sub, true, 0x0000, 0x3c00, 0, fp16()) == 0x0000);
  CHECK(arith_bits_like(p, ArithOp::add, true, 0x7e00, 0x3c00, 0, fp16()) == 0x0000);
  CHECK(arith_bits_like(p, ArithOp::mul, true, 0x3800, 0x3c00, 0, fp16()) == 0x3800);
  // NaN results of the plain forms: 0x7FFF (recorded); inf - inf too.
  CHECK(arith_bits_like(p, ArithOp::sub, false, 0x7c00, 0x7c00, 0, fp16()) == 0x7fff);
  CHECK(arith_bits_like(p, ArithOp::div, false, 0xffc1, 0x3c00, 0, bf16()) == 0x7fff);
}

TEST_CASE("canonicalize_nan_bits leaves non-NaN values alone and follows the input rule", "[profile]") {
  const Profile& p = profile_cuda_sm90();
  std::uint64_t changed = 0, checked = 0;
  for (std::uint64_t b = 0; b < 0x10000; ++b) {
    const std::uint64_t out = canonicalize_nan_bits(p, fp16(), b, true);
    ++checked;
    if (out != b) {
      ++changed;
      REQUIRE(is_nan_bits(b, fp16()));
      REQUIRE(out == 0x7fff);
    }
  }
  // 2 * (2^10 - 1) NaN encodings, minus 0x7fff itself.
  CHECK(changed == 2 * 1023 - 1);
  // e4m3: a NaN made by overflow keeps its sign; a NaN input becomes 0x7F.
  CHECK(canonicalize_nan_bits(p, fp8_e4m3(), 0xff, false) == 0xff);
  CHECK(canonicalize_nan_bits(p, fp8_e4m3(), 0xff, true) == 0x7f);
  CHECK(canonicalize_nan_bits(p, fp16(), 0xfe00, true, Operation::arithmetic) == 0x7fff);
  CHECK(canonicalize_nan_bits(profile_x86(), fp16(), 0xfe00, true) == 0xfe00);
  CHECK(canonical_nan(p, bf16()).value_or(0) == 0x7fff);
  CHECK(!canonical_nan(profile_x86(), bf16()).has_value());
  std::printf("canonicalize_nan_bits: %llu fp16 encodings, %llu NaNs canonicalised\n", (unsigned long long)checked,
              (unsigned long long)changed);
}

namespace {

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

}  // namespace

// Simulate mode (`mpsim round --like` without --bits): the bulk engine's values, then the device's rule,
// must be the device's encodings decoded, bit for bit (NaN payloads, signalling ones, the ±inf / ±max
// finite of a cut payload). Expected values: decode_float of round_bits_like's encodings, the path
// recorded_test checks against the H100's digests.
TEST_CASE("cuda-sm90 profile: simulate-mode values are the decoded device encodings", "[profile]") {
  const Profile& p = profile_cuda_sm90();
  const auto patterns = mpsim::test::recorded_edge_patterns();
  std::vector<float> x(patterns.size());
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = f32(patterns[k]);
  std::uint64_t compared = 0, changed = 0, mismatches = 0;
  for (const auto& rc : mpsim::test::kRecordedConversions) {
    Format fmt = parse_format(rc.format);
    if (rc.saturate) fmt.overflow = Overflow::saturate;
    const Rounding r = Rounding::of(rc.mode);
    const DeviceRounding d = resolve_profile(p, fmt, r);
    std::vector<float> values(x.size());
    round_array(std::span<const float>(x), std::span<float>(values), d.format, d.rounding);
    const std::vector<float> ieee_values = values;
    d.convert_values(std::span<const float>(x), std::span<float>(values));
    std::uint64_t run_changed = 0;
    for (std::size_t k = 0; k < x.size(); ++k) {
      const float want = decode_float(round_bits_like(p, x[k], fmt, r, k), fmt);
      ++compared;
      run_changed += !same_bits(values[k], ieee_values[k]);
      if (!same_bits(values[k], want) || !same_bits(round_like(p, x[k], fmt, r, k), want)) {
        ++mismatches;
        UNSCOPED_INFO(rc.run << " input 0x" << std::hex << patterns[k] << ": value 0x"
                             << std::bit_cast<std::uint32_t>(values[k]) << ", decoded encoding 0x"
                             << std::bit_cast<std::uint32_t>(want));
      }
    }
    // Every recorded rule changes some NaN value here: on inputs where the rule and IEEE agreed, the
    // comparison could not fail.
    INFO(rc.run);
    CHECK(run_changed > 0);
    changed += run_changed;
  }
  CHECK(mismatches == 0);
  std::printf(
      "simulate-mode values under cuda-sm90: %llu (rule, input) pairs over %zu recorded conversions, %llu "
      "values differ from IEEE's, %llu mismatches against the decoded device encodings\n",
      (unsigned long long)compared, std::size(mpsim::test::kRecordedConversions), (unsigned long long)changed,
      (unsigned long long)mismatches);

  // The recorded outputs, written out (float patterns; tf32's encoding is the pattern >> 13).
  const Rounding rna = Rounding::of(RoundingMode::nearest_away);
  Format tsat = tf32();
  tsat.overflow = Overflow::saturate;
  auto bits_of = [](float v) { return std::bit_cast<std::uint32_t>(v); };
  CHECK(bits_of(round_like(p, f32(0x7f800001u), tf32(), rna)) == 0x7f800000u);  // cut payload: +inf
  CHECK(bits_of(round_like(p, f32(0xff800001u), tf32(), rna)) == 0xff800000u);
  CHECK(bits_of(round_like(p, f32(0x7fa6f000u), tf32(), rna)) == 0x7fa6e000u);  // signalling NaN kept
  CHECK(bits_of(round_like(p, f32(0x7f800001u), tsat, rna)) == 0x7f7fe000u);    // satfinite: +max finite
  CHECK(bits_of(round_like(p, f32(0xff812345u), tf32())) == 0x7fffe000u);       // cvt.rn: canonical
  CHECK(bits_of(round_like(p, f32(0xffc01234u), fp16())) == 0x7fffe000u);       // fp16 0x7FFF decoded
  CHECK(bits_of(round_like(p, f32(0xffc01234u), bf16())) == 0x7fff0000u);       // bf16 0x7FFF decoded
  CHECK(!std::signbit(round_like(p, f32(0xffc00000u), fp8_e4m3())));            // 0x7F: positive NaN
  // From double no rule applies (the H100 keeps __double2half's payload): the double value is IEEE's.
  const double nan_payload = std::bit_cast<double>(0xfff8040000000000ull);
  CHECK(std::bit_cast<std::uint64_t>(round_like(p, nan_payload, fp16())) ==
        std::bit_cast<std::uint64_t>(round(nan_payload, fp16())));
  std::vector<double> xd = {nan_payload, 1.0, -std::numeric_limits<double>::infinity()};
  std::vector<double> vd(xd.size());
  const DeviceRounding dd = resolve_profile(p, fp16(), {}, Operation::convert, InputType::float64);
  round_array(std::span<const double>(xd), std::span<double>(vd), dd.format, dd.rounding);
  dd.convert_values(std::span<const double>(xd), std::span<double>(vd));
  for (std::size_t k = 0; k < xd.size(); ++k)
    CHECK(std::bit_cast<std::uint64_t>(vd[k]) == std::bit_cast<std::uint64_t>(round_like(p, xd[k], fp16())));
}
