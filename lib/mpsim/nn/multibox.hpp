// SSD's multibox loss (Liu et al., "SSD: Single Shot MultiBox Detector", ECCV 2016, §2.2):
// default boxes on several feature maps; each ground truth matched to its best default box and every
// default box matched to a ground truth it overlaps with IoU >= 0.5; localisation (smooth L1 on the
// encoded offsets) over the matched boxes plus softmax confidence loss over the matched boxes and the
// hardest negatives (3 per positive), the sum divided by the number of matched boxes.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "mpsim/nn/loss.hpp"

namespace mpsim::nn {

struct Box {  // centre and size, in image-relative coordinates [0, 1]
  double cx = 0, cy = 0, w = 0, h = 0;
};
struct GroundTruth {
  Box box;
  int label = 1;  // 1..num_classes; 0 is the background class
};

// Intersection over union of two boxes (0 if either is empty).
double iou(const Box& a, const Box& b);

struct FeatureMapSpec {
  int size = 1;                       // the map is size x size cells
  double scale = 0.2;                 // box side relative to the image (for aspect ratio 1)
  std::vector<double> aspect_ratios;  // w/h of the boxes at each cell
};
// Default boxes of all maps, in the order map, row y, column x, aspect ratio (the order in which the
// heads' outputs are read): cell (y, x) of a map of size f is centred at ((x+0.5)/f, (y+0.5)/f); a box
// of aspect ratio r has w = scale*sqrt(r), h = scale/sqrt(r) (SSD eq. 4 without the extra s'_k box).
std::vector<Box> make_default_boxes(const std::vector<FeatureMapSpec>& maps);

// For each default box the index of its matched ground truth, or -1 (background). SSD's two rules,
// in this order (as ssd.pytorch's match()): (1) every ground truth takes the default box with which it
// has the highest IoU (the first such box on ties), whatever the IoU; (2) every other default box is
// matched to the ground truth with which its IoU is highest (first on ties) if that IoU >= threshold.
// A default box chosen in (1) by several ground truths keeps the last of them.
std::vector<int> match_default_boxes(const std::vector<Box>& defaults, const std::vector<GroundTruth>& truths,
                                     double threshold = 0.5);

// SSD's offset encoding with variances 0.1 (centre) and 0.2 (size) (ssd.pytorch box_utils.encode).
std::array<double, 4> encode_box(const Box& truth, const Box& default_box);
Box decode_box(const std::array<double, 4>& offsets, const Box& default_box);

// Hard negative mining: among the default boxes with match < 0, selects the min(ratio * positives,
// negatives) with the highest confidence loss (ties: lower index first). Returns a 0/1 mask over all
// boxes; positives are not in it.
std::vector<std::uint8_t> hard_negative_mask(const std::vector<double>& background_loss, const std::vector<int>& match,
                                             int ratio = 3);

struct MultiboxResult {
  double loss = 0;       // (loc + conf) / matched, 0 if nothing matched
  double loc_loss = 0;   // Σ over matched boxes (before the division)
  double conf_loss = 0;  // Σ over matched boxes and mined negatives (before the division)
  int matched = 0;       // positives over the whole batch
  int negatives = 0;     // mined negatives over the whole batch
};

// loc (B, D, 4) predicted offsets, conf (B, D, NC) logits with class 0 the background; truths per image.
// Writes dloc (B, D, 4) and dconf (B, D, NC) = grad_scale * d(loss)/d(input) (overwritten; zero on the
// boxes that take no part). The softmax, log and the loss are computed in T.
template <class T>
MultiboxResult multibox_loss(T* dloc, T* dconf, const T* loc, const T* conf,
                             const std::vector<std::vector<GroundTruth>>& truths, const std::vector<Box>& defaults,
                             int NC, T grad_scale, int neg_ratio = 3, double iou_threshold = 0.5) {
  const int B = static_cast<int>(truths.size());
  const int D = static_cast<int>(defaults.size());
  MultiboxResult r;
  std::vector<std::vector<int>> matches(B);
  std::vector<std::vector<std::uint8_t>> negs(B);
  std::vector<T> probs(static_cast<std::size_t>(D) * NC), losses(D);
  std::vector<std::vector<T>> all_probs(B), all_losses(B);
  std::vector<std::int32_t> labels(D);
  for (int b = 0; b < B; ++b) {
    matches[b] = match_default_boxes(defaults, truths[b], iou_threshold);
    for (int d = 0; d < D; ++d) labels[d] = matches[b][d] < 0 ? 0 : truths[b][matches[b][d]].label;
    softmax_cross_entropy_forward(losses.data(), probs.data(), conf + static_cast<std::int64_t>(b) * D * NC,
                                  labels.data(), D, NC);
    std::vector<double> bg(D);
    for (int d = 0; d < D; ++d) bg[d] = static_cast<double>(losses[d]);  // labels are 0 on negatives
    negs[b] = hard_negative_mask(bg, matches[b], neg_ratio);
    for (int d = 0; d < D; ++d) {
      if (matches[b][d] >= 0) {
        ++r.matched;
        r.conf_loss += static_cast<double>(losses[d]);
        const auto t = encode_box(truths[b][matches[b][d]].box, defaults[d]);
        const T tt[4] = {T(t[0]), T(t[1]), T(t[2]), T(t[3])};
        r.loc_loss += static_cast<double>(smooth_l1_forward(loc + (static_cast<std::int64_t>(b) * D + d) * 4, tt, 4));
      } else if (negs[b][d]) {
        ++r.negatives;
        r.conf_loss += static_cast<double>(losses[d]);
      }
    }
    all_probs[b] = probs;
    all_losses[b] = losses;
  }
  std::fill(dloc, dloc + static_cast<std::int64_t>(B) * D * 4, T(0));
  std::fill(dconf, dconf + static_cast<std::int64_t>(B) * D * NC, T(0));
  if (r.matched == 0) return r;
  r.loss = (r.loc_loss + r.conf_loss) / r.matched;
  const T g = grad_scale / T(r.matched);
  std::vector<T> dloss(D);
  for (int b = 0; b < B; ++b) {
    for (int d = 0; d < D; ++d) {
      labels[d] = matches[b][d] < 0 ? 0 : truths[b][matches[b][d]].label;
      dloss[d] = (matches[b][d] >= 0 || negs[b][d]) ? g : T(0);
      if (matches[b][d] >= 0) {
        const auto t = encode_box(truths[b][matches[b][d]].box, defaults[d]);
        const T tt[4] = {T(t[0]), T(t[1]), T(t[2]), T(t[3])};
        const std::int64_t o = (static_cast<std::int64_t>(b) * D + d) * 4;
        smooth_l1_backward(dloc + o, loc + o, tt, g, 4);
      }
    }
    softmax_cross_entropy_backward(dconf + static_cast<std::int64_t>(b) * D * NC, all_probs[b].data(), labels.data(),
                                   dloss.data(), D, NC);
  }
  return r;
}

}  // namespace mpsim::nn
