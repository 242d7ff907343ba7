// 2-D convolution as im2col + one GEMM over the whole batch (NCHW, square kernel, zero padding).
#pragma once

#include <cstdint>
#include <vector>

#include "mpsim/nn/eigen.hpp"
#include "mpsim/nn/matmul.hpp"

namespace mpsim::nn {

struct Conv2dShape {
  int B = 1, C = 1, H = 1, W = 1;  // input (B, C, H, W)
  int OC = 1, K = 3, stride = 1, pad = 1;
  int OH() const { return (H + 2 * pad - K) / stride + 1; }
  int OW() const { return (W + 2 * pad - K) / stride + 1; }
  std::int64_t in_size() const { return static_cast<std::int64_t>(B) * C * H * W; }
  std::int64_t out_size() const { return static_cast<std::int64_t>(B) * OC * OH() * OW(); }
  std::int64_t weight_size() const { return static_cast<std::int64_t>(OC) * C * K * K; }
};

// col (C*K*K, B*OH*OW) from inp (B, C, H, W): column (b, oy, ox) holds the receptive field of that output.
template <class T>
void im2col(T* col, const T* inp, const Conv2dShape& s) {
  const int OH = s.OH(), OW = s.OW();
  const std::int64_t ncols = static_cast<std::int64_t>(s.B) * OH * OW;
  for (int c = 0; c < s.C; ++c)
    for (int ky = 0; ky < s.K; ++ky)
      for (int kx = 0; kx < s.K; ++kx) {
        T* row = col + ((static_cast<std::int64_t>(c) * s.K + ky) * s.K + kx) * ncols;
        for (int b = 0; b < s.B; ++b) {
          const T* img = inp + (static_cast<std::int64_t>(b) * s.C + c) * s.H * s.W;
          for (int oy = 0; oy < OH; ++oy) {
            const int y = oy * s.stride - s.pad + ky;
            for (int ox = 0; ox < OW; ++ox) {
              const int x = ox * s.stride - s.pad + kx;
              *row++ = (y >= 0 && y < s.H && x >= 0 && x < s.W) ? img[y * s.W + x] : T(0);
            }
          }
        }
      }
}

// dinp (B, C, H, W) = the adjoint of im2col applied to dcol (overwritten).
template <class T>
void col2im(T* dinp, const T* dcol, const Conv2dShape& s) {
  const int OH = s.OH(), OW = s.OW();
  const std::int64_t ncols = static_cast<std::int64_t>(s.B) * OH * OW;
  for (std::int64_t i = 0; i < s.in_size(); ++i) dinp[i] = T(0);
  for (int c = 0; c < s.C; ++c)
    for (int ky = 0; ky < s.K; ++ky)
      for (int kx = 0; kx < s.K; ++kx) {
        const T* row = dcol + ((static_cast<std::int64_t>(c) * s.K + ky) * s.K + kx) * ncols;
        for (int b = 0; b < s.B; ++b) {
          T* img = dinp + (static_cast<std::int64_t>(b) * s.C + c) * s.H * s.W;
          for (int oy = 0; oy < OH; ++oy) {
            const int y = oy * s.stride - s.pad + ky;
            for (int ox = 0; ox < OW; ++ox, ++row) {
              const int x = ox * s.stride - s.pad + kx;
              if (y >= 0 && y < s.H && x >= 0 && x < s.W) img[y * s.W + x] += *row;
            }
          }
        }
      }
}

// out (B, OC, OH, OW) = weight (OC, C*K*K) · im2col(inp) + bias (OC); bias may be null. gemm: the
// GEMM's accumulator and operand quantizer (matmul.hpp; default: T, operands as given).
template <class T>
void conv2d_forward(T* out, const T* inp, const T* weight, const T* bias, const Conv2dShape& s,
                    const GemmContext& gemm = {}) {
  const std::int64_t P = static_cast<std::int64_t>(s.OH()) * s.OW();
  const std::int64_t ncols = s.B * P;
  const std::int64_t krows = static_cast<std::int64_t>(s.C) * s.K * s.K;
  std::vector<T> col(static_cast<std::size_t>(krows * ncols));
  im2col(col.data(), inp, s);
  Mat<T> prod(s.OC, ncols);
  matmul(prod, CMatMap<T>(weight, s.OC, krows), CMatMap<T>(col.data(), krows, ncols), gemm, recipe::Role::fprop_w,
         recipe::Role::fprop_x);
  for (int b = 0; b < s.B; ++b)
    for (int oc = 0; oc < s.OC; ++oc) {
      T* o = out + (static_cast<std::int64_t>(b) * s.OC + oc) * P;
      const T add = bias ? bias[oc] : T(0);
      for (std::int64_t p = 0; p < P; ++p) o[p] = prod(oc, b * P + p) + add;
    }
}

// dinp (B, C, H, W) = col2im(weight^T · dout); dweight (OC, C*K*K) = dout · im2col(inp)^T;
// dbias (OC) = Σ dout over batch and positions. All overwritten; any may be null. gemm: the two
// GEMMs' context (the bias sum is a reduction and stays in T).
template <class T>
void conv2d_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const Conv2dShape& s,
                     const GemmContext& gemm = {}) {
  const std::int64_t P = static_cast<std::int64_t>(s.OH()) * s.OW();
  const std::int64_t ncols = s.B * P;
  const std::int64_t krows = static_cast<std::int64_t>(s.C) * s.K * s.K;
  Mat<T> d(s.OC, ncols);  // dout regrouped as (OC, B*P), the layout of the forward product
  for (int b = 0; b < s.B; ++b)
    for (int oc = 0; oc < s.OC; ++oc) {
      const T* g = dout + (static_cast<std::int64_t>(b) * s.OC + oc) * P;
      for (std::int64_t p = 0; p < P; ++p) d(oc, b * P + p) = g[p];
    }
  if (dbias) VecMap<T>(dbias, s.OC) = d.rowwise().sum();
  if (dweight) {
    std::vector<T> col(static_cast<std::size_t>(krows * ncols));
    im2col(col.data(), inp, s);
    matmul(MatMap<T>(dweight, s.OC, krows), d, CMatMap<T>(col.data(), krows, ncols).transpose(), gemm,
           recipe::Role::wgrad_dy, recipe::Role::wgrad_x);
  }
  if (dinp) {
    Mat<T> dcol(krows, ncols);
    matmul(dcol, CMatMap<T>(weight, s.OC, krows).transpose(), d, gemm, recipe::Role::dgrad_w, recipe::Role::dgrad_dy);
    col2im(dinp, dcol.data(), s);
  }
}

}  // namespace mpsim::nn
