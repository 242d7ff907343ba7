// Exhaustive tests of lib/mpsim/format/bulk.hpp against the scalar specification round_bits():
//  * fp16 and bf16, nearest-even: all 2^32 float32 inputs, every path against a fast independent result:
//    x86 F16C vcvtps2ph for fp16, the integer formula (add 0x7fff plus the kept lsb; NaN: quiet bit set)
//    for bf16. round_bits() equals F16C and the bf16 formula on all 2^32 inputs (here, in the same pass),
//    so every result is tied to the specification;
//  * fp16 and bf16, toward zero and stochastic: every 21st float bit pattern (2.0 * 10^8 inputs; 21 is
//    odd, so every residue of the low mantissa bits occurs), all 2^32 with MPSIM_EXHAUSTIVE_FULL=1
//    (`./run test-full`; CI's time budget keeps ./run test to the 21st), against round_bits() itself,
//    and for toward zero round_bits() against F16C vcvtps2ph imm 3 / truncation on the same inputs;
//  * tf32, fp8_e4m3, fp8_e5m2 and the custom e3m4, e6m9, every rounding mode: >= 10^8 inputs per
//    format (every 41st float bit pattern, shared out among the seven modes, so each mode sees every
//    exponent and mantissa residue; and in every mode each format boundary: every representable value,
//    the midpoints between neighbours, and the floats one and two ulps either side of both).
// Every path the CPU has (avx2 with and without the F16C instruction, avx512, two threads) is compared
// in the same pass, packed and simulate, with Stats checked against counts this file computes from the
// input and the expected result. Two worker threads share the chunks.
#include "catch_compat.hpp"

#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/format/bulk.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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
      t.as_float[b] =
          std::bit_cast<float>(((b & f.sign_bit()) ? 0x80000000u : 0u) | 0x7f800000u | (man << (23 - f.man_bits)));
    } else {
      t.as_float[b] = static_cast<float>(t.value[b]);
    }
  }
  return t;
}

// The test's own classification (see Stats in bulk.hpp), from the input and the encoding's value.
void classify(Stats& s, float x, double y, const Format& f) {
  ++s.count;
  if (std::isnan(x)) {
    ++s.nan;
    return;
  }
  if (std::isinf(x)) {
    ++s.inf_in;
    return;
  }
  if (x == 0) {
    ++s.zero_in;
    return;
  }
  const double ax = std::fabs(static_cast<double>(x));
  if (ax > s.max_abs) s.max_abs = ax;
  if (s.min_abs_nonzero == 0 || ax < s.min_abs_nonzero) s.min_abs_nonzero = ax;
  if (y != 0 && std::fabs(y) < f.min_normal) ++s.subnormal;
  if (y == static_cast<double>(x)) {
    ++s.exact;
    return;
  }
  ++s.rounded;
  if (y == 0) ++s.underflow;
  if (std::isnan(y) || std::isinf(y) ||
      (f.overflow == Overflow::saturate && std::fabs(y) == f.max_finite && ax > f.max_finite))
    ++s.overflow;
}

struct Variant {
  std::string name;
  BulkOptions opt;
  bool simulate = true;  // also check simulate mode
};

// Every path this CPU has; `threaded`: also the automatic path on two threads (packed).
std::vector<Variant> variants(const Format& f, const Rounding& r, bool threaded = true) {
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
  if (threaded) {
    Variant t{"threaded(2 threads, automatic path, packed)", {}, false};
    t.opt.threads = 2;
    v.push_back(t);
  }
  return v;
}

struct Tally {
  std::mutex mu;
  std::uint64_t inputs = 0, compared = 0, mismatches = 0, stats_compared = 0, stats_mismatches = 0;
  std::string first_problem;
};

