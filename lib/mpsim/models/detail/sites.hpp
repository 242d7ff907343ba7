// Small helpers the models use to put the precision policy's rounding sites around the layers.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "mpsim/nn/policy.hpp"

namespace mpsim::models {

// `src` itself when the policy leaves `cls` in fp32 (no copy), else a copy in `scratch` rounded at `site`
// (also under fp32 while an observer taps the sites: the copy is then unchanged).
inline const float* rounded_input(nn::Precision& prec, const std::string& site, nn::OpClass cls, const float* src,
                                  std::size_t n, std::vector<float>& scratch) {
  if (!prec.rounds(cls) && !prec.observing()) return src;
  scratch.assign(src, src + n);
  prec.round(site, cls, std::span<float>(scratch.data(), n));
  return scratch.data();
}

inline void round_site(nn::Precision& prec, const std::string& site, nn::OpClass cls, float* data, std::size_t n) {
  prec.round(site, cls, std::span<float>(data, n));
}

// Adds this batch's weight gradient (rounded at its weight_grad site) into the master gradient buffer.
inline void accumulate_weight_grad(nn::Precision& prec, const std::string& site, std::vector<float>& g, float* master) {
  prec.round(site, nn::OpClass::weight_grad, std::span<float>(g.data(), g.size()));
  for (std::size_t i = 0; i < g.size(); ++i) master[i] += g[i];
}

}  // namespace mpsim::models
