// Speed of the bulk rounding engine (lib/mpsim/format/bulk.hpp) against baselines timed in the same
// run: memcpy of the same input bytes, the F16C loop (_mm256_cvtps_ph, and _mm256_cvtph_ps back for
// simulate mode) and, where the CPU has AVX512-BF16, the vcvtneps2bf16 loop.
// Data: 2^26 float32 values, log-uniform over magnitudes 2^-30..2^20 with random signs, and N(0,1).
// Each row: median ns/element of 7 repetitions (one pass over the array each). A compact table is
// printed at the end: format, mode, set, ns/elem, ratio to the F16C loop of the same output kind
// (packed: the cvtps_ph loop; simulate: cvtps_ph + cvtph_ps), ratio to memcpy.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/format/bulk.hpp"

using namespace mpsim;

namespace {

constexpr std::size_t kN = std::size_t{1} << 26;
constexpr int kRepetitions = 7;

struct Data {
  std::vector<float> log_uniform, normal;
  std::vector<float> out_f;
  std::vector<std::uint16_t> out16;
  std::vector<std::uint8_t> out8;
  std::vector<std::uint32_t> out32;
};

Data& data() {
  static Data d = [] {
    Data d;
    d.log_uniform.resize(kN);
    d.normal.resize(kN);
    std::mt19937_64 rng(2024);
    std::uniform_real_distribution<float> u(-30.0f, 20.0f);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (std::size_t i = 0; i < kN; ++i) {
      const float m = std::exp2(u(rng));
      d.log_uniform[i] = (rng() & 1) ? -m : m;
      d.normal[i] = g(rng);
    }
    d.out_f.assign(kN, 0.0f);
    d.out16.assign(kN, 0);
    d.out8.assign(kN, 0);
    d.out32.assign(kN, 0);
    return d;
  }();
  return d;
}

const std::vector<float>& input(int set) { return set == 0 ? data().log_uniform : data().normal; }
const char* set_name(int set) { return set == 0 ? "loguni" : "normal"; }

// Row key -> per-repetition ns/element.
struct Row {
  std::string format, mode, set, kind;  // kind: "packed" or "simulate" (the F16C baseline it is compared to)
  std::vector<double> ns;
  std::function<void()> pass;
};
std::vector<Row>& rows() {
  static std::vector<Row> r;
  return r;
}

// Registers a benchmark that runs `pass` once per iteration (1 iteration x 7 repetitions) and records
// ns/element.
void add(const std::string& format, const std::string& mode, int set, const std::string& kind,
         std::function<void()> pass) {
  const std::size_t row = rows().size();
  rows().push_back({format, mode, set_name(set), kind, {}, pass});
  const std::string name = format + "/" + mode + "/" + set_name(set);
  benchmark::RegisterBenchmark(name.c_str(),
                               [row, pass](benchmark::State& st) {
                                 for (auto _ : st) {
                                   const auto t0 = std::chrono::steady_clock::now();
                                   pass();
                                   const double s =
                                       std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                                   rows()[row].ns.push_back(s * 1e9 / static_cast<double>(kN));
                                   benchmark::ClobberMemory();
                                 }
                                 st.counters["ns_per_elem"] = rows()[row].ns.back();
                               })
      ->Iterations(1)
      ->Repetitions(kRepetitions)
      ->ReportAggregatesOnly(true)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

__attribute__((target("avx2,f16c"))) void f16c_packed(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
}

__attribute__((target("avx2,f16c"))) void f16c_simulate(const float* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT)));
}

