// The AMP kernels with PyTorch GradScaler semantics (aten/src/ATen/native/cuda/AmpKernels.cu):
//  _amp_foreach_non_finite_check_and_unscale_: per element, found_inf = 1 if !isfinite(val), and
//    val = (inv_scale == 1 ? val : val * inv_scale) computed in float (opmath) and cast back (RN);
//  _amp_update_scale_ (amp_update_scale_cuda_kernel, one thread): found_inf -> scale *= backoff,
//    tracker = 0; else successful = tracker + 1; if successful == growth_interval, new_scale =
//    float(scale * growth) and it replaces scale only if finite, tracker = 0; else tracker = successful.
#include <cuda_fp16.h>

#include "check.cuh"
#include "mpsim_cuda.hpp"

namespace mpsim::cuda {

namespace {

__global__ void unscale_f32_kernel(float* x, std::uint32_t n, float* found_inf, float inv_scale) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float v = x[i];
    if (!isfinite(v)) *found_inf = 1.f;
    x[i] = inv_scale == 1.f ? v : v * inv_scale;
  }
}

__global__ void unscale_f16_kernel(std::uint16_t* x, std::uint32_t n, float* found_inf, float inv_scale) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float v = __half2float(__ushort_as_half(x[i]));
    if (!isfinite(v)) *found_inf = 1.f;
    x[i] = __half_as_ushort(__float2half_rn(inv_scale == 1.f ? v : v * inv_scale));
  }
}

__global__ void update_scale_kernel(float* scale, int* tracker, const float* found_inf, double growth, double backoff,
                                    int interval) {
  if (*found_inf) {
    *scale = static_cast<float>((*scale) * backoff);
    *tracker = 0;
  } else {
    const int successful = *tracker + 1;
    if (successful == interval) {
      const float grown = static_cast<float>((*scale) * growth);
      if (isfinite(grown)) *scale = grown;  // do not grow past float's range to inf
      *tracker = 0;
    } else {
      *tracker = successful;
    }
  }
}

template <class T, class Kernel>
void unscale(std::vector<std::span<T>>& grads, float& found_inf, float inv_scale, Kernel kernel, const char* what) {
  DeviceBuffer<float> dfound(1, what);
  dfound.upload(&found_inf, 1, what);
  for (std::size_t t = 0; t < grads.size(); ++t) {
    auto& g = grads[t];
    check_size(g.size(), what);
    if (g.empty()) continue;
    const auto n = static_cast<std::uint32_t>(g.size());
    DeviceBuffer<T> d(n, what);
    d.upload(g.data(), n, what);
    kernel<<<grid_for(n, 256), 256>>>(d.ptr, n, dfound.ptr, inv_scale);
    check_launch(what);
    d.download(g.data(), n, what);
  }
  dfound.download(&found_inf, 1, what);
}

}  // namespace

void amp_unscale_f32(std::vector<std::span<float>> grads, float& found_inf, float inv_scale) {
  unscale(grads, found_inf, inv_scale, unscale_f32_kernel, "amp unscale (float)");
}

void amp_unscale_f16(std::vector<std::span<std::uint16_t>> grads, float& found_inf, float inv_scale) {
  unscale(grads, found_inf, inv_scale, unscale_f16_kernel, "amp unscale (fp16)");
}

void amp_update_scale(float& scale, int& growth_tracker, float found_inf, double growth_factor, double backoff_factor,
                      int growth_interval) {
  const char* what = "amp update scale";
  if (growth_interval < 1) throw Error(std::string(what) + ": growth_interval must be >= 1");
  DeviceBuffer<float> ds(1, what), df(1, what);
  DeviceBuffer<int> dt(1, what);
  ds.upload(&scale, 1, what);
  df.upload(&found_inf, 1, what);
  dt.upload(&growth_tracker, 1, what);
  update_scale_kernel<<<1, 1>>>(ds.ptr, dt.ptr, df.ptr, growth_factor, backoff_factor, growth_interval);
  check_launch(what);
  ds.download(&scale, 1, what);
  dt.download(&growth_tracker, 1, what);
}

}  // namespace mpsim::cuda
