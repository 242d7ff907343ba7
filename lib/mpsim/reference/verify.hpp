// `mpsim verify`: named checks that compare the production code with the independent references and,
// where the CPU has them, with hardware conversions. Each check returns rows (format, mode, what it was
// compared with, inputs checked, mismatches, first mismatching input) for the table and the JSON report.
//
// The registry is open: another engineer adds rows (e.g. arithmetic against the Boost reference) by
// calling register_check() from a file that is linked whole — a tools/mpsim/*.cpp (static
// `const bool registered = mpsim::verify::register_check(...)`) or main() of a test — because objects of
// a static library that nothing references are not linked.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim {
class GridTable;
}

namespace mpsim::verify {

struct Mismatch {
  std::string input;  // the input, readable ("0x3f800001 (1.00000012)")
  std::uint64_t expected = 0;
  std::uint64_t got = 0;
};

struct Row {
  std::string check;  // the check's name
  std::string format;
  std::string mode;     // "rne", "sr(b=32)", ... or "-" for rows without a mode
  std::string against;  // "grid table", "boost reference", "F16C vcvtps2ph", ...
  std::uint64_t checked = 0;
  std::uint64_t mismatches = 0;
  std::uint64_t documented = 0;  // inputs that differ in a documented way (hardware flushing subnormals)
  std::optional<Mismatch> first;
  bool skipped = false;
  std::string note;    // why skipped, or what `documented` counts
  double seconds = 0;  // wall time of the sweep that produced the row
};

struct Options {
  bool exhaustive = false;  // every float input instead of the sampled set
  int threads = 0;          // 0: all hardware threads
  std::uint64_t seed = 2026;
  // Called with a line of progress text (may be empty for none).
  std::function<void(const std::string&)> progress;
};

struct Check {
  std::string name;
  std::string description;
  std::function<std::vector<Row>(const Options&)> run;
};

bool register_check(Check check);
// The built-in conversion checks followed by every registered one.
const std::vector<Check>& checks();
std::vector<Check> conversion_checks();

// Runs every check (or those whose name contains `filter`) in order.
std::vector<Row> run_checks(const Options& options, const std::string& filter = "");
bool any_mismatch(const std::vector<Row>& rows);
nlohmann::json to_json(const std::vector<Row>& rows);
std::string format_table(const std::vector<Row>& rows);

// ---- the sweep engine over float inputs (used by the checks and by tests/format/round_exhaustive_test) ----

// Positive float bit patterns p = (h << low_bits) | low, for every h < 2^(31 - low_bits) and every low in
// `lows` (sorted, < 2^low_bits), visited in increasing magnitude; each is checked with both signs.
// low_bits = 0 with lows {0} is every float. Keeping the low bits at ties, ties ± 1, 2 and the ends of a
// rounding interval while sweeping every exponent and every kept mantissa covers every boundary of any
// format with at least low_bits + 1 discarded bits.
struct FloatPatterns {
  int low_bits = 0;
  std::vector<std::uint32_t> lows{0};
  std::uint64_t magnitudes() const { return (std::uint64_t{1} << (31 - low_bits)) * lows.size(); }
  std::uint64_t inputs() const { return 2 * magnitudes(); }
  std::uint32_t at(std::uint64_t i) const {
    return static_cast<std::uint32_t>(((i / lows.size()) << low_bits) | lows[i % lows.size()]);
  }
  static FloatPatterns all() { return {}; }
  // The boundary set: low bits in {0, 1, 2, half - 1, half, half + 1, all ones - 1, all ones}.
  static FloatPatterns boundaries(int low_bits);
};

// A hardware conversion of one float, compared with round_bits(x, fmt) (nearest-even).
struct Hardware {
  std::string name;  // "F16C vcvtps2ph"
  bool available = false;
  std::string unavailable_reason;
  std::uint64_t (*convert)(std::uint32_t float_bits) = nullptr;
  // Inputs where the hardware differs from the specification in a documented way (counted, not
  // mismatches). When the hardware is absent, inputs for which it holds with ours != hardware's
  // predictable answer are still counted, so the report shows how many it would affect.
  bool (*documented)(std::uint32_t float_bits, std::uint64_t ours) = nullptr;
  std::string documented_note;
};

struct Sweep {
  std::string check;  // name for the rows
  Format format;
  std::vector<Rounding> roundings;  // one row each, compared with the grid table
  FloatPatterns patterns;
  std::optional<Hardware> hardware;  // one more row (nearest-even only)
};

// Runs a sweep on `threads` threads (0: all); the rows do not depend on the thread count.
std::vector<Row> run_sweep(const Sweep& sweep, int threads = 0);

// The name of a rounding for the tables: "rne", "sr(b=8)", with "+daz" for zeroed subnormal inputs.
std::string rounding_label(const Rounding& r);
// The format with its options: "fp16", "fp16+sat", "fp16+ftz".
std::string format_label(const Format& f);
// The seven modes (stochastic with the given seed and 32 bits).
std::vector<Rounding> all_modes(std::uint64_t seed);

// The hardware conversions this build knows, with cpuid checks at run time.
Hardware f16c_fp16();        // x86 F16C vcvtps2ph (round to nearest even)
Hardware avx512bf16_bf16();  // x86 AVX512-BF16 vcvtneps2bf16

// A double near a boundary of `fmt` (grid points, midpoints, a few double ulps either side, tiny values,
// values past the overflow threshold, and some random bit patterns), of random sign.
double boundary_sample(const Format& fmt, std::mt19937_64& rng);

// Compares round_bits with the Boost reference on `count` boundary samples (as double, and as float
// when `as_float`) in every rounding of `roundings`; one row per rounding.
std::vector<Row> compare_with_boost(const std::string& check, const Format& fmt, std::span<const Rounding> roundings,
                                    std::uint64_t count, bool as_float, std::uint64_t seed, int threads = 0);
// Compares the grid table with the Boost reference the same way (the cross-check of the fast method).
std::vector<Row> grid_vs_boost(const std::string& check, const Format& fmt, std::span<const Rounding> roundings,
                               std::uint64_t count, bool as_float, std::uint64_t seed, int threads = 0);

}  // namespace mpsim::verify