#if defined(__GNUC__) && __GNUC__ >= 10
#define MPSIM_HAVE_BF16_INTRIN 1
__attribute__((target("avx512f,avx512bf16"))) void bf16_hw_packed(const float* in, std::uint16_t* out, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(in + i))));
}
// Simulate mode: the bf16 bits widened back to float (a bf16 value is the top half of its float).
__attribute__((target("avx512f,avx512bf16"))) void bf16_hw_simulate(const float* in, float* out, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) {
    const __m256i h = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_loadu_ps(in + i)));
    _mm512_storeu_si512(out + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
#endif

bool cpu_has_bf16() {
#ifdef MPSIM_HAVE_BF16_INTRIN
  return mpsim::cpu_features().avx512bf16;
#else
  return false;
#endif
}

BulkOptions one_thread() {
  BulkOptions o;
  o.threads = 1;
  return o;
}

void register_all() {
  const RoundingMode others[] = {RoundingMode::toward_zero, RoundingMode::up, RoundingMode::down,
                                 RoundingMode::nearest_away, RoundingMode::to_odd};
  const Rounding sr = Rounding::stochastic(1, 32);
  // 16 random bits: the 16-bit stream, two elements per Philox word (hd/philox.hpp, sr_word).
  const Rounding sr16 = Rounding::stochastic(1, 16);
  for (int set = 0; set < 2; ++set) {
    const float* in = input(set).data();
    std::span<const float> sin(input(set));
    Data& d = data();
    add("memcpy", "-", set, "packed", [in, &d] { std::memcpy(d.out_f.data(), in, kN * sizeof(float)); });
    add("f16c-loop", "rne", set, "packed", [in, &d] { f16c_packed(in, d.out16.data(), kN); });
    add("f16c-loop", "rne", set, "simulate", [in, &d] { f16c_simulate(in, d.out_f.data(), kN); });
#ifdef MPSIM_HAVE_BF16_INTRIN
    if (cpu_has_bf16()) {
      add("bf16-hw-loop", "rne", set, "packed", [in, &d] { bf16_hw_packed(in, d.out16.data(), kN); });
      add("bf16-hw-loop", "rne", set, "simulate", [in, &d] { bf16_hw_simulate(in, d.out_f.data(), kN); });
    }
#endif
    auto packed16 = [&d, sin](const Format& f, Rounding r, BulkOptions o, Stats* s = nullptr) {
      return [&d, sin, &f, r, o, s] { round_array(sin, std::span<std::uint16_t>(d.out16), f, r, s, o); };
    };
    auto packed8 = [&d, sin](const Format& f, Rounding r, BulkOptions o, Stats* s = nullptr) {
      return [&d, sin, &f, r, o, s] { round_array(sin, std::span<std::uint8_t>(d.out8), f, r, s, o); };
    };
    auto simulate = [&d, sin](const Format& f, Rounding r, BulkOptions o, Stats* s = nullptr) {
      return [&d, sin, &f, r, o, s] { round_array(sin, std::span<float>(d.out_f), f, r, s, o); };
    };
    static Stats sink;
    BulkOptions sw = one_thread();
    sw.hardware_convert = false;
    BulkOptions two = one_thread();
    two.threads = 2;
    add("fp16", "rne", set, "simulate", simulate(fp16(), {}, one_thread()));
    add("fp16", "rne", set, "packed", packed16(fp16(), {}, one_thread()));
    add("fp16(sw)", "rne", set, "simulate", simulate(fp16(), {}, sw));
    add("fp16(sw)", "rne", set, "packed", packed16(fp16(), {}, sw));
    add("bf16", "rne", set, "simulate", simulate(bf16(), {}, one_thread()));
    add("bf16", "rne", set, "packed", packed16(bf16(), {}, one_thread()));
    for (RoundingMode m : others) {
      add("fp16", std::string(short_name(m)), set, "packed", packed16(fp16(), Rounding::of(m), one_thread()));
      add("bf16", std::string(short_name(m)), set, "packed", packed16(bf16(), Rounding::of(m), one_thread()));
    }
    add("tf32", "rne", set, "simulate", simulate(tf32(), {}, one_thread()));
    add("fp8_e4m3", "rne", set, "packed", packed8(fp8_e4m3(), {}, one_thread()));
    add("fp8_e4m3", "rne", set, "simulate", simulate(fp8_e4m3(), {}, one_thread()));
    add("fp8_e5m2", "rne", set, "packed", packed8(fp8_e5m2(), {}, one_thread()));
    add("fp16", "sr", set, "packed", packed16(fp16(), sr, one_thread()));
    add("bf16", "sr", set, "packed", packed16(bf16(), sr, one_thread()));
    add("fp16", "sr", set, "simulate", simulate(fp16(), sr, one_thread()));
    add("fp16", "sr16", set, "packed", packed16(fp16(), sr16, one_thread()));
    add("bf16", "sr16", set, "packed", packed16(bf16(), sr16, one_thread()));
    add("fp16", "sr16", set, "simulate", simulate(fp16(), sr16, one_thread()));
    add("fp8_e4m3", "sr16", set, "packed", packed8(fp8_e4m3(), sr16, one_thread()));
    add("fp16+stats", "rne", set, "packed", packed16(fp16(), {}, one_thread(), &sink));
    add("fp16(sw)+stats", "rne", set, "packed", packed16(fp16(), {}, sw, &sink));
    add("bf16+stats", "rne", set, "packed", packed16(bf16(), {}, one_thread(), &sink));
    add("bf16+stats", "rne", set, "simulate", simulate(bf16(), {}, one_thread(), &sink));
    add("fp16+stats", "sr", set, "packed", packed16(fp16(), sr, one_thread(), &sink));
    add("fp16+stats", "sr", set, "simulate", simulate(fp16(), sr, one_thread(), &sink));
    add("fp16+stats", "sr16", set, "packed", packed16(fp16(), sr16, one_thread(), &sink));
    add("fp16+stats", "rto", set, "packed", packed16(fp16(), Rounding::of(RoundingMode::to_odd), one_thread(), &sink));
    add("fp8_e4m3+stats", "rne", set, "packed", packed8(fp8_e4m3(), {}, one_thread(), &sink));
    add("fp8_e4m3+stats", "rne", set, "simulate", simulate(fp8_e4m3(), {}, one_thread(), &sink));
    // Streaming (non-temporal) stores, BulkOptions::streaming_stores ("nt" rows; "+stats nt" rows are
    // paired with the "nt" row of the same call).
    BulkOptions nt = one_thread();
    nt.streaming_stores = true;
    add("fp16 nt", "rne", set, "simulate", simulate(fp16(), {}, nt));
    add("fp16 nt", "rne", set, "packed", packed16(fp16(), {}, nt));
    add("bf16 nt", "rne", set, "packed", packed16(bf16(), {}, nt));
    add("fp8_e4m3 nt", "rne", set, "packed", packed8(fp8_e4m3(), {}, nt));
    add("fp8_e4m3 nt", "rne", set, "simulate", simulate(fp8_e4m3(), {}, nt));
    add("fp16 nt", "sr", set, "packed", packed16(fp16(), sr, nt));
    add("fp16+stats nt", "rne", set, "packed", packed16(fp16(), {}, nt, &sink));
    add("bf16+stats nt", "rne", set, "packed", packed16(bf16(), {}, nt, &sink));
    add("fp8_e4m3+stats nt", "rne", set, "packed", packed8(fp8_e4m3(), {}, nt, &sink));
    add("fp8_e4m3+stats nt", "rne", set, "simulate", simulate(fp8_e4m3(), {}, nt, &sink));
    add("fp16+stats nt", "sr", set, "packed", packed16(fp16(), sr, nt, &sink));
    // The same calls forced onto the AVX2 path, where the automatic path is AVX-512.
    if (best_path() == Path::avx512) {
      BulkOptions a2 = one_thread();
      a2.path = Path::avx2;
      BulkOptions a2sw = a2;
      a2sw.hardware_convert = false;
      add("fp16 avx2", "rne", set, "packed", packed16(fp16(), {}, a2));
      add("fp16(sw) avx2", "rne", set, "packed", packed16(fp16(), {}, a2sw));
      add("bf16 avx2", "rne", set, "simulate", simulate(bf16(), {}, a2));
      add("bf16 avx2", "rne", set, "packed", packed16(bf16(), {}, a2));
      add("fp16 avx2", "rto", set, "packed", packed16(fp16(), Rounding::of(RoundingMode::to_odd), a2));
      add("fp8_e5m2 avx2", "rne", set, "packed", packed8(fp8_e5m2(), {}, a2));
      add("fp16 avx2", "sr", set, "packed", packed16(fp16(), sr, a2));
      add("fp16 avx2", "sr", set, "simulate", simulate(fp16(), sr, a2));
      add("fp16 avx2", "sr16", set, "packed", packed16(fp16(), sr16, a2));
      add("bf16 avx2", "sr16", set, "packed", packed16(bf16(), sr16, a2));
      add("fp16+stats avx2", "rne", set, "packed", packed16(fp16(), {}, a2, &sink));
      add("fp16+stats avx2", "sr", set, "packed", packed16(fp16(), sr, a2, &sink));
    }
    add("fp16 2thr", "rne", set, "simulate", simulate(fp16(), {}, two));
    add("fp16 2thr", "rne", set, "packed", packed16(fp16(), {}, two));
    add("bf16 2thr", "rne", set, "packed", packed16(bf16(), {}, two));
    add("fp16 2thr", "sr", set, "packed", packed16(fp16(), sr, two));
    add("bf16+stats 2thr", "rne", set, "simulate", simulate(bf16(), {}, two, &sink));
    add("fp16+stats 2thr", "sr", set, "packed", packed16(fp16(), sr, two, &sink));
    add("memcpy 2thr", "-", set, "packed", [in, &d] {
      std::thread t([&] { std::memcpy(d.out_f.data() + kN / 2, in + kN / 2, kN / 2 * sizeof(float)); });
      std::memcpy(d.out_f.data(), in, kN / 2 * sizeof(float));
      t.join();
    });
  }
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

std::string fmt_ratio(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r);
  return buf;
}

double seconds_of(const std::function<void()>& pass) {
  const auto t0 = std::chrono::steady_clock::now();
  pass();
  benchmark::ClobberMemory();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The ratio of `row` to `base` timed in alternation (base, row, base, row, ...): the median of the
// per-pair ratios. On a machine shared with other work the bandwidth drifts between rows timed
// minutes apart; alternating puts both sides of a ratio under the same conditions.
double paired_ratio(const Row& row, const Row& base) {
  std::vector<double> r;
  for (int k = 0; k < kRepetitions; ++k) {
    const double b = seconds_of(base.pass);
    r.push_back(seconds_of(row.pass) / b);
  }
  return median(r);
}

const Row* find_row(const std::string& format, const std::string& mode, const std::string& set,
                    const std::string& kind) {
  for (const Row& r : rows())
    if (r.format == format && r.mode == mode && r.set == set && r.kind == kind && !r.ns.empty()) return &r;
  return nullptr;
}

void print_table() {
  std::map<std::string, double> f16c, mcpy, bf16hw;
  for (const Row& r : rows()) {
    if (r.format == "f16c-loop") f16c[r.set + r.kind] = median(r.ns);
    if (r.format == "bf16-hw-loop") bf16hw[r.set + r.kind] = median(r.ns);
    if (r.format == "memcpy") mcpy[r.set] = median(r.ns);
  }
  std::printf("\nbulk rounding, 2^26 float32, median of %d, path %s%s\n", kRepetitions,
              std::string(to_string(best_path())).c_str(),
              cpu_has_bf16() ? "" : "; no AVX512-BF16 on this CPU: bf16 is compared with the F16C loop");
  std::printf(
      "(pair: the median ratio of %d alternated runs of the row and its baseline. pair other: Stats rows vs\n"
      " the same call without Stats; 2thr rows: speedup over the same call on one thread)\n",
      kRepetitions);
  // The table as CSV too, where MPSIM_BENCH_CSV names a file (./run bench: out/bench/bench_round.csv);
  // written under a temporary name and renamed at the end, so an interrupted run leaves no partial file.
  const char* csv_path = std::getenv("MPSIM_BENCH_CSV");
  const std::string csv_tmp = csv_path ? std::string(csv_path) + ".tmp" : std::string();
  std::FILE* csv = csv_path ? std::fopen(csv_tmp.c_str(), "w") : nullptr;
  if (csv_path && !csv) std::fprintf(stderr, "bench_round: cannot write %s\n", csv_tmp.c_str());
  if (csv)
    std::fprintf(csv, "format,mode,set,output,ns_per_elem,x_f16c,x_memcpy,pair_f16c,pair_other,x_bf16hw,pair_bf16hw\n");
  std::printf("(x BF16 / pair BF16: bf16 rows against the AVX512-BF16 vcvtneps2bf16 loop of the same output kind)\n");
  std::printf("%-18s %-4s %-8s %-8s %9s %8s %8s %10s %10s %8s %10s\n", "format", "mode", "set", "output", "ns/elem",
              "x F16C", "x memcpy", "pair F16C", "pair other", "x BF16", "pair BF16");
  for (const Row& r : rows()) {
    if (r.ns.empty()) continue;
    const double ns = median(r.ns);
    const double base = f16c.count(r.set + r.kind) ? f16c[r.set + r.kind] : 0;
    const double mc = mcpy.count(r.set) ? mcpy[r.set] : 0;
    std::string paired = "", paired2 = "";
    if (const Row* b = find_row("f16c-loop", "rne", r.set, r.kind); b && r.format.find("2thr") == std::string::npos)
      paired = fmt_ratio(paired_ratio(r, *b));
    const std::size_t plus = r.format.find("+stats");
    const std::size_t thr = r.format.find(" 2thr");
    if (plus != std::string::npos) {
      std::string plain = r.format.substr(0, plus) + r.format.substr(plus + 6);
      if (const std::size_t t2 = plain.find(" 2thr"); t2 != std::string::npos) plain = plain.substr(0, t2);
      if (const Row* b = find_row(plain, r.mode, r.set, r.kind); b && thr == std::string::npos)
        paired2 = fmt_ratio(paired_ratio(r, *b));
    }
    if (thr != std::string::npos) {
      if (const Row* b = find_row(r.format.substr(0, thr), r.mode, r.set, r.kind))
        paired2 = fmt_ratio(1.0 / paired_ratio(r, *b));
    }
    // bf16 rows (one thread, not Stats-vs-plain) also against the bf16 hardware loop.
    std::string xbf = "", pairbf = "";
    const bool bf16_row =
        r.format.rfind("bf16", 0) == 0 && r.format.find("2thr") == std::string::npos && r.format != "bf16-hw-loop";
    if (bf16_row && bf16hw.count(r.set + r.kind)) {
      xbf = fmt_ratio(ns / bf16hw[r.set + r.kind]);
      if (const Row* b = find_row("bf16-hw-loop", "rne", r.set, r.kind)) pairbf = fmt_ratio(paired_ratio(r, *b));
    }
    std::printf("%-18s %-4s %-8s %-8s %9.3f %8.2f %8.2f %10s %10s %8s %10s\n", r.format.c_str(), r.mode.c_str(),
                r.set.c_str(), r.kind.c_str(), ns, base > 0 ? ns / base : 0.0, mc > 0 ? ns / mc : 0.0, paired.c_str(),
                paired2.c_str(), xbf.c_str(), pairbf.c_str());
    if (csv)
      std::fprintf(csv, "%s,%s,%s,%s,%.4f,%.4f,%.4f,%s,%s,%s,%s\n", r.format.c_str(), r.mode.c_str(), r.set.c_str(),
                   r.kind.c_str(), ns, base > 0 ? ns / base : 0.0, mc > 0 ? ns / mc : 0.0, paired.c_str(),
                   paired2.c_str(), xbf.c_str(), pairbf.c_str());
    std::fflush(stdout);
  }
  if (csv) {
    std::fclose(csv);
    if (std::rename(csv_tmp.c_str(), csv_path) != 0)
      std::fprintf(stderr, "bench_round: cannot rename to %s\n", csv_path);
    else std::printf("table written to %s\n", csv_path);
  }
}

}  // namespace

int main(int argc, char** argv) {
  data();
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_table();
  return 0;
}
