// GEMM C (m x n, float) = A (m x k) * B (k x n), fp16 inputs, all row-major:
//  - SIMT: one thread per C element, fp32 accumulation in the fixed order p = 0..k-1 with __fmaf_rn
//    (one rounding per step), so the CPU reproduces it bit for bit with std::fma on floats;
//  - tensor cores through WMMA 16x16x16 (mma.h), fp32 or fp16 accumulators: the order and internal
//    precision of the hardware's dot products are not specified, so these are compared as ulp distributions;
//  - cuBLAS cublasGemmEx with CUBLAS_COMPUTE_16F, _32F, _32F_FAST_16F.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <algorithm>
#include <memory>
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

template <class Acc>
__global__ void wmma_gemm_kernel(const __half* a, const __half* b, Acc* c, int m, int n, int k) {
  using namespace nvcuda;
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int tiles_n = n / 16;
  const int ti = warp / tiles_n, tj = warp % tiles_n;
  if (ti >= m / 16) return;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, Acc> fc;
  wmma::fill_fragment(fc, static_cast<Acc>(0.f));
  for (int p = 0; p < k; p += 16) {
    wmma::load_matrix_sync(fa, a + static_cast<std::size_t>(ti) * 16 * k + p, k);
    wmma::load_matrix_sync(fb, b + static_cast<std::size_t>(p) * n + tj * 16, n);
    wmma::mma_sync(fc, fa, fb, fc);
  }
  wmma::store_matrix_sync(c + static_cast<std::size_t>(ti) * 16 * n + tj * 16, fc, n, wmma::mem_row_major);
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
  if (m < 1 || n < 1 || k < 1)
    throw Error(what + ": shape " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                " has an empty dimension");
  const std::uint64_t mk = std::uint64_t(m) * k, kn = std::uint64_t(k) * n, mn = std::uint64_t(m) * n;
  if (mk >= (1ull << 31) || kn >= (1ull << 31) || mn >= (1ull << 31))
    throw Error(what + ": a matrix of shape " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k) +
                " exceeds 2^31 elements (32-bit indexing)");
  if (a.size() != mk || b.size() != kn || c.size() != mn)
    throw Error(what + ": buffers do not fit the shape (A needs " + std::to_string(mk) + ", B " + std::to_string(kn) +
                ", C " + std::to_string(mn) + " elements; got " + std::to_string(a.size()) + ", " +
                std::to_string(b.size()) + ", " + std::to_string(c.size()) + ")");
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
        if (kind == Gemm::wmma_f32) wmma_gemm_kernel<float><<<blocks, 128>>>(da.ptr, db.ptr, dc.ptr, m, n, k);
        else wmma_gemm_kernel<__half><<<blocks, 128>>>(da.ptr, db.ptr, dh.ptr, m, n, k);
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
  run_once();  // warm-up (and the result)
  check_launch(what.c_str());
  std::vector<float> ms;
  EventTimer t;
  for (int i = 0; i < repeats; ++i) {
    t.begin();
    run_once();
    ms.push_back(t.end_ms());
  }
  check_launch(what.c_str());
  if (half_out) {
    half_to_float_kernel<<<grid_for(mn, 256), 256>>>(dh.ptr, dc.ptr, static_cast<std::uint32_t>(mn));
    check_launch(what.c_str());
  }
  check(cudaMemcpy(c.data(), dc.ptr, mn * 4, cudaMemcpyDeviceToHost), what.c_str());
  if (ms.empty()) return 0;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace mpsim::cuda
