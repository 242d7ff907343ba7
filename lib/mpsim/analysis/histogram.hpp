// Log2Histogram: counts of values by binade (power-of-two magnitude band), the picture behind every
// gradient-underflow discussion (Micikevicius et al., "Mixed Precision Training", ICLR 2018, Fig. 3).
//
// Bin n holds 2^n <= |x| < 2^(n+1). Note that std::frexp returns the exponent n+1 for such x (its
// mantissa lies in [0.5, 1)): a histogram built on frexp's exponent is shifted by one binade. Here the
// binade is read from the IEEE exponent field directly (and from the leading one for subnormals), so
// no frexp or log2 runs per element. Zeros, NaNs and the two infinities have buckets of their own;
// a zero never lands in a magnitude bin.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

namespace mpsim::analysis {

struct Log2Histogram {
  int min_exp = 0;                  // binade of bins[0]
  int max_exp = -1;                 // binade of bins.back()
  std::vector<std::uint64_t> bins;  // bins[n - min_exp]: count of 2^n <= |x| < 2^(n+1)
  std::uint64_t zero = 0;           // +0 and -0
  std::uint64_t nan = 0;
  std::uint64_t neg_inf = 0;
  std::uint64_t pos_inf = 0;

  // Counts every element. A finite value outside [2^min_exp, 2^(max_exp+1)) widens the range (so a
  // float-ranged histogram can take doubles); nothing is ever clamped into an end bin.
  void add(std::span<const float> values);
  void add(std::span<const double> values);
  void add(double value);

  // The histogram of the union: the range becomes the union of both ranges.
  Log2Histogram& operator+=(const Log2Histogram& other);

  std::uint64_t total() const;           // every element counted, all buckets
  std::uint64_t finite_nonzero() const;  // sum of the magnitude bins
  std::uint64_t count(int n) const;      // bins[n - min_exp], 0 outside the range
  // Binades of the smallest and largest non-zero finite value seen; {0, -1} when there is none.
  int lowest_nonempty() const;
  int highest_nonempty() const;
  // Makes [lo, hi] part of the range (bins added are zero).
  void widen(int lo, int hi);

  // {"min_exp","max_exp","zero","nan","neg_inf","pos_inf","total","bins":[[n,count],...]} with only
  // the non-empty bins listed, in increasing n.
  nlohmann::json to_json() const;
  static Log2Histogram from_json(const nlohmann::json&);  // throws mpsim::Error on a malformed object

  // Every counter in one fixed layout, whatever the range: {zero, nan, neg_inf, pos_inf, then the bins of
  // double's binades 2^-1074 .. 2^1023} (kCountsSize values), so that histograms of several processes merge
  // with one element-wise sum of int64 (torch.distributed.all_reduce). from_counts() rebuilds the float
  // range (make_float_histogram) widened to the outermost non-empty bin: the histogram those counts came
  // from, if it was float-ranged (every histogram add() builds from float or double values is). Throws
  // mpsim::Error on a wrong size or a negative count.
  static constexpr int kCountsMinExp = -1074, kCountsMaxExp = 1023;
  static constexpr std::size_t kCountsSize = 4 + (kCountsMaxExp - kCountsMinExp + 1);
  std::vector<std::int64_t> counts() const;
  static Log2Histogram from_counts(std::span<const std::int64_t> counts);

  friend bool operator==(const Log2Histogram&, const Log2Histogram&) = default;
};

// An empty histogram with one bin per power of two over [2^min_exp, 2^(max_exp+1)).
Log2Histogram make_histogram(int min_exp, int max_exp);
// Bins from float's smallest subnormal 2^-149 to its largest binade 2^127.
Log2Histogram make_float_histogram();
// Bins from double's smallest subnormal 2^-1074 to its largest binade 2^1023.
Log2Histogram make_double_histogram();

// The binade n of a finite non-zero x (2^n <= |x| < 2^(n+1)), from the bits.
int binade(float x);
int binade(double x);

}  // namespace mpsim::analysis
