// Helpers for the model tests: bitwise snapshots of parameters and gradients.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "mpsim/nn/model.hpp"

namespace modeltest {

inline std::vector<std::uint32_t> bits_of(const std::vector<mpsim::nn::Param>& ps, bool grads) {
  std::vector<std::uint32_t> out;
  for (const auto& p : ps) {
    const auto s = grads ? p.grad : p.value;
    for (float v : s) {
      std::uint32_t b;
      std::memcpy(&b, &v, 4);
      out.push_back(b);
    }
  }
  return out;
}

inline void zero_grads(const std::vector<mpsim::nn::Param>& ps) {
  for (const auto& p : ps) std::fill(p.grad.begin(), p.grad.end(), 0.0f);
}

// A few plain SGD steps (momentum-free), for the tests that need a model that has moved.
inline double sgd_steps(mpsim::nn::Model& m, mpsim::nn::Precision& prec, int steps, double lr, float scale) {
  double loss = 0;
  for (int s = 0; s < steps; ++s) {
    auto ps = m.params();
    zero_grads(ps);
    loss = m.forward_backward(static_cast<std::uint64_t>(s), scale, prec);
    for (auto& p : ps)
      for (std::size_t i = 0; i < p.value.size(); ++i) p.value[i] -= static_cast<float>(lr * p.grad[i] / scale);
  }
  return loss;
}

}  // namespace modeltest
