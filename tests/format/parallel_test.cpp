// Tests of lib/mpsim/parallel.hpp, the library's one thread fan-out: the ranges cover [0, n) once each,
// whatever n and the worker count; an exception on any worker reaches the caller (the lowest-numbered
// worker's, after every worker joined); every worker runs under the default MXCSR and the caller's comes
// back. The callers' results for several thread counts are compared in bulk_test, trainer_test and
// digest_test.
#include "catch_compat.hpp"

#include <atomic>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "mpsim/parallel.hpp"

using namespace mpsim;

TEST_CASE("parallel_for covers [0, n) exactly once in contiguous, aligned ranges", "[parallel]") {
  std::size_t cases = 0, bad = 0;
  for (std::size_t n : {0, 1, 5, 63, 64, 65, 1000, 4097, 100003}) {
    for (int workers : {1, 2, 3, 7, 16}) {
      for (std::size_t align : {1, 64}) {
        std::vector<int> hits(n, 0);
        std::vector<std::size_t> begins(static_cast<std::size_t>(workers)), ends(static_cast<std::size_t>(workers));
        parallel_for(
            n, workers, "test",
            [&](int w, std::size_t b, std::size_t e) {
              begins[static_cast<std::size_t>(w)] = b;
              ends[static_cast<std::size_t>(w)] = e;
              for (std::size_t i = b; i < e; ++i) ++hits[i];  // ranges are disjoint: no two workers share an i
            },
            align);
        for (std::size_t i = 0; i < n; ++i) bad += hits[i] != 1;
        for (int w = 0; w < workers; ++w) {
          const auto k = static_cast<std::size_t>(w);
          // Contiguous and in order: range w ends where range w + 1 begins; every begin is aligned.
          if (w + 1 < workers) bad += ends[k] != begins[k + 1];
          bad += begins[k] % align != 0;
        }
        bad += begins[0] != 0 || ends.back() != n;
        ++cases;
      }
    }
  }
  std::printf("parallel_for: %zu (n, workers, align) cases, %zu defects\n", cases, bad);
  CHECK(bad == 0);
}

TEST_CASE("an exception on any worker is rethrown on the caller after all workers finished", "[parallel]") {
  for (int workers : {1, 2, 4}) {
    for (int thrower = 0; thrower < workers; ++thrower) {
      std::atomic<int> finished{0};
      std::string caught;
      try {
        run_workers(workers, "test", [&](int w) {
          if (w >= thrower) {
            ++finished;
            throw std::runtime_error("worker " + std::to_string(w));
          }
          ++finished;
        });
      } catch (const std::runtime_error& e) {
        caught = e.what();
      }
      INFO(workers << " workers, the first thrower " << thrower << ": caught '" << caught << "'");
      // Every worker from `thrower` on throws: the lowest-numbered one's exception is the one reported.
      CHECK(caught == "worker " + std::to_string(thrower));
      CHECK(finished == workers);
    }
  }
}

#if defined(__x86_64__) || defined(__i386__)
TEST_CASE("every worker runs under the default MXCSR; the caller's comes back", "[parallel]") {
  const unsigned saved = _mm_getcsr();
  // FTZ (bit 15), DAZ (bit 6) and round toward zero (bits 13-14): what -ffast-math code may leave set.
  const unsigned caller = 0x1f80u | 0x8000u | 0x0040u | 0x6000u;
  _mm_setcsr(caller);
  std::vector<unsigned> seen(4, 0);
  run_workers(4, "test",
              [&](int w) { seen[static_cast<std::size_t>(w)] = _mm_getcsr() & ~0x3fu; });  // flags masked out
  const unsigned after = _mm_getcsr();
  _mm_setcsr(saved);
  for (int w = 0; w < 4; ++w) {
    std::printf("worker %d MXCSR %#x (want 0x1f80)\n", w, seen[static_cast<std::size_t>(w)]);
    CHECK(seen[static_cast<std::size_t>(w)] == 0x1f80u);
  }
  std::printf("caller MXCSR after %#x (was %#x)\n", after & ~0x3fu, caller);
  CHECK((after & ~0x3fu) == caller);
}
#endif
