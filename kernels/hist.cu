// Exponent histogram of float data, with the bins of lib/mpsim/analysis/histogram.hpp's Log2Histogram
// for float (make_float_histogram: bin n counts 2^n <= |x| < 2^(n+1), n = -149..127; zero, NaN, -inf,
// +inf apart). The bin comes straight from the bits: the exponent field for normal numbers, the position
// of the leading mantissa bit for subnormals, so no log2 and no frexp.
#include <algorithm>
#include <cstring>
#include <vector>

#include "check.cuh"
#include "mpsim_cuda.hpp"

namespace mpsim::cuda {

namespace {

constexpr int kBins = 277;         // -149 .. 127
constexpr int kSlots = kBins + 4;  // + zero, nan, -inf, +inf
constexpr unsigned kThreads = 256;

__device__ __forceinline__ int slot_of(unsigned b) {
  const unsigned e = (b >> 23) & 0xffu, m = b & 0x7fffffu;
  if (e == 255) return m ? kBins + 1 : (b >> 31 ? kBins + 2 : kBins + 3);
  if (e == 0) return m ? (31 - __clz(m)) : kBins;  // subnormal m * 2^-149: n = floor(log2 m) - 149
  return static_cast<int>(e) - 127 + 149;
}

__global__ void __launch_bounds__(kThreads)
    hist_kernel(const float4* x4, const float* x, std::uint32_t n, unsigned long long* counts) {
  __shared__ unsigned int local[kSlots];
  for (int s = threadIdx.x; s < kSlots; s += blockDim.x) local[s] = 0;
  __syncthreads();
  const std::uint32_t n4 = n / 4;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
    const float4 v = x4[i];
    atomicAdd(&local[slot_of(__float_as_uint(v.x))], 1u);
    atomicAdd(&local[slot_of(__float_as_uint(v.y))], 1u);
    atomicAdd(&local[slot_of(__float_as_uint(v.z))], 1u);
    atomicAdd(&local[slot_of(__float_as_uint(v.w))], 1u);
  }
  if (blockIdx.x == 0)
    for (std::uint32_t i = n4 * 4 + threadIdx.x; i < n; i += blockDim.x)
      atomicAdd(&local[slot_of(__float_as_uint(x[i]))], 1u);
  __syncthreads();
  for (int s = threadIdx.x; s < kSlots; s += blockDim.x)
    if (local[s]) atomicAdd(&counts[s], static_cast<unsigned long long>(local[s]));
}

unsigned hist_grid(std::uint32_t n) {
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "exponent_histogram");
  // Enough blocks to fill the device, few enough that a block's 32-bit shared counters cannot overflow.
  return std::max(1u, std::min<unsigned>(grid_for(n / 4 + 1, kThreads), static_cast<unsigned>(sms) * 8));
}

}  // namespace

Histogram exponent_histogram(std::span<const float> x, double* gpu_ms) {
  const char* what = "exponent_histogram";
  check_size(x.size(), what);
  Histogram h;
  h.bins.assign(kBins, 0);
  if (x.empty()) return h;
  const auto n = static_cast<std::uint32_t>(x.size());
  DeviceBuffer<float> dx(n, what);
  DeviceBuffer<unsigned long long> dc(kSlots, what);
  dx.upload(x.data(), n, what);
  check(cudaMemset(dc.ptr, 0, kSlots * sizeof(unsigned long long)), what);
  EventTimer t;
  t.begin();
  hist_kernel<<<hist_grid(n), kThreads>>>(reinterpret_cast<const float4*>(dx.ptr), dx.ptr, n, dc.ptr);
  check(cudaGetLastError(), what);
  const float ms = t.end_ms();
  check_launch(what);
  if (gpu_ms) *gpu_ms = ms;
  std::vector<unsigned long long> c(kSlots);
  dc.download(c.data(), kSlots, what);
  for (int s = 0; s < kBins; ++s) h.bins[s] = c[s];
  h.zero = c[kBins];
  h.nan = c[kBins + 1];
  h.neg_inf = c[kBins + 2];
  h.pos_inf = c[kBins + 3];
  return h;
}

double histogram_bandwidth_gbs(std::uint64_t count, int repeats) {
  const char* what = "histogram bandwidth";
  check_size(count, what);
  const auto n = static_cast<std::uint32_t>(count);
  DeviceBuffer<float> dx(n, what);
  DeviceBuffer<unsigned long long> dc(kSlots, what);
  // Log-uniform-ish data: bit patterns spread over the exponents (a constant would serialise the atomics).
  std::vector<float> host(1u << 20);
  for (std::uint32_t i = 0; i < host.size(); ++i) {
    const std::uint32_t b = (i * 2654435761u) & 0x3fffffffu;  // positive, exponents 0..127
    std::memcpy(&host[i], &b, 4);
  }
  for (std::uint64_t off = 0; off < n; off += host.size())
    check(cudaMemcpy(dx.ptr + off, host.data(), std::min<std::uint64_t>(host.size(), n - off) * 4,
                     cudaMemcpyHostToDevice),
          what);
  std::vector<float> ms;
  EventTimer t;
  for (int i = 0; i <= std::max(1, repeats); ++i) {
    check(cudaMemset(dc.ptr, 0, kSlots * sizeof(unsigned long long)), what);
    t.begin();
    hist_kernel<<<hist_grid(n), kThreads>>>(reinterpret_cast<const float4*>(dx.ptr), dx.ptr, n, dc.ptr);
    check(cudaGetLastError(), what);
    const float e = t.end_ms();
    if (i) ms.push_back(e);
  }
  std::sort(ms.begin(), ms.end());
  return 4.0 * n / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace mpsim::cuda
