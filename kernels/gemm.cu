// GEMM C (m x n, float) = A (m x k) * B (k x n), fp16 inputs, all row-major:
//  - SIMT: one thread per C element, fp32 accumulation in the fixed order p = 0..k-1 with __fmaf_rn
//    (one rounding per step), so the CPU reproduces it bit for bit with std::fma on floats;
//  - tensor cores through WMMA 16x16x16 (mma.h), fp32 or fp16 accumulators: the order and internal
//    precision of the hardware's dot products are not specified, so these are compared as ulp distributions;
//  - cuBLAS cublasGemmEx with CUBLAS_COMPUTE_16F, _32F, _32F_FAST_16F;
//  - tensor cores with bf16 or tf32 inputs and fp32 accumulators: WMMA (16x16x16 bf16, 16x16x8 tf32) and the
//    PTX mma.sync m16n8k8 / m16n8k4 tf32 instructions; fp8 (e4m3, e5m2) through mma.sync m16n8k32.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <mma.h>

#include <algorithm>
#include <bit>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "check.cuh"
#include "mpsim_cuda.hpp"

namespace mpsim::cuda {

namespace {

__global__ void simt_gemm_kernel(const __half* a, const __half* b, float* c, int m, int n, int k) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y * blockDim.y + threadIdx.y;
  if (i >= m || j >= n) return;
  float acc = 0.f;
  for (int p = 0; p < k; ++p)
    acc = __fmaf_rn(__half2float(a[static_cast<std::size_t>(i) * k + p]),
                    __half2float(b[static_cast<std::size_t>(p) * n + j]), acc);
  c[static_cast<std::size_t>(i) * n + j] = acc;
}

// Tensor cores through WMMA, one warp per 16x16 tile of C, chaining one mma_sync per K of the shape:
// fp16 or bf16 inputs (16x16x16, Elem = Store), or tf32 held in floats (16x16x8, Elem = precision::tf32,
// Store = float). The tf32 inputs are tf32 values already (the host checks), so __float_to_tf32 leaves them
// as they are; the documentation requires the call before mma_sync.
template <class Elem, class Store, class Acc, int K>
__global__ void wmma_gemm_kernel(const Store* a, const Store* b, Acc* c, int m, int n, int k) {
  using namespace nvcuda;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int tiles_n = n / 16;
  const int ti = warp / tiles_n, tj = warp % tiles_n;
  if (ti >= m / 16) return;
  wmma::fragment<wmma::matrix_a, 16, 16, K, Elem, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, K, Elem, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, K, Acc> fc;
  wmma::fill_fragment(fc, static_cast<Acc>(0.f));
  for (int p = 0; p < k; p += K) {
    wmma::load_matrix_sync(fa, a + static_cast<std::size_t>(ti) * 16 * k + p, k);
    wmma::load_matrix_sync(fb, b + static_cast<std::size_t>(p) * n + tj * 16, n);
    if constexpr (std::is_same_v<Elem, wmma::precision::tf32>) {
      for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
      for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
    }
    wmma::mma_sync(fc, fa, fb, fc);
  }
  wmma::store_matrix_sync(c + static_cast<std::size_t>(ti) * 16 * n + tj * 16, fc, n, wmma::mem_row_major);
}

// tf32 through the PTX instruction itself, mma.sync.aligned.m16n8k{8,4}.row.col.f32.tf32.tf32.f32: one warp per
// 16x8 tile of C, the fragments read from row-major A and B in the instruction's register layout (PTX ISA,
// "Matrix Fragments for mma.m16n8k8" and "mma.m16n8k4", .tf32): with g = lane / 4, t = lane % 4,
// A register r holds (g + 8 (r % 2), t + 4 (r / 2)), B register r holds (t + 4 r, g), C register r holds
// (g + 8 (r / 2), 2 t + r % 2).
template <int K>
__global__ void mma_sync_tf32_gemm_kernel(const float* a, const float* b, float* c, int m, int n, int k) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const int tiles_n = n / 8;
  const int ti = warp / tiles_n, tj = warp % tiles_n;
  if (ti >= m / 16) return;
  const int g = lane / 4, t = lane % 4, row0 = ti * 16, col0 = tj * 8;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  for (int p = 0; p < k; p += K) {
    auto A = [&](int r, int cc) { return __float_as_uint(a[static_cast<std::size_t>(row0 + r) * k + p + cc]); };
    auto B = [&](int r, int cc) { return __float_as_uint(b[static_cast<std::size_t>(p + r) * n + col0 + cc]); };
    if constexpr (K == 8) {
      asm volatile(
          "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(A(g, t)), "r"(A(g + 8, t)), "r"(A(g, t + 4)), "r"(A(g + 8, t + 4)), "r"(B(t, g)), "r"(B(t + 4, g)));
    } else {
      asm volatile("mma.sync.aligned.m16n8k4.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
                   : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                   : "r"(A(g, t)), "r"(A(g + 8, t)), "r"(B(t, g)));
    }
  }
  for (int r = 0; r < 4; ++r) c[static_cast<std::size_t>(row0 + g + 8 * (r / 2)) * n + col0 + 2 * t + r % 2] = d[r];
}

// fp8 through mma.sync.aligned.m16n8k32.row.col.f32.{e4m3,e5m2}.{e4m3,e5m2}.f32 (sm_89 and later): one warp
// per 16x8 tile of C. Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k32", 8-bit types), g = lane / 4,
// t = lane % 4: A register r holds the 4 bytes (g + 8 (r % 2), 4 t + 16 (r / 2) + j), j = 0..3 from the low
// byte up; B register r holds (4 t + 16 r + j, g); C as for m16n8k8.
template <bool E5M2>
__global__ void mma_sync_fp8_gemm_kernel(const std::uint8_t* a, const std::uint8_t* b, float* c, int m, int n, int k) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const int tiles_n = n / 8;
  const int ti = warp / tiles_n, tj = warp % tiles_n;
  if (ti >= m / 16) return;
  const int g = lane / 4, t = lane % 4, row0 = ti * 16, col0 = tj * 8;
  float d[4] = {0.f, 0.f, 0.f, 0.f};
  for (int p = 0; p < k; p += 32) {
    auto A4 = [&](int r, int cc) {  // 4 consecutive bytes of a row
      const std::uint8_t* q = a + static_cast<std::size_t>(row0 + r) * k + p + cc;
      return unsigned(q[0]) | unsigned(q[1]) << 8 | unsigned(q[2]) << 16 | unsigned(q[3]) << 24;
    };
    auto B4 = [&](int r, int cc) {  // 4 consecutive rows of a column
      const std::uint8_t* q = b + static_cast<std::size_t>(p + r) * n + col0 + cc;
      return unsigned(q[0]) | unsigned(q[n]) << 8 | unsigned(q[2 * n]) << 16 | unsigned(q[3 * n]) << 24;
    };
    const unsigned a0 = A4(g, 4 * t), a1 = A4(g + 8, 4 * t), a2 = A4(g, 4 * t + 16), a3 = A4(g + 8, 4 * t + 16);
    const unsigned b0 = B4(4 * t, g), b1 = B4(4 * t + 16, g);
    if constexpr (E5M2)
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.f32.e5m2.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
      asm volatile(
          "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};\n"
          : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  for (int r = 0; r < 4; ++r) c[static_cast<std::size_t>(row0 + g + 8 * (r / 2)) * n + col0 + 2 * t + r % 2] = d[r];
}

__global__ void half_to_float_kernel(const __half* in, float* out, std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __half2float(in[i]);
}

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(what) + ": cuBLAS error " + cublasGetStatusName(s) + " (" + cublasGetStatusString(s) + ")");
}

