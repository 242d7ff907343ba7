// Tests of lib/mpsim/detail/cpu_features.hpp, the one CPUID / XCR0 reader every dispatch asks: each flag
// against two independent readings of the same CPU, GCC's __builtin_cpu_supports (libgcc's cpuinfo, which
// also checks XCR0) and the Linux kernel's /proc/cpuinfo flags (where the file is readable).
#include "catch_compat.hpp"

#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "mpsim/detail/cpu_features.hpp"

using namespace mpsim;

namespace {

struct Flag {
  const char* gcc;     // __builtin_cpu_supports name
  const char* linux_;  // /proc/cpuinfo flag
  bool ours;
};

std::set<std::string> proc_cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}

}  // namespace

TEST_CASE("cpu_features agrees with __builtin_cpu_supports and /proc/cpuinfo", "[cpu_features]") {
#if defined(__x86_64__) || defined(__i386__)
  const CpuFeatures& f = cpu_features();
  const Flag flags[] = {
      {"avx", "avx", f.avx},
      {"fma", "fma", f.fma},
      {"f16c", "f16c", f.f16c},
      {"avx2", "avx2", f.avx2},
      {"avx512f", "avx512f", f.avx512f},
      {"avx512dq", "avx512dq", f.avx512dq},
      {"avx512cd", "avx512cd", f.avx512cd},
      {"avx512bw", "avx512bw", f.avx512bw},
      {"avx512vl", "avx512vl", f.avx512vl},
  };
  // __builtin_cpu_supports takes a string literal only, so the GCC readings are spelled out in the order above.
  const bool gcc[] = {
      __builtin_cpu_supports("avx") != 0,      __builtin_cpu_supports("fma") != 0,
      __builtin_cpu_supports("f16c") != 0,     __builtin_cpu_supports("avx2") != 0,
      __builtin_cpu_supports("avx512f") != 0,  __builtin_cpu_supports("avx512dq") != 0,
      __builtin_cpu_supports("avx512cd") != 0, __builtin_cpu_supports("avx512bw") != 0,
      __builtin_cpu_supports("avx512vl") != 0,
  };
  const std::set<std::string> proc = proc_cpuinfo_flags();
  int compared = 0, mismatches = 0, proc_compared = 0;
  std::string have;
  for (std::size_t i = 0; i < std::size(flags); ++i) {
    ++compared;
    if (flags[i].ours != gcc[i]) {
      ++mismatches;
      std::printf("  %s: cpu_features %d, __builtin_cpu_supports %d\n", flags[i].gcc, flags[i].ours, gcc[i]);
    }
    if (!proc.empty()) {
      ++proc_compared;
      const bool listed = proc.count(flags[i].linux_) != 0;
      if (listed != flags[i].ours) {
        ++mismatches;
        std::printf("  %s: cpu_features %d, /proc/cpuinfo %d\n", flags[i].linux_, flags[i].ours, listed);
      }
    }
    if (flags[i].ours) have += std::string(" ") + flags[i].gcc;
  }
  // AVX512_BF16: GCC 12 knows the name; the kernel spells it avx512_bf16.
  if (!proc.empty()) {
    ++proc_compared;
    if ((proc.count("avx512_bf16") != 0) != f.avx512bf16) ++mismatches;
  }
  if (f.avx512bf16) have += " avx512bf16";
  CHECK(f.avx2_fma_f16c() == (f.avx2 && f.fma && f.f16c));
  CHECK(f.avx512_engine() == (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512cd));
  std::printf(
      "cpu_features: %d flags against __builtin_cpu_supports, %d against /proc/cpuinfo, %d mismatches;"
      " this CPU:%s\n",
      compared, proc_compared, mismatches, have.c_str());
  CHECK(mismatches == 0);
#else
  const CpuFeatures& f = cpu_features();
  CHECK_FALSE(f.avx2);  // no x86: every flag stays false
  std::printf("cpu_features: not an x86 CPU, every flag false\n");
#endif
}
