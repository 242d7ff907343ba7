// Elementwise activations.
#pragma once

#include <cstddef>

namespace mpsim::nn {

// out (n) = max(inp, 0)
template <class T>
void relu_forward(T* out, const T* inp, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) out[i] = inp[i] > T(0) ? inp[i] : T(0);
}

// dinp (n) = dout where out > 0, else 0 (the subgradient 0 at 0, as PyTorch). dinp may alias dout.
template <class T>
void relu_backward(T* dinp, const T* dout, const T* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dinp[i] = out[i] > T(0) ? dout[i] : T(0);
}

}  // namespace mpsim::nn
