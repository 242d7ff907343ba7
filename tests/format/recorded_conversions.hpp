// The H100 recording's conversions and edge inputs, for the tests of `--like cuda-sm90`'s simulate-mode
// values (profile_test, round_cli_test).
#pragma once

#include <cstdint>
#include <vector>

#include "mpsim/format/round.hpp"

namespace mpsim::test {

// The conversions the H100 recording holds (data/hardware/nvidia-h100-80gb-hbm3/convert.json), as the
// (format, mode, .satfinite) a `--like cuda-sm90` caller asks for.
struct RecordedConversion {
  const char* run;
  const char* format;
  RoundingMode mode;
  const char* cli_mode;  // `mpsim round --mode`
  bool saturate;
};
inline const RecordedConversion kRecordedConversions[] = {
    {"fp16_rn", "fp16", RoundingMode::nearest_even, "rne", false},
    {"fp16_rz", "fp16", RoundingMode::toward_zero, "rtz", false},
    {"fp16_rd", "fp16", RoundingMode::down, "rd", false},
    {"fp16_ru", "fp16", RoundingMode::up, "ru", false},
    {"bf16_rn", "bf16", RoundingMode::nearest_even, "rne", false},
    {"bf16_rz", "bf16", RoundingMode::toward_zero, "rtz", false},
    {"bf16_rd", "bf16", RoundingMode::down, "rd", false},
    {"bf16_ru", "bf16", RoundingMode::up, "ru", false},
    {"fp8_e4m3_nosat", "fp8_e4m3", RoundingMode::nearest_even, "rne", false},
    {"fp8_e4m3_satfinite", "fp8_e4m3", RoundingMode::nearest_even, "rne", true},
    {"fp8_e5m2_nosat", "fp8_e5m2", RoundingMode::nearest_even, "rne", false},
    {"fp8_e5m2_satfinite", "fp8_e5m2", RoundingMode::nearest_even, "rne", true},
    {"tf32_rna", "tf32", RoundingMode::nearest_away, "rna", false},
    {"tf32_rn", "tf32", RoundingMode::nearest_even, "rne", false},
    {"tf32_rz", "tf32", RoundingMode::toward_zero, "rtz", false},
    {"tf32_rna_satfinite", "tf32", RoundingMode::nearest_away, "rna", true},
};

// Edge inputs: the recording's first mismatching inputs (0x7F800001.., 0xFF800001..), the signalling
// payload it lists for tf32 rna (0x7FA6F000), NaNs with payloads in the kept and the cut bits, quiet and
// signalling, of both signs; then the infinities, zeros, float max and subnormals, and every 4099th NaN
// pattern of both signs (4099: odd and prime, so every residue of the cut low bits occurs).
inline std::vector<std::uint32_t> recorded_edge_patterns() {
  std::vector<std::uint32_t> v = {0x7f800001u, 0x7f800002u, 0x7f800003u, 0x7f800004u, 0xff800001u, 0xff800002u,
                                  0xff800003u, 0xff800004u, 0x7fa6f000u, 0x7fc00000u, 0xffc00000u, 0x7fffffffu,
                                  0xffffffffu, 0x7f801fffu, 0x7f802000u, 0xff802000u, 0x7fbfe000u, 0xffc12345u,
                                  0x7f800000u, 0xff800000u, 0x00000000u, 0x80000000u, 0x7f7fffffu, 0xff7fffffu,
                                  0x7f7fe000u, 0x00000001u, 0x80400000u, 0x477ff000u, 0x43e80000u, 0x3f800000u};
  for (std::uint32_t b = 0x7f800001u; b < 0x80000000u; b += 4099) {
    v.push_back(b);
    v.push_back(b | 0x80000000u);
  }
  return v;
}

}  // namespace mpsim::test
