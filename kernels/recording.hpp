// A recorded exhaustive hardware run set (data/hardware/<device>/convert.json, arith.json; schema
// mpsim-hw-1, data/hardware/README.md) compared with the emulation: per run, the blocks recomputed
// (recompute.hpp) and how many equal the hardware's digests; for a differing block, the first inputs
// where the emulation under the recording's profile and under IEEE disagree, and the hardware outputs the
// recording lists for that block beside the emulation's. Used by `mpsim verify --against` and
// tests/kernels/recorded_test.cpp. Host only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "recompute.hpp"

namespace mpsim::hw {

struct ListedOutput {  // an element the recording lists with the hardware's output
  std::uint64_t index = 0;
  std::string input;  // readable
  std::uint32_t hw = 0;
  std::uint32_t emulated = 0;
};

struct DifferingBlock {
  std::uint64_t block = 0;
  std::uint64_t hw_digest = 0, emulated_digest = 0;
  // First elements where the emulation under the recording's profile and under IEEE differ.
  std::vector<ElementDifference> profile_vs_ieee;
  std::vector<std::string> inputs;   // readable, one per profile_vs_ieee entry
  std::vector<ListedOutput> listed;  // the recording's listed hardware outputs inside this block
};

struct RunComparison {
  std::string file, kind, name, intrinsic;
  std::uint64_t blocks_total = 0, blocks_compared = 0, blocks_equal = 0, emu_digest_mismatches = 0;
  std::vector<std::uint64_t> differing;  // block numbers
  std::vector<DifferingBlock> details;   // for the first differing blocks
  double seconds = 0;
};

struct RecordingOptions {
  // Blocks to recompute per run; nullopt: all. A function so callers can choose per run (kind, name, count).
  std::function<std::vector<std::uint64_t>(const std::string& kind, const std::string& name, std::uint64_t blocks)>
      blocks;
  std::vector<std::string> runs;  // only these runs (empty: all)
  std::size_t detail_blocks = 2;  // differing blocks explained per run
  std::size_t detail_inputs = 4;  // first differing inputs per explained block
  int threads = 0;
  std::function<void(const std::string&)> progress;
};

// Checks one recording file (the parsed JSON of convert.json or arith.json, `file` naming it) whole, before any
// block is recomputed: its kind, block size and profile; per run a known name, one 16-hex-digit digest per
// block (hw_digests, and emu_digests where present), and the listed mismatches' indices and hex outputs.
// Throws mpsim::Error naming the file and what is wrong. compare_recording calls it first; the fuzz target
// tests/fuzz/fuzz_recording.cpp calls it on arbitrary JSON.
void check_recording(const nlohmann::json& doc, const std::string& file);

// The device directory's convert.json and arith.json (whichever exist) compared with the emulation.
// Throws mpsim::Error naming the file for a missing directory, malformed JSON or an unknown run.
std::vector<RunComparison> compare_recording(const std::filesystem::path& device_dir, const RecordingOptions& o);

std::string format_comparison(const std::vector<RunComparison>& runs);

}  // namespace mpsim::hw
