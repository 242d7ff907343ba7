// Tests of lib/mpsim/models/shapes.hpp: boxes inside the image and around bright pixels, determinism.
#include "catch_compat.hpp"

#include "mpsim/models/shapes.hpp"

using namespace mpsim::models;

TEST_CASE("shapes: 1..3 objects per image, boxes inside, object pixels bright", "[shapes]") {
  const int S = 32, n = 64;
  const auto a = make_shapes(5, 0, 100, n, S);
  const auto b = make_shapes(5, 0, 100, n, S);
  CHECK(a.images == b.images);
  const auto shifted = make_shapes(5, 0, 101, n - 1, S);  // image k is a function of (seed, stream, k)
  CHECK(std::equal(shifted.images.begin(), shifted.images.end(), a.images.begin() + S * S));
  std::size_t objects = 0;
  int per_class[4] = {0, 0, 0, 0};
  for (int k = 0; k < n; ++k) {
    const auto& ts = a.truths[k];
    CHECK(ts.size() >= 1);
    CHECK(ts.size() <= 3);
    for (const auto& t : ts) {
      ++objects;
      ++per_class[t.label];
      CHECK(t.label >= 1);
      CHECK(t.label <= kShapeClasses);
      CHECK(t.box.cx - t.box.w / 2 >= 0);
      CHECK(t.box.cx + t.box.w / 2 <= 1);
      CHECK(t.box.w * S >= 7);
      CHECK(t.box.w * S <= 16);
      // the pixel at the box centre is inside every shape (disk, square, triangle at half height)
      const int x = static_cast<int>(t.box.cx * S), y = static_cast<int>(t.box.cy * S);
      CHECK(a.images[(k * S + y) * S + x] >= 0.6f);
    }
  }
  std::printf("shapes: %d images, %zu objects (squares %d, disks %d, triangles %d)\n", n, objects, per_class[1],
              per_class[2], per_class[3]);
  CHECK(per_class[1] > 0);
  CHECK(per_class[2] > 0);
  CHECK(per_class[3] > 0);
}
