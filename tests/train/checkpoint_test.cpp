// lib/mpsim/train/checkpoint: a checkpoint is identified by its content (the tensors' values in the order of
// its tensor list, and its metadata), not by its byte layout: the same tensors laid out in another order (as
// the safetensors library's save_file does; tests/train/checkpoint_safetensors.py does it with the library
// itself) read back the same, a flipped value or metadata byte is refused, and a checkpoint written by an
// earlier mpsim (tests/train/data/, no metadata CRC) is still read. The files are parsed here from the
// safetensors README's layout, not with the library's reader.
#include "mpsim/train/checkpoint.hpp"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "../io/test_files.hpp"
#include "catch_compat.hpp"
#include "mpsim/error.hpp"
#include "mpsim/io/safetensors_writer.hpp"

using namespace mpsim::train;
using mpsim::test::error_of;
using mpsim::test::ScratchDir;
using mpsim::test::slurp;
namespace fs = std::filesystem;

namespace {

struct RawSafetensors {
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::vector<float>> tensors;
  std::uint64_t header_len = 0;
};

// The file's metadata and F32 tensors, from its bytes (u64 header length, JSON header, data).
RawSafetensors parse_raw(const std::string& bytes) {
  RawSafetensors r;
  std::memcpy(&r.header_len, bytes.data(), 8);
  const auto header = nlohmann::json::parse(bytes.substr(8, r.header_len));
  for (const auto& [key, v] : header.items()) {
    if (key == "__metadata__") {
      for (const auto& [mk, mv] : v.items()) r.metadata[mk] = mv.get<std::string>();
      continue;
    }
    const auto begin = v["data_offsets"][0].get<std::size_t>(), end = v["data_offsets"][1].get<std::size_t>();
    std::vector<float> values((end - begin) / 4);
    std::memcpy(values.data(), bytes.data() + 8 + r.header_len + begin, end - begin);
    r.tensors[key] = values;
  }
  return r;
}

}  // namespace

TEST_CASE("a checkpoint laid out in another order reads back the same; flipped bytes are refused", "[checkpoint]") {
  ScratchDir dir("checkpoint-order");
  const std::vector<float> a = {1.5f, -2.0f, 3.25f}, b = {0.f, -0.f, 1e-40f, 65504.f, -1.f}, z = {7.f, 8.f};
  const CheckpointTensorView views[] = {{"param/a", a}, {"param/b", b}, {"optimizer/z", z}};
  nlohmann::json header = {{"step", 7}, {"scaler_state", {{"scale", 65536.0}, {"_growth_tracker", 3}}}};
  write_checkpoint(dir / "written.safetensors", header, views);
  const RawSafetensors raw = parse_raw(slurp(dir / "written.safetensors"));
  CHECK(raw.metadata.count("metadata_crc32") == 1);

  // The same tensors and metadata strings, laid out in another order (z, b, a; a different header length).
  const mpsim::io::SafetensorsView reordered[] = {{"optimizer/z", {}, z}, {"param/b", {}, b}, {"param/a", {}, a}};
  mpsim::io::write_safetensors(dir / "reordered.safetensors", raw.metadata, reordered);
  const auto ck = read_checkpoint(dir / "reordered.safetensors");
  REQUIRE(ck.tensors.size() == 3);
  int compared = 0, differ = 0;
  for (const auto& t : ck.tensors) {
    const auto& want = raw.tensors.at(t.name);
    for (std::size_t i = 0; i < want.size(); ++i, ++compared) differ += std::memcmp(&want[i], &t.values[i], 4) != 0;
  }
  std::printf("reordered checkpoint: %zu tensors, %d values compared bit for bit, %d differ\n", ck.tensors.size(),
              compared, differ);
  CHECK(differ == 0);
  CHECK(ck.tensors[0].name == "param/a");  // in the order of the tensor list, not the file's
  CHECK(ck.header["step"] == 7);

  // Every byte of the reordered file's data flipped: refused (the data CRC-32 follows the values).
  const std::string bytes = slurp(dir / "reordered.safetensors");
  const std::uint64_t data_start = 8 + parse_raw(bytes).header_len;
  int flips = 0, refused = 0;
  for (std::uint64_t i = data_start; i < bytes.size(); ++i, ++flips) {
    std::string bad = bytes;
    bad[i] ^= 0x04;
    std::ofstream(dir / "flip.safetensors", std::ios::binary) << bad;
    refused +=
        error_of([&] { read_checkpoint(dir / "flip.safetensors"); }).find("corrupt checkpoint") != std::string::npos;
  }
  std::printf("data byte flips: %d, refused %d\n", flips, refused);
  CHECK(flips == 40);
  CHECK(refused == flips);

  // A metadata value changed (the step, still valid JSON): refused by the metadata's CRC-32.
  auto meta = raw.metadata;
  meta["step"] = "8";
  mpsim::io::write_safetensors(dir / "meta.safetensors", meta, reordered);
  const std::string msg = error_of([&] { read_checkpoint(dir / "meta.safetensors"); });
  std::printf("metadata changed: %s\n", msg.c_str());
  CHECK(msg.find("the metadata's CRC-32") != std::string::npos);
}

TEST_CASE("checkpoints of earlier versions (no metadata CRC) are still read", "[checkpoint]") {
  ScratchDir dir("checkpoint-old");
  // Written by mpsim 0.1.0 at commit 00dc8e2 (`mpsim train --model lstm --policy mixed-fp16 --scaler dynamic
  // --steps 2 --size 8 --batch 2`), before the metadata CRC existed.
  const char* root = std::getenv("MPSIM_SOURCE_ROOT");
  REQUIRE(root != nullptr);
  const fs::path old_file = fs::path(root) / "tests/train/data/checkpoint_mpsim-0.1.0-00dc8e2.safetensors";
  const RawSafetensors raw = parse_raw(slurp(old_file));
  CHECK(raw.metadata.count("metadata_crc32") == 0);
  const auto ck = read_checkpoint(old_file);
  int compared = 0, differ = 0;
  for (const auto& t : ck.tensors) {
    const auto& want = raw.tensors.at(t.name);
    REQUIRE(want.size() == t.values.size());
    for (std::size_t i = 0; i < want.size(); ++i, ++compared) differ += std::memcmp(&want[i], &t.values[i], 4) != 0;
  }
  std::printf("mpsim 0.1.0 checkpoint: step %s, %zu tensors, %d values compared, %d differ\n",
              ck.header["step"].dump().c_str(), ck.tensors.size(), compared, differ);
  CHECK(ck.header["step"] == 2);
  CHECK(ck.tensors.size() == raw.tensors.size());
  CHECK(differ == 0);
  // Its data laid out in another order: still read (the data CRC-32 is over the values in list order).
  std::vector<mpsim::io::SafetensorsView> views;
  for (auto it = raw.tensors.rbegin(); it != raw.tensors.rend(); ++it) views.push_back({it->first, {}, it->second});
  mpsim::io::write_safetensors(dir / "old-reordered.safetensors", raw.metadata, views);
  CHECK(read_checkpoint(dir / "old-reordered.safetensors").tensors.size() == raw.tensors.size());
}
