// Conversions float -> fp16 / bf16 (every rounding the intrinsics offer) and float -> fp8 (with and
// without saturation), and back; plus the bandwidth benchmark of the fp16 RN conversion.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <vector>

#include "check.cuh"
#include "hw_ops.cuh"
#include "mpsim_cuda.hpp"

namespace mpsim::cuda {

namespace {

template <int Fmt, int Mode>
__global__ void to16_kernel(const float* in, std::uint16_t* out, std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = hw_to16<Fmt, Mode>(in[i]);
}

template <int Fp8, bool Sat>
__global__ void to_fp8_kernel(const float* in, std::uint8_t* out, std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = hw_to_fp8<Fp8, Sat>(in[i]);
}

template <int Fmt>
__global__ void from16_kernel(const std::uint16_t* in, float* out, std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = Fmt == 0 ? __half2float(__ushort_as_half(in[i])) : __bfloat162float(__ushort_as_bfloat16(in[i]));
}

template <int Fp8>
__global__ void from_fp8_kernel(const std::uint8_t* in, float* out, std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(in[i], Fp8 == 0 ? __NV_E4M3 : __NV_E5M2);
    out[i] = __half2float(__half(h));
  }
}

// Bandwidth path: 4 floats (16 bytes) per thread per step, 8 bytes written.
__global__ void to_fp16_rn_vec4_kernel(const float4* in, uint2* out, std::uint32_t n4) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += gridDim.x * blockDim.x) {
    const float4 v = in[i];
    const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
    uint2 o;
    o.x = *reinterpret_cast<const unsigned*>(&lo);
    o.y = *reinterpret_cast<const unsigned*>(&hi);
    out[i] = o;
  }
}

constexpr unsigned kBlock = 256;

}  // namespace

void convert_to_16(std::span<const float> in, std::span<std::uint16_t> out, Half16 fmt, std::uint8_t mode) {
  const char* what = "convert_to_16";
  if (in.size() != out.size()) throw Error(std::string(what) + ": input and output sizes differ");
  check_size(in.size(), what);
  if (mode > emu::kDown) throw Error(std::string(what) + ": the intrinsics offer rn, rz, ru, rd only");
  if (in.empty()) return;
  const auto n = static_cast<std::uint32_t>(in.size());
  DeviceBuffer<float> din(n, what);
  DeviceBuffer<std::uint16_t> dout(n, what);
  din.upload(in.data(), n, what);
  const unsigned g = grid_for(n, kBlock);
  const bool bf = fmt == Half16::bf16;
  switch (mode) {
    case emu::kNearestEven:
      bf ? to16_kernel<1, 0><<<g, kBlock>>>(din.ptr, dout.ptr, n)
         : to16_kernel<0, 0><<<g, kBlock>>>(din.ptr, dout.ptr, n);
      break;
    case emu::kTowardZero:
      bf ? to16_kernel<1, 1><<<g, kBlock>>>(din.ptr, dout.ptr, n)
         : to16_kernel<0, 1><<<g, kBlock>>>(din.ptr, dout.ptr, n);
      break;
    case emu::kUp:
      bf ? to16_kernel<1, 2><<<g, kBlock>>>(din.ptr, dout.ptr, n)
         : to16_kernel<0, 2><<<g, kBlock>>>(din.ptr, dout.ptr, n);
      break;
    default:
      bf ? to16_kernel<1, 3><<<g, kBlock>>>(din.ptr, dout.ptr, n)
         : to16_kernel<0, 3><<<g, kBlock>>>(din.ptr, dout.ptr, n);
      break;
  }
  check_launch(what);
  dout.download(out.data(), n, what);
}

