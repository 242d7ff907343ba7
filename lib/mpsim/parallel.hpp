// The one thread fan-out of the library (bulk engine, training, study, verify, the host digests):
// fixed contiguous ranges or a fixed number of workers, each worker under the default floating-point
// environment, and an exception on any worker rethrown on the caller after every worker has joined.
// Results never depend on the thread count: callers give each worker its own output (or merge with an
// associative operation), and the ranges are a function of (n, workers) only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <exception>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>  // _mm_getcsr / _mm_setcsr (SSE: every x86-64 CPU)
#endif

namespace mpsim {

// The library's floating-point environment: the caller's MXCSR may have DAZ and FTZ on (a program linked
// with -ffast-math runs so) or another rounding mode, and F16C's vcvtps2ph reads float subnormal inputs
// as zero under DAZ, as do the float comparisons and conversions of the scalar paths. Each worker runs
// under the default MXCSR (all exceptions masked, nearest-even, no DAZ/FTZ) and gives the thread its own
// back, flags included, when it is done.
class DefaultFpEnv {
 public:
#if defined(__x86_64__) || defined(__i386__)
  DefaultFpEnv() : saved_(_mm_getcsr()) { _mm_setcsr(0x1f80u); }  // 0x1f80: MXCSR's reset value (Intel SDM 10.2.3)
  ~DefaultFpEnv() { _mm_setcsr(saved_); }
#else
  DefaultFpEnv() = default;
#endif
  DefaultFpEnv(const DefaultFpEnv&) = delete;
  DefaultFpEnv& operator=(const DefaultFpEnv&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  unsigned saved_;
#endif
};

namespace parallel_detail {
// Test hook: throws std::runtime_error on the last worker of a fan-out named `site` when the environment
// variable MPSIM_INJECT_WORKER_FAILURE equals `site` (tests/tools check that the CLI then exits 3 with
// the message instead of std::terminate). The variable is read once.
void inject_failure(std::string_view site, int worker, int workers);
}  // namespace parallel_detail

// Runs body(worker) for every worker in [0, workers): worker 0 on the calling thread, the others on
// threads of their own, each under DefaultFpEnv. Returns when all are done; if any threw, rethrows the
// exception of the lowest-numbered worker that threw (the same one whatever the timing). `site` names
// the fan-out for the test hook.
template <class Body>
void run_workers(int workers, std::string_view site, Body&& body) {
  if (workers <= 1) {  // no thread, no allocation: the bulk engine calls this for every small array
    const DefaultFpEnv env;
    parallel_detail::inject_failure(site, 0, 1);
    body(0);
    return;
  }
  std::vector<std::exception_ptr> failures(static_cast<std::size_t>(workers));
  auto guarded = [&](int w) {
    try {
      const DefaultFpEnv env;
      parallel_detail::inject_failure(site, w, workers);
      body(w);
    } catch (...) {
      failures[static_cast<std::size_t>(w)] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(workers - 1));
  try {
    for (int w = 1; w < workers; ++w) pool.emplace_back(guarded, w);
  } catch (...) {
    // No thread could be started: the ones that were finish their ranges, then the caller sees why.
    for (auto& t : pool) t.join();
    throw;
  }
  guarded(0);
  for (auto& t : pool) t.join();
  for (const auto& f : failures)
    if (f) std::rethrow_exception(f);
}

// The first index of range k when [0, n) is cut into `workers` contiguous ranges: n / workers * k rounded
// down to a multiple of `align` (the last range ends at n and takes the remainder).
inline std::size_t range_begin(std::size_t n, int workers, int k, std::size_t align = 1) {
  if (k >= workers) return n;
  return n / static_cast<std::size_t>(workers) * static_cast<std::size_t>(k) / align * align;
}

// Runs body(worker, begin, end) over `workers` contiguous ranges of [0, n) (range_begin), as run_workers.
template <class Body>
void parallel_for(std::size_t n, int workers, std::string_view site, Body&& body, std::size_t align = 1) {
  workers = std::max(workers, 1);
  run_workers(workers, site,
              [&](int w) { body(w, range_begin(n, workers, w, align), range_begin(n, workers, w + 1, align)); });
}

// The number of hardware threads (at least 1): what `threads = 0` means everywhere.
inline int hardware_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace mpsim
