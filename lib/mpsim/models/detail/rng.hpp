// A counter-based random stream for the data generators and initialisers: the stream for (seed, a, b)
// is a pure function of its key, so a training batch is regenerated from (seed, batch_index) alone
// and a checkpoint needs no data-RNG state.
#pragma once

#include <cmath>
#include <cstdint>

#include "mpsim/format/round.hpp"

namespace mpsim::models {

class Rng {
 public:
  Rng(std::uint64_t seed, std::uint64_t a = 0, std::uint64_t b = 0)
      : state_(splitmix64(splitmix64(splitmix64(seed) ^ a) ^ (b * 0x9E3779B97F4A7C15ull))) {}
  std::uint64_t next() {
    // splitmix64 (Steele, Lea & Flood 2014) as a generator: a Weyl sequence through the mixer.
    state_ += 0x9E3779B97F4A7C15ull;
    return splitmix64(state_);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  int below(int n) { return static_cast<int>(uniform() * n); }  // 0..n-1
  double normal() {
    // Box-Muller; 1 - u keeps the log's argument in (0, 1].
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }

 private:
  std::uint64_t state_;
};

}  // namespace mpsim::models