void convert_to_fp8(std::span<const float> in, std::span<std::uint8_t> out, Fp8 fmt, bool satfinite) {
  const char* what = "convert_to_fp8";
  if (in.size() != out.size()) throw Error(std::string(what) + ": input and output sizes differ");
  check_size(in.size(), what);
  if (in.empty()) return;
  const auto n = static_cast<std::uint32_t>(in.size());
  DeviceBuffer<float> din(n, what);
  DeviceBuffer<std::uint8_t> dout(n, what);
  din.upload(in.data(), n, what);
  const unsigned g = grid_for(n, kBlock);
  if (fmt == Fp8::e4m3)
    satfinite ? to_fp8_kernel<0, true><<<g, kBlock>>>(din.ptr, dout.ptr, n)
              : to_fp8_kernel<0, false><<<g, kBlock>>>(din.ptr, dout.ptr, n);
  else
    satfinite ? to_fp8_kernel<1, true><<<g, kBlock>>>(din.ptr, dout.ptr, n)
              : to_fp8_kernel<1, false><<<g, kBlock>>>(din.ptr, dout.ptr, n);
  check_launch(what);
  dout.download(out.data(), n, what);
}

void convert_from_16(std::span<const std::uint16_t> in, std::span<float> out, Half16 fmt) {
  const char* what = "convert_from_16";
  if (in.size() != out.size()) throw Error(std::string(what) + ": input and output sizes differ");
  check_size(in.size(), what);
  if (in.empty()) return;
  const auto n = static_cast<std::uint32_t>(in.size());
  DeviceBuffer<std::uint16_t> din(n, what);
  DeviceBuffer<float> dout(n, what);
  din.upload(in.data(), n, what);
  const unsigned g = grid_for(n, kBlock);
  fmt == Half16::bf16 ? from16_kernel<1><<<g, kBlock>>>(din.ptr, dout.ptr, n)
                      : from16_kernel<0><<<g, kBlock>>>(din.ptr, dout.ptr, n);
  check_launch(what);
  dout.download(out.data(), n, what);
}

void convert_from_fp8(std::span<const std::uint8_t> in, std::span<float> out, Fp8 fmt) {
  const char* what = "convert_from_fp8";
  if (in.size() != out.size()) throw Error(std::string(what) + ": input and output sizes differ");
  check_size(in.size(), what);
  if (in.empty()) return;
  const auto n = static_cast<std::uint32_t>(in.size());
  DeviceBuffer<std::uint8_t> din(n, what);
  DeviceBuffer<float> dout(n, what);
  din.upload(in.data(), n, what);
  const unsigned g = grid_for(n, kBlock);
  fmt == Fp8::e4m3 ? from_fp8_kernel<0><<<g, kBlock>>>(din.ptr, dout.ptr, n)
                   : from_fp8_kernel<1><<<g, kBlock>>>(din.ptr, dout.ptr, n);
  check_launch(what);
  dout.download(out.data(), n, what);
}

double convert_bandwidth_gbs(std::uint64_t count, int repeats) {
  const char* what = "convert bandwidth";
  check_size(count, what);
  count &= ~std::uint64_t{3};
  DeviceBuffer<float> din(count, what);
  DeviceBuffer<std::uint16_t> dout(count, what);
  check(cudaMemset(din.ptr, 0, count * sizeof(float)), what);
  const auto n4 = static_cast<std::uint32_t>(count / 4);
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), what);
  const unsigned g = std::min<unsigned>(grid_for(n4, kBlock), static_cast<unsigned>(sms) * 16);
  std::vector<float> ms;
  EventTimer t;
  for (int i = 0; i <= std::max(1, repeats); ++i) {
    t.begin();
    to_fp16_rn_vec4_kernel<<<g, kBlock>>>(reinterpret_cast<const float4*>(din.ptr), reinterpret_cast<uint2*>(dout.ptr),
                                          n4);
    check(cudaGetLastError(), what);
    const float e = t.end_ms();
    if (i) ms.push_back(e);  // the first run warms up
  }
  std::sort(ms.begin(), ms.end());
  return 6.0 * count / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace mpsim::cuda
