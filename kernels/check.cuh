// Error checking for the CUDA wrappers: every runtime call and every launch goes through these, and a
// failure becomes an mpsim::Error naming the operation and CUDA's own message.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "mpsim/error.hpp"

namespace mpsim::cuda {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(std::string(what) + ": CUDA error " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
// After a launch: the launch error, then (synchronising) the execution error.
inline void check_launch(const char* what) {
  check(cudaGetLastError(), what);
  check(cudaDeviceSynchronize(), what);
}

inline void check_size(std::uint64_t n, const char* what) {
  if (n >= (std::uint64_t{1} << 32))
    throw Error(std::string(what) + ": " + std::to_string(n) +
                " elements exceed the kernels' 32-bit indexing (at most 2^32 - 1)");
}

// Device buffer that frees itself; allocation failure (out of memory) is an Error naming the size.
template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  std::uint64_t count = 0;
  DeviceBuffer() = default;
  DeviceBuffer(std::uint64_t n, const char* what) : count(n) {
    if (n == 0) return;
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T));
    if (e != cudaSuccess) {
      cudaGetLastError();  // clear the sticky-free allocation error
      throw Error(std::string(what) + ": cannot allocate " + std::to_string(n * sizeof(T)) +
                  " bytes on the device: " + cudaGetErrorString(e));
    }
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  void upload(const T* host, std::uint64_t n, const char* what) {
    if (n) check(cudaMemcpy(ptr, host, n * sizeof(T), cudaMemcpyHostToDevice), what);
  }
  void download(T* host, std::uint64_t n, const char* what) const {
    if (n) check(cudaMemcpy(host, ptr, n * sizeof(T), cudaMemcpyDeviceToHost), what);
  }
};

inline unsigned grid_for(std::uint64_t n, unsigned block) {
  const std::uint64_t g = (n + block - 1) / block;
  return static_cast<unsigned>(g < 65535u * 32u ? (g == 0 ? 1 : g) : 65535u * 32u);  // grid-stride loops beyond
}

struct EventTimer {
  cudaEvent_t start{}, stop{};
  EventTimer() {
    check(cudaEventCreate(&start), "cudaEventCreate");
    check(cudaEventCreate(&stop), "cudaEventCreate");
  }
  ~EventTimer() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  void begin() { check(cudaEventRecord(start), "cudaEventRecord"); }
  float end_ms() {
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    return ms;
  }
};

}  // namespace mpsim::cuda
