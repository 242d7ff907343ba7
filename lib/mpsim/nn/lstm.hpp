// One LSTM layer over a whole sequence, with backpropagation through time (Hochreiter & Schmidhuber
// 1997; gate order i, f, g, o and the equations of PyTorch's nn.LSTM):
//   a = x_t W_ih^T + h_{t-1} W_hh^T + b;  i = σ(a_i), f = σ(a_f), g = tanh(a_g), o = σ(a_o)
//   c_t = f c_{t-1} + i g;  h_t = o tanh(c_t);  h_0 = c_0 = 0.
// The precision policy reaches inside the time loop through `hook(tensor, OpClass, T* data, n)`:
// "ih_out" / "hh_out" (matmul outputs), "h_in" (the recurrent matmul's input), "gates_grad" and
// "h_grad" (the gradients stored between time steps). NoHook leaves everything exact.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "mpsim/nn/eigen.hpp"
#include "mpsim/nn/matmul.hpp"
#include "mpsim/nn/policy.hpp"

namespace mpsim::nn {

struct LstmShape {
  int T = 1, B = 1, I = 1, H = 1;  // time steps, batch, input width, hidden width
};

struct NoHook {
  template <class T>
  void operator()(const char*, OpClass, T*, std::int64_t) const {}
};

template <class T>
struct LstmCache {
  std::vector<T> gates;   // (T, B, 4H) after the nonlinearities: i, f, g, o
  std::vector<T> c;       // (T+1, B, H), c[0] = 0
  std::vector<T> h_in;    // (T, B, H) h_{t-1} as fed to the recurrent product (rounded by the hook)
  std::vector<T> tanh_c;  // (T, B, H)
};

template <class T>
T sigmoid(T x) {
  return T(1) / (T(1) + std::exp(-x));
}

// out (T, B, H) = h_1..h_T for x (T, B, I); w_ih (4H, I), w_hh (4H, H), bias (4H). gemm: the
// products' accumulator and operand quantizer (matmul.hpp; the layer's two weights are gemm.sub("ih") and
// gemm.sub("hh")); default: T, operands as given.
template <class T, class Hook = NoHook>
void lstm_forward(T* out, LstmCache<T>& cache, const T* x, const T* w_ih, const T* w_hh, const T* bias,
                  const LstmShape& s, Hook&& hook = {}, const GemmContext& gemm = {}) {
  const GemmContext ih = gemm.sub("ih"), hh = gemm.sub("hh");
  const int G = 4 * s.H;
  const std::int64_t BH = static_cast<std::int64_t>(s.B) * s.H;
  cache.gates.assign(static_cast<std::size_t>(s.T) * s.B * G, T(0));
  cache.c.assign(static_cast<std::size_t>(s.T + 1) * BH, T(0));
  cache.h_in.assign(static_cast<std::size_t>(s.T) * BH, T(0));
  cache.tanh_c.assign(static_cast<std::size_t>(s.T) * BH, T(0));
  // All input products at once: one GEMM of (T*B, I) x (I, 4H).
  Mat<T> pre_x(static_cast<std::int64_t>(s.T) * s.B, G);
  matmul(pre_x, CMatMap<T>(x, static_cast<std::int64_t>(s.T) * s.B, s.I), CMatMap<T>(w_ih, G, s.I).transpose(), ih,
         recipe::Role::fprop_x, recipe::Role::fprop_w);
  hook("ih_out", OpClass::matmul_output, pre_x.data(), static_cast<std::int64_t>(pre_x.size()));
  Mat<T> pre_h(s.B, G);
  for (int t = 0; t < s.T; ++t) {
    T* hin = cache.h_in.data() + t * BH;
    for (std::int64_t k = 0; k < BH; ++k) hin[k] = t == 0 ? T(0) : out[(t - 1) * BH + k];
    hook("h_in", OpClass::matmul_input, hin, BH);
    matmul(pre_h, CMatMap<T>(hin, s.B, s.H), CMatMap<T>(w_hh, G, s.H).transpose(), hh, recipe::Role::fprop_x,
           recipe::Role::fprop_w);
    hook("hh_out", OpClass::matmul_output, pre_h.data(), static_cast<std::int64_t>(pre_h.size()));
    const T* c_prev = cache.c.data() + t * BH;
    T* c_new = cache.c.data() + (t + 1) * BH;
    for (int b = 0; b < s.B; ++b) {
      T* gate = cache.gates.data() + (static_cast<std::int64_t>(t) * s.B + b) * G;
      const T* px = pre_x.data() + (static_cast<std::int64_t>(t) * s.B + b) * G;
      for (int j = 0; j < s.H; ++j) {
        const T ai = px[j] + pre_h(b, j) + bias[j];
        const T af = px[s.H + j] + pre_h(b, s.H + j) + bias[s.H + j];
        const T ag = px[2 * s.H + j] + pre_h(b, 2 * s.H + j) + bias[2 * s.H + j];
        const T ao = px[3 * s.H + j] + pre_h(b, 3 * s.H + j) + bias[3 * s.H + j];
        const T i = sigmoid(ai), f = sigmoid(af), g = std::tanh(ag), o = sigmoid(ao);
        gate[j] = i;
        gate[s.H + j] = f;
        gate[2 * s.H + j] = g;
        gate[3 * s.H + j] = o;
        const std::int64_t k = static_cast<std::int64_t>(b) * s.H + j;
        c_new[k] = f * c_prev[k] + i * g;
        const T tc = std::tanh(c_new[k]);
        cache.tanh_c[t * BH + k] = tc;
        out[t * BH + k] = o * tc;
      }
    }
  }
}

// Backpropagation through time. dout (T, B, H) = dL/dh_t from above. Writes (overwrites)
// dx (T, B, I) (may be null), dw_ih (4H, I), dw_hh (4H, H), dbias (4H).
template <class T, class Hook = NoHook>
void lstm_backward(T* dx, T* dw_ih, T* dw_hh, T* dbias, const T* dout, const LstmCache<T>& cache, const T* x,
                   const T* w_ih, const T* w_hh, const LstmShape& s, Hook&& hook = {}, const GemmContext& gemm = {}) {
  const GemmContext ih = gemm.sub("ih"), hh = gemm.sub("hh");
  const int G = 4 * s.H;
  const std::int64_t BH = static_cast<std::int64_t>(s.B) * s.H;
  const std::int64_t TB = static_cast<std::int64_t>(s.T) * s.B;
  Mat<T> dgates(TB, G);
  Mat<T> dh_next = Mat<T>::Zero(s.B, s.H);
  std::vector<T> dc_next(static_cast<std::size_t>(BH), T(0));
  for (int t = s.T - 1; t >= 0; --t) {
    const T* c_prev = cache.c.data() + t * BH;
    for (int b = 0; b < s.B; ++b) {
      const T* gate = cache.gates.data() + (static_cast<std::int64_t>(t) * s.B + b) * G;
      T* dg = dgates.data() + (static_cast<std::int64_t>(t) * s.B + b) * G;
      for (int j = 0; j < s.H; ++j) {
        const std::int64_t k = static_cast<std::int64_t>(b) * s.H + j;
        const T i = gate[j], f = gate[s.H + j], g = gate[2 * s.H + j], o = gate[3 * s.H + j];
        const T tc = cache.tanh_c[t * BH + k];
        const T dh = dout[t * BH + k] + dh_next(b, j);
        const T dc = dc_next[k] + dh * o * (T(1) - tc * tc);
        dg[j] = dc * g * i * (T(1) - i);
        dg[s.H + j] = dc * c_prev[k] * f * (T(1) - f);
        dg[2 * s.H + j] = dc * i * (T(1) - g * g);
        dg[3 * s.H + j] = dh * tc * o * (T(1) - o);
        dc_next[k] = dc * f;
      }
    }
    T* dg_t = dgates.data() + static_cast<std::int64_t>(t) * s.B * G;
    hook("gates_grad", OpClass::activation_grad, dg_t, static_cast<std::int64_t>(s.B) * G);
    matmul(dh_next, CMatMap<T>(dg_t, s.B, G), CMatMap<T>(w_hh, G, s.H), hh, recipe::Role::dgrad_dy,
           recipe::Role::dgrad_w);
    hook("h_grad", OpClass::activation_grad, dh_next.data(), BH);
  }
  matmul(MatMap<T>(dw_hh, G, s.H), dgates.transpose(), CMatMap<T>(cache.h_in.data(), TB, s.H), hh,
         recipe::Role::wgrad_dy, recipe::Role::wgrad_x);
  matmul(MatMap<T>(dw_ih, G, s.I), dgates.transpose(), CMatMap<T>(x, TB, s.I), ih, recipe::Role::wgrad_dy,
         recipe::Role::wgrad_x);
  VecMap<T>(dbias, G) = dgates.colwise().sum().transpose();
  if (dx)
    matmul(MatMap<T>(dx, TB, s.I), dgates, CMatMap<T>(w_ih, G, s.I), ih, recipe::Role::dgrad_dy, recipe::Role::dgrad_w);
}

}  // namespace mpsim::nn