// The expected encodings of a chunk; `spec` empty means: compute them with round_bits(). Without
// `with_stats` the paths run without a Stats sink (the kernels' other instantiation) and only the
// results are compared.
template <class Packed>
void check_chunk(const std::vector<float>& in, std::uint64_t index0, const Format& f, const Rounding& r,
                 const Tables& t, const std::vector<Variant>& vs, Tally& tally, std::vector<Packed> spec = {},
                 bool with_stats = true) {
  const std::size_t n = in.size();
  // The expected results, once per chunk: encodings, the floats simulate mode must give, and the Stats.
  const bool from_spec = spec.empty();
  if (from_spec) spec.resize(n);
  thread_local std::vector<std::uint32_t> spec_sim;  // reused: fresh pages per chunk cost more than the checks
  spec_sim.resize(n);
  Stats want;
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint64_t bits = from_spec ? round_bits(in[j], f, r, index0 + j) : spec[j];
    spec[j] = static_cast<Packed>(bits);
    spec_sim[j] = std::bit_cast<std::uint32_t>(t.as_float[bits]);
    if (with_stats) classify(want, in[j], t.value[bits], f);
  }
  thread_local std::vector<Packed> packed;
  thread_local std::vector<std::uint32_t> sim;
  packed.resize(n);
  sim.resize(n);
  std::uint64_t compared = 0, bad = 0, stats_compared = 0, stats_bad = 0;
  std::string problem;
  for (const Variant& v : vs) {
    BulkOptions opt = v.opt;
    opt.index0 = index0;
    Stats sp, ss;
    round_array(std::span<const float>(in), std::span<Packed>(packed), f, r, with_stats ? &sp : nullptr, opt);
    // Simulate mode runs the same kernel with another store: the threaded variant checks packed only.
    if (v.simulate)
      round_array(std::span<const float>(in), std::span<float>(reinterpret_cast<float*>(sim.data()), n), f, r,
                  with_stats ? &ss : nullptr, opt);
    else sim = spec_sim, ss = want;
    if (!with_stats) sp = ss = want;
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
    if (with_stats) stats_compared += v.simulate ? 2 : 1;
    stats_bad += !(sp == want) + !(ss == want);
    if ((!(sp == want) || !(ss == want)) && problem.empty())
      problem = f.name + " " + std::string(short_name(r.mode)) + " " + v.name + ": Stats differ at index0 " +
                std::to_string(index0);
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

void report(const char* what, const Format& f, const Rounding& r, const std::vector<Variant>& vs, Tally& t,
            double seconds) {
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

namespace {

// The fast independent results for all 2^32 inputs (see the head of this file).
#if defined(__x86_64__)
bool have_f16c() { return mpsim::cpu_features().f16c; }

__attribute__((target("avx,f16c"))) void f16c_convert(const float* in, std::uint16_t* out, std::size_t n,
                                                      bool toward_zero) {
  for (std::size_t j = 0; j < n; j += 8) {
    const __m256 v = _mm256_loadu_ps(in + j);
    const __m128i h =
        toward_zero ? _mm256_cvtps_ph(v, _MM_FROUND_TO_ZERO) : _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + j), h);
  }
}
#else
bool have_f16c() { return false; }
void f16c_convert(const float*, std::uint16_t*, std::size_t, bool) {}
#endif

std::uint16_t bf16_formula(float x, bool toward_zero) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // NaN: quiet, top payload
  if (toward_zero) return static_cast<std::uint16_t>(u >> 16);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

}  // namespace

TEST_CASE("fp16 and bf16 nearest-even: all 2^32 float inputs, every path, against F16C / the integer formula",
          "[bulk][exhaustive]") {
  if (!path_available(Path::avx512)) WARN("AVX-512 not on this CPU: the avx512 path is not tested here");
  const bool f16c = have_f16c();
  if (!f16c) WARN("no F16C on this CPU: fp16 is checked against round_bits() instead");
  const auto t_all = std::chrono::steady_clock::now();
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  for (const Format* f : {&fp16(), &bf16()}) {
    const Tables tables = make_tables(*f);
    const Rounding r = Rounding::nearest_even();
    const auto t0 = std::chrono::steady_clock::now();
    // The threaded path splits the same kernels at chunk boundaries: it runs in the strided sweeps below.
    const std::vector<Variant> vs = variants(*f, r, false);
    Tally tally;
    std::atomic<std::uint64_t> spec_bad{0};
    two_workers((std::size_t{1} << 32) / kChunk, [&](std::size_t k) {
      std::vector<float> in(kChunk);
      const std::uint64_t base = std::uint64_t{k} * kChunk;
      for (std::size_t j = 0; j < kChunk; ++j) in[j] = std::bit_cast<float>(static_cast<std::uint32_t>(base + j));
      std::vector<std::uint16_t> expect(kChunk);
      if (*f == fp16() && f16c) {
        f16c_convert(in.data(), expect.data(), kChunk, false);
        // round_bits() itself against the instruction on all 2^32 inputs (round_exhaustive_test.cpp adds the
        // grid table on all of them under MPSIM_EXHAUSTIVE_FULL=1, on the boundary sets in every run).
        std::uint64_t bad = 0;
        for (std::size_t j = 0; j < kChunk; ++j) bad += round_bits(in[j], *f, r) != expect[j];
        spec_bad += bad;
      } else if (*f == bf16()) {
        // round_exhaustive_test.cpp ties round_bits() to the grid table; this ties it to the formula.
        std::uint64_t bad = 0;
        for (std::size_t j = 0; j < kChunk; ++j) {
          expect[j] = bf16_formula(in[j], false);
          bad += round_bits(in[j], *f, r) != expect[j];
        }
        spec_bad += bad;
      } else {
        for (std::size_t j = 0; j < kChunk; ++j) expect[j] = static_cast<std::uint16_t>(round_bits(in[j], *f, r));
      }
      // Stats on every 4th chunk (a quarter of all inputs, every exponent); the rest run without a sink.
      check_chunk<std::uint16_t>(in, base, *f, r, tables, vs, tally, std::move(expect), k % 4 == 0);
    });
    CHECK(tally.inputs * chunk_stride() == (std::uint64_t{1} << 32));
    report("exhaustive", *f, r, vs, tally, since(t0));
    if (*f == bf16() || f16c) {
      WARN("round_bits " << f->name << " rne against " << (*f == bf16() ? "the integer formula" : "F16C vcvtps2ph")
                         << ": all 2^32 inputs, " << spec_bad.load() << " differ");
      CHECK(spec_bad.load() == 0);
    }
  }
  WARN("fp16/bf16 nearest-even exhaustive: " << since(t_all) << " s wall in all");
}

