// The one Catch2 main (and Catch2's implementation, the slowest file in the tree to compile: built
// once) for every test executable. An executable may define mpsim_test_precheck() to end before Catch2
// runs: test_kernels_gpu returns 77 (meson SKIP) there when no CUDA device is present.
#define CATCH_CONFIG_RUNNER
#include "catch_compat.hpp"

// A return value >= 0 is the exit status; -1 runs the tests.
extern "C" int mpsim_test_precheck() __attribute__((weak));

int main(int argc, char** argv) {
  if (mpsim_test_precheck) {
    const int rc = mpsim_test_precheck();
    if (rc >= 0) return rc;
  }
  return Catch::Session().run(argc, argv);
}
