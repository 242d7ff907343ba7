// The generated detection set: grey images with a few filled shapes (square, disk, triangle), each
// with its box and class, on a noisy background. Image k of a set is a pure function of (seed, k).
#pragma once

#include <cstdint>
#include <vector>

#include "mpsim/nn/multibox.hpp"

namespace mpsim::models {

inline constexpr int kShapeClasses = 3;  // 1 square, 2 disk, 3 triangle (0 is the background)

struct ShapesBatch {
  int B = 0, S = 0;  // images (B, 1, S, S)
  std::vector<float> images;
  std::vector<std::vector<nn::GroundTruth>> truths;  // per image, boxes in [0, 1] coordinates
};

// Images first..first+count-1 of the stream `stream` under `seed`; 1..3 objects each, 7..16 pixels
// wide, overlapping each other with IoU < 0.1.
ShapesBatch make_shapes(std::uint64_t seed, std::uint64_t stream, std::uint64_t first, int count, int S);

}  // namespace mpsim::models
