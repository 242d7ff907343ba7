#include "mpsim/nn/multibox.hpp"

#include <numeric>

namespace mpsim::nn {

double iou(const Box& a, const Box& b) {
  const double ix = std::max(0.0, std::min(a.cx + a.w / 2, b.cx + b.w / 2) - std::max(a.cx - a.w / 2, b.cx - b.w / 2));
  const double iy = std::max(0.0, std::min(a.cy + a.h / 2, b.cy + b.h / 2) - std::max(a.cy - a.h / 2, b.cy - b.h / 2));
  const double inter = ix * iy;
  const double uni = a.w * a.h + b.w * b.h - inter;
  return uni > 0 ? inter / uni : 0.0;
}

std::vector<Box> make_default_boxes(const std::vector<FeatureMapSpec>& maps) {
  std::vector<Box> out;
  for (const auto& m : maps)
    for (int y = 0; y < m.size; ++y)
      for (int x = 0; x < m.size; ++x)
        for (double r : m.aspect_ratios)
          out.push_back({(x + 0.5) / m.size, (y + 0.5) / m.size, m.scale * std::sqrt(r), m.scale / std::sqrt(r)});
  return out;
}

std::vector<int> match_default_boxes(const std::vector<Box>& defaults, const std::vector<GroundTruth>& truths,
                                     double threshold) {
  const int D = static_cast<int>(defaults.size());
  const int G = static_cast<int>(truths.size());
  std::vector<int> match(D, -1);
  if (G == 0) return match;
  std::vector<double> best_overlap(D, -1.0);
  std::vector<int> best_truth(D, -1);
  std::vector<int> best_default(G, 0);
  std::vector<double> best_default_iou(G, -1.0);
  for (int d = 0; d < D; ++d)
    for (int g = 0; g < G; ++g) {
      const double v = iou(defaults[d], truths[g].box);
      if (v > best_overlap[d]) {
        best_overlap[d] = v;
        best_truth[d] = g;
      }
      if (v > best_default_iou[g]) {
        best_default_iou[g] = v;
        best_default[g] = d;
      }
    }
  for (int d = 0; d < D; ++d)
    if (best_overlap[d] >= threshold) match[d] = best_truth[d];
  for (int g = 0; g < G; ++g) match[best_default[g]] = g;
  return match;
}

std::array<double, 4> encode_box(const Box& t, const Box& d) {
  return {(t.cx - d.cx) / (0.1 * d.w), (t.cy - d.cy) / (0.1 * d.h), std::log(t.w / d.w) / 0.2,
          std::log(t.h / d.h) / 0.2};
}

Box decode_box(const std::array<double, 4>& o, const Box& d) {
  return {d.cx + o[0] * 0.1 * d.w, d.cy + o[1] * 0.1 * d.h, d.w * std::exp(o[2] * 0.2), d.h * std::exp(o[3] * 0.2)};
}

std::vector<std::uint8_t> hard_negative_mask(const std::vector<double>& background_loss, const std::vector<int>& match,
                                             int ratio) {
  const int D = static_cast<int>(match.size());
  std::vector<std::uint8_t> mask(D, 0);
  std::vector<int> neg;
  int positives = 0;
  for (int d = 0; d < D; ++d) {
    if (match[d] >= 0) ++positives;
    else neg.push_back(d);
  }
  const std::size_t keep = std::min<std::size_t>(static_cast<std::size_t>(ratio) * positives, neg.size());
  std::stable_sort(neg.begin(), neg.end(), [&](int a, int b) { return background_loss[a] > background_loss[b]; });
  for (std::size_t k = 0; k < keep; ++k) mask[neg[k]] = 1;
  return mask;
}

}  // namespace mpsim::nn
