// Exhaustive tests of lib/mpsim/format/bulk.hpp against the scalar specification round_bits():
//  * fp16 and bf16, nearest-even / toward zero / stochastic: all 2^32 float32 inputs;
//  * tf32, fp8_e4m3, fp8_e5m2 and the custom e3m4, e6m9, every rounding mode: >= 10^8 inputs per
//    format (every 43rd float bit pattern, shared out among the seven modes, so each mode sees every
//    exponent and mantissa residue; and in every mode each format boundary: every representable value,
//    the midpoints between neighbours, and the floats one and two ulps either side of both).
// The specification is computed once per chunk and every path the CPU has (avx2 with and without the
// F16C instruction, avx512, two threads) is compared with it in the same pass, packed and simulate,
// with Stats checked against counts this file computes from the input and the specification's result.
// Two worker threads share the chunks.
#include <catch2/catch.hpp>

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mpsim/format/bulk.hpp"

using namespace mpsim;

namespace {

// Every encoding's value, as double (for the Stats classification) and as the float that simulate
// mode must produce (round(float)'s rule: IEEE NaN payloads kept).
struct Tables {
  std::vector<double> value;
  std::vector<float> as_float;
};

Tables make_tables(const Format& f) {
  Tables t;
  const std::size_t n = std::size_t{1} << f.storage_bits;
  t.value.resize(n);
  t.as_float.resize(n);
  for (std::size_t b = 0; b < n; ++b) {
    t.value[b] = decode(b, f);
    if (is_nan_bits(b, f) && f.nan == NanEncoding::ieee) {
      const std::uint32_t man = static_cast<std::uint32_t>(b & ((std::uint64_t{1} << f.man_bits) - 1));
      t.as_float[b] = std::bit_cast<float>(((b & f.sign_bit()) ? 0x80000000u : 0u) | 0x7f800000u | (man << (23 - f.man_bits)));
    } else {
      t.as_float[b] = static_cast<float>(t.value[b]);
    }
  }
  return t;
}

// The test's own classification (see Stats in bulk.hpp), from the input and the encoding's value.
void classify(Stats& s, float x, double y, const Format& f) {
  ++s.count;
  if (std::isnan(x)) { ++s.nan; return; }
  if (std::isinf(x)) { ++s.inf_in; return; }
  if (x == 0) { ++s.zero_in; return; }
  const double ax = std::fabs(static_cast<double>(x));
  if (ax > s.max_abs) s.max_abs = ax;
  if (s.min_abs_nonzero == 0 || ax < s.min_abs_nonzero) s.min_abs_nonzero = ax;
  if (y != 0 && std::fabs(y) < f.min_normal) ++s.subnormal;
  if (y == static_cast<double>(x)) { ++s.exact; return; }
  ++s.rounded;
  if (y == 0) ++s.underflow;
  if (std::isnan(y) || std::isinf(y) || (f.overflow == Overflow::saturate && std::fabs(y) == f.max_finite && ax > f.max_finite))
    ++s.overflow;
}

struct Variant {
  std::string name;
  BulkOptions opt;
  bool simulate = true;  // also check simulate mode
};

std::vector<Variant> variants(const Format& f, const Rounding& r) {
  std::vector<Variant> v;
  for (Path p : {Path::avx2, Path::avx512}) {
    if (!path_available(p)) continue;
    Variant a{std::string(to_string(p)), {}, true};
    a.opt.path = p;
    a.opt.threads = 1;
    v.push_back(a);
    if (f == fp16() && r.mode == RoundingMode::nearest_even) {  // F16C used above; the software code here
      a.name += "-software";
      a.opt.hardware_convert = false;
      v.push_back(a);
    }
  }
  Variant t{"threaded(2 threads, automatic path, packed)", {}, false};
  t.opt.threads = 2;
  v.push_back(t);
  return v;
}

struct Tally {
  std::mutex mu;
  std::uint64_t inputs = 0, compared = 0, mismatches = 0, stats_compared = 0, stats_mismatches = 0;
  std::string first_problem;
};

template <class Packed>
void check_chunk(const std::vector<float>& in, std::uint64_t index0, const Format& f, const Rounding& r, const Tables& t,
                 const std::vector<Variant>& vs, Tally& tally) {
  const std::size_t n = in.size();
  // The specification, once per chunk: encodings, the floats simulate mode must give, and the Stats.
  std::vector<Packed> spec(n);
  std::vector<std::uint32_t> spec_sim(n);
  Stats want;
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint64_t bits = round_bits(in[j], f, r, index0 + j);
    spec[j] = static_cast<Packed>(bits);
    spec_sim[j] = std::bit_cast<std::uint32_t>(t.as_float[bits]);
    classify(want, in[j], t.value[bits], f);
  }
  std::vector<Packed> packed(n);
  std::vector<std::uint32_t> sim(n);
  std::uint64_t compared = 0, bad = 0, stats_compared = 0, stats_bad = 0;
  std::string problem;
  for (const Variant& v : vs) {
    BulkOptions opt = v.opt;
    opt.index0 = index0;
    Stats sp, ss;
    round_array(std::span<const float>(in), std::span<Packed>(packed), f, r, &sp, opt);
    // Simulate mode runs the same kernel with another store: the threaded variant checks packed only.
    if (v.simulate)
      round_array(std::span<const float>(in), std::span<float>(reinterpret_cast<float*>(sim.data()), n), f, r, &ss, opt);
    else
      sim = spec_sim, ss = want;
    std::uint64_t diff = 0;
    for (std::size_t j = 0; j < n; ++j) diff += (packed[j] != spec[j]) + (sim[j] != spec_sim[j]);
    if (diff != 0 && problem.empty()) {
      for (std::size_t j = 0; j < n; ++j)
        if (packed[j] != spec[j] || sim[j] != spec_sim[j]) {
          problem = f.name + " " + std::string(short_name(r.mode)) + " " + v.name + ": input bits " +
                    std::to_string(std::bit_cast<std::uint32_t>(in[j])) + " packed " + std::to_string(packed[j]) +
                    " want " + std::to_string(spec[j]) + ", simulate bits " + std::to_string(sim[j]) + " want " +
                    std::to_string(spec_sim[j]);
          break;
        }
    }
    bad += diff;
    compared += (v.simulate ? 2 : 1) * n;
    stats_compared += v.simulate ? 2 : 1;
    stats_bad += !(sp == want) + !(ss == want);
    if ((!(sp == want) || !(ss == want)) && problem.empty())
      problem = f.name + " " + std::string(short_name(r.mode)) + " " + v.name + ": Stats differ at index0 " + std::to_string(index0);
  }
  std::lock_guard<std::mutex> lock(tally.mu);
  tally.inputs += n;
  tally.compared += compared;
  tally.mismatches += bad;
  tally.stats_compared += stats_compared;
  tally.stats_mismatches += stats_bad;
  if (tally.first_problem.empty()) tally.first_problem = problem;
}