struct Handle {
  cublasHandle_t h{};
  Handle() { check_cublas(cublasCreate(&h), "cublasCreate"); }
  ~Handle() { cublasDestroy(h); }
};

// The shape checks every GEMM here shares: no empty dimension, 32-bit indexing, buffers of the shape's sizes.
void check_gemm_shape(const std::string& what, int m, int n, int k, std::size_t a, std::size_t b, std::size_t c) {
  if (m < 1 || n < 1 || k < 1)
    throw Error(what + ": shape " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                " has an empty dimension");
  const std::uint64_t mk = std::uint64_t(m) * k, kn = std::uint64_t(k) * n, mn = std::uint64_t(m) * n;
  if (mk >= (1ull << 31) || kn >= (1ull << 31) || mn >= (1ull << 31))
    throw Error(what + ": a matrix of shape " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                " exceeds 2^31 elements (32-bit indexing)");
  if (a != mk || b != kn || c != mn)
    throw Error(what + ": buffers do not fit the shape (A needs " + std::to_string(mk) + ", B " + std::to_string(kn) +
                ", C " + std::to_string(mn) + " elements; got " + std::to_string(a) + ", " + std::to_string(b) + ", " +
                std::to_string(c) + ")");
}

// One warm-up run (which also leaves the result), then `repeats` timed runs: the median in ms (0 for none).
template <class Run>
double time_kernel(const std::string& what, Run&& run_once, int repeats) {
  run_once();
  check_launch(what.c_str());
  std::vector<float> ms;
  EventTimer t;
  for (int i = 0; i < repeats; ++i) {
    t.begin();
    run_once();
    check(cudaGetLastError(), what.c_str());
    ms.push_back(t.end_ms());
  }
  check_launch(what.c_str());
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace

const char* gemm_name(Gemm g) {
  switch (g) {
    case Gemm::simt_f32: return "simt_f32";
    case Gemm::wmma_f32: return "wmma_f32";
    case Gemm::wmma_f16: return "wmma_f16";
    case Gemm::cublas_16f: return "cublas_16f";
    case Gemm::cublas_32f: return "cublas_32f";
    case Gemm::cublas_32f_fast_16f: return "cublas_32f_fast_16f";
  }
  return "?";
}

double gemm(Gemm kind, int m, int n, int k, std::span<const std::uint16_t> a, std::span<const std::uint16_t> b,
            std::span<float> c, int repeats) {
  const std::string what = std::string("gemm ") + gemm_name(kind);
  check_gemm_shape(what, m, n, k, a.size(), b.size(), c.size());
  const std::uint64_t mk = std::uint64_t(m) * k, kn = std::uint64_t(k) * n, mn = std::uint64_t(m) * n;
  const bool wmma = kind == Gemm::wmma_f32 || kind == Gemm::wmma_f16;
  if (wmma && (m % 16 || n % 16 || k % 16))
    throw Error(what + ": the WMMA kernel needs m, n, k multiples of 16, got " + std::to_string(m) + ", " +
                std::to_string(n) + ", " + std::to_string(k));
  require_device(what);
  DeviceBuffer<__half> da(mk, what.c_str()), db(kn, what.c_str()), dh(mn, what.c_str());
  DeviceBuffer<float> dc(mn, what.c_str());
  check(cudaMemcpy(da.ptr, a.data(), mk * 2, cudaMemcpyHostToDevice), what.c_str());
  check(cudaMemcpy(db.ptr, b.data(), kn * 2, cudaMemcpyHostToDevice), what.c_str());
  std::unique_ptr<Handle> handle;
  if (!wmma && kind != Gemm::simt_f32) handle = std::make_unique<Handle>();
  const bool half_out = kind == Gemm::wmma_f16 || kind == Gemm::cublas_16f;
  auto run_once = [&] {
    switch (kind) {
      case Gemm::simt_f32: {
        const dim3 block(16, 16), grid((n + 15) / 16, (m + 15) / 16);
        simt_gemm_kernel<<<grid, block>>>(da.ptr, db.ptr, dc.ptr, m, n, k);
        break;
      }
      case Gemm::wmma_f32:
      case Gemm::wmma_f16: {
        const std::uint64_t warps = std::uint64_t(m / 16) * (n / 16);
        const unsigned blocks = static_cast<unsigned>((warps * 32 + 127) / 128);
        if (kind == Gemm::wmma_f32)
          wmma_gemm_kernel<__half, __half, float, 16><<<blocks, 128>>>(da.ptr, db.ptr, dc.ptr, m, n, k);
        else wmma_gemm_kernel<__half, __half, __half, 16><<<blocks, 128>>>(da.ptr, db.ptr, dh.ptr, m, n, k);
        break;
      }
      default: {
        // Row-major C = A B is column-major C^T = B^T A^T: pass B first, with leading dimensions n and k.
        if (kind == Gemm::cublas_16f) {
          const __half alpha = __float2half(1.f), beta = __float2half(0.f);
          check_cublas(
              cublasGemmEx(handle->h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, db.ptr, CUDA_R_16F, n, da.ptr,
                           CUDA_R_16F, k, &beta, dh.ptr, CUDA_R_16F, n, CUBLAS_COMPUTE_16F, CUBLAS_GEMM_DEFAULT),
              what.c_str());
        } else {
          const float alpha = 1.f, beta = 0.f;
          const cublasComputeType_t ct = kind == Gemm::cublas_32f ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_16F;
          check_cublas(cublasGemmEx(handle->h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, db.ptr, CUDA_R_16F, n, da.ptr,
                                    CUDA_R_16F, k, &beta, dc.ptr, CUDA_R_32F, n, ct, CUBLAS_GEMM_DEFAULT),
                       what.c_str());
        }
      }
    }
    check(cudaGetLastError(), what.c_str());
  };
  const double ms = time_kernel(what, run_once, repeats);
  if (half_out) {
    half_to_float_kernel<<<grid_for(mn, 256), 256>>>(dh.ptr, dc.ptr, static_cast<std::uint32_t>(mn));
    check_launch(what.c_str());
  }
  check(cudaMemcpy(c.data(), dc.ptr, mn * 4, cudaMemcpyDeviceToHost), what.c_str());
  return ms;
}

const char* mma_kernel_name(MmaKernel kernel) {
  switch (kernel) {
    case MmaKernel::wmma_bf16: return "wmma_bf16_f32";
    case MmaKernel::wmma_tf32: return "wmma_tf32_f32";
    case MmaKernel::mma_sync_tf32_k8: return "mma_sync_tf32_k8";
    case MmaKernel::mma_sync_tf32_k4: return "mma_sync_tf32_k4";
    case MmaKernel::mma_sync_e4m3_k32: return "mma_sync_e4m3_k32";
    case MmaKernel::mma_sync_e5m2_k32: return "mma_sync_e5m2_k32";
  }
  return "?";
}

double mma_gemm_f32(MmaKernel kernel, int m, int n, int k, std::span<const float> a, std::span<const float> b,
                    std::span<float> c, int repeats) {
  const std::string what = std::string("tensor-core gemm ") + mma_kernel_name(kernel);
  const bool bf = kernel == MmaKernel::wmma_bf16, wmma = bf || kernel == MmaKernel::wmma_tf32;
  const bool fp8 = kernel == MmaKernel::mma_sync_e4m3_k32 || kernel == MmaKernel::mma_sync_e5m2_k32;
  const __nv_fp8_interpretation_t fp8_kind = kernel == MmaKernel::mma_sync_e5m2_k32 ? __NV_E5M2 : __NV_E4M3;
  const int tk = fp8 ? 32 : bf ? 16 : kernel == MmaKernel::mma_sync_tf32_k4 ? 4 : 8, tn = wmma ? 16 : 8;
  check_gemm_shape(what, m, n, k, a.size(), b.size(), c.size());
  if (m % 16 || n % tn || k % tk)
    throw Error(what + ": needs m a multiple of 16, n of " + std::to_string(tn) + " and k of " + std::to_string(tk) +
                ", got " + std::to_string(m) + ", " + std::to_string(n) + ", " + std::to_string(k));
  const std::uint64_t mk = std::uint64_t(m) * k, kn = std::uint64_t(k) * n, mn = std::uint64_t(m) * n;
  // Only values the input format holds: the kernel must not round, or the comparison would test the rounding.
  // fp8: the byte from CUDA's host conversion must decode to the value again.
  const char* format = fp8 ? (fp8_kind == __NV_E5M2 ? "fp8_e5m2" : "fp8_e4m3") : bf ? "bf16" : "tf32";
  std::vector<std::uint8_t> a8(fp8 ? mk : 0), b8(fp8 ? kn : 0);
  for (int which = 0; which < 2; ++which) {
    const std::span<const float> span = which ? b : a;
    for (std::size_t i = 0; i < span.size(); ++i) {
      bool held;
      if (fp8) {
        const __nv_fp8_storage_t q = __nv_cvt_float_to_fp8(span[i], __NV_NOSAT, fp8_kind);
        (which ? b8 : a8)[i] = q;
        held = __half2float(__half(__nv_cvt_fp8_to_halfraw(q, fp8_kind))) == span[i];
      } else {
        held = !(std::bit_cast<std::uint32_t>(span[i]) & (bf ? 0xffffu : 0x1fffu));
      }
      if (!held)
        throw Error(what + ": input element " + std::to_string(i) + " (" + std::to_string(span[i]) + ") is not a " +
                    format + " value");
    }
  }
  require_device(what);
  DeviceBuffer<float> dc(mn, what.c_str());
  const std::uint64_t warps = std::uint64_t(m / 16) * (n / tn);
  const unsigned blocks = static_cast<unsigned>((warps * 32 + 127) / 128);
  std::function<void()> run_once;
  DeviceBuffer<__nv_bfloat16> ha(bf ? mk : 0, what.c_str()), hb(bf ? kn : 0, what.c_str());
  DeviceBuffer<float> fa(bf || fp8 ? 0 : mk, what.c_str()), fb(bf || fp8 ? 0 : kn, what.c_str());
  DeviceBuffer<std::uint8_t> qa(fp8 ? mk : 0, what.c_str()), qb(fp8 ? kn : 0, what.c_str());
  if (fp8) {
    check(cudaMemcpy(qa.ptr, a8.data(), mk, cudaMemcpyHostToDevice), what.c_str());
    check(cudaMemcpy(qb.ptr, b8.data(), kn, cudaMemcpyHostToDevice), what.c_str());
    if (fp8_kind == __NV_E5M2)
      run_once = [&] { mma_sync_fp8_gemm_kernel<true><<<blocks, 128>>>(qa.ptr, qb.ptr, dc.ptr, m, n, k); };
    else run_once = [&] { mma_sync_fp8_gemm_kernel<false><<<blocks, 128>>>(qa.ptr, qb.ptr, dc.ptr, m, n, k); };
  } else if (bf) {
    auto upload = [&](std::span<const float> x, __nv_bfloat16* d) {
      std::vector<std::uint16_t> bits(x.size());
      for (std::size_t i = 0; i < x.size(); ++i)
        bits[i] = static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(x[i]) >> 16);
      check(cudaMemcpy(d, bits.data(), bits.size() * 2, cudaMemcpyHostToDevice), what.c_str());
    };
    upload(a, ha.ptr);
    upload(b, hb.ptr);
    run_once = [&] {
      wmma_gemm_kernel<__nv_bfloat16, __nv_bfloat16, float, 16><<<blocks, 128>>>(ha.ptr, hb.ptr, dc.ptr, m, n, k);
    };
  } else {
    check(cudaMemcpy(fa.ptr, a.data(), mk * 4, cudaMemcpyHostToDevice), what.c_str());
    check(cudaMemcpy(fb.ptr, b.data(), kn * 4, cudaMemcpyHostToDevice), what.c_str());
    if (kernel == MmaKernel::wmma_tf32)
      run_once = [&] {
        wmma_gemm_kernel<nvcuda::wmma::precision::tf32, float, float, 8>
            <<<blocks, 128>>>(fa.ptr, fb.ptr, dc.ptr, m, n, k);
      };
    else if (kernel == MmaKernel::mma_sync_tf32_k8)
      run_once = [&] { mma_sync_tf32_gemm_kernel<8><<<blocks, 128>>>(fa.ptr, fb.ptr, dc.ptr, m, n, k); };
    else run_once = [&] { mma_sync_tf32_gemm_kernel<4><<<blocks, 128>>>(fa.ptr, fb.ptr, dc.ptr, m, n, k); };
  }
  const double ms = time_kernel(what, run_once, repeats);
  check(cudaMemcpy(c.data(), dc.ptr, mn * 4, cudaMemcpyDeviceToHost), what.c_str());
  return ms;
}

}  // namespace mpsim::cuda
