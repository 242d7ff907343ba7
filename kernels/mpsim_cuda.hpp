// Host API of the CUDA kernels (the `mpsim_cuda` library). Plain C++: no CUDA header, so tools/ and the
// tests include it whether or not the build has CUDA; where it has not, MPSIM_WITH_CUDA is undefined and
// only cuda_built() (false) may be called.
//
// Every wrapper checks each CUDA return code and the last error after each launch, and rejects sizes
// beyond 32-bit indexing, shapes that do not fit and device allocations that fail with an mpsim::Error
// naming the operation; nothing returns a silent wrong result.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "emu.hpp"

namespace mpsim::cuda {

constexpr bool cuda_built() {
#if defined(MPSIM_WITH_CUDA)
  return true;
#else
  return false;
#endif
}

struct DeviceInfo {
  bool present = false;
  std::string why_absent;  // with present == false: the CUDA error that said so
  std::string name;
  int ordinal = 0;
  int cc_major = 0, cc_minor = 0;
  int driver_version = 0;   // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;  // cudaRuntimeGetVersion
  int multiprocessors = 0;
  std::uint64_t global_memory = 0;
  std::uint64_t l2_bytes = 0;
  double memory_clock_khz = 0;
  int memory_bus_bits = 0;
};

// Never throws: a missing driver or device comes back as present == false with the reason.
DeviceInfo device_info();
// Throws mpsim::Error (naming `what`) when no device is present.
void require_device(const std::string& what);

// ---- conversions (element-wise, arrays of any length < 2^32) ----
enum class Half16 : std::uint8_t { fp16, bf16 };
enum class Fp8 : std::uint8_t { e4m3, e5m2 };
// mode: emu::Mode (kNearestEven, kTowardZero, kUp, kDown): __float2half_rn/_rz/_ru/_rd,
// __float2bfloat16_rn/_rz/_ru/_rd.
void convert_to_16(std::span<const float> in, std::span<std::uint16_t> out, Half16 fmt, std::uint8_t mode);
void convert_to_fp8(std::span<const float> in, std::span<std::uint8_t> out, Fp8 fmt, bool satfinite);
// Back to float (exact): __half2float, __bfloat162float, __nv_cvt_fp8_to_halfraw + __half2float.
void convert_from_16(std::span<const std::uint16_t> in, std::span<float> out, Half16 fmt);
void convert_from_fp8(std::span<const std::uint8_t> in, std::span<float> out, Fp8 fmt);

// ---- half / bf16 arithmetic on arrays (bits in, bits out) ----
enum class Unary : std::uint8_t { sqrt, rcp, exp, log };
// op: hw ArithOp of runs.hpp (add sub mul div fma and the _sat forms). c is read by fma only.
void arith_16(std::uint8_t op, Half16 fmt, std::span<const std::uint16_t> a, std::span<const std::uint16_t> b,
              std::span<const std::uint16_t> c, std::span<std::uint16_t> out);
void unary_16(Unary op, Half16 fmt, std::span<const std::uint16_t> a, std::span<std::uint16_t> out);

// ---- exhaustive comparisons on the device (hardware vs the emu.hpp emulation, 2^32 elements) ----
struct CompareResult {
  std::uint64_t elements = 0;
  std::uint64_t mismatches = 0;                     // hardware bits != emulated bits
  std::uint64_t nan_mismatches = 0;                 // ... of which both are NaN (a NaN-pattern difference only)
  std::vector<std::uint64_t> first_mismatch_index;  // up to 16 smallest mismatching element indices
  std::vector<std::uint32_t> first_mismatch_hw, first_mismatch_emu;
  std::vector<std::uint64_t> hw_digests, emu_digests;  // per 2^24-element block (kernels/digest.hpp)
  double gpu_ms = 0;                                   // kernel time, cudaEvent-timed
};
// run: index into hw::convert_runs() / hw::arith_runs(); f, r: the emulation's parameters (with the
// device profile applied, see runs_host.hpp dev_params).
CompareResult compare_convert(int run, const emu::DevFormat& f, const emu::DevRounding& r);
CompareResult compare_arith(int run, const emu::DevFormat& f, const emu::DevRounding& r);
// The conversion runs whose emulation is not ported to the device (tf32, fp64 inputs: run 12..17 of
// hw::convert_runs()): only the hardware's outputs, digested (hw_digests; no emu_digests, no mismatch
// counts); the emulation is compared with them on the CPU (recompute.hpp, `mpsim verify --against`).
CompareResult record_convert(int run, std::uint64_t elements);

// ---- GEMM: C (m x n, row-major, float) = A (m x k, row-major fp16 bits) * B (k x n, row-major fp16) ----
enum class Gemm : std::uint8_t {
  simt_f32,             // one thread per C element, fp32 accumulation in order p = 0..k-1 with __fmaf_rn
  wmma_f32,             // tensor cores (WMMA 16x16x16), fp32 accumulators
  wmma_f16,             // tensor cores, fp16 accumulators (C rounded to fp16, returned as float)
  cublas_16f,           // cublasGemmEx, CUBLAS_COMPUTE_16F
  cublas_32f,           // CUBLAS_COMPUTE_32F
  cublas_32f_fast_16f,  // CUBLAS_COMPUTE_32F_FAST_16F
};
const char* gemm_name(Gemm);
// Shapes: m, n, k >= 1, m*k, k*n, m*n < 2^31; the WMMA kernels need m, n, k multiples of 16.
// Returns the kernel time in ms (median of `repeats` timed runs after one warm-up).
double gemm(Gemm kind, int m, int n, int k, std::span<const std::uint16_t> a, std::span<const std::uint16_t> b,
            std::span<float> c, int repeats = 1);

// Tensor cores with fp32 accumulators and bf16, tf32 or fp8 inputs, given as floats the input format holds
// exactly (anything else is refused: the kernel must not round). WMMA bf16 16x16x16 and tf32 16x16x8 need m
// and n multiples of 16; the PTX mma.sync m16n8k8 / m16n8k4 tf32 and m16n8k32 fp8 kernels m of 16 and n of
// 8; k a multiple of the instruction's K. Returns the kernel time in ms as gemm() does.
enum class MmaKernel : std::uint8_t {
  wmma_bf16,
  wmma_tf32,
  mma_sync_tf32_k8,
  mma_sync_tf32_k4,
  mma_sync_e4m3_k32,
  mma_sync_e5m2_k32
};
const char* mma_kernel_name(MmaKernel);
double mma_gemm_f32(MmaKernel kernel, int m, int n, int k, std::span<const float> a, std::span<const float> b,
                    std::span<float> c, int repeats = 1);

// ---- exponent histogram: bins as lib/mpsim/analysis Log2Histogram of float ----
// bins[n - min_exp] counts 2^n <= |x| < 2^(n+1) for n in [min_exp, max_exp] (min_exp = -149, max_exp = 127
// for float: 277 bins); zero, NaN, -inf, +inf apart.
struct Histogram {
  int min_exp = -149, max_exp = 127;
  std::vector<std::uint64_t> bins;
  std::uint64_t zero = 0, nan = 0, neg_inf = 0, pos_inf = 0;
};
Histogram exponent_histogram(std::span<const float> x, double* gpu_ms = nullptr);

// ---- AMP (PyTorch GradScaler) ----
// _amp_foreach_non_finite_check_and_unscale_: every element of every tensor multiplied in place by
// inv_scale (left as it is when inv_scale == 1), found_inf set to 1 if any element was inf or NaN
// (never reset to 0 here: the caller zeroes it). Tensors are float, or fp16 bits with `fp16` set.
void amp_unscale_f32(std::vector<std::span<float>> grads, float& found_inf, float inv_scale);
void amp_unscale_f16(std::vector<std::span<std::uint16_t>> grads, float& found_inf, float inv_scale);
// _amp_update_scale_: found_inf -> scale *= backoff, tracker = 0; else ++tracker, and when it reaches
// growth_interval the scale grows (unless that overflows float) and the tracker resets.
void amp_update_scale(float& scale, int& growth_tracker, float found_inf, double growth_factor, double backoff_factor,
                      int growth_interval);

// ---- bandwidth reference ----
// Device-to-device cudaMemcpy of `bytes` bytes; returns GB/s (median of repeats).
double copy_bandwidth_gbs(std::uint64_t bytes, int repeats = 5);
// Conversion throughput: float -> fp16 RN over `count` floats in device memory; GB/s of bytes moved
// (4 read + 2 written per element). `variant` indexes convert_bandwidth_variants(): the same conversion,
// memory walked differently (vector width, grid size, cache hints). The input holds spread bit patterns;
// `differing`, when given, receives how many outputs differ from the scalar __float2half_rn kernel's.
std::vector<std::string> convert_bandwidth_variants();
double convert_bandwidth_gbs(std::uint64_t count, int repeats = 5, std::size_t variant = 0,
                             std::uint64_t* differing = nullptr);
double histogram_bandwidth_gbs(std::uint64_t count, int repeats = 5);

}  // namespace mpsim::cuda
