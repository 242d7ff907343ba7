// Max pooling over non-overlapping K x K windows (stride K), NCHW.
#pragma once

#include <cstdint>

namespace mpsim::nn {

// out (B, C, H/K, W/K) = max over each window of inp (B, C, H, W); argmax (B, C, H/K, W/K) holds the
// flat index into inp of the winner (the first one in row-major order on ties).
template <class T>
void maxpool_forward(T* out, std::int32_t* argmax, const T* inp, int B, int C, int H, int W, int K) {
  const int OH = H / K, OW = W / K;
  for (int bc = 0; bc < B * C; ++bc) {
    const T* in = inp + static_cast<std::int64_t>(bc) * H * W;
    for (int oy = 0; oy < OH; ++oy)
      for (int ox = 0; ox < OW; ++ox) {
        int best = (oy * K) * W + ox * K;
        for (int ky = 0; ky < K; ++ky)
          for (int kx = 0; kx < K; ++kx) {
            const int idx = (oy * K + ky) * W + ox * K + kx;
            if (in[idx] > in[best]) best = idx;
          }
        const std::int64_t o = (static_cast<std::int64_t>(bc) * OH + oy) * OW + ox;
        out[o] = in[best];
        argmax[o] = static_cast<std::int32_t>(static_cast<std::int64_t>(bc) * H * W + best);
      }
  }
}

// dinp (B, C, H, W) = dout routed to each window's winner, 0 elsewhere (overwritten).
template <class T>
void maxpool_backward(T* dinp, const T* dout, const std::int32_t* argmax, int B, int C, int H, int W, int K) {
  const std::int64_t n_in = static_cast<std::int64_t>(B) * C * H * W;
  const std::int64_t n_out = static_cast<std::int64_t>(B) * C * (H / K) * (W / K);
  for (std::int64_t i = 0; i < n_in; ++i) dinp[i] = T(0);
  for (std::int64_t o = 0; o < n_out; ++o) dinp[argmax[o]] += dout[o];
}

}  // namespace mpsim::nn
