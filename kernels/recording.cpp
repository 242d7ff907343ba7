#include "recording.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mpsim/error.hpp"

namespace mpsim::hw {

namespace {

// A non-negative integer field. nlohmann's get<std::uint64_t>() converts a float (1e115, which the fuzzer
// wrote) with undefined behaviour and a negative integer by wrapping, so only an unsigned JSON integer passes.
std::uint64_t unsigned_field(const nlohmann::json& v, const std::string& what) {
  if (!v.is_number_unsigned()) throw Error(fmt::format("{} must be a non-negative integer, got {}", what, v.dump()));
  return v.get<std::uint64_t>();
}

nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw Error(path.string() + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path.string() + ": not valid JSON (" + e.what() + ")");
  }
}

std::uint32_t parse_hex(const nlohmann::json& v, const std::string& where) {
  // "0x" and 1 to 8 hex digits, as the recordings write them ("0x7fff"), and nothing else (std::stoull would
  // take "-1", "12zz" or 2^64 - 1 and wrap or cut).
  const std::string s = v.get<std::string>();
  const std::string_view digits =
      s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X') ? std::string_view(s).substr(2) : std::string_view(s);
  std::uint32_t out = 0;
  const auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), out, 16);
  if (digits.empty() || digits.size() > 8 || err != std::errc() || end != digits.data() + digits.size())
    throw Error(where + ": '" + s + "' is not a 32-bit hex number");
  return out;
}

// Recompute, compare and explain one run of kind K (ConvertRun or ArithRun).
template <class Run>
RunComparison compare_run(const std::string& file, const std::string& kind, const Run& run, const Profile& profile,
                          const nlohmann::json& rec, const RecordingOptions& o,
                          std::string (*describe)(const Run&, std::uint64_t)) {
  const auto t0 = std::chrono::steady_clock::now();
  RunComparison c;
  c.file = file;
  c.kind = kind;
  c.name = run.name;
  c.intrinsic = rec.value("intrinsic", run.intrinsic);
  const auto& hw_d = rec.at("hw_digests");
  c.blocks_total = hw_d.size();
  if (c.blocks_total != block_count(run))
    throw Error(fmt::format("{}: run {} has {} digests, the run has {} blocks", file, run.name, c.blocks_total,
                            block_count(run)));
  std::vector<std::uint64_t> blocks;
  if (o.blocks) blocks = o.blocks(kind, run.name, c.blocks_total);
  else
    for (std::uint64_t b = 0; b < c.blocks_total; ++b) blocks.push_back(b);
  for (std::uint64_t b : blocks) {
    if (b >= c.blocks_total) continue;
    const std::string where = fmt::format("{} run {} block {}", file, run.name, b);
    const std::uint64_t want = parse_digest_hex(hw_d.at(b), where);
    const std::uint64_t got = recompute_block(run, profile, b, o.threads);
    ++c.blocks_compared;
    if (rec.contains("emu_digests") && got != parse_digest_hex(rec.at("emu_digests").at(b), where))
      ++c.emu_digest_mismatches;
    if (got == want) {
      ++c.blocks_equal;
      continue;
    }
    c.differing.push_back(b);
    if (c.details.size() >= o.detail_blocks) continue;
    DifferingBlock d;
    d.block = b;
    d.hw_digest = want;
    d.emulated_digest = got;
    d.profile_vs_ieee = differing_elements(run, profile, profile_ieee(), b, o.detail_inputs, o.threads);
    for (const auto& e : d.profile_vs_ieee) d.inputs.push_back(describe(run, e.index));
    for (const auto& m : rec.value("first_mismatches", nlohmann::json::array())) {
      const std::uint64_t i = unsigned_field(m.at("index"), where + ": a listed mismatch's index");
      if ((i >> kDigestBlockLog2) != b) continue;
      ListedOutput l;
      l.index = i;
      l.input = describe(run, i);
      l.hw = parse_hex(m.at("hw"), where);
      std::uint32_t out = 0;
      if constexpr (std::is_same_v<Run, ConvertRun>)
        convert_outputs(run, profile, i, std::span<std::uint32_t>(&out, 1));
      else arith_outputs(run, profile, i, std::span<std::uint32_t>(&out, 1));
      l.emulated = out;
      d.listed.push_back(l);
    }
    c.details.push_back(std::move(d));
  }
  c.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return c;
}

}  // namespace

