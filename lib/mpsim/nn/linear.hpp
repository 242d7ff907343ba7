// Fully connected layer.
#pragma once

#include "mpsim/nn/eigen.hpp"
#include "mpsim/nn/matmul.hpp"

namespace mpsim::nn {

// out (N, OC) = inp (N, C) · weight (OC, C)^T + bias (OC); bias may be null. gemm: the accumulator and,
// under a scaling recipe, the operands' quantizer (matmul.hpp; default: fp32, operands as given).
template <class T>
void linear_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC,
                    const GemmContext& gemm = {}) {
  MatMap<T> o(out, N, OC);
  matmul(o, CMatMap<T>(inp, N, C), CMatMap<T>(weight, OC, C).transpose(), gemm, recipe::Role::fprop_x,
         recipe::Role::fprop_w);
  if (bias) o.rowwise() += CVecMap<T>(bias, OC).transpose();
}

// dinp (N, C) = dout (N, OC) · weight (OC, C); dweight (OC, C) = dout^T · inp; dbias (OC) = Σ_n dout.
// All outputs are overwritten (the caller rounds them and adds weight gradients to its buffers);
// any of dinp / dweight / dbias may be null. gemm: the two products' context (dgrad, wgrad) (the bias sum is a
// reduction and stays in T).
template <class T>
void linear_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C, int OC,
                     const GemmContext& gemm = {}) {
  CMatMap<T> d(dout, N, OC);
  if (dinp)
    matmul(MatMap<T>(dinp, N, C), d, CMatMap<T>(weight, OC, C), gemm, recipe::Role::dgrad_dy, recipe::Role::dgrad_w);
  if (dweight)
    matmul(MatMap<T>(dweight, OC, C), d.transpose(), CMatMap<T>(inp, N, C), gemm, recipe::Role::wgrad_dy,
           recipe::Role::wgrad_x);
  if (dbias) VecMap<T>(dbias, OC) = d.colwise().sum().transpose();
}

}  // namespace mpsim::nn
