// The AMD CDNA profiles (mi100, mi250, mi300x) against the published CDNA models' own outputs: the errors that
// north-numerical-computing/MATLAB-tensor-core's experiments/matmul_test_CDNA.m printed for its models
// (experiments/data/matmul_test_<in>_binary32_words_<p>_model_<gpu>.dat, carried into
// data/mma/cdna_model_errors.csv by scripts/mma_recorded_convert.py). These are model outputs, not hardware
// results: no AMD hardware data checks the profiles (docs/mma.md).
//
// A .dat row is ||C - A B||_inf / ||A||_inf / ||B||_inf, printed with %e (7 significant digits), for random
// 10 x n and n x 10 matrices split into p words of the input format and multiplied word by word with the model
// (matmul_test_CDNA.m lines 31-91). The test redraws the matrices (MATLAB's rng(1) is MT19937 seeded by
// init_genrand(1), rand is genrand_res53 filled column by column, randi(2) is floor(2 rand) + 1), runs the
// same products through mpsim's profile, and compares the printed error digit for digit.
//
// One property of the published runs, found from the data: CPFloat's MEX keeps its rounding mode between calls
// when the options omit `round` (cpfloat/mex/cpfloat.c), and GEMM.m (line 27) last sets round = 4 (toward zero)
// for C. So every word split of matmul_test_CDNA.m after the first GEMM call of a MATLAB run rounds toward zero,
// not to nearest; only the first n = 10 of a MATLAB run rounds to nearest. Which files began a run is not
// recorded: the n = 10 row of a one-word file may match either, and the test says which one it does.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/mma/dot.hpp"

using namespace mpsim;
namespace fs = std::filesystem;

namespace {

struct Row {
  std::string input, model;
  int words = 0;
  long n = 0;
  std::string error;
};

std::vector<Row> load_rows() {
  const char* root = std::getenv("MPSIM_SOURCE_ROOT");
  const fs::path file = fs::path(root ? root : ".") / "data" / "mma" / "cdna_model_errors.csv";
  std::ifstream in(file);
  REQUIRE(in.good());
  std::vector<Row> rows;
  std::string line;
  std::getline(in, line);  // header: input,model,words,n,error,bound
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::stringstream ss(line);
    Row r;
    std::string words, n, bound;
    std::getline(ss, r.input, ',');
    std::getline(ss, r.model, ',');
    std::getline(ss, words, ',');
    std::getline(ss, n, ',');
    std::getline(ss, r.error, ',');
    r.words = std::stoi(words);
    r.n = std::stol(n);
    rows.push_back(r);
  }
  return rows;
}

// n = floor(logspace(1, 6, 20)) (matmul_test_CDNA.m line 34).
std::vector<long> n_list() {
  std::vector<long> v;
  for (int i = 0; i < 20; ++i) v.push_back(static_cast<long>(std::floor(std::pow(10.0, 1.0 + 5.0 * i / 19.0))));
  return v;
}