void check_recording(const nlohmann::json& doc, const std::string& file) {
  try {
    if (!doc.is_object()) throw Error(file + ": not a recording of schema mpsim-hw-1 (not a JSON object)");
    const std::string kind = doc.at("kind").get<std::string>();
    if (kind != "convert" && kind != "arith") throw Error(file + ": kind '" + kind + "' holds no digests");
    if (unsigned_field(doc.at("block_elements"), file + ": block_elements") != kDigestBlock)
      throw Error(fmt::format("{}: block_elements must be {}", file, kDigestBlock));
    // The lookups' own messages do not name the file.
    const auto named = [&file](const auto& lookup) {
      try {
        return lookup();
      } catch (const Error& e) {
        throw Error(file + ": " + e.what());
      }
    };
    named([&] { return &find_profile(doc.at("profile").get<std::string>()); });
    for (const auto& rec : doc.at("runs")) {
      const std::string name = rec.at("name").get<std::string>();
      const std::uint64_t blocks = named(
          [&] { return kind == "convert" ? block_count(find_convert_run(name)) : block_count(find_arith_run(name)); });
      const std::string where = fmt::format("{} run {}", file, name);
      for (const char* key : {"hw_digests", "emu_digests"}) {
        if (!rec.contains(key) && std::string_view(key) == "emu_digests") continue;
        const auto& digests = rec.at(key);
        if (!digests.is_array() || digests.size() != blocks)
          throw Error(fmt::format("{}: {} must list {} digests, one per block", where, key, blocks));
        for (std::size_t b = 0; b < digests.size(); ++b)
          parse_digest_hex(digests[b].get<std::string>(), fmt::format("{} {} block {}", where, key, b));
      }
      for (const auto& m : rec.value("first_mismatches", nlohmann::json::array())) {
        if (unsigned_field(m.at("index"), where + ": a listed mismatch's index") >> 32)
          throw Error(fmt::format("{}: a listed mismatch's index {} is beyond 2^32", where, m.at("index").dump()));
        parse_hex(m.at("hw"), where);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(file + ": not a recording of schema mpsim-hw-1 (" + e.what() + ")");
  }
}

std::vector<RunComparison> compare_recording(const std::filesystem::path& dir, const RecordingOptions& o) {
  if (!std::filesystem::is_directory(dir))
    throw Error(dir.string() +
                ": no such directory (expected data/hardware/<device>/ holding convert.json, arith.json)");
  std::vector<RunComparison> out;
  bool any_file = false;
  for (const char* name : {"convert.json", "arith.json"}) {
    const auto path = dir / name;
    if (!std::filesystem::exists(path)) continue;
    any_file = true;
    const nlohmann::json doc = read_json(path);
    const std::string file = path.string();
    check_recording(doc, file);  // a malformed entry fails now, not after minutes of recomputing
    try {
      const std::string kind = doc.at("kind").get<std::string>();
      if (unsigned_field(doc.at("block_elements"), file + ": block_elements") != kDigestBlock)
        throw Error(fmt::format("{}: block_elements must be {}", file, kDigestBlock));
      const Profile& profile = find_profile(doc.at("profile").get<std::string>());
      for (const auto& rec : doc.at("runs")) {
        const std::string run = rec.at("name").get<std::string>();
        if (!o.runs.empty() && std::find(o.runs.begin(), o.runs.end(), run) == o.runs.end()) continue;
        if (o.progress) o.progress(fmt::format("{} {}", name, run));
        if (kind == "convert")
          out.push_back(compare_run(file, kind, find_convert_run(run), profile, rec, o, describe_convert_input));
        else if (kind == "arith")
          out.push_back(compare_run(file, kind, find_arith_run(run), profile, rec, o, describe_arith_input));
        else throw Error(file + ": kind '" + kind + "' holds no digests");
      }
    } catch (const nlohmann::json::exception& e) {
      throw Error(file + ": not a recording of schema mpsim-hw-1 (" + e.what() + ")");
    }
  }
  if (!any_file) throw Error(dir.string() + ": holds neither convert.json nor arith.json");
  return out;
}

std::string format_comparison(const std::vector<RunComparison>& runs) {
  std::string s = fmt::format("{:<20} {:<44} {:>8} {:>8} {:>8} {:>8}\n", "run", "intrinsic", "blocks", "compared",
                              "equal", "seconds");
  for (const auto& r : runs) {
    s += fmt::format("{:<20} {:<44} {:>8} {:>8} {:>8} {:>8.1f}\n", r.name, r.intrinsic.substr(0, 44), r.blocks_total,
                     r.blocks_compared, r.blocks_equal, r.seconds);
    if (!r.differing.empty()) {
      std::string list;
      for (std::size_t k = 0; k < r.differing.size() && k < 16; ++k)
        list += (k ? " " : "") + std::to_string(r.differing[k]);
      if (r.differing.size() > 16) list += " ...";
      s += fmt::format("  {} blocks differ from the hardware: {}\n", r.differing.size(), list);
    }
    if (r.emu_digest_mismatches)
      s += fmt::format("  {} blocks differ from the device emulation's digests\n", r.emu_digest_mismatches);
    for (const auto& d : r.details) {
      s += fmt::format("  block {}: hardware digest {}, emulation {}\n", d.block, digest_hex(d.hw_digest),
                       digest_hex(d.emulated_digest));
      if (d.profile_vs_ieee.empty()) s += "    the profile and IEEE agree on every input of this block\n";
      else s += "    first inputs where the profile and IEEE differ (recomputed both ways):\n";
      for (std::size_t k = 0; k < d.profile_vs_ieee.size(); ++k)
        s += fmt::format("      {} -> profile 0x{:x}, ieee 0x{:x}\n", d.inputs[k], d.profile_vs_ieee[k].a,
                         d.profile_vs_ieee[k].b);
      if (!d.listed.empty()) s += "    hardware outputs the recording lists in this block:\n";
      for (const auto& l : d.listed)
        s += fmt::format("      {} -> hardware 0x{:x}, emulation 0x{:x}{}\n", l.input, l.hw, l.emulated,
                         l.hw == l.emulated ? "" : "  DIFFERENT");
    }
  }
  return s;
}

}  // namespace mpsim::hw
