// Fully connected layer.
#pragma once

#include "mpsim/nn/eigen.hpp"
#include "mpsim/nn/matmul.hpp"

namespace mpsim::nn {

// out (N, OC) = inp (N, C) · weight (OC, C)^T + bias (OC); bias may be null. accumulate: see matmul.hpp
// (null: fp32).
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                    const Format* accumulate = nullptr) {
  MatMap<T> o(out, N, OC);
  matmul(o, CMatMap<T>(inp, N, C), CMatMap<T>(weight, OC, C).transpose(), accumulate);
  if (bias) o.rowwise() += CVecMap<T>(bias, OC).transpose();
}

// dinp (N, C) = dout (N, OC) · weight (OC, C); dweight (OC, C) = dout^T · inp; dbias (OC) = Σ_n dout.
// All outputs are overwritten (the caller rounds them and adds weight gradients to its buffers);
// any of dinp / dweight / dbias may be null. accumulate: the two products' accumulator (the bias sum is a
// reduction and stays in T).
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C,
                     int OC, const Format* accumulate = nullptr) {
  CMatMap<T> d(dout, N, OC);
  if (dinp) matmul(MatMap<T>(dinp, N, C), d, CMatMap<T>(weight, OC, C), accumulate);
  if (dweight) matmul(MatMap<T>(dweight, OC, C), d.transpose(), CMatMap<T>(inp, N, C), accumulate);
  if (dbias) VecMap<T>(dbias, OC) = d.colwise().sum().transpose();
}

}  // namespace mpsim::nn
