// Central finite differences in fp64 for the layer tests: d f / d x_i ~ (f(x + h e_i) - f(x - h e_i)) / 2h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace gradcheck {

inline std::vector<double> random_vector(std::size_t n, std::mt19937_64& rng, double lo = -1, double hi = 1) {
  std::uniform_real_distribution<double> u(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

struct Result {
  std::size_t checked = 0;
  double worst = 0;  // largest |analytic - numeric| / max(1, |numeric|)
};

// Compares `analytic` (the gradient of f with respect to x) with central differences of f, element by
// element, and prints what it compared.
inline Result check(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                    const std::function<double()>& f, double h = 1e-6) {
  Result r;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double keep = x[i];
    x[i] = keep + h;
    const double up = f();
    x[i] = keep - h;
    const double down = f();
    x[i] = keep;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(analytic[i] - numeric) / std::max(1.0, std::abs(numeric));
    r.worst = std::max(r.worst, err);
    ++r.checked;
  }
  std::printf("gradcheck %-28s %5zu elements, worst relative error %.3g\n", what.c_str(), r.checked, r.worst);
  return r;
}

// sum_i out[i] * w[i]: a scalar objective whose gradient with respect to out is w.
inline double dot(const std::vector<double>& out, const std::vector<double>& w) {
  double s = 0;
  for (std::size_t i = 0; i < out.size(); ++i) s += out[i] * w[i];
  return s;
}

}  // namespace gradcheck
