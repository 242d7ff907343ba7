// What this CPU can run, read once from CPUID and XCR0: the one place the library, the tools, the kernels'
// host code and the tests ask (bulk engine and range counter dispatch, the matrix-unit integer path, the
// hardware conversions of `verify`, the F16C oracles of the exhaustive tests, the benchmarks).
//
// Intel SDM vol. 2A, CPUID: leaf 1 ECX bit 12 FMA, 27 OSXSAVE, 28 AVX, 29 F16C; leaf 7 subleaf 0 EBX bit 5
// AVX2, 16 AVX512F, 17 AVX512DQ, 28 AVX512CD, 30 AVX512BW, 31 AVX512VL; leaf 7 subleaf 1 EAX bit 5
// AVX512_BF16. A VEX / EVEX instruction also needs the OS to save its registers (Intel SDM vol. 1, 13.2 and
// 15.2: XCR0 bits 1-2 for SSE/AVX state, 5-7 for the opmask and ZMM state), so each flag below is the CPUID
// bit AND the OS support: the rule GCC's __builtin_cpu_supports follows (tests/cpu_features_test.cpp
// compares the two). Internal: not installed.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace mpsim {

struct CpuFeatures {
  bool avx = false, fma = false, f16c = false, avx2 = false;
  bool avx512f = false, avx512dq = false, avx512cd = false, avx512bw = false, avx512vl = false;
  bool avx512bf16 = false;

  // What the bulk engine's and the range counter's AVX2 kernels are compiled for (-mavx2 -mfma -mf16c,
  // lib/mpsim/format/meson.build): every AVX2 CPU has FMA and F16C, but a hypervisor may hide them.
  bool avx2_fma_f16c() const { return avx2 && fma && f16c; }
  // The AVX-512 kernels' -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512cd.
  bool avx512_engine() const { return avx512f && avx512bw && avx512vl && avx512dq && avx512cd; }
};

namespace detail {

inline CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  if (!osxsave) return f;  // no XGETBV: the OS saves no vector state beyond SSE
  const bool fma = c & (1u << 12), avx = c & (1u << 28), f16c = c & (1u << 29);
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const bool avx_state = (xcr0_lo & 0x6u) == 0x6u;
  const bool zmm_state = (xcr0_lo & 0xe6u) == 0xe6u;
  f.avx = avx && avx_state;
  f.fma = fma && f.avx;
  f.f16c = f16c && f.avx;
  if (__get_cpuid_max(0, nullptr) >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b & (1u << 5)) && f.avx;
    const bool z = f.avx && zmm_state;
    f.avx512f = (b & (1u << 16)) && z;
    f.avx512dq = (b & (1u << 17)) && z;
    f.avx512cd = (b & (1u << 28)) && z;
    f.avx512bw = (b & (1u << 30)) && z;
    f.avx512vl = (b & (1u << 31)) && z;
    const unsigned max_subleaf = a;
    if (max_subleaf >= 1) {
      __cpuid_count(7, 1, a, b, c, d);
      f.avx512bf16 = (a & (1u << 5)) && f.avx512f;
    }
  }
#endif
  return f;
}

}  // namespace detail

// Read once, on first use (thread-safe: a function-local static).
inline const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detail::detect_cpu_features();
  return f;
}

}  // namespace mpsim