// MT19937 (Matsumoto & Nishimura, ACM TOMACS 8(1), 1998; init_genrand as in their mt19937ar.c), written out
// so that skipping a run's draws can regenerate the state without tempering each output (std::mt19937::discard
// tempers every one). The test checks it against std::mt19937 below.
struct Mt19937 {
  std::uint32_t s[624];
  int i = 624;
  explicit Mt19937(std::uint32_t seed) {
    s[0] = seed;
    for (int k = 1; k < 624; ++k) s[k] = 1812433253u * (s[k - 1] ^ (s[k - 1] >> 30)) + static_cast<std::uint32_t>(k);
  }
  void twist() {
    for (int k = 0; k < 624; ++k) {
      const std::uint32_t y = (s[k] & 0x80000000u) | (s[(k + 1) % 624] & 0x7fffffffu);
      s[k] = s[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    i = 0;
  }
  std::uint32_t operator()() {
    if (i >= 624) twist();
    std::uint32_t y = s[i++];
    y ^= y >> 11;
    y ^= (y << 7) & 0x9d2c5680u;
    y ^= (y << 15) & 0xefc60000u;
    return y ^ (y >> 18);
  }
  void discard(unsigned long long z) {
    while (z > 0) {
      if (i >= 624) twist();
      const auto step = std::min<unsigned long long>(z, static_cast<unsigned long long>(624 - i));
      i += static_cast<int>(step);
      z -= step;
    }
  }
};

// MATLAB's rand after rng(1): genrand_res53 of MT19937.
struct MatlabRand {
  Mt19937 g{1};
  double next() {
    const std::uint32_t a = g() >> 5, b = g() >> 6;
    return (a * 67108864.0 + b) / 9007199254740992.0;
  }
};

constexpr int kM = 10, kQ = 10;  // matmul_test_CDNA.m lines 32-33

struct Experiment {
  const Format* in;       // the experiment's input format (CPFloat's binary16, bfloat16, fp8-e5m2)
  const Format* gemm_in;  // the format GEMM.m rounds the model's inputs to (fnuz on MI300X fp8)
  int t;                  // precision incl. the implicit bit (u = 2^-t)
  double fmax;            // the input format's largest value
};

Experiment experiment(const std::string& input, const std::string& model) {
  if (input == "binary16") return {&fp16(), &fp16(), 11, 65504.0};
  if (input == "bfloat16") return {&bf16(), &bf16(), 8, std::ldexp(2.0 - std::ldexp(1.0, -7), 127)};
  // GEMM.m lines 49-60: on MI300X (fp8_fnuz = 1) the inputs are rounded to e5m2fnuz [3, -15, 15].
  return {&fp8_e5m2(), model == "mi300x" ? &fp8_e5m2fnuz() : &fp8_e5m2(), 3, 57344.0};
}

// One run of matmul_test_CDNA.m (one file: input, model, p words) for its first `rows` values of n, drawing from
// `rng` (left after the run's last drawn n). `first_rne`: the run's first n rounds to nearest (see the top).
std::vector<double> run(const mma::MatrixUnit& unit, const Experiment& ex, int p, MatlabRand rng, std::size_t rows,
                        bool first_rne) {
  const double u = std::ldexp(1.0, -ex.t);
  const double Fmax = std::numeric_limits<float>::max();
  const auto ns = n_list();
  std::vector<double> errs;
  for (std::size_t i = 0; i < rows; ++i) {
    const long n = ns[i];
    const std::size_t N = static_cast<std::size_t>(n);
    std::vector<double> A(kM * N), B(N * kQ);  // row-major
    for (std::size_t k = 0; k < N; ++k)
      for (int r = 0; r < kM; ++r) A[r * N + k] = std::pow(10.0, rng.next() * 20 - 10);
    for (int j = 0; j < kQ; ++j)
      for (std::size_t k = 0; k < N; ++k) B[k * kQ + j] = std::pow(10.0, rng.next() * 20 - 10);
    for (std::size_t k = 0; k < N; ++k)
      for (int r = 0; r < kM; ++r) A[r * N + k] *= (std::floor(rng.next() * 2) + 1) * 2 - 3;
    for (int j = 0; j < kQ; ++j)
      for (std::size_t k = 0; k < N; ++k) B[k * kQ + j] *= (std::floor(rng.next() * 2) + 1) * 2 - 3;
    // The reference A B (MATLAB's is a BLAS dgemm; here each entry with an 80-bit accumulator, then rounded).
    std::vector<double> Ct(kM * kQ);
    for (int r = 0; r < kM; ++r)
      for (int j = 0; j < kQ; ++j) {
        long double s = 0;
        for (std::size_t k = 0; k < N; ++k) s += static_cast<long double>(A[r * N + k]) * B[k * kQ + j];
        Ct[r * kQ + j] = static_cast<double>(s);
      }
    const double theta = std::min(ex.fmax, std::sqrt(Fmax / static_cast<double>(n)));
    auto prev_pow2 = [](double x) { return std::exp2(std::floor(std::log2(x))); };
    std::vector<double> L(kM), Mc(kQ);
    for (int r = 0; r < kM; ++r) {
      double mx = 0;
      for (std::size_t k = 0; k < N; ++k) mx = std::max(mx, std::fabs(A[r * N + k]));
      L[r] = prev_pow2(theta / mx);
    }
    for (int j = 0; j < kQ; ++j) {
      double mx = 0;
      for (std::size_t k = 0; k < N; ++k) mx = std::max(mx, std::fabs(B[k * kQ + j]));
      Mc[j] = prev_pow2(theta / mx);
    }
    const Rounding split_rounding =
        Rounding::of((i == 0 && first_rne) ? RoundingMode::nearest_even : RoundingMode::toward_zero);
    std::vector<double> t1(kM * N), t2(N * kQ);
    for (int r = 0; r < kM; ++r)
      for (std::size_t k = 0; k < N; ++k) t1[r * N + k] = L[r] * A[r * N + k];
    for (std::size_t k = 0; k < N; ++k)
      for (int j = 0; j < kQ; ++j) t2[k * kQ + j] = B[k * kQ + j] * Mc[j];
    std::vector<std::vector<double>> LA(p), BM(p);
    for (int w = 0; w < p; ++w) {
      if (w > 0) {  // lines 69-74: temp = temp - X{j-1} u^(j-2); X{j} = round(temp / u^(j-1))
        for (std::size_t e = 0; e < t1.size(); ++e) t1[e] -= LA[w - 1][e] * std::pow(u, w - 1);
        for (std::size_t e = 0; e < t2.size(); ++e) t2[e] -= BM[w - 1][e] * std::pow(u, w - 1);
      }
      LA[w].resize(t1.size());
      BM[w].resize(t2.size());
      for (std::size_t e = 0; e < t1.size(); ++e)
        LA[w][e] = mpsim::round(t1[e] / std::pow(u, w), *ex.in, split_rounding);
      for (std::size_t e = 0; e < t2.size(); ++e)
        BM[w][e] = mpsim::round(t2[e] / std::pow(u, w), *ex.in, split_rounding);
    }
    // matmul (lines 109-127): C = model(u^(j+k-2) A{j} B{k} + C) for j + k - 2 < p; GEMM.m rounds alpha A and B
    // to its input format to nearest (lines 73-76).
    std::vector<double> C(kM * kQ, 0.0), D(kM * kQ);
    for (int j = 0; j < p; ++j)
      for (int k = 0; k < p; ++k) {
        if (j + k >= p) continue;
        std::vector<double> a(LA[j]), b(BM[k]);
        const double alpha = std::pow(u, j + k);
        for (double& x : a) x = mpsim::round(alpha * x, *ex.gemm_in);
        for (double& x : b) x = mpsim::round(x, *ex.gemm_in);
        mma::gemm(unit, kM, kQ, N, a.data(), b.data(), C.data(), D.data(), 1);
        C = D;
      }
    double num = 0, na = 0, nb = 0;
    for (int r = 0; r < kM; ++r) {
      double s = 0;
      for (int j = 0; j < kQ; ++j) s += std::fabs((1 / L[r]) * C[r * kQ + j] * (1 / Mc[j]) - Ct[r * kQ + j]);
      num = std::max(num, s);
      double sa = 0;
      for (std::size_t k = 0; k < N; ++k) sa += std::fabs(A[r * N + k]);
      na = std::max(na, sa);
    }
    for (std::size_t k = 0; k < N; ++k) {
      double s = 0;
      for (int j = 0; j < kQ; ++j) s += std::fabs(B[k * kQ + j]);
      nb = std::max(nb, s);
    }
    errs.push_back(num / na / nb);
  }
  return errs;
}

// Distance between two printed values in units of the file's 7th significant digit.
double last_digits(double ours, const std::string& printed) {
  const double v = std::stod(printed);
  const double unit = std::pow(10.0, std::floor(std::log10(std::fabs(v))) - 6);
  return std::fabs(ours - v) / unit;
}

struct Tally {
  int rows = 0, exact = 0, within_one = 0, off = 0;
  double worst = 0;
};

// The rows of `file_rows` (one file) compared with a run of `unit`; `starts`: the generator at the start of the
// first, second and third run of a MATLAB script (experiments_CDNA.m runs p = 1, 2, 3 or 1, 4, 6 in turn).
Tally compare(const mma::MatrixUnit& unit, const std::vector<Row>& file_rows, const std::vector<MatlabRand>& starts,
              std::size_t rows, bool print) {
  const Row& r0 = file_rows.front();
  const Experiment ex = experiment(r0.input, r0.model);
  const int order = r0.words == 1 ? 0 : (r0.words == 2 || r0.words == 4) ? 1 : 2;
  const auto errs = run(unit, ex, r0.words, starts[order], rows, false);
  std::vector<double> errs_rne;
  if (r0.words == 1) errs_rne = run(unit, ex, r0.words, starts[0], 1, true);
  Tally t;
  for (std::size_t i = 0; i < rows && i < file_rows.size(); ++i) {
    double d = last_digits(errs[i], file_rows[i].error);
    std::string how = "RZ splits";
    if (i == 0 && !errs_rne.empty() && last_digits(errs_rne[0], file_rows[i].error) < d) {
      d = last_digits(errs_rne[0], file_rows[i].error);
      how = "RNE splits (first call of a MATLAB run)";
    }
    ++t.rows;
    t.worst = std::max(t.worst, d);
    if (d < 0.5) ++t.exact;
    else if (d <= 1.5) ++t.within_one;
    else ++t.off;
    if (print && (i == 0 || d >= 0.5))
      std::printf("%s\n", fmt::format("  {} {} p={} n={}: file {} model {:e} ({:.2f} last digits; {})", r0.model,
                                      r0.input, r0.words, file_rows[i].n, file_rows[i].error,
                                      i == 0 && how != "RZ splits" ? errs_rne[0] : errs[i], d, how)
                              .c_str());
  }
  return t;
}

const std::vector<MatlabRand>& run_starts() {
  static const std::vector<MatlabRand> starts = [] {
    // Draws per run: for each n, rand(10, n), rand(n, 10), randi(2, 10, n), randi(2, n, 10); two words each.
    unsigned long long per_run = 0;
    for (long n : n_list()) per_run += 2ull * (4ull * 10 * static_cast<unsigned long long>(n));
    std::vector<MatlabRand> s(3);
    s[1].g.discard(per_run);
    s[2] = s[1];
    s[2].g.discard(per_run);
    return s;
  }();
  return starts;
}

// The first 6 values of n (n <= 206) in the unit suite; all 20 (to n = 10^6: 5,000 times the products) with
// MPSIM_EXHAUSTIVE_FULL=1; MPSIM_CDNA_ROWS=R (1..20) chooses R (14: n <= 26,366, under a minute here).
std::size_t rows_to_check() {
  const char* rows = std::getenv("MPSIM_CDNA_ROWS");
  if (rows) {
    const int r = std::atoi(rows);
    REQUIRE(r >= 1);
    REQUIRE(r <= 20);
    return static_cast<std::size_t>(r);
  }
  const char* full = std::getenv("MPSIM_EXHAUSTIVE_FULL");
  return (full && std::string(full) == "1") ? 20 : 6;
}

// fp8-e5m2 with 2 and 3 words: no version of experiments_CDNA.m runs them (it runs p = 1, 4, 6 for fp8), and
// their printed errors (0.08 to 0.85 at n <= 206) exceed the same model's one-word errors at every n, where
// for every other input and model two words give a smaller error than one at every n. They are compared and
// printed, not required to match.
bool from_committed_script(const Row& r) { return !(r.input == "fp8-e5m2" && (r.words == 2 || r.words == 3)); }

std::map<std::string, std::vector<Row>> files_of(const std::vector<Row>& rows) {
  std::map<std::string, std::vector<Row>> files;
  for (const auto& r : rows) files[fmt::format("{} {} {}", r.model, r.input, r.words)].push_back(r);
  return files;
}

}  // namespace

TEST_CASE("the MT19937 written here equals std::mt19937, skips included", "[mma][cdna]") {
  Mt19937 mine(1);
  std::mt19937 ref(1);
  std::size_t differ = 0;
  for (const unsigned long long skip : {0ull, 1ull, 623ull, 624ull, 100000ull, 1234567ull}) {
    mine.discard(skip);
    ref.discard(skip);
    for (int k = 0; k < 1000; ++k) differ += mine() != ref();
  }
  std::printf("MT19937: 6000 outputs after skips of 0 to 1234567 draws, %zu differ from std::mt19937\n", differ);
  CHECK(differ == 0);
}

TEST_CASE("CDNA profiles reproduce the published CDNA models' printed errors", "[mma][cdna]") {
  const auto files = files_of(load_rows());
  REQUIRE(files.size() == 23);
  const auto& starts = run_starts();
  const std::size_t n_rows = rows_to_check();
  Tally all, other;
  for (const auto& [name, file_rows] : files) {
    const Row& r0 = file_rows.front();
    const mma::MatrixUnit unit = mma::matrix_unit(r0.model, *experiment(r0.input, r0.model).gemm_in, fp32());
    const Tally t = compare(unit, file_rows, starts, n_rows, true);
    std::printf("%s: %d rows, %d digit for digit, %d within one last digit, %d off, worst %.2f last digits%s\n",
                name.c_str(), t.rows, t.exact, t.within_one, t.off, t.worst,
                from_committed_script(r0) ? "" : " (not from the committed script: not required)");
    Tally& sum = from_committed_script(r0) ? all : other;
    sum.rows += t.rows;
    sum.exact += t.exact;
    sum.within_one += t.within_one;
    sum.off += t.off;
    sum.worst = std::max(sum.worst, t.worst);
  }
  std::printf("cdna: 21 files x %zu rows = %d rows, %d digit for digit, %d within one last digit, %d off, worst %.2f\n",
              n_rows, all.rows, all.exact, all.within_one, all.off, all.worst);
  std::printf("cdna: the 2 fp8-e5m2 files of 2 and 3 words: %d rows, %d off\n", other.rows, other.off);
  CHECK(all.rows == 21 * static_cast<int>(n_rows));
  CHECK(all.off == 0);
}

TEST_CASE("CDNA profiles: a mutation of each structure fails the printed errors", "[mma][cdna]") {
  // Each mutation on the files whose errors the accumulation decides (the most words: errors near fp32's unit
  // roundoff), which the unmutated profiles match digit for digit above.
  const auto files = files_of(load_rows());
  const auto& starts = run_starts();
  struct Mutation {
    const char* what;
    const char* file;
    void (*apply)(mma::MatrixUnit&);
  };
  const Mutation mutations[] = {
      {"mi100: RZ instead of RNE", "mi100 binary16 3",
       [](mma::MatrixUnit& u) { u.block.rounding = mma::FinalRounding::toward_zero; }},
      {"mi100: blocks of 8 instead of 4", "mi100 binary16 3", [](mma::MatrixUnit& u) { u.block.products = 8; }},
      {"mi250: pairwise blocks of 8 instead of 4", "mi250 binary16 3",
       [](mma::MatrixUnit& u) { u.block.products = 8; }},
      {"mi250: the exact sum instead of pairwise fp32", "mi250 bfloat16 3",
       [](mma::MatrixUnit& u) { u.block.structure = mma::BlockStructure::exact; }},
      {"mi300x: one fewer alignment bit", "mi300x binary16 3", [](mma::MatrixUnit& u) { u.block.align_bits = 23; }},
      {"mi300x: blocks of 16 instead of 8", "mi300x bfloat16 3", [](mma::MatrixUnit& u) { u.block.products = 16; }},
      {"mi300x fp8: one group instead of even/odd", "mi300x fp8-e5m2 6",
       [](mma::MatrixUnit& u) { u.block.structure = mma::BlockStructure::late_accumulator; }},
  };
  for (const auto& m : mutations) {
    const auto& file_rows = files.at(m.file);
    const Row& r0 = file_rows.front();
    mma::MatrixUnit unit = mma::matrix_unit(r0.model, *experiment(r0.input, r0.model).gemm_in, fp32());
    m.apply(unit);
    mma::validate(unit);
    const Tally t = compare(unit, file_rows, starts, 4, false);
    std::printf("  mutation %-46s on %-18s: %d of %d rows off (worst %.0f last digits)\n", m.what, m.file, t.off,
                t.rows, t.worst);
    CHECK(t.off > 0);
  }
}
