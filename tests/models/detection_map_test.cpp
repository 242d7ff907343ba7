// Tests of lib/mpsim/models/detection_map.hpp: AP and NMS on hand-worked cases.
#include "catch_compat.hpp"

#include <cstdio>

#include "mpsim/models/detection_map.hpp"

using namespace mpsim;
using namespace mpsim::models;

TEST_CASE("average precision, hand-worked", "[detection_map]") {
  const std::vector<std::vector<nn::GroundTruth>> truths{{{{0.25, 0.25, 0.2, 0.2}, 1}}, {{{0.7, 0.7, 0.3, 0.3}, 1}}};
  // by score: TP (image 0), FP (nothing there), duplicate of image 0 (FP), TP (image 1)
  const std::vector<Detection> dets{{0, 1, 0.9, {0.26, 0.25, 0.2, 0.2}},
                                    {0, 1, 0.8, {0.8, 0.2, 0.1, 0.1}},
                                    {0, 1, 0.75, {0.25, 0.26, 0.2, 0.2}},
                                    {1, 1, 0.7, {0.7, 0.7, 0.3, 0.3}},
                                    {1, 2, 0.99, {0.7, 0.7, 0.3, 0.3}}};  // other class: ignored for class 1
  // precision 1, 1/2, 1/3, 1/2 at recall 1/2, 1/2, 1/2, 1: envelope 1 up to recall 1/2, then 1/2
  std::printf("AP class 1: %.17g (hand-worked 0.75); mAP: %.17g (0.75); perfect detections mAP %.17g (1)\n",
              average_precision(dets, truths, 1), mean_average_precision(dets, truths, 2),
              mean_average_precision({{0, 1, 0.5, truths[0][0].box}, {1, 1, 0.6, truths[1][0].box}}, truths, 1));
  CHECK(average_precision(dets, truths, 1) == Approx(0.5 * 1 + 0.5 * 0.5));
  // class 2 has no ground truth: not part of the mean
  CHECK(mean_average_precision(dets, truths, 2) == Approx(0.75));
  CHECK(average_precision({}, truths, 1) == 0.0);
  // perfect detections
  const std::vector<Detection> perfect{{0, 1, 0.5, truths[0][0].box}, {1, 1, 0.6, truths[1][0].box}};
  CHECK(mean_average_precision(perfect, truths, 1) == Approx(1.0));
}

TEST_CASE("non-maximum suppression, hand-worked", "[detection_map]") {
  const std::vector<nn::Box> boxes{
      {0.5, 0.5, 0.2, 0.2}, {0.51, 0.5, 0.2, 0.2}, {0.2, 0.2, 0.1, 0.1}, {0.5, 0.56, 0.2, 0.2}};
  const std::vector<double> scores{0.6, 0.9, 0.5, 0.4};
  // 1 kept first; 0 overlaps it (IoU 0.9) and goes; 2 is elsewhere; 3 overlaps 1 with IoU ~0.52 > 0.45
  for (double iou : {0.45, 0.95}) {
    std::printf("nms(iou %.2f) keeps:", iou);
    for (int k : nms(boxes, scores, iou, 10)) std::printf(" %d", k);
    std::printf("\n");
  }
  CHECK(nms(boxes, scores, 0.45, 10) == std::vector<int>{1, 2});
  CHECK(nms(boxes, scores, 0.45, 1) == std::vector<int>{1});
  CHECK(nms(boxes, scores, 0.95, 10) == std::vector<int>{1, 0, 2, 3});
}
