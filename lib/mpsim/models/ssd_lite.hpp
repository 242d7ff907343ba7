// ssd_lite: a small convolutional SSD-style detector for the generated shapes set.
//   image (1, 32, 32) -> conv1 3x3 16 -> relu -> pool 2 -> conv2 3x3 32 -> relu -> pool 2 = f1 (32, 8, 8)
//   -> conv3 3x3 32 -> relu -> pool 2 = f2 (32, 4, 4); head1 on f1, head2 on f2: 3x3 convs giving, per
//   cell and default box, 4 offsets and 4 class logits (background + 3 shapes).
// Default boxes: 8x8 cells of scale 0.3 and 4x4 cells of scale 0.5, aspect ratios 1, 2, 1/2 (240 boxes).
// Loss: multibox (nn/multibox.hpp). Metric: mAP@0.5 on 128 held-out generated images.
#pragma once

#include <memory>

#include "mpsim/nn/model.hpp"

namespace mpsim::models {

std::unique_ptr<nn::Model> make_ssd_lite(const nn::ModelConfig& config, std::uint64_t seed);

}  // namespace mpsim::models
