#include "mpsim/models/detection_map.hpp"

#include <algorithm>
#include <numeric>

namespace mpsim::models {

double average_precision(std::vector<Detection> dets, const std::vector<std::vector<nn::GroundTruth>>& truths,
                         int label, double iou_threshold) {
  std::size_t positives = 0;
  std::vector<std::vector<char>> claimed(truths.size());
  for (std::size_t i = 0; i < truths.size(); ++i) {
    claimed[i].assign(truths[i].size(), 0);
    for (const auto& t : truths[i]) positives += t.label == label;
  }
  if (positives == 0) return 0.0;
  std::erase_if(dets, [&](const Detection& d) { return d.label != label; });
  std::stable_sort(dets.begin(), dets.end(), [](const Detection& a, const Detection& b) { return a.score > b.score; });
  std::vector<double> precision, recall;
  std::size_t tp = 0;
  for (std::size_t k = 0; k < dets.size(); ++k) {
    const auto& d = dets[k];
    int best = -1;
    double best_iou = iou_threshold;
    const auto& ts = truths[d.image];
    for (std::size_t g = 0; g < ts.size(); ++g) {
      if (ts[g].label != label) continue;
      const double v = nn::iou(d.box, ts[g].box);
      if (v >= best_iou) {
        best_iou = v;
        best = static_cast<int>(g);
      }
    }
    // VOC: a detection whose best ground truth is already claimed is a false positive.
    if (best >= 0 && !claimed[d.image][best]) {
      claimed[d.image][best] = 1;
      ++tp;
    }
    precision.push_back(static_cast<double>(tp) / static_cast<double>(k + 1));
    recall.push_back(static_cast<double>(tp) / static_cast<double>(positives));
  }
  // All-point interpolation: the area under the precision envelope (max precision at recall >= r).
  double ap = 0, prev_recall = 0;
  for (std::size_t k = 0; k < precision.size(); ++k) {
    double envelope = 0;
    for (std::size_t j = k; j < precision.size(); ++j) envelope = std::max(envelope, precision[j]);
    ap += (recall[k] - prev_recall) * envelope;
    prev_recall = recall[k];
  }
  return ap;
}

double mean_average_precision(const std::vector<Detection>& detections,
                              const std::vector<std::vector<nn::GroundTruth>>& truths, int num_classes,
                              double iou_threshold) {
  double sum = 0;
  int classes = 0;
  for (int c = 1; c <= num_classes; ++c) {
    bool present = false;
    for (const auto& ts : truths)
      for (const auto& t : ts) present = present || t.label == c;
    if (!present) continue;
    sum += average_precision(detections, truths, c, iou_threshold);
    ++classes;
  }
  return classes ? sum / classes : 0.0;
}

std::vector<int> nms(const std::vector<nn::Box>& boxes, const std::vector<double>& scores, double threshold,
                     int top_k) {
  std::vector<int> order(boxes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return scores[a] > scores[b]; });
  std::vector<int> keep;
  for (int i : order) {
    if (static_cast<int>(keep.size()) >= top_k) break;
    bool ok = true;
    for (int k : keep) ok = ok && nn::iou(boxes[i], boxes[k]) <= threshold;
    if (ok) keep.push_back(i);
  }
  return keep;
}

}  // namespace mpsim::models
