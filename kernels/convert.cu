// Conversions float -> fp16 / bf16 (every rounding the intrinsics offer) and float -> fp8 (with and
// without saturation), and back; plus the bandwidth benchmark of the fp16 RN conversion.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <iterator>
#include <string>
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

// Bandwidth paths. Every variant converts with the same __floats2half2_rn; they differ only in how memory is
// walked (floats per thread per step, grid size, cache hints), which is all the bandwidth depends on.
// PerThread 4: one 16-byte load, one 8-byte store; 8 (16): two (four) 16-byte loads, one (two) 16-byte stores. Stream
// uses the evict-first loads and stores (__ldcs / __stcs): the data is touched once.
template <int PerThread, bool Stream>
__global__ void to_fp16_rn_bandwidth_kernel(const float4* __restrict__ in, void* __restrict__ out,
                                            std::uint32_t groups) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < groups; i += gridDim.x * blockDim.x) {
    if constexpr (PerThread == 4) {
      const float4 v = Stream ? __ldcs(in + i) : in[i];
      const __half2 lo = __floats2half2_rn(v.x, v.y), hi = __floats2half2_rn(v.z, v.w);
      uint2 o;
      o.x = *reinterpret_cast<const unsigned*>(&lo);
      o.y = *reinterpret_cast<const unsigned*>(&hi);
      if constexpr (Stream) __stcs(static_cast<uint2*>(out) + i, o);
      else static_cast<uint2*>(out)[i] = o;
    } else {
      // All loads first (PerThread / 4 of 16 bytes in flight), then the 16-byte stores.
      constexpr int kLoads = PerThread / 4;
      float4 v[kLoads];
#pragma unroll
      for (int j = 0; j < kLoads; ++j) v[j] = Stream ? __ldcs(in + kLoads * i + j) : in[kLoads * i + j];
#pragma unroll
      for (int j = 0; j < kLoads / 2; ++j) {
        const float4 a = v[2 * j], b = v[2 * j + 1];
        const __half2 h0 = __floats2half2_rn(a.x, a.y), h1 = __floats2half2_rn(a.z, a.w);
        const __half2 h2 = __floats2half2_rn(b.x, b.y), h3 = __floats2half2_rn(b.z, b.w);
        uint4 o;
        o.x = *reinterpret_cast<const unsigned*>(&h0);
        o.y = *reinterpret_cast<const unsigned*>(&h1);
        o.z = *reinterpret_cast<const unsigned*>(&h2);
        o.w = *reinterpret_cast<const unsigned*>(&h3);
        uint4* dst = static_cast<uint4*>(out) + (kLoads / 2) * i + j;
        if constexpr (Stream) __stcs(dst, o);
        else *dst = o;
      }
    }
  }
}

// Spread bit patterns (every exponent, both signs, NaNs) so that the variants are checked as well as timed.
__global__ void fill_patterns_kernel(float* x, std::uint32_t n) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = __uint_as_float(i * 2654435761u);
}

__global__ void count_differing_kernel(const std::uint16_t* a, const std::uint16_t* b, std::uint32_t n,
                                       unsigned long long* count) {
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (a[i] != b[i]) atomicAdd(count, 1ull);
}

struct BandwidthVariant {
  const char* name;
  int per_thread;
  bool stream;
  bool capped;  // grid of 16 blocks per SM with a grid-stride loop, else one pass (a thread per group)
};
constexpr BandwidthVariant kBandwidthVariants[] = {
    {"vec4, 16 blocks/SM", 4, false, true},          {"vec4, one pass", 4, false, false},
    {"vec8, 16 blocks/SM", 8, false, true},          {"vec8, one pass", 8, false, false},
    {"vec8, one pass, streaming", 8, true, false},   {"vec16, one pass", 16, false, false},
    {"vec16, one pass, streaming", 16, true, false},
};

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

std::vector<std::string> convert_bandwidth_variants() {
  std::vector<std::string> names;
  for (const auto& v : kBandwidthVariants) names.emplace_back(v.name);
  return names;
}

double convert_bandwidth_gbs(std::uint64_t count, int repeats, std::size_t variant, std::uint64_t* differing) {
  const char* what = "convert bandwidth";
  check_size(count, what);
  if (variant >= std::size(kBandwidthVariants)) throw Error(std::string(what) + ": no such variant");
  const BandwidthVariant& v = kBandwidthVariants[variant];
  count &= ~std::uint64_t{15};
  DeviceBuffer<float> din(count, what);
  DeviceBuffer<std::uint16_t> dout(count, what);
  const auto n = static_cast<std::uint32_t>(count);
  fill_patterns_kernel<<<grid_for(n, kBlock), kBlock>>>(din.ptr, n);
  check_launch(what);
  const auto groups = static_cast<std::uint32_t>(count / static_cast<std::uint64_t>(v.per_thread));
  int sms = 0;
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), what);
  const unsigned full = grid_for(groups, kBlock);
  const unsigned g = v.capped ? std::min<unsigned>(full, static_cast<unsigned>(sms) * 16) : full;
  const auto* in = reinterpret_cast<const float4*>(din.ptr);
  std::vector<float> ms;
  EventTimer t;
  for (int i = 0; i <= std::max(1, repeats); ++i) {
    t.begin();
    if (v.per_thread == 4)
      v.stream ? to_fp16_rn_bandwidth_kernel<4, true><<<g, kBlock>>>(in, dout.ptr, groups)
               : to_fp16_rn_bandwidth_kernel<4, false><<<g, kBlock>>>(in, dout.ptr, groups);
    else if (v.per_thread == 8)
      v.stream ? to_fp16_rn_bandwidth_kernel<8, true><<<g, kBlock>>>(in, dout.ptr, groups)
               : to_fp16_rn_bandwidth_kernel<8, false><<<g, kBlock>>>(in, dout.ptr, groups);
    else
      v.stream ? to_fp16_rn_bandwidth_kernel<16, true><<<g, kBlock>>>(in, dout.ptr, groups)
               : to_fp16_rn_bandwidth_kernel<16, false><<<g, kBlock>>>(in, dout.ptr, groups);
    check(cudaGetLastError(), what);
    const float e = t.end_ms();
    if (i) ms.push_back(e);  // the first run warms up
  }
  if (differing) {  // the output against the scalar kernel the exhaustive comparisons use
    DeviceBuffer<std::uint16_t> ref(count, what);
    DeviceBuffer<unsigned long long> c(1, what);
    check(cudaMemset(c.ptr, 0, sizeof(unsigned long long)), what);
    to16_kernel<0, 0><<<grid_for(n, kBlock), kBlock>>>(din.ptr, ref.ptr, n);
    count_differing_kernel<<<grid_for(n, kBlock), kBlock>>>(dout.ptr, ref.ptr, n, c.ptr);
    check_launch(what);
    unsigned long long h = 0;
    c.download(&h, 1, what);
    *differing = h;
  }
  std::sort(ms.begin(), ms.end());
  return 6.0 * count / (ms[ms.size() / 2] * 1e-3) / 1e9;
}

}  // namespace mpsim::cuda
