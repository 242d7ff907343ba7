// The tables of exhaustive runs (host only): names, formats, modes, and the CPU-side emulation of one
// element under a device profile, used by `mpsim hw` and by the recorded-digest test.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "emu_host.hpp"
#include "mpsim/error.hpp"
#include "runs.hpp"

namespace mpsim::hw {

struct ConvertRun {
  std::string name;    // "fp16_rn", "fp8_e4m3_satfinite", ...
  std::string format;  // Format name
  RoundingMode mode;
  bool saturate;          // __NV_SATFINITE, .satfinite
  std::string intrinsic;  // what the hardware kernel calls
  // float: element i is the float with bits i (2^32); double: element j is f64_sample(j) (2^28).
  InputType input = InputType::float32;
  // The output as the hardware writes it: tf32 results are float patterns, the encoding << 13.
  int output_shift = 0;
  // The emulation runs on the device beside the kernel (compare.cu); the others (tf32, fp64 inputs) are
  // recorded on the device (hw_record in hw_ops.cuh: the hardware's digests only) and the emulation is
  // recomputed on the CPU (recompute.hpp).
  bool on_device = true;

  std::uint64_t elements() const { return input == InputType::float64 ? kF64SampleElements : std::uint64_t{1} << 32; }
};

inline const std::vector<ConvertRun>& convert_runs() {
  static const std::vector<ConvertRun> all = {
      {"fp16_rn", "fp16", RoundingMode::nearest_even, false, "__float2half_rn"},
      {"fp16_rz", "fp16", RoundingMode::toward_zero, false, "__float2half_rz"},
      {"fp16_rd", "fp16", RoundingMode::down, false, "__float2half_rd"},
      {"fp16_ru", "fp16", RoundingMode::up, false, "__float2half_ru"},
      {"bf16_rn", "bf16", RoundingMode::nearest_even, false, "__float2bfloat16_rn"},
      {"bf16_rz", "bf16", RoundingMode::toward_zero, false, "__float2bfloat16_rz"},
      {"bf16_rd", "bf16", RoundingMode::down, false, "__float2bfloat16_rd"},
      {"bf16_ru", "bf16", RoundingMode::up, false, "__float2bfloat16_ru"},
      {"fp8_e4m3_nosat", "fp8_e4m3", RoundingMode::nearest_even, false, "__nv_cvt_float_to_fp8(__NV_NOSAT, __NV_E4M3)"},
      {"fp8_e4m3_satfinite", "fp8_e4m3", RoundingMode::nearest_even, true,
       "__nv_cvt_float_to_fp8(__NV_SATFINITE, __NV_E4M3)"},
      {"fp8_e5m2_nosat", "fp8_e5m2", RoundingMode::nearest_even, false, "__nv_cvt_float_to_fp8(__NV_NOSAT, __NV_E5M2)"},
      {"fp8_e5m2_satfinite", "fp8_e5m2", RoundingMode::nearest_even, true,
       "__nv_cvt_float_to_fp8(__NV_SATFINITE, __NV_E5M2)"},
      {"tf32_rna", "tf32", RoundingMode::nearest_away, false, "cvt.rna.tf32.f32", InputType::float32, 13, false},
      {"tf32_rn", "tf32", RoundingMode::nearest_even, false, "cvt.rn.tf32.f32", InputType::float32, 13, false},
      {"tf32_rz", "tf32", RoundingMode::toward_zero, false, "cvt.rz.tf32.f32", InputType::float32, 13, false},
      {"tf32_rna_satfinite", "tf32", RoundingMode::nearest_away, true, "cvt.rna.satfinite.tf32.f32", InputType::float32,
       13, false},
      {"fp64_fp16_rn", "fp16", RoundingMode::nearest_even, false, "__double2half", InputType::float64, 0, false},
      {"fp64_bf16_rn", "bf16", RoundingMode::nearest_even, false, "__double2bfloat16", InputType::float64, 0, false},
  };
  return all;
}

inline const ConvertRun& find_convert_run(std::string_view name) {
  for (const auto& r : convert_runs())
    if (r.name == name) return r;
  throw Error("unknown conversion run '" + std::string(name) + "' (see mpsim hw convert --list)");
}

inline Format run_format(const ConvertRun& run) {
  Format f = parse_format(run.format);
  if (run.saturate) f.overflow = Overflow::saturate;
  return f;
}

inline void dev_params(const ConvertRun& run, const Profile& profile, emu::DevFormat& f, emu::DevRounding& r) {
  emu::make_dev(run_format(run), Rounding::of(run.mode), profile, Operation::convert, f, r);
}

struct ArithRun {
  std::string name;    // "fp16_add", "bf16_fma_sat", ...
  std::string format;  // fp16 | bf16
  ArithOp op;
  std::string intrinsic;
};

inline std::string_view arith_op_name(ArithOp op) {
  static constexpr std::string_view names[] = {"add",     "sub",     "mul",     "div",    "fma",
                                               "add_sat", "sub_sat", "mul_sat", "fma_sat"};
  return op < kArithOpCount ? names[op] : "?";
}

inline const std::vector<ArithRun>& arith_runs() {
  static const std::vector<ArithRun> all = [] {
    std::vector<ArithRun> v;
    static constexpr const char* intrinsics[] = {"__hadd",     "__hsub",     "__hmul",     "__hdiv",    "__hfma",
                                                 "__hadd_sat", "__hsub_sat", "__hmul_sat", "__hfma_sat"};
    for (const char* fmt : {"fp16", "bf16"})
      for (int op = 0; op < kArithOpCount; ++op)
        v.push_back({std::string(fmt) + "_" + std::string(arith_op_name(static_cast<ArithOp>(op))), fmt,
                     static_cast<ArithOp>(op), intrinsics[op]});
    return v;
  }();
  return all;
}

inline const ArithRun& find_arith_run(std::string_view name) {
  for (const auto& r : arith_runs())
    if (r.name == name) return r;
  throw Error("unknown arithmetic run '" + std::string(name) + "' (see mpsim hw arith --list)");
}

inline void dev_params(const ArithRun& run, const Profile& profile, emu::DevFormat& f, emu::DevRounding& r) {
  emu::make_dev(parse_format(run.format), Rounding{}, profile, Operation::arithmetic, f, r);
}

}  // namespace mpsim::hw