// For local iteration only: MPSIM_EXHAUSTIVE_CHUNK_STRIDE=k checks every k-th chunk (default 1: all).
std::size_t chunk_stride() {
  const char* e = std::getenv("MPSIM_EXHAUSTIVE_CHUNK_STRIDE");
  const long k = e ? std::atol(e) : 1;
  if (k > 1) WARN("MPSIM_EXHAUSTIVE_CHUNK_STRIDE=" << k << ": only every " << k << "-th chunk is checked");
  return k > 1 ? static_cast<std::size_t>(k) : 1;
}

// Runs chunk(k) for k in [0, chunks) on two threads.
template <class Chunk>
void two_workers(std::size_t chunks, Chunk chunk) {
  static const std::size_t stride = chunk_stride();
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t k; (k = next.fetch_add(stride)) < chunks;) chunk(k);
  };
  std::thread other(worker);
  worker();
  other.join();
}

void report(const char* what, const Format& f, const Rounding& r, const std::vector<Variant>& vs, Tally& t, double seconds) {
  std::string names;
  for (const Variant& v : vs) names += " " + v.name;
  WARN(what << " " << f.name << " " << short_name(r.mode) << ": " << t.inputs << " inputs, paths" << names << ": "
            << t.compared << " results compared, " << t.mismatches << " mismatches; " << t.stats_compared
            << " Stats compared, " << t.stats_mismatches << " differ; " << seconds << " s"
            << (t.first_problem.empty() ? "" : "; first: " + t.first_problem));
  CHECK(t.mismatches == 0);
  CHECK(t.stats_mismatches == 0);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("fp16 and bf16: all 2^32 float inputs, every path, bit-identical to round_bits with equal Stats",
          "[bulk][exhaustive]") {
  if (!path_available(Path::avx512)) WARN("AVX-512 not on this CPU: the avx512 path is not tested here");
  const auto t_all = std::chrono::steady_clock::now();
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (const Format* f : {&fp16(), &bf16()}) {
    const Tables tables = make_tables(*f);
    for (const Rounding& r : {Rounding::nearest_even(), Rounding::of(RoundingMode::toward_zero), Rounding::stochastic(0x1234, 32)}) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<Variant> vs = variants(*f, r);
      Tally tally;
      two_workers((std::size_t{1} << 32) / kChunk, [&](std::size_t k) {
        std::vector<float> in(kChunk);
        const std::uint64_t base = std::uint64_t{k} * kChunk;
        for (std::size_t j = 0; j < kChunk; ++j) in[j] = std::bit_cast<float>(static_cast<std::uint32_t>(base + j));
        check_chunk<std::uint16_t>(in, base, *f, r, tables, vs, tally);
      });
      CHECK(tally.inputs * chunk_stride() == (std::uint64_t{1} << 32));
      report("exhaustive", *f, r, vs, tally, since(t0));
    }
  }
  WARN("fp16/bf16 exhaustive: " << since(t_all) << " s wall in all");
}

