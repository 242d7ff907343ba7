// The exhaustive comparison runs of `mpsim hw convert` / `mpsim hw arith`: what element i of each run is,
// for the hardware kernel, the on-device emulation and the CPU recomputation of recorded digests alike.
// Host and device (MPSIM_HD); the run tables for the host are in runs_host.hpp.
#pragma once

#include <cstdint>

#include "emu.hpp"

namespace mpsim::hw {

// Conversions: element i is the float whose bits are i (all 2^32 of them); the output is the encoding.
MPSIM_HD std::uint32_t emulate_convert(std::uint64_t i, const emu::DevFormat& f, const emu::DevRounding& r) {
  return static_cast<std::uint32_t>(emu::round_float(static_cast<std::uint32_t>(i), f, r, i));
}

// splitmix64 (digest.hpp's digest_mix), the generator of the index conventions below.
MPSIM_HD std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Conversions from double: element j (< 2^28) is f64_sample(j), the recorded H100 probe's stress set
// (data/hardware/nvidia-h100-80gb-hbm3/README.md): a quarter random 64-bit patterns, a quarter random
// significands over exponents -150 .. 133, and a quarter each points at and around the midpoints of fp16
// and of bf16 (m, m +- 1, m +- a few to 2^40 double ulps, a grid value +- 1 ulp), where rounding a
// double directly and rounding it through float differ.
inline constexpr std::uint64_t kF64SampleElements = std::uint64_t{1} << 28;

// The value of a positive 16-bit pattern h of a format with `man` mantissa bits and bias `bias`, and
// the midpoint between h and h + 1 (exact in double: 12 bits at most).
MPSIM_HD double f64_sample_grid(std::uint64_t h, int man, int bias) {
  const std::uint64_t field = h >> man, frac = h & ((std::uint64_t{1} << man) - 1);
  const std::uint64_t sig = field == 0 ? frac : (frac | (std::uint64_t{1} << man));
  const int e = (field == 0 ? 1 : static_cast<int>(field)) - bias - man;
  double v = static_cast<double>(sig);
  for (int k = 0; k < e; ++k) v *= 2.0;  // exact scaling by powers of two (no ldexp on the device)
  for (int k = 0; k > e; --k) v *= 0.5;
  return v;
}

MPSIM_HD std::uint64_t f64_sample(std::uint64_t j) {
  const std::uint64_t r1 = splitmix64(0xD0B1E00000000000ull ^ j), r2 = splitmix64(r1);
  const std::uint64_t sign = r2 & (std::uint64_t{1} << 63);
  switch (j & 3) {
    case 2: return r1;
    case 3: {
      const int e = -150 + static_cast<int>(r2 % 284);
      return sign | (static_cast<std::uint64_t>(e + 1023) << 52) | (r1 & 0x000fffffffffffffull);
    }
    default: break;
  }
  const bool half = (j & 3) == 0;  // 0: fp16's grid, 1: bf16's
  const int man = half ? 10 : 7, bias = half ? 15 : 127;
  const std::uint64_t max_finite = half ? 0x7bff : 0x7f7f;
  const std::uint64_t h = r1 % (max_finite + 1);
  const double value = f64_sample_grid(h, man, bias);
  const double ulp = f64_sample_grid(h + 1, man, bias) - value;
  const std::uint64_t m = emu::bits_of(value + ulp / 2), v = emu::bits_of(value);
  const bool plus = (r2 >> 11) & 1;
  const std::uint64_t k_near = 2 + (r2 >> 16) % ((std::uint64_t{1} << 28) - 2);
  const std::uint64_t k_far = (r2 >> 16) % (std::uint64_t{1} << 40);
  std::uint64_t x = m;
  switch ((r2 >> 8) & 7) {
    case 0: x = m; break;
    case 1: x = m + 1; break;
    case 2: x = m - 1; break;
    case 3: x = m + k_near; break;
    case 4: x = m - k_near; break;
    case 5: x = plus ? m + k_far : m - k_far; break;
    // value(0) - 1 ulp stays 0 (the recording's digests; -2^-1074 or the wrapped pattern do not match them).
    case 6: x = plus ? v + 1 : (v == 0 ? 0 : v - 1); break;
    default: x = plus ? m + (std::uint64_t{1} << 28) : m - (std::uint64_t{1} << 28); break;
  }
  return x | sign;
}

// Arithmetic on 16-bit formats. Binary operations: element i is the pair (a, b) = (i >> 16, i & 0xffff),
// all 2^32 pairs. fma: (a, b) the same and c = the top 16 bits of splitmix64(0xC0FFEE0000000000 ^ i)
// (2^32 of the 2^48 triples): the convention of the recorded H100 probe
// (data/hardware/nvidia-h100-80gb-hbm3/), so its fma digests can be recomputed.
enum ArithOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kFma, kAddSat, kSubSat, kMulSat, kFmaSat, kArithOpCount };

MPSIM_HD void arith_operands(std::uint64_t i, std::uint32_t& a, std::uint32_t& b, std::uint32_t& c) {
  a = static_cast<std::uint32_t>(i >> 16) & 0xffffu;
  b = static_cast<std::uint32_t>(i) & 0xffffu;
  c = static_cast<std::uint32_t>(splitmix64(0xC0FFEE0000000000ull ^ i) >> 48);
}

MPSIM_HD std::uint32_t emulate_arith(ArithOp op, std::uint64_t i, const emu::DevFormat& f, const emu::DevRounding& r) {
  std::uint32_t a, b, c;
  arith_operands(i, a, b, c);
  emu::Op base = emu::kAdd;
  switch (op) {
    case kAdd:
    case kAddSat: base = emu::kAdd; break;
    case kSub:
    case kSubSat: base = emu::kSub; break;
    case kMul:
    case kMulSat: base = emu::kMul; break;
    case kDiv: base = emu::kDiv; break;
    case kFma:
    case kFmaSat: base = emu::kFma; break;
    default: break;
  }
  std::uint64_t out = emu::arith(base, a, b, c, f, r, i);
  if (op == kAddSat || op == kSubSat || op == kMulSat || op == kFmaSat) out = emu::saturate01(out, f);
  return static_cast<std::uint32_t>(out);
}

}  // namespace mpsim::hw
