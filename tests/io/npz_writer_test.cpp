// Tests of lib/mpsim/io/npz_writer.hpp: an .npz whose members are appended interleaved, in pieces of any
// size, is byte for byte the archive npz_bytes makes of the whole arrays, and reads back (TensorSource) with
// the values written; a writer that got too few or too many elements, or was never committed, leaves no
// file. (numpy reads these archives in tests/format/block_check.py, through `mpsim round --bits`.)
#include "mpsim/io/npz_writer.hpp"

#include "catch_compat.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <span>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/io/npy.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "test_files.hpp"

using namespace mpsim::io;
using mpsim::test::ScratchDir;

TEST_CASE("NpzWriter: interleaved pieces make the archive npz_bytes makes", "[npz_writer]") {
  ScratchDir dir("npz-writer");
  // A block quantizer's output: elements (97 x 100), scales (97 x 4) and one float, produced together.
  std::vector<std::uint8_t> elements(97 * 100), scales(97 * 4);
  for (std::size_t i = 0; i < elements.size(); ++i) elements[i] = static_cast<std::uint8_t>(i * 7 + 3);
  for (std::size_t i = 0; i < scales.size(); ++i) scales[i] = static_cast<std::uint8_t>(255 - i);
  const float t[1] = {0.0123f};
  const std::vector<std::int64_t> empty_shape = {0, 3};
  const auto want = npz_bytes({{"elements", make_npy(std::span<const std::uint8_t>(elements), {97, 100})},
                               {"scales", make_npy(std::span<const std::uint8_t>(scales), {97, 4})},
                               {"tensor_scale", make_npy(std::span<const float>(t), {1})},
                               {"empty", make_npy(std::span<const float>(), empty_shape)}});
  int files = 0;
  for (const std::size_t rows_per_piece : {std::size_t{1}, std::size_t{5}, std::size_t{97}}) {
    NpzWriter w(dir / "pieces.npz", {{"elements", DType::u8, {97, 100}},
                                     {"scales", DType::u8, {97, 4}},
                                     {"tensor_scale", DType::f32, {1}},
                                     {"empty", DType::f32, empty_shape}});
    for (std::size_t r = 0; r < 97; r += rows_per_piece) {
      const std::size_t n = std::min(rows_per_piece, 97 - r);
      w.append(0, std::span<const std::uint8_t>(elements).subspan(r * 100, n * 100));
      w.append(1, std::span<const std::uint8_t>(scales).subspan(r * 4, n * 4));
    }
    w.append(2, std::span<const float>(t));
    w.commit();
    const auto got = mpsim::test::read_bytes(dir / "pieces.npz");
    CHECK(got == want);
    ++files;
    const TensorSource src = TensorSource::open(dir / "pieces.npz");
    REQUIRE(src.tensors().size() == 4);
    const auto& e = src.tensors()[0];
    CHECK(e.name == "elements");
    CHECK(e.shape == std::vector<std::int64_t>{97, 100});
    std::vector<float> back;
    src.for_each_chunk(e, 1000,
                       [&](std::span<const float> v, std::uint64_t) { back.insert(back.end(), v.begin(), v.end()); });
    REQUIRE(back.size() == elements.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < back.size(); ++i) differ += back[i] != static_cast<float>(elements[i]);
    CHECK(differ == 0);
    std::printf(
        "NpzWriter, rows of 100 + 4 appended %zu rows at a time: %zu bytes, %s npz_bytes'; %zu elements "
        "read back, %zu differ\n",
        rows_per_piece, got.size(), got == want ? "equal to" : "DIFFERENT from", back.size(), differ);
  }
  CHECK(files == 3);
}

TEST_CASE("NpzWriter: too few or too many elements, a wrong element size, no commit: an error and no file",
          "[npz_writer]") {
  ScratchDir dir("npz-writer");
  const std::vector<std::uint8_t> six(6, 1);
  const std::vector<float> one(1, 1.0f);
  {
    NpzWriter w(dir / "short.npz", {{"a", DType::u8, {2, 3}}, {"b", DType::u8, {4}}});
    w.append(0, std::span<const std::uint8_t>(six));
    w.append(1, std::span<const std::uint8_t>(six).first(3));
    CHECK_THROWS_AS(w.commit(), mpsim::Error);                                                // b is one short
    CHECK_THROWS_AS(w.append(0, std::span<const std::uint8_t>(six).first(1)), mpsim::Error);  // past a's shape
    CHECK_THROWS_AS(w.append(1, std::span<const float>(one)), mpsim::Error);  // 4-byte elements into uint8
  }
  {
    NpzWriter w(dir / "abandoned.npz", {{"a", DType::u8, {6}}});
    w.append(0, std::span<const std::uint8_t>(six));
  }  // destroyed without commit
  CHECK(dir.files().empty());
  std::printf("NpzWriter failures left %zu files\n", dir.files().size());
}
