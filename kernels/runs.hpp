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

// Arithmetic on 16-bit formats. Binary operations: element i is the pair (a, b) = (i >> 16, i & 0xffff),
// all 2^32 pairs. fma: (a, b) the same and c = the high half of lowbias32(i) (2^32 of the 2^48 triples).
enum ArithOp : std::uint8_t { kAdd, kSub, kMul, kDiv, kFma, kAddSat, kSubSat, kMulSat, kFmaSat, kArithOpCount };

MPSIM_HD void arith_operands(std::uint64_t i, std::uint32_t& a, std::uint32_t& b, std::uint32_t& c) {
  a = static_cast<std::uint32_t>(i >> 16) & 0xffffu;
  b = static_cast<std::uint32_t>(i) & 0xffffu;
  c = emu::lowbias32(static_cast<std::uint32_t>(i)) >> 16;
}

MPSIM_HD std::uint32_t emulate_arith(ArithOp op, std::uint64_t i, const emu::DevFormat& f, const emu::DevRounding& r) {
  std::uint32_t a, b, c;
  arith_operands(i, a, b, c);
  emu::Op base = emu::kAdd;
  switch (op) {
    case kAdd: case kAddSat: base = emu::kAdd; break;
    case kSub: case kSubSat: base = emu::kSub; break;
    case kMul: case kMulSat: base = emu::kMul; break;
    case kDiv: base = emu::kDiv; break;
    case kFma: case kFmaSat: base = emu::kFma; break;
    default: break;
  }
  std::uint64_t out = emu::arith(base, a, b, c, f, r, i);
  if (op == kAddSat || op == kSubSat || op == kMulSat || op == kFmaSat) out = emu::saturate01(out, f);
  return static_cast<std::uint32_t>(out);
}

}  // namespace mpsim::hw
