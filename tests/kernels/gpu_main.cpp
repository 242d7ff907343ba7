// test_kernels_gpu ends with 77 (meson SKIP) and one line when there is no CUDA device, so the GPU tests
// skip cleanly on machines with the toolkit but without a GPU (tests/catch_main.cpp calls this first).
#include <cstdio>

#include "mpsim_cuda.hpp"

extern "C" int mpsim_test_precheck() {
  const mpsim::cuda::DeviceInfo info = mpsim::cuda::device_info();
  if (!info.present) {
    std::printf("no CUDA device: skipped (%s)\n", info.why_absent.c_str());
    return 77;
  }
  std::printf("CUDA device: %s (compute capability %d.%d)\n", info.name.c_str(), info.cc_major, info.cc_minor);
  return -1;
}
