// Fully connected layer.
#pragma once

#include "mpsim/nn/eigen.hpp"

namespace mpsim::nn {

// out (N, OC) = inp (N, C) · weight (OC, C)^T + bias (OC); bias may be null.
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  MatMap<T> o(out, N, OC);
  o.noalias() = CMatMap<T>(inp, N, C) * CMatMap<T>(weight, OC, C).transpose();
  if (bias) o.rowwise() += CVecMap<T>(bias, OC).transpose();
}

// dinp (N, C) = dout (N, OC) · weight (OC, C); dweight (OC, C) = dout^T · inp; dbias (OC) = Σ_n dout.
// All outputs are overwritten (the caller rounds them and adds weight gradients to its buffers);
// any of dinp / dweight / dbias may be null.
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                     int OC) {
  CMatMap<T> d(dout, N, OC);
  if (dinp) MatMap<T>(dinp, N, C).noalias() = d * CMatMap<T>(weight, OC, C);
  if (dweight) MatMap<T>(dweight, OC, C).noalias() = d.transpose() * CMatMap<T>(inp, N, C);
  if (dbias) VecMap<T>(dbias, OC) = d.colwise().sum().transpose();
}

}  // namespace mpsim::nn
