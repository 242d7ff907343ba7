// Tests of lib/mpsim/io/safetensors_writer.hpp: files read back with io::TensorSource (names, shapes,
// values bit for bit) and the header's metadata and layout checked by hand; bad tensors are errors that
// leave no file behind. (tests/python/test_sim_vs_torch.py and tests/train/checkpoint_safetensors.py read
// its files with the safetensors package itself.)
#include "catch_compat.hpp"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "mpsim/error.hpp"
#include "mpsim/io/safetensors_writer.hpp"
#include "mpsim/io/tensor_source.hpp"
#include "test_files.hpp"

using namespace mpsim;

TEST_CASE("tensors with shapes and metadata read back", "[safetensors_writer]") {
  test::ScratchDir dir("st-writer");
  std::vector<float> a(2 * 3 * 4), b{1.5f, -0.0f, 1e-45f};
  for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(i) * 0.25f - 2.0f;
  const std::vector<io::SafetensorsView> tensors = {{"site/conv1/out", {2, 3, 4}, a}, {"b", {}, b}};
  const auto path = dir / "t.safetensors";
  io::write_safetensors(path, {{"model", "\"ssd\""}, {"step", "3"}}, tensors);

  const auto src = io::TensorSource::open(path);
  REQUIRE(src.kind() == io::FileKind::safetensors);
  REQUIRE(src.tensors().size() == 2);
  std::size_t compared = 0, mismatches = 0;
  for (const auto& t : tensors) {
    const auto& ref = src.tensor(t.name);
    const std::vector<std::int64_t> want =
        t.shape.empty() ? std::vector<std::int64_t>{static_cast<std::int64_t>(t.values.size())} : t.shape;
    CHECK(ref.shape == want);
    const auto got = src.read_float(ref);
    REQUIRE(got.size() == t.values.size());
    for (std::size_t i = 0; i < got.size(); ++i, ++compared)
      mismatches += std::memcmp(&got[i], &t.values[i], sizeof(float)) != 0;
  }
  std::printf("safetensors writer: 2 tensors, %zu values read back by TensorSource, %zu mismatches\n", compared,
              mismatches);
  CHECK(mismatches == 0);

  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  CHECK((8 + n) % 8 == 0);  // the data starts 8-byte aligned
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  CHECK(header["__metadata__"] == nlohmann::json({{"model", "\"ssd\""}, {"step", "3"}}));
  CHECK(header["b"]["data_offsets"] == nlohmann::json({a.size() * 4, (a.size() + b.size()) * 4}));
  CHECK(bytes.size() == 8 + n + (a.size() + b.size()) * 4);
}

TEST_CASE("a bad tensor list is an error naming it, and nothing is written", "[safetensors_writer]") {
  test::ScratchDir dir("st-writer-bad");
  const std::vector<float> v(6, 1.0f);
  const std::vector<std::pair<std::vector<io::SafetensorsView>, std::string>> bad = {
      {{{"x", {4, 2}, v}}, "'x' has 6 values, its shape holds 8"},
      {{{"x", {}, v}, {"x", {}, v}}, "'x' is empty, reserved or given twice"},
      {{{"", {}, v}}, "'' is empty"},
      {{{"__metadata__", {}, v}}, "reserved"},
  };
  for (const auto& [tensors, want] : bad) {
    std::string msg;
    try {
      io::write_safetensors(dir / "bad.safetensors", {}, tensors);
    } catch (const Error& e) {
      msg = e.what();
    }
    std::printf("%s\n", msg.c_str());
    CHECK(msg.find("bad.safetensors") != std::string::npos);
    CHECK(msg.find(want) != std::string::npos);
    CHECK(dir.files().empty());
  }
}
