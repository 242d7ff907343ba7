#include "mpsim/reference/verify.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>

#include <fmt/format.h>

#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/parallel.hpp"
#include "mpsim/reference/grid_table.hpp"
#include "mpsim/reference/reference.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define MPSIM_VERIFY_X86 1
#endif

namespace mpsim::verify {

namespace {

int thread_count(int threads) { return threads > 0 ? threads : hardware_threads(); }

// One row's counts while a sweep runs; the first mismatch is the one with the smallest key, so the
// report does not depend on how the work was split between threads.
struct Tally {
  std::uint64_t checked = 0, mismatches = 0, documented = 0;
  std::uint64_t first_key = std::numeric_limits<std::uint64_t>::max();
  std::uint64_t first_input = 0, expected = 0, got = 0;

  void mismatch(std::uint64_t key, std::uint64_t input, std::uint64_t want, std::uint64_t have) {
    ++mismatches;
    if (key < first_key) {
      first_key = key;
      first_input = input;
      expected = want;
      got = have;
    }
  }
  void merge(const Tally& o) {
    checked += o.checked;
    documented += o.documented;
    mismatches += o.mismatches;
    if (o.first_key < first_key) {
      first_key = o.first_key;
      first_input = o.first_input;
      expected = o.expected;
      got = o.got;
    }
  }
};

std::string describe_float(std::uint32_t bits) {
  return fmt::format("0x{:08x} ({:.9g})", bits, std::bit_cast<float>(bits));
}
std::string describe_double(std::uint64_t bits) {
  return fmt::format("0x{:016x} ({:.17g})", bits, std::bit_cast<double>(bits));
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

FloatPatterns FloatPatterns::boundaries(int low_bits) {
  FloatPatterns p;
  p.low_bits = low_bits;
  const std::uint32_t half = 1u << (low_bits - 1), ones = (1u << low_bits) - 1;
  p.lows = {0, 1, 2, half - 1, half, half + 1, ones - 1, ones};
  return p;
}

std::string rounding_label(const Rounding& r) {
  std::string s(short_name(r.mode));
  if (r.mode == RoundingMode::stochastic) s += fmt::format("(b={})", r.sr_bits);
  if (r.input_subnormals == InputSubnormals::zero) s += "+daz";
  return s;
}

std::string format_label(const Format& f) {
  std::string s = f.name;
  if (f.overflow == Overflow::saturate) s += "+sat";
  if (f.subnormals == Subnormals::flush) s += "+ftz";
  return s;
}

std::vector<Rounding> all_modes(std::uint64_t seed) {
  std::vector<Rounding> v;
  for (RoundingMode m : {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up, RoundingMode::down,
                         RoundingMode::nearest_away, RoundingMode::to_odd})
    v.push_back(Rounding::of(m));
  v.push_back(Rounding::stochastic(seed, 32));
  return v;
}

// ---- hardware ----------------------------------------------------------------------------------------

#ifdef MPSIM_VERIFY_X86
namespace {

// vcvtps2ph with imm8 = 0: round to nearest even, MXCSR not consulted (Intel SDM, VCVTPS2PH).
__attribute__((target("f16c"))) std::uint64_t f16c_convert(std::uint32_t float_bits) {
  return static_cast<std::uint16_t>(_cvtss_sh(std::bit_cast<float>(float_bits), 0));
}

// vcvtneps2bf16: nearest even; "input denormals are always treated as zero" and output denormals
// flushed (Intel SDM, VCVTNEPS2BF16; https://felixcloutier.com/x86/vcvtneps2bf16).
__attribute__((target("avx512f,avx512bf16"))) std::uint64_t avx512bf16_convert(std::uint32_t float_bits) {
  const __m512 v = _mm512_set1_ps(std::bit_cast<float>(float_bits));
  const __m256bh r = _mm512_cvtneps_pbh(v);
  std::uint16_t out = 0;
  std::memcpy(&out, &r, sizeof out);
  return out;
}

}  // namespace
#endif

namespace {
bool bf16_flushes(std::uint32_t float_bits, std::uint64_t ours) {
  const bool subnormal_input = (float_bits & 0x7f800000u) == 0 && (float_bits & 0x7fffffu) != 0;
  return subnormal_input && (ours & 0x7fffu) != 0;
}
}  // namespace

Hardware f16c_fp16() {
  Hardware h;
  h.name = "F16C vcvtps2ph";
#ifdef MPSIM_VERIFY_X86
  h.available = cpu_features().f16c;
  h.convert = f16c_convert;
  h.unavailable_reason = "this CPU has no F16C";
#else
  h.unavailable_reason = "not an x86 build";
#endif
  return h;
}

Hardware avx512bf16_bf16() {
  Hardware h;
  h.name = "AVX512-BF16 vcvtneps2bf16";
#ifdef MPSIM_VERIFY_X86
  h.available = cpu_features().avx512bf16;
  h.convert = avx512bf16_convert;
  h.unavailable_reason = "this CPU has no AVX512-BF16";
#else
  h.unavailable_reason = "not an x86 build";
#endif
  h.documented = bf16_flushes;
  h.documented_note =
      "documented: float subnormal inputs whose bf16 result is non-zero, which vcvtneps2bf16 flushes to +-0 "
      "(Intel SDM: input denormals are treated as zero)";
  return h;
}

// ---- the sweep ---------------------------------------------------------------------------------------

std::vector<Row> run_sweep(const Sweep& sweep, int threads) {
  const auto t0 = std::chrono::steady_clock::now();
  const GridTable grid(sweep.format);
  const Format& fmt = sweep.format;
  const auto& rs = sweep.roundings;
  const std::size_t nr = rs.size();
  const bool with_hw = sweep.hardware.has_value();
  const bool hw_runs = with_hw && sweep.hardware->available;
  const bool hw_counts = with_hw && (hw_runs || sweep.hardware->documented);
  // The row whose results the hardware is compared with: plain nearest-even.
  std::size_t rne = nr;
  for (std::size_t k = 0; k < nr; ++k)
    if (rs[k].mode == RoundingMode::nearest_even && rs[k].input_subnormals == InputSubnormals::keep) rne = k;

  const std::uint64_t total = sweep.patterns.magnitudes();
  const std::uint64_t chunk = std::max<std::uint64_t>(1, total / 512);
  const std::uint64_t chunks = (total + chunk - 1) / chunk;
  std::atomic<std::uint64_t> next{0};
  const int nthreads = static_cast<int>(std::min<std::uint64_t>(thread_count(threads), chunks));
  std::vector<std::vector<Tally>> tallies(nthreads, std::vector<Tally>(nr + 1));

  run_workers(nthreads, "verify", [&](int worker) {
    std::vector<Tally>& tally = tallies[worker];
    for (std::uint64_t c = next++; c < chunks; c = next++) {
      const std::uint64_t begin = c * chunk, end = std::min(total, begin + chunk);
      std::uint32_t cursor = 0;
      bool cursor_set = false;
      for (std::uint64_t i = begin; i < end; ++i) {
        const std::uint32_t p = sweep.patterns.at(i);
        const bool is_nan = p > 0x7f800000u, is_inf = p == 0x7f800000u, is_zero = p == 0;
        const bool is_subnormal = p < 0x00800000u && !is_zero;
        GridTable::Position pos;
        if (!is_nan && !is_inf && !is_zero) {
          const double a = std::bit_cast<float>(p);
          if (!cursor_set) {
            pos = grid.locate(a);
            cursor = pos.lo;
            cursor_set = true;
          } else {
            pos = grid.locate_from(a, cursor);
          }
        }
        for (std::uint32_t s = 0; s < 2; ++s) {
          const std::uint32_t bits = p | (s << 31);
          const float x = std::bit_cast<float>(bits);
          const std::uint64_t key = 2 * i + s;
          std::uint64_t ours_rne = 0;
          for (std::size_t k = 0; k < nr; ++k) {
            const Rounding& r = rs[k];
            std::uint64_t want;
            if (is_nan) want = grid.nan_from_float(bits);
            else if (is_inf) want = grid.from_infinity(s);
            else if (is_zero || (is_subnormal && r.input_subnormals == InputSubnormals::zero)) want = grid.zero(s);
            else want = grid.decide(s, pos, r, bits);
            const std::uint64_t got = round_bits(x, fmt, r, bits);
            ++tally[k].checked;
            if (got != want) tally[k].mismatch(key, bits, want, got);
            if (k == rne) ours_rne = got;
          }
          if (hw_counts) {
            if (rne == nr) ours_rne = round_bits(x, fmt);
            Tally& t = tally[nr];
            ++t.checked;
            if (hw_runs) {
              const std::uint64_t hw = sweep.hardware->convert(bits);
              if (hw != ours_rne) {
                if (sweep.hardware->documented && sweep.hardware->documented(bits, ours_rne)) ++t.documented;
                else t.mismatch(key, bits, ours_rne, hw);
              }
            } else if (sweep.hardware->documented(bits, ours_rne)) {
              ++t.documented;
            }
          }
        }
      }
    }
  });

  std::vector<Tally> merged(nr + 1);
  for (const auto& t : tallies)
    for (std::size_t k = 0; k <= nr; ++k) merged[k].merge(t[k]);
  const double secs = seconds_since(t0);
  std::vector<Row> rows;
  auto make_row = [&](const Tally& t, std::string mode, std::string against) {
    Row row;
    row.check = sweep.check;
    row.format = format_label(fmt);
    row.mode = std::move(mode);
    row.against = std::move(against);
    row.checked = t.checked;
    row.mismatches = t.mismatches;
    row.documented = t.documented;
    if (t.mismatches)
      row.first = Mismatch{describe_float(static_cast<std::uint32_t>(t.first_input)), t.expected, t.got};
    row.seconds = secs;
    return row;
  };
  for (std::size_t k = 0; k < nr; ++k) rows.push_back(make_row(merged[k], rounding_label(rs[k]), "grid table"));
  if (with_hw) {
    const Hardware& h = *sweep.hardware;
    Row row = make_row(merged[nr], "rne", h.name);
    if (!h.available) {
      row.skipped = true;
      row.checked = 0;
      row.note = "skipped: " + h.unavailable_reason;
      if (h.documented)
        row.note += fmt::format("; it would flush {} of these {} inputs ({})", merged[nr].documented,
                                merged[nr].checked, h.documented_note);
    } else if (h.documented) {
      row.note = h.documented_note;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// ---- sampled comparisons -------------------------------------------------------------------------------

double boundary_sample(const Format& f, std::mt19937_64& rng) {
  const int m = f.man_bits;
  const std::uint64_t top = (std::uint64_t{1} << f.exp_bits) - 1, ones = (std::uint64_t{1} << m) - 1;
  const std::uint64_t max_enc = f.nan == NanEncoding::ieee       ? ((top - 1) << m) | ones
                                : f.nan == NanEncoding::all_ones ? ((top << m) | ones) - 1
                                                                 : (top << m) | ones;
  auto grid_value = [&](std::uint64_t e) {
    const std::uint64_t field = e >> m, mant = e & ones;
    return field == 0 && f.has_zero ? std::ldexp(double(mant), 1 - f.bias - m)
                                    : std::ldexp(double(mant | (ones + 1)), int(field) - f.bias - m);
  };
  const std::uint64_t enc = rng() % (max_enc + 2);  // up to the first point past max_finite
  const double v = grid_value(enc), next = grid_value(std::min(enc + 1, max_enc + 1));
  const int k = static_cast<int>(rng() % 3);
  auto nudge = [&](double y) {
    const double dir = (rng() & 1) ? std::numeric_limits<double>::infinity() : 0.0;
    for (int i = 0; i < k; ++i) y = std::nextafter(y, dir);
    return y;
  };
  double x = 0;
  switch (rng() % 16) {
    case 0:
    case 1:
    case 2:
    case 3: x = std::bit_cast<float>(static_cast<std::uint32_t>(rng())); break;
    case 4: x = std::bit_cast<double>(rng()); break;
    case 5:
    case 6: x = v; break;
    case 7:
    case 8:
    case 9: x = nudge(v + (next - v) / 2); break;
    case 10:
    case 11: x = nudge(v); break;
    case 12: x = std::ldexp(0.5 + 0.5 * std::ldexp(double(rng() >> 11), -53), 1 - f.bias - m - int(rng() % 40)); break;
    case 13: x = std::ldexp(1.0 + std::ldexp(double(rng() >> 11), -53), f.emax + int(rng() % 4)); break;
    case 14: x = v + (next - v) * std::ldexp(double(rng() >> 11), -53); break;
    case 15: {
      const double specials[] = {0.0,
                                 std::numeric_limits<double>::infinity(),
                                 std::numeric_limits<double>::quiet_NaN(),
                                 f.max_finite,
                                 f.min_normal,
                                 f.min_subnormal};
      x = specials[rng() % 6];
      break;
    }
  }
  return (rng() & 1) ? -x : x;
}

namespace {

// Compares two conversions on `count` boundary samples in blocks, each block with its own generator, so
// the samples and the report do not depend on the thread count.
template <class Want, class Got>
std::vector<Row> compare_sampled(const std::string& check, const Format& fmt, std::span<const Rounding> rs,
                                 std::uint64_t count, bool as_float, std::uint64_t seed, int threads,
                                 const std::string& against, Want want, Got got) {
  const auto t0 = std::chrono::steady_clock::now();
  constexpr std::uint64_t block = 1024;
  const std::uint64_t blocks = (count + block - 1) / block;
  std::atomic<std::uint64_t> next{0};
  const int nthreads =
      static_cast<int>(std::max<std::uint64_t>(1, std::min<std::uint64_t>(thread_count(threads), blocks)));
  std::vector<std::vector<Tally>> tallies(nthreads, std::vector<Tally>(rs.size()));
  run_workers(nthreads, "verify", [&](int worker) {
    for (std::uint64_t b = next++; b < blocks; b = next++) {
      std::mt19937_64 rng(splitmix64(seed ^ splitmix64(b)));
      const std::uint64_t end = std::min(count, (b + 1) * block);
      for (std::uint64_t i = b * block; i < end; ++i) {
        const double xd = boundary_sample(fmt, rng);
        const float xf = static_cast<float>(xd);
        const std::uint64_t input = as_float ? std::bit_cast<std::uint32_t>(xf) : std::bit_cast<std::uint64_t>(xd);
        for (std::size_t k = 0; k < rs.size(); ++k) {
          const std::uint64_t w = as_float ? want(xf, rs[k], i) : want(xd, rs[k], i);
          const std::uint64_t g = as_float ? got(xf, rs[k], i) : got(xd, rs[k], i);
          ++tallies[worker][k].checked;
          if (w != g) tallies[worker][k].mismatch(i, input, w, g);
        }
      }
    }
  });
  const double secs = seconds_since(t0);
  std::vector<Row> rows;
  for (std::size_t k = 0; k < rs.size(); ++k) {
    Tally t;
    for (const auto& tw : tallies) t.merge(tw[k]);
    Row row;
    row.check = check;
    row.format = format_label(fmt);
    row.mode = rounding_label(rs[k]) + (as_float ? " float" : " double");
    row.against = against;
    row.checked = t.checked;
    row.mismatches = t.mismatches;
    if (t.mismatches)
      row.first = Mismatch{
          as_float ? describe_float(static_cast<std::uint32_t>(t.first_input)) : describe_double(t.first_input),
          t.expected, t.got};
    row.seconds = secs;
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

std::vector<Row> compare_with_boost(const std::string& check, const Format& fmt, std::span<const Rounding> rs,
                                    std::uint64_t count, bool as_float, std::uint64_t seed, int threads) {
  auto want = [&](auto x, const Rounding& r, std::uint64_t i) { return reference_round(x, fmt, r, i); };
  auto got = [&](auto x, const Rounding& r, std::uint64_t i) { return round_bits(x, fmt, r, i); };
  return compare_sampled(check, fmt, rs, count, as_float, seed, threads, "boost reference", want, got);
}

std::vector<Row> grid_vs_boost(const std::string& check, const Format& fmt, std::span<const Rounding> rs,
                               std::uint64_t count, bool as_float, std::uint64_t seed, int threads) {
  const GridTable grid(fmt);
  auto want = [&](auto x, const Rounding& r, std::uint64_t i) { return reference_round(x, fmt, r, i); };
  auto got = [&](auto x, const Rounding& r, std::uint64_t i) { return grid.round(x, r, i); };
  std::vector<Row> rows = compare_sampled(check, fmt, rs, count, as_float, seed, threads, "boost reference", want, got);
  for (auto& row : rows) row.against = "boost reference (grid table under test)";
  return rows;
}

namespace {

std::vector<Row> grid_vs_production_double(const std::string& check, const Format& fmt, std::span<const Rounding> rs,
                                           std::uint64_t count, std::uint64_t seed, int threads) {
  const GridTable grid(fmt);
  auto want = [&](auto x, const Rounding& r, std::uint64_t i) { return grid.round(x, r, i); };
  auto got = [&](auto x, const Rounding& r, std::uint64_t i) { return round_bits(x, fmt, r, i); };
  return compare_sampled(check, fmt, rs, count, false, seed, threads, "grid table", want, got);
}

// The formats of the float sweeps and the hardware that converts to them.
struct SweptFormat {
  const Format& (*format)();
  std::optional<Hardware> (*hardware)();
};
std::optional<Hardware> no_hardware() { return std::nullopt; }
std::optional<Hardware> fp16_hardware() { return f16c_fp16(); }
std::optional<Hardware> bf16_hardware() { return avx512bf16_bf16(); }
const SweptFormat swept_formats[] = {
    {fp16, fp16_hardware}, {bf16, bf16_hardware}, {fp8_e4m3, no_hardware}, {fp8_e5m2, no_hardware}};

// Options of the format and the rounding that the main sweeps leave at their defaults.
std::vector<Row> variant_rows(const Options& o) {
  std::vector<Row> rows;
  const FloatPatterns patterns = FloatPatterns::boundaries(o.exhaustive ? 8 : 16);
  std::vector<Rounding> rs = all_modes(o.seed);
  for (int b : {1, 3, 8, 16}) rs.push_back(Rounding::stochastic(o.seed + b, b));
  Rounding daz = Rounding::nearest_even();
  daz.input_subnormals = InputSubnormals::zero;
  rs.push_back(daz);
  Rounding daz_down = Rounding::of(RoundingMode::down);
  daz_down.input_subnormals = InputSubnormals::zero;
  rs.push_back(daz_down);
  std::vector<Format> formats;
  for (const Format& (*base)() : {fp16, bf16, fp8_e4m3, fp8_e5m2}) {
    Format sat = base();
    sat.overflow = Overflow::saturate;
    Format ftz = base();
    ftz.subnormals = Subnormals::flush;
    formats.push_back(sat);
    formats.push_back(ftz);
  }
  formats.push_back(fp8_e4m3fnuz());
  formats.push_back(fp8_e5m2fnuz());
  formats.push_back(parse_format("e3m2"));
  for (const Format& f : formats) {
    if (o.progress) o.progress("round-variants " + format_label(f));
    auto r = run_sweep({"round-variants", f, rs, patterns, std::nullopt}, o.threads);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  // Stochastic bits other than 32 on the plain formats too.
  std::vector<Rounding> sr;
  for (int b : {1, 3, 8, 16}) sr.push_back(Rounding::stochastic(o.seed + b, b));
  sr.push_back(daz);
  for (const auto& sf : swept_formats) {
    auto r = run_sweep({"round-variants", sf.format(), sr, patterns, std::nullopt}, o.threads);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

std::vector<Row> double_rows(const Options& o) {
  std::vector<Row> rows;
  const std::uint64_t n = o.exhaustive ? 10'000'000 : 50'000;
  const auto rs = all_modes(o.seed);
  for (const Format& (*f)() : {fp16, bf16, fp8_e4m3, fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz}) {
    auto r = grid_vs_production_double("round-double", f(), rs, n, o.seed, o.threads);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

std::vector<Row> boost_rows(const Options& o) {
  std::vector<Row> rows;
  const std::uint64_t n = o.exhaustive ? 200'000 : 2'000;
  const auto rs = all_modes(o.seed);
  for (const Format& f : named_formats()) {
    if (o.progress) o.progress("boost " + f.name);
    for (bool as_float : {false, true}) {
      auto r = compare_with_boost("boost", f, rs, n, as_float, o.seed, o.threads);
      rows.insert(rows.end(), r.begin(), r.end());
    }
  }
  return rows;
}

std::vector<Row> grid_boost_rows(const Options& o) {
  std::vector<Row> rows;
  const std::uint64_t n = o.exhaustive ? 200'000 : 2'000;
  const auto rs = all_modes(o.seed);
  for (const auto& sf : swept_formats) {
    for (bool as_float : {false, true}) {
      auto r = grid_vs_boost("grid-vs-boost", sf.format(), rs, n, as_float, o.seed, o.threads);
      rows.insert(rows.end(), r.begin(), r.end());
    }
  }
  return rows;
}

std::vector<Check>& registered() {
  static std::vector<Check> all;
  return all;
}

}  // namespace

std::vector<Check> conversion_checks() {
  std::vector<Check> v;
  for (const auto& sf : swept_formats) {
    const std::string name = "round-" + sf.format().name;
    v.push_back({name,
                 "float -> " + sf.format().name +
                     " in every mode against the grid table (every float with --exhaustive, else every exponent "
                     "and mantissa with the low 14 bits at the boundaries), and against hardware",
                 [sf, name](const Options& o) {
                   if (o.progress) o.progress(name);
                   Sweep s{name, sf.format(), all_modes(o.seed),
                           o.exhaustive ? FloatPatterns::all() : FloatPatterns::boundaries(14), sf.hardware()};
                   return run_sweep(s, o.threads);
                 }});
  }
  v.push_back({"round-variants", "saturation, flushing, input subnormals as zero, stochastic bit counts, fnuz formats",
               variant_rows});
  v.push_back({"round-double", "double -> small formats against the grid table on boundary samples", double_rows});
  v.push_back(
      {"boost", "float and double -> every named format against the Boost.Multiprecision reference", boost_rows});
  v.push_back({"grid-vs-boost", "the grid table itself against the Boost.Multiprecision reference", grid_boost_rows});
  return v;
}

bool register_check(Check check) {
  registered().push_back(std::move(check));
  return true;
}

const std::vector<Check>& checks() {
  static std::vector<Check> all;
  static std::once_flag once;
  std::call_once(once, [] {
    all = conversion_checks();
    for (const auto& c : registered()) all.push_back(c);
  });
  return all;
}

std::vector<Row> run_checks(const Options& options, const std::string& filter) {
  std::vector<Row> rows;
  // Checks registered after the first call to checks() are still run.
  std::vector<Check> list = conversion_checks();
  list.insert(list.end(), registered().begin(), registered().end());
  for (const auto& c : list) {
    if (!filter.empty() && c.name.find(filter) == std::string::npos) continue;
    auto r = c.run(options);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  return rows;
}

bool any_mismatch(const std::vector<Row>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.mismatches > 0; });
}

nlohmann::json to_json(const std::vector<Row>& rows) {
  nlohmann::json all = nlohmann::json::array();
  std::uint64_t checked = 0, mismatches = 0;
  for (const auto& r : rows) {
    nlohmann::json j = {{"check", r.check},           {"format", r.format},   {"mode", r.mode},
                        {"against", r.against},       {"checked", r.checked}, {"mismatches", r.mismatches},
                        {"documented", r.documented}, {"skipped", r.skipped}, {"note", r.note},
                        {"seconds", r.seconds}};
    if (r.first)
      j["first_mismatch"] = {{"input", r.first->input}, {"expected", r.first->expected}, {"got", r.first->got}};
    else j["first_mismatch"] = nullptr;
    all.push_back(std::move(j));
    checked += r.checked;
    mismatches += r.mismatches;
  }
  return {{"rows", all}, {"checked", checked}, {"mismatches", mismatches}, {"passed", mismatches == 0}};
}

std::string format_table(const std::vector<Row>& rows) {
  std::string out = fmt::format("{:<15} {:<14} {:<16} {:<40} {:>12} {:>10}  {}\n", "check", "format", "mode", "against",
                                "inputs", "mismatches", "first mismatch");
  for (const auto& r : rows) {
    std::string first = "-";
    if (r.first) first = fmt::format("{} expected 0x{:x} got 0x{:x}", r.first->input, r.first->expected, r.first->got);
    if (r.skipped) first = "(skipped)";
    out += fmt::format("{:<15} {:<14} {:<16} {:<40} {:>12} {:>10}  {}\n", r.check, r.format, r.mode, r.against,
                       r.checked, r.mismatches, first);
    if (!r.note.empty() || r.documented)
      out += fmt::format("{:<15} note: {}{}\n", "", r.note,
                         r.documented && !r.skipped ? fmt::format(" ({} inputs)", r.documented) : "");
  }
  return out;
}

}  // namespace mpsim::verify
