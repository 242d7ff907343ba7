// hist + underflow over a 2^28-value float32 .npy file against a plain read of the same file, in the
// same run, single thread (the target: the analysis runs at >= 0.7x the read bandwidth).
// Both passes read the file through the page cache in the same chunk size; the analysis pass is the
// one `mpsim hist` and `mpsim underflow` make (streaming .npy input + RangeCounter, which yields the
// histogram and the underflow counts at every power-of-two scale at once).
// Environment: MPSIM_BENCH_LOG2N (default 28), MPSIM_BENCH_DIR (default the system temp dir).
#include <fmt/core.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "mpsim/analysis/inputs.hpp"
#include "mpsim/analysis/range_counter.hpp"
#include "mpsim/analysis/underflow.hpp"
#include "mpsim/io/npy.hpp"

namespace {

// CPU time of this thread (user + system): on a machine shared with other work, wall time measures
// the neighbours; both passes are single-threaded, so their CPU times compare like for like.
double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
double seconds_since(double t0) { return cpu_now() - t0; }

}  // namespace

int main() {
  const int log2n = std::getenv("MPSIM_BENCH_LOG2N") ? std::atoi(std::getenv("MPSIM_BENCH_LOG2N")) : 28;
  const std::size_t n = std::size_t{1} << log2n;
  const auto dir = std::getenv("MPSIM_BENCH_DIR") ? std::filesystem::path(std::getenv("MPSIM_BENCH_DIR"))
                                                  : std::filesystem::temp_directory_path();
  const auto file = dir / fmt::format("mpsim_bench_analysis_{}.npy", ::getpid());

  // Gradient-like data: log-normal magnitudes around 2^-20, random signs, 1 in 16 exact zeros.
  {
    const std::size_t block = std::size_t{1} << 20;
    std::vector<float> v(block);
    std::mt19937_64 g(1);
    std::normal_distribution<float> e(-20.0f, 5.0f);
    // A .npy 1.0 header (numpy/lib/format.py): magic, version, header length, dict padded to 64 bytes.
    std::string dict = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({},), }}", n);
    while ((10 + dict.size() + 1) % 64 != 0) dict += ' ';
    dict += '\n';
    std::ofstream out(file, std::ios::binary);
    const std::uint16_t hlen = static_cast<std::uint16_t>(dict.size());
    out.write("\x93NUMPY\x01\x00", 8);
    out.write(reinterpret_cast<const char*>(&hlen), 2);
    out.write(dict.data(), std::streamsize(dict.size()));
    for (std::size_t done = 0; done < n; done += block) {
      for (std::size_t i = 0; i < block; ++i)
        v[i] = (i & 15) == 0 ? 0.0f : ((g() & 1) ? -1.0f : 1.0f) * std::exp2(e(g));
      out.write(reinterpret_cast<const char*>(v.data()), std::streamsize(block * 4));
    }
  }
  const double mib = double(n) * 4 / (1 << 20);
  mpsim::analysis::InputOptions io;  // the commands' chunk size
  const std::size_t chunk_bytes = io.chunk_elements * 4;

  auto plain_read = [&] {
    std::ifstream in(file, std::ios::binary);
    std::vector<char> buf(chunk_bytes);
    std::uint64_t touch = 0;
    const double t0 = cpu_now();
    while (in.read(buf.data(), std::streamsize(buf.size())) || in.gcount() > 0) touch += std::uint8_t(buf[0]);
    const double s = seconds_since(t0);
    if (touch == 0xdeadbeef) fmt::print(" ");
    return s;
  };
  auto analysis = [&](mpsim::analysis::RangeCounter& c) {
    const double t0 = cpu_now();
    const auto failures = mpsim::analysis::for_each_tensor(
        {file.string()}, io, [&](const mpsim::analysis::TensorInfo&, const mpsim::analysis::TensorRead& read) {
          read([&](std::span<const float> f, std::span<const double>, std::uint64_t) { c.add(f); });
        });
    if (!failures.empty()) throw std::runtime_error(failures.front().message);
    // The reports themselves: histogram, counts at the scale, recommendation, the 41-scale sweep.
    const auto h = c.histogram();
    mpsim::analysis::UnderflowOptions uo;
    const auto j = mpsim::analysis::underflow_report_json("bench", c, uo, true);
    const double s = seconds_since(t0);
    if (h.total() != n || j["numel"].get<std::uint64_t>() != n) throw std::runtime_error("bench: counts do not add up");
    return s;
  };

  plain_read();  // warm the page cache
  double best_read = 1e30, best_analysis = 1e30;
  for (int rep = 0; rep < 3; ++rep) {
    best_read = std::min(best_read, plain_read());
    mpsim::analysis::RangeCounter c(mpsim::fp16());
    best_analysis = std::min(best_analysis, analysis(c));
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::filesystem::remove(file);
  const double read_bw = mib / best_read, an_bw = mib / best_analysis;
  fmt::print("bench_analysis: {} float32 values ({:.0f} MiB .npy), single thread, CPU time, best of 3\n", n, mib);
  fmt::print("  plain read:            {:8.3f} s  {:8.1f} MiB/s\n", best_read, read_bw);
  fmt::print("  hist + underflow fp16: {:8.3f} s  {:8.1f} MiB/s  ({:.2f}x the read bandwidth; target >= 0.7x)\n",
             best_analysis, an_bw, an_bw / read_bw);
  fmt::print("  peak resident memory:  {:.1f} MiB\n", double(ru.ru_maxrss) / 1024);
  return 0;
}
