// Mean average precision at IoU 0.5 (PASCAL VOC: Everingham et al. 2010; the all-point interpolated
// AP of VOC2010 and later, as in the VOC devkit's VOCap).
#pragma once

#include <vector>

#include "mpsim/nn/multibox.hpp"

namespace mpsim::models {

struct Detection {
  int image = 0;
  int label = 1;
  double score = 0;
  nn::Box box;
};

// AP of one class: detections sorted by score (ties: input order), each a true positive if it overlaps
// a not yet claimed ground truth of its class in its image with IoU >= iou_threshold. 0 if the class
// has no ground truth.
double average_precision(std::vector<Detection> detections, const std::vector<std::vector<nn::GroundTruth>>& truths,
                         int label, double iou_threshold = 0.5);
// Mean of the APs of classes 1..num_classes that have ground truth.
double mean_average_precision(const std::vector<Detection>& detections,
                              const std::vector<std::vector<nn::GroundTruth>>& truths, int num_classes,
                              double iou_threshold = 0.5);

// Greedy non-maximum suppression: keeps the highest-scoring box, drops those overlapping it with
// IoU > threshold, repeats; at most top_k kept. Returns indices into `boxes`.
std::vector<int> nms(const std::vector<nn::Box>& boxes, const std::vector<double>& scores, double threshold, int top_k);

}  // namespace mpsim::models
