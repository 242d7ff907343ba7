#include "mpsim/models/shapes.hpp"

#include <algorithm>
#include <cmath>

#include "mpsim/models/detail/rng.hpp"

namespace mpsim::models {

namespace {

bool inside(int cls, double px, double py, double x0, double y0, double side) {
  const double u = (px - x0) / side, v = (py - y0) / side;  // [0,1)^2 inside the box
  if (u < 0 || u >= 1 || v < 0 || v >= 1) return false;
  switch (cls) {
    case 1: return true;
    case 2: return (u - 0.5) * (u - 0.5) + (v - 0.5) * (v - 0.5) <= 0.25;
    default: return std::abs(u - 0.5) <= 0.5 * v;  // apex at the top, base along the bottom edge
  }
}

}  // namespace

ShapesBatch make_shapes(std::uint64_t seed, std::uint64_t stream, std::uint64_t first, int count, int S) {
  ShapesBatch out;
  out.B = count;
  out.S = S;
  out.images.assign(static_cast<std::size_t>(count) * S * S, 0.0f);
  out.truths.resize(count);
  for (int k = 0; k < count; ++k) {
    Rng rng(seed, stream, first + k);
    float* img = out.images.data() + static_cast<std::size_t>(k) * S * S;
    for (int i = 0; i < S * S; ++i) img[i] = static_cast<float>(0.1 * rng.normal());
    const int objects = 1 + rng.below(3);
    for (int o = 0, tries = 0; o < objects && tries < 50; ++tries) {
      const double side = rng.uniform(7.0, 16.0);
      const double x0 = rng.uniform(0.0, S - side), y0 = rng.uniform(0.0, S - side);
      const int cls = 1 + rng.below(kShapeClasses);
      nn::Box box{(x0 + side / 2) / S, (y0 + side / 2) / S, side / S, side / S};
      bool clear = true;
      for (const auto& t : out.truths[k]) clear = clear && nn::iou(t.box, box) < 0.1;
      if (!clear) continue;
      const float level = static_cast<float>(rng.uniform(0.6, 1.0));
      for (int y = 0; y < S; ++y)
        for (int x = 0; x < S; ++x)
          if (inside(cls, x + 0.5, y + 0.5, x0, y0, side)) img[y * S + x] = level;
      out.truths[k].push_back({box, cls});
      ++o;
    }
  }
  return out;
}

}  // namespace mpsim::models
