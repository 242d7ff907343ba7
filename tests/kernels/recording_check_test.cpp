// kernels/recording.hpp, check_recording: every committed recording (data/hardware/<device>/convert.json,
// arith.json) passes, and each kind of damage to one is refused with a message naming the file and the
// entry, before any block is recomputed. (tests/fuzz/fuzz_recording.cpp feeds it arbitrary JSON.)
#include "catch_compat.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "mpsim/error.hpp"
#include "recording.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

TEST_CASE("recordings: the committed files pass, damaged ones are refused naming the entry", "[recording_check]") {
  const char* root = std::getenv("MPSIM_SOURCE_ROOT");
  REQUIRE(root != nullptr);
  int files = 0;
  json convert;
  for (const auto& device : fs::directory_iterator(fs::path(root) / "data" / "hardware")) {
    for (const char* name : {"convert.json", "arith.json"}) {
      const auto path = device.path() / name;
      if (!fs::exists(path)) continue;
      std::ifstream in(path);
      const json doc = json::parse(in);
      CHECK_NOTHROW(mpsim::hw::check_recording(doc, path.string()));
      ++files;
      if (std::string(name) == "convert.json") convert = doc;
    }
  }
  REQUIRE(files >= 2);
  REQUIRE(convert.is_object());
  const std::function<void(json&)> damages[] = {
      [](json& d) { d["runs"][0]["hw_digests"][3] = "not hex"; },
      [](json& d) { d["runs"][0]["hw_digests"].erase(0); },
      [](json& d) { d["runs"][0]["hw_digests"][0] = 5; },
      [](json& d) { d["runs"][0]["name"] = "no_such_run"; },
      [](json& d) { d["profile"] = "no_such_profile"; },
      [](json& d) { d["kind"] = "unary"; },
      [](json& d) { d["block_elements"] = 1024; },
      [](json& d) { d["runs"][0]["first_mismatches"][0]["hw"] = "-1"; },
      [](json& d) { d["runs"][0]["first_mismatches"][0]["hw"] = "0x123456789"; },
      [](json& d) { d["runs"][0]["first_mismatches"][0]["index"] = std::uint64_t{1} << 32; },
      [](json& d) { d["runs"][0]["emu_digests"] = json::array({"00"}); },
      [](json& d) { d = json::array(); },
  };
  int refused = 0;
  for (const auto& damage : damages) {
    json d = convert;
    damage(d);
    try {
      mpsim::hw::check_recording(d, "damaged/convert.json");
    } catch (const mpsim::Error& e) {
      refused += std::string(e.what()).rfind("damaged/convert.json", 0) == 0;
      std::printf("refused: %s\n", e.what());
    }
  }
  std::printf("recordings: %d committed files pass; %d of %zu damaged copies refused\n", files, refused,
              std::size(damages));
  CHECK(refused == static_cast<int>(std::size(damages)));
}
