// main() of test_kernels_gpu: exits 77 (meson SKIP) with one line when there is no CUDA device, so the
// GPU tests skip cleanly on machines with the toolkit but without a GPU.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include "mpsim_cuda.hpp"

int main(int argc, char** argv) {
  const mpsim::cuda::DeviceInfo info = mpsim::cuda::device_info();
  if (!info.present) {
    std::printf("no CUDA device: skipped (%s)\n", info.why_absent.c_str());
    return 77;
  }
  std::printf("CUDA device: %s (compute capability %d.%d)\n", info.name.c_str(), info.cc_major, info.cc_minor);
  return Catch::Session().run(argc, argv);
}