TEST_CASE(
    "fp16 and bf16 toward zero and stochastic: every 21st float pattern (all with MPSIM_EXHAUSTIVE_FULL=1), "
    "every path, against round_bits",
    "[bulk][exhaustive]") {
  // Toward zero: the specification is also compared with F16C vcvtps2ph imm 3 (fp16) and truncation
  // (bf16) on the same inputs.
  const bool f16c = have_f16c();
  const auto t_all = std::chrono::steady_clock::now();
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const char* full = std::getenv("MPSIM_EXHAUSTIVE_FULL");
  // Odd: every residue of the low bits occurs. Every 5th input took about 100 s of ./run test on the
  // 2-core machine.
  const std::uint64_t kStride = full && std::string(full) == "1" ? 1 : 21;
  WARN((kStride == 1 ? "all 2^32 inputs" : "every 21st input (MPSIM_EXHAUSTIVE_FULL=1: all 2^32)"));
  const std::uint64_t total = ((std::uint64_t{1} << 32) + kStride - 1) / kStride;
  for (const Format* f : {&fp16(), &bf16()}) {
    const Tables tables = make_tables(*f);
    for (const Rounding& r : {Rounding::of(RoundingMode::toward_zero), Rounding::stochastic(0x1234, 32)}) {
      const bool rtz = r.mode == RoundingMode::toward_zero;
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<Variant> vs = variants(*f, r);
      Tally tally;
      std::atomic<std::uint64_t> spec_checked{0}, spec_bad{0};
      two_workers((total + kChunk - 1) / kChunk, [&](std::size_t k) {
        const std::uint64_t begin = std::uint64_t{k} * kChunk, end = std::min<std::uint64_t>(total, begin + kChunk);
        std::vector<float> in(end - begin);
        for (std::uint64_t j = begin; j < end; ++j)
          in[j - begin] = std::bit_cast<float>(static_cast<std::uint32_t>(j * kStride));
        if (rtz && (*f == bf16() || f16c)) {
          std::vector<std::uint16_t> hw(in.size() + 8);
          if (*f == fp16()) f16c_convert(in.data(), hw.data(), in.size() & ~std::size_t{7}, true);
          std::uint64_t bad = 0, checked = 0;
          for (std::size_t j = 0; j < in.size(); ++j) {
            if (*f == fp16() && j >= (in.size() & ~std::size_t{7})) break;
            const std::uint16_t want = *f == fp16() ? hw[j] : bf16_formula(in[j], true);
            bad += round_bits(in[j], *f, r) != want;
            ++checked;
          }
          spec_checked += checked;
          spec_bad += bad;
        }
        check_chunk<std::uint16_t>(in, begin, *f, r, tables, vs, tally);
      });
      CHECK(tally.inputs * chunk_stride() >= total);
      report(kStride == 1 ? "exhaustive" : "every 21st pattern", *f, r, vs, tally, since(t0));
      if (rtz) {
        WARN("round_bits " << f->name << " rtz against " << (*f == fp16() ? "F16C imm 3" : "truncation") << ": "
                           << spec_checked.load() << " inputs, " << spec_bad.load() << " differ");
        CHECK(spec_bad.load() == 0);
        if (*f == bf16() || f16c) CHECK(spec_checked.load() * chunk_stride() >= total - 8);
      }
    }
  }
  WARN("fp16/bf16 toward zero and stochastic: " << since(t_all) << " s wall in all");
}

