// Losses, computed in the caller's scalar type (fp32 for the models: the policy never rounds them).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace mpsim::nn {

// losses (N) = -log softmax(logits (N, V))[targets[n]]; probs (N, V) = softmax, kept for backward.
// The maximum is subtracted first so exp never overflows.
template <class T>
void softmax_cross_entropy_forward(T* losses, T* probs, const T* logits, const std::int32_t* targets, int N, int V) {
  for (int n = 0; n < N; ++n) {
    const T* z = logits + static_cast<std::int64_t>(n) * V;
    T* p = probs + static_cast<std::int64_t>(n) * V;
    T mx = z[0];
    for (int v = 1; v < V; ++v) mx = std::max(mx, z[v]);
    T sum = 0;
    for (int v = 0; v < V; ++v) {
      p[v] = std::exp(z[v] - mx);
      sum += p[v];
    }
    for (int v = 0; v < V; ++v) p[v] /= sum;
    // -log p[target] = log(sum) - (z[target] - mx): exact even where p[target] underflows.
    losses[n] = std::log(sum) - (z[targets[n]] - mx);
  }
}

// dlogits (N, V) = dloss[n] * (probs - onehot(targets[n])) (overwritten). dloss[n] = 0 skips row n.
template <class T>
void softmax_cross_entropy_backward(T* dlogits, const T* probs, const std::int32_t* targets, const T* dloss, int N,
                                    int V) {
  for (int n = 0; n < N; ++n) {
    const T* p = probs + static_cast<std::int64_t>(n) * V;
    T* d = dlogits + static_cast<std::int64_t>(n) * V;
    for (int v = 0; v < V; ++v) d[v] = dloss[n] * p[v];
    d[targets[n]] -= dloss[n];
  }
}

// Smooth L1 with beta 1 (Girshick, "Fast R-CNN", 2015, eq. 3; SSD's localisation loss):
// returns Σ_i s(pred[i] - target[i]) with s(d) = 0.5 d^2 if |d| < 1, |d| - 0.5 otherwise.
template <class T>
T smooth_l1_forward(const T* pred, const T* target, std::size_t n) {
  T sum = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const T d = pred[i] - target[i];
    const T a = std::abs(d);
    sum += a < T(1) ? T(0.5) * d * d : a - T(0.5);
  }
  return sum;
}

// dpred (n) = dloss * s'(pred - target) = dloss * clamp(pred - target, -1, 1) (overwritten).
template <class T>
void smooth_l1_backward(T* dpred, const T* pred, const T* target, T dloss, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) dpred[i] = dloss * std::clamp(pred[i] - target[i], T(-1), T(1));
}

}  // namespace mpsim::nn
