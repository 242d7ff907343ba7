// Device discovery and the copy-bandwidth reference.
#include <algorithm>
#include <vector>

#include "check.cuh"
#include "mpsim_cuda.hpp"

namespace mpsim::cuda {

DeviceInfo device_info() {
  DeviceInfo info;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();
    info.why_absent = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    return info;
  }
  if (count == 0) {
    info.why_absent = "cudaGetDeviceCount found 0 devices";
    return info;
  }
  cudaDeviceProp p{};
  e = cudaGetDeviceProperties(&p, 0);
  if (e != cudaSuccess) {
    cudaGetLastError();
    info.why_absent = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e);
    return info;
  }
  info.present = true;
  info.name = p.name;
  info.cc_major = p.major;
  info.cc_minor = p.minor;
  info.multiprocessors = p.multiProcessorCount;
  info.global_memory = p.totalGlobalMem;
  info.l2_bytes = static_cast<std::uint64_t>(p.l2CacheSize);
  int clock = 0, bus = 0;
  if (cudaDeviceGetAttribute(&clock, cudaDevAttrMemoryClockRate, 0) == cudaSuccess) info.memory_clock_khz = clock;
  if (cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, 0) == cudaSuccess) info.memory_bus_bits = bus;
  cudaGetLastError();
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  return info;
}

void require_device(const std::string& what) {
  const DeviceInfo info = device_info();
  if (!info.present) throw Error(what + ": no CUDA device (" + info.why_absent + ")");
}

double copy_bandwidth_gbs(std::uint64_t bytes, int repeats) {
  DeviceBuffer<unsigned char> a(bytes, "copy bandwidth"), b(bytes, "copy bandwidth");
  check(cudaMemset(a.ptr, 1, bytes), "cudaMemset");
  check(cudaMemcpy(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D (warm-up)");
  std::vector<float> ms;
  EventTimer t;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    t.begin();
    check(cudaMemcpy(b.ptr, a.ptr, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy D2D");
    ms.push_back(t.end_ms());
  }
  std::sort(ms.begin(), ms.end());
  return 2.0 * bytes / (ms[ms.size() / 2] * 1e-3) / 1e9;  // read + write
}

}  // namespace mpsim::cuda
