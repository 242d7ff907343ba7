// Tests of lib/mpsim/io/npy_writer.hpp: a .npy written in pieces is the file write_npy writes whole; a
// writer that got too few or too many elements, or was never committed, leaves no file.
#include "mpsim/io/npy_writer.hpp"

#include "catch_compat.hpp"

#include <cstdint>
#include <span>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/io/npy.hpp"
#include "test_files.hpp"

using namespace mpsim::io;
using mpsim::test::ScratchDir;

TEST_CASE("NpyWriter: pieces of any size make the file write_npy makes", "[npy_writer]") {
  ScratchDir dir("npy-writer");
  std::vector<float> x(1001);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.5f - 7.0f;
  const std::vector<std::int64_t> shape = {7, 11, 13};
  write_npy(dir / "whole.npy", make_npy(std::span<const float>(x), shape));
  std::size_t files = 0;
  for (const std::size_t piece : {std::size_t{1}, std::size_t{64}, std::size_t{333}, x.size()}) {
    NpyWriter w(dir / "pieces.npy", DType::f32, shape);
    for (std::size_t at = 0; at < x.size(); at += piece)
      w.append(std::span<const float>(x).subspan(at, std::min(piece, x.size() - at)));
    CHECK(w.written() == x.size());
    w.commit();
    CHECK(mpsim::test::read_bytes(dir / "pieces.npy") == mpsim::test::read_bytes(dir / "whole.npy"));
    ++files;
  }
  // float16 bits, 0-d and empty arrays.
  const std::vector<std::uint16_t> h = {0x3c00};
  NpyWriter scalar(dir / "scalar.npy", DType::f16, {});
  scalar.append(std::span<const std::uint16_t>(h));
  scalar.commit();
  const NpyArray s = read_npy(dir / "scalar.npy");
  CHECK(s.dtype == DType::f16);
  CHECK(s.shape.empty());
  CHECK(to_float(s) == std::vector<float>{1.0f});
  NpyWriter empty(dir / "empty.npy", DType::f64, {0, 3});
  empty.commit();
  CHECK(read_npy(dir / "empty.npy").count() == 0);
  WARN(files << " files written in pieces of 1, 64, 333 and 1001 floats equal write_npy's; 0-d and empty arrays");
}

TEST_CASE("NpyWriter: too few or too many elements, a wrong element size, no commit: no file", "[npy_writer]") {
  ScratchDir dir("npy-writer");
  const std::vector<float> x(10, 1.0f);
  const std::vector<double> d(10, 1.0);
  auto only_scratch = [&] { return dir.files().empty(); };
  {
    NpyWriter w(dir / "a.npy", DType::f32, {10});
    w.append(std::span<const float>(x).first(9));
    CHECK_THROWS_WITH(w.commit(), Catch::Contains("9 of 10 elements written"));
  }
  CHECK(only_scratch());
  {
    NpyWriter w(dir / "a.npy", DType::f32, {10});
    w.append(std::span<const float>(x).first(6));
    CHECK_THROWS_WITH(w.append(std::span<const float>(x).first(6)), Catch::Contains("2 elements written past"));
    CHECK_THROWS_WITH(w.append(std::span<const double>(d).first(1)),
                      Catch::Contains("writing 8-byte elements into a float32"));
  }
  CHECK(only_scratch());
  {
    NpyWriter w(dir / "a.npy", DType::f32, {10});
    w.append(std::span<const float>(x));
  }  // never committed
  CHECK(only_scratch());
  CHECK_THROWS_AS(NpyWriter(dir / "no/such/dir/a.npy", DType::f32, {1}), mpsim::Error);
  CHECK_THROWS_AS(NpyWriter(dir / "a.npy", DType::f32, {-1}), mpsim::Error);
  CHECK(only_scratch());
}
