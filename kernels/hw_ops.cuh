// The hardware side of every comparison: one device function per intrinsic, selected at compile time.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "runs.hpp"

namespace mpsim::cuda {

// Fmt: 0 fp16, 1 bf16. Mode: emu::Mode 0 rn, 1 rz, 2 ru, 3 rd.
template <int Fmt, int Mode>
__device__ __forceinline__ std::uint16_t hw_to16(float x) {
  if constexpr (Fmt == 0) {
    if constexpr (Mode == 0) return __half_as_ushort(__float2half_rn(x));
    else if constexpr (Mode == 1) return __half_as_ushort(__float2half_rz(x));
    else if constexpr (Mode == 2) return __half_as_ushort(__float2half_ru(x));
    else return __half_as_ushort(__float2half_rd(x));
  } else {
    if constexpr (Mode == 0) return __bfloat16_as_ushort(__float2bfloat16_rn(x));
    else if constexpr (Mode == 1) return __bfloat16_as_ushort(__float2bfloat16_rz(x));
    else if constexpr (Mode == 2) return __bfloat16_as_ushort(__float2bfloat16_ru(x));
    else return __bfloat16_as_ushort(__float2bfloat16_rd(x));
  }
}

// Fp8: 0 e4m3, 1 e5m2.
template <int Fp8, bool Sat>
__device__ __forceinline__ std::uint8_t hw_to_fp8(float x) {
  return __nv_cvt_float_to_fp8(x, Sat ? __NV_SATFINITE : __NV_NOSAT, Fp8 == 0 ? __NV_E4M3 : __NV_E5M2);
}

// Run k of hw::convert_runs() (same order: fp16 rn rz rd ru, bf16 rn rz rd ru, e4m3 nosat sat, e5m2 nosat sat).
template <int Run>
__device__ __forceinline__ std::uint32_t hw_convert(float x) {
  if constexpr (Run == 0) return hw_to16<0, 0>(x);
  else if constexpr (Run == 1) return hw_to16<0, 1>(x);
  else if constexpr (Run == 2) return hw_to16<0, 3>(x);
  else if constexpr (Run == 3) return hw_to16<0, 2>(x);
  else if constexpr (Run == 4) return hw_to16<1, 0>(x);
  else if constexpr (Run == 5) return hw_to16<1, 1>(x);
  else if constexpr (Run == 6) return hw_to16<1, 3>(x);
  else if constexpr (Run == 7) return hw_to16<1, 2>(x);
  else if constexpr (Run == 8) return hw_to_fp8<0, false>(x);
  else if constexpr (Run == 9) return hw_to_fp8<0, true>(x);
  else if constexpr (Run == 10) return hw_to_fp8<1, false>(x);
  else return hw_to_fp8<1, true>(x);
}

// The runs whose emulation does not run on the device (hw::ConvertRun::on_device false): tf32 (PTX cvt; the
// output is the float pattern, low 13 bits cut) and fp64 -> fp16 / bf16 on the f64_sample stress set. Their
// outputs are digested on the device and the emulation is recomputed on the CPU (recompute.hpp). PTX ISA:
// cvt.rna.tf32.f32 needs sm_80; .rn / .rz and .rna.satfinite for tf32 need sm_90 (this build's target).
template <int Run>
__device__ __forceinline__ std::uint32_t hw_record(std::uint64_t i) {
  std::uint32_t d = 0;
  const float x = __uint_as_float(static_cast<unsigned>(i));
  if constexpr (Run == 12) asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(d) : "f"(x));
  else if constexpr (Run == 13) asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(d) : "f"(x));
  else if constexpr (Run == 14) asm("cvt.rz.tf32.f32 %0, %1;" : "=r"(d) : "f"(x));
  else if constexpr (Run == 15) asm("cvt.rna.satfinite.tf32.f32 %0, %1;" : "=r"(d) : "f"(x));
  else if constexpr (Run == 16)
    d = __half_as_ushort(__double2half(__longlong_as_double(static_cast<long long>(hw::f64_sample(i)))));
  else d = __bfloat16_as_ushort(__double2bfloat16(__longlong_as_double(static_cast<long long>(hw::f64_sample(i)))));
  return d;
}

template <class T>
__device__ __forceinline__ T from_bits(std::uint32_t b);
template <>
__device__ __forceinline__ __half from_bits<__half>(std::uint32_t b) {
  return __ushort_as_half(static_cast<unsigned short>(b));
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_bits<__nv_bfloat16>(std::uint32_t b) {
  return __ushort_as_bfloat16(static_cast<unsigned short>(b));
}
__device__ __forceinline__ std::uint32_t to_bits(__half h) { return __half_as_ushort(h); }
__device__ __forceinline__ std::uint32_t to_bits(__nv_bfloat16 h) { return __bfloat16_as_ushort(h); }

// Op: hw::ArithOp.
template <class T, int Op>
__device__ __forceinline__ std::uint32_t hw_arith(std::uint32_t ab, std::uint32_t bb, std::uint32_t cb) {
  const T a = from_bits<T>(ab), b = from_bits<T>(bb), c = from_bits<T>(cb);
  if constexpr (Op == hw::kAdd) return to_bits(__hadd(a, b));
  else if constexpr (Op == hw::kSub) return to_bits(__hsub(a, b));
  else if constexpr (Op == hw::kMul) return to_bits(__hmul(a, b));
  else if constexpr (Op == hw::kDiv) return to_bits(__hdiv(a, b));
  else if constexpr (Op == hw::kFma) return to_bits(__hfma(a, b, c));
  else if constexpr (Op == hw::kAddSat) return to_bits(__hadd_sat(a, b));
  else if constexpr (Op == hw::kSubSat) return to_bits(__hsub_sat(a, b));
  else if constexpr (Op == hw::kMulSat) return to_bits(__hmul_sat(a, b));
  else return to_bits(__hfma_sat(a, b, c));
}

}  // namespace mpsim::cuda