TEST_CASE("tf32, fp8 and custom formats: >= 10^8 inputs covering every exponent and boundary, every mode",
          "[bulk][exhaustive]") {
  const auto t_all = std::chrono::steady_clock::now();
  const RoundingMode modes[] = {RoundingMode::nearest_even, RoundingMode::toward_zero, RoundingMode::up,
                                RoundingMode::down,         RoundingMode::nearest_away, RoundingMode::to_odd,
                                RoundingMode::stochastic};
  constexpr std::uint32_t kStride = 43;  // odd: every residue of the low mantissa bits occurs
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (const Format& f : {tf32(), fp8_e4m3(), fp8_e5m2(), parse_format("e3m4"), parse_format("e6m9")}) {
    const Tables tables = make_tables(f);
    // Boundaries: every encoding's value, the midpoint to the next one up, and ±1, ±2 float ulps of both.
    std::vector<float> edges;
    const std::size_t encodings = std::size_t{1} << f.storage_bits;
    for (std::size_t b = 0; b < encodings; ++b) {
      const double v = tables.value[b];
      if (!std::isfinite(v)) continue;
      const double next = b + 1 < encodings ? tables.value[b + 1] : v;
      for (double c : {v, std::isfinite(next) ? (v + next) / 2 : v}) {
        const float cf = static_cast<float>(c);
        if (!std::isfinite(cf)) continue;
        for (int k = -2; k <= 2; ++k) edges.push_back(std::bit_cast<float>(std::bit_cast<std::uint32_t>(cf) + k));
      }
    }
    // Mode k takes every 7th strided pattern from offset k: the seven modes together see every 43rd
    // pattern (10^8 per format), each mode 1.4 * 10^7 of them plus every boundary input.
    const std::size_t strided = (std::uint64_t{1} << 32) / (kStride * 7) + 1;
    const std::size_t total = strided + edges.size();
    const std::size_t chunks = (total + kChunk - 1) / kChunk;
    std::uint64_t format_inputs = 0;
    for (int mode_k = 0; mode_k < 7; ++mode_k) {
      const RoundingMode mode = modes[mode_k];
      const Rounding r = mode == RoundingMode::stochastic ? Rounding::stochastic(77, 32) : Rounding::of(mode);
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<Variant> vs = variants(f, r);
      Tally tally;
      two_workers(chunks, [&](std::size_t k) {
        const std::size_t begin = k * kChunk, end = std::min(total, begin + kChunk);
        std::vector<float> in(end - begin);
        for (std::size_t j = begin; j < end; ++j)
          in[j - begin] = j < strided ? std::bit_cast<float>(static_cast<std::uint32_t>((j * 7 + mode_k) * kStride))
                                      : edges[j - strided];
        if (f.storage_bytes() == 1)
          check_chunk<std::uint8_t>(in, begin, f, r, tables, vs, tally);
        else if (f.storage_bytes() == 2)
          check_chunk<std::uint16_t>(in, begin, f, r, tables, vs, tally);
        else
          check_chunk<std::uint32_t>(in, begin, f, r, tables, vs, tally);
      });
      format_inputs += tally.inputs;
      report("sampled", f, r, vs, tally, since(t0));
    }
    WARN("sampled " << f.name << ": " << format_inputs << " inputs over the seven modes");
    CHECK(format_inputs * chunk_stride() >= 100000000u);
  }
  WARN("tf32/fp8/custom sampled: " << since(t_all) << " s wall in all");
}
