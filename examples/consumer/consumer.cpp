// A program outside the mpsim tree, built against an installed mpsim with pkg-config:
//
//   c++ -std=c++20 -O2 consumer.cpp $(pkg-config --cflags --libs mpsim) -o consumer
//
// It uses three layers (format with its run-time dispatched vector kernels, io, analysis), so it links
// only if the installed archive carries all of them. Given a file name it rounds that float32 .npy to
// fp16 and writes the result beside it; without one it rounds a few values of its own. Either way it
// prints what it did and checks the bulk engine against the scalar rounding function.
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include "mpsim/analysis/histogram.hpp"
#include "mpsim/format/bulk.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/io/npy.hpp"

int main(int argc, char** argv) {
  using namespace mpsim;
  std::vector<float> x = {1.0f, 0.1f, 1e-6f, 1e-8f, 70000.0f, -3.14159f};
  if (argc > 1) x = io::to_float(io::read_npy(argv[1]));

  std::vector<float> y(x.size());
  Stats stats;
  round_array(std::span<const float>(x), std::span<float>(y), fp16(), Rounding{}, &stats);
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (decode(round_bits(static_cast<double>(x[i]), fp16()), fp16()) != static_cast<double>(y[i]) && y[i] == y[i])
      ++mismatches;

  analysis::Log2Histogram h = analysis::make_float_histogram();
  h.add(std::span<const float>(x));
  if (argc > 1) io::write_npy(std::string(argv[1]) + ".fp16.npy", io::make_npy(std::span<const float>(y)));
  std::printf(
      "%zu values to fp16: %llu rounded, %llu underflow, %llu overflow; binades %d..%d; "
      "%zu mismatches against round_bits\n",
      x.size(), static_cast<unsigned long long>(stats.rounded), static_cast<unsigned long long>(stats.underflow),
      static_cast<unsigned long long>(stats.overflow), h.lowest_nonempty(), h.highest_nonempty(), mismatches);
  return mismatches == 0 ? 0 : 1;
}
