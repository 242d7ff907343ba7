// The bulk rounding engine: the array path that the training simulator, the analysis reports and the
// CLI call (docs/design.md). Bit-identical to the scalar specification round_bits() for every element,
// whatever the code path or thread count; it can count what it did (Stats) in the same pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"

namespace mpsim {

// What one rounding pass did. Every input element lands in exactly one of the classes
// zero_in / nan / inf_in / exact / rounded, and the finer counters say what happened to the
// non-zero finite ones:
//   underflow: non-zero input that became ±0 (flushed: "lost" gradients);
//   subnormal: result is a non-zero subnormal of the format (precision partly lost);
//   overflow:  finite input whose result is ±inf, NaN (formats without inf) or ±max_finite by saturation.
struct Stats {
  std::uint64_t count = 0;      // elements processed
  std::uint64_t zero_in = 0;    // input was ±0
  std::uint64_t nan = 0;        // input was NaN
  std::uint64_t inf_in = 0;     // input was ±inf
  std::uint64_t exact = 0;      // finite non-zero input, result equal to it
  std::uint64_t rounded = 0;    // finite non-zero input, result differs from it (includes underflow/overflow)
  std::uint64_t underflow = 0;  // finite non-zero input -> ±0
  std::uint64_t subnormal = 0;  // result is a non-zero subnormal
  std::uint64_t overflow = 0;   // finite input -> ±inf / NaN / saturated to ±max_finite
  double max_abs = 0;           // largest finite |input| seen (0 if none)
  double min_abs_nonzero = 0;   // smallest non-zero finite |input| seen (0 if none)

  void merge(const Stats& o);
  std::uint64_t nonzero_finite() const { return exact + rounded; }
  friend bool operator==(const Stats&, const Stats&) = default;
};

// The Stats class of rounding x into fmt under r: 0 zero (from a non-zero x: underflow), 1 subnormal,
// 2 normal, 3 overflow (±inf, NaN, or a saturated ±max_finite from beyond it). x must be finite and
// non-zero. Monotone in |x| within a sign, which the F16C path's Stats thresholds and the analysis
// range counter both rely on.
int outcome_class(double x, const Format& fmt, const Rounding& r);

// Which code path the engine takes. `automatic` picks the fastest the CPU has (cpuid). Forcing a path
// the CPU lacks is an mpsim::Error.
enum class Path : std::uint8_t { automatic, scalar, avx2, avx512 };
std::string_view to_string(Path);
bool path_available(Path);  // false if the CPU (or the build) lacks it

struct BulkOptions {
  Path path = Path::automatic;
  int threads = 0;           // 0: the engine's default (all hardware threads for large arrays); 1: none
  std::uint64_t index0 = 0;  // stochastic rounding: element i uses generator index index0 + i
  // Use a hardware conversion instruction where it is exact for the case (F16C vcvtps2ph for fp16
  // with subnormals kept in nearest-even, toward zero, up and down, and nearest-away from two of them);
  // false forces the software vector code (tests compare both).
  bool hardware_convert = true;
  // Write the output with non-temporal (streaming) stores, which bypass the caches: for large arrays that
  // will not be read again soon, the stores then cost no read of the destination lines
  // (docs/performance.md: 2^26 floats to fp16 in 0.79-0.83x the time of the F16C loop with ordinary stores). Slower
  // where the output is read again soon, so off by default. Vector paths only; the same bits either way.
  bool streaming_stores = false;
};

// The path `automatic` resolves to on this CPU for float input (avx512, avx2 or scalar).
Path best_path();

// Whether the vector paths handle this format for float input: man_bits <= 22, emin >= -126,
// emin + 23 - man_bits <= 127 and storage up to 32 bits (every named format but fp32 and fp64).
// Other formats, and double input, run the scalar code (threaded) whatever path is asked for.
bool vector_supported(const Format& fmt);

// Simulate mode: out[i] = round(in[i]) held in the input's type. `in` and `out` may be the same array.
// For float output the format must fit in float (exp_bits <= 8 and man_bits <= 23, bias such that its
// range lies inside float's); otherwise mpsim::Error.
void round_array(std::span<const float> in, std::span<float> out, const Format& fmt, const Rounding& r = {},
                 Stats* stats = nullptr, const BulkOptions& opt = {});
void round_array(std::span<const double> in, std::span<double> out, const Format& fmt, const Rounding& r = {},
                 Stats* stats = nullptr, const BulkOptions& opt = {});

// Packed mode: out[i] = round_bits(in[i]) in the format's storage. The element type must be the
// format's storage width (uint8 for 8-bit formats, uint16 for 16-bit ones, uint32 up to 32 bits);
// otherwise mpsim::Error.
void round_array(std::span<const float> in, std::span<std::uint8_t> out, const Format& fmt, const Rounding& r = {},
                 Stats* stats = nullptr, const BulkOptions& opt = {});
void round_array(std::span<const float> in, std::span<std::uint16_t> out, const Format& fmt, const Rounding& r = {},
                 Stats* stats = nullptr, const BulkOptions& opt = {});
void round_array(std::span<const float> in, std::span<std::uint32_t> out, const Format& fmt, const Rounding& r = {},
                 Stats* stats = nullptr, const BulkOptions& opt = {});
void round_array(std::span<const double> in, std::span<std::uint8_t> out, const Format& fmt, const Rounding& r = {},
                 Stats* stats = nullptr, const BulkOptions& opt = {});
void round_array(std::span<const double> in, std::span<std::uint16_t> out, const Format& fmt, const Rounding& r = {},
                 Stats* stats = nullptr, const BulkOptions& opt = {});

// The number of threads the engine uses for an array of n elements under opt (at least 1): passes over
// the engine's output that follow it (soft_error.hpp) split their work the same way.
int bulk_threads(std::size_t n, const BulkOptions& opt);

// Unpacking: out[i] = decode(in[i]) (exact for every format that fits in float).
void decode_array(std::span<const std::uint8_t> in, std::span<float> out, const Format& fmt);
void decode_array(std::span<const std::uint16_t> in, std::span<float> out, const Format& fmt);
void decode_array(std::span<const std::uint32_t> in, std::span<float> out, const Format& fmt);

}  // namespace mpsim