TEST_CASE(
    "fp16 up / down / nearest-away / to-odd (F16C and software): every encoding and midpoint with neighbours; "
    "every 41st float pattern",
    "[bulk][exhaustive]") {
  // The F16C path rounds up and down with vcvtps2ph, nearest-away from two conversions and a tie test,
  // to-odd from a truncation and an exactness test, and counts Stats from per-sign thresholds: the
  // places they can go wrong are the encodings, the midpoints between them (every tie) and their float
  // neighbours, all of which are checked here, with a sample of everything else.
  const auto t_all = std::chrono::steady_clock::now();
  const Format& f = fp16();
  const Tables tables = make_tables(f);
  std::vector<float> edges;
  for (std::size_t b = 0; b < (std::size_t{1} << 16); ++b) {
    const double v = tables.value[b];
    if (!std::isfinite(v)) continue;
    const double next = (b & 0x7fff) < 0x7c00 ? tables.value[b + 1] : v;  // ±max finite: the overflow tie 65520
    const double mid = std::isfinite(next) ? (v + next) / 2 : std::copysign(65520.0, v);
    for (double c : {v, mid}) {
      const float cf = static_cast<float>(c);
      for (int k = -2; k <= 2; ++k) edges.push_back(std::bit_cast<float>(std::bit_cast<std::uint32_t>(cf) + k));
    }
  }
  constexpr std::uint32_t kStride = 41;
  constexpr std::size_t kChunk = std::size_t{1} << 20;
  const std::size_t strided = (std::uint64_t{1} << 32) / kStride + 1;
  const std::size_t total = strided + edges.size();
  for (const RoundingMode mode :
       {RoundingMode::up, RoundingMode::down, RoundingMode::nearest_away, RoundingMode::to_odd}) {
    const Rounding r = Rounding::of(mode);
    std::vector<Variant> vs = variants(f, r);
    for (Path p : {Path::avx2, Path::avx512}) {
      if (!path_available(p)) continue;
      Variant sw{std::string(to_string(p)) + "-software", {}, true};
      sw.opt.path = p;
      sw.opt.threads = 1;
      sw.opt.hardware_convert = false;
      vs.push_back(sw);
    }
    const auto t0 = std::chrono::steady_clock::now();
    Tally tally;
    two_workers((total + kChunk - 1) / kChunk, [&](std::size_t k) {
      const std::size_t begin = k * kChunk, end = std::min(total, begin + kChunk);
      std::vector<float> in(end - begin);
      for (std::size_t j = begin; j < end; ++j)
        in[j - begin] =
            j < strided ? std::bit_cast<float>(static_cast<std::uint32_t>(j * kStride)) : edges[j - strided];
      check_chunk<std::uint16_t>(in, begin, f, r, tables, vs, tally);
    });
    CHECK(tally.inputs * chunk_stride() >= total);
    report("every tie + every 41st pattern", f, r, vs, tally, since(t0));
  }
  WARN("fp16 ru/rd/rna/rto: " << edges.size() << " boundary inputs + " << strided << " sampled per mode, "
                              << since(t_all) << " s wall in all");
}

TEST_CASE("tf32, fp8 and custom formats: >= 10^8 inputs covering every exponent and boundary, every mode",
          "[bulk][exhaustive]") {
  const auto t_all = std::chrono::steady_clock::now();
  const RoundingMode modes[] = {RoundingMode::nearest_even, RoundingMode::toward_zero,  RoundingMode::up,
                                RoundingMode::down,         RoundingMode::nearest_away, RoundingMode::to_odd,
                                RoundingMode::stochastic};
  constexpr std::uint32_t kStride = 41;  // odd: every residue of the low mantissa bits occurs
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
    // Mode k takes every 7th strided pattern from offset k: the seven modes together see every 41st
    // pattern (1.05 * 10^8 per format), each mode 1.4 * 10^7 of them plus every boundary input.
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
        if (f.storage_bytes() == 1) check_chunk<std::uint8_t>(in, begin, f, r, tables, vs, tally);
        else if (f.storage_bytes() == 2) check_chunk<std::uint16_t>(in, begin, f, r, tables, vs, tally);
        else check_chunk<std::uint32_t>(in, begin, f, r, tables, vs, tally);
      });
      format_inputs += tally.inputs;
      report("sampled", f, r, vs, tally, since(t0));
    }
    WARN("sampled " << f.name << ": " << format_inputs << " inputs over the seven modes");
    CHECK(format_inputs * chunk_stride() >= 100000000u);
  }
  WARN("tf32/fp8/custom sampled: " << since(t_all) << " s wall in all");
}
