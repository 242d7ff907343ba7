// The worked examples of Fasi, Higham, Mikaitis & Pranesh, "Numerical behavior of NVIDIA tensor cores",
// PeerJ Comput. Sci. 7:e330 (2021), run through the named units. The paper's test vectors and the results
// it reports for the hardware are those of its test suite, github.com/north-numerical-computing/
// tensor-cores-numerical-behavior (commit 9dae3fcf401345a9a27b8398fce5d6e676ecec7c, GPL-2.0: only the
// inputs and the asserted results are carried here, as facts, each with its file and line):
//   tc_test_numerics-V100.cu              V100, fp16 in, fp32 and fp16 out (wmma 16x16x16)
//   tc_test_numerics-T4-A100-binary16.cu  T4 and A100, fp16 in (one file for both: Makefile lines 6-10)
//   tc_test_numerics-A100-bf16.cu         A100, bf16 in, fp32 out (wmma 16x16x16)
//   tc_test_numerics-A100-tf32.cu         A100, tf32 in, fp32 out (wmma 16x16x8)
// Each test writes A(0, 0..3), B(0..3, 0) and C(0, 0) of a zeroed tile and checks D(0, 0); every case below
// is that dot product over the instruction's whole K (16, or 8 for tf32), zeros padding it.
//
// The tf32 suite stores fp32 values in the operands, and the hardware reads only their tf32 bits: its
// "products are computed exactly" case (tf32.cu lines 199-202) expects (1 - 2^-11)^2 from 1 - 2^-24, so
// the instruction truncates an fp32 operand to tf32. The tf32 inputs here are rounded toward zero for that
// reason (mpsim gemm and mpsim.matmul round to nearest-even: docs/mma.md, "Inputs not in the format").
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/mma/dot.hpp"

using namespace mpsim;

namespace {

enum class Expect { equal, nonzero };

struct Example {
  const char* where;  // file:line of the suite's assertion
  const char* what;   // the suite's item
  std::vector<double> a, b;
  double c;
  double want;  // the value the suite asserts (Expect::equal) or the exact result (Expect::nonzero)
  Expect expect = Expect::equal;
};

struct Suite {
  const char* file;
  const char* gpu;  // the mpsim model run on it
  const Format* in;
  const Format* out;
  int k;  // the wmma instruction's K
  std::vector<Example> examples;
};

double p2(int e) { return std::ldexp(1.0, e); }

// The operand as the instruction reads it: tf32 keeps the high bits of an fp32 (see the header).
double as_read(double x, const Format& in) {
  if (in == tf32()) return round(x, in, Rounding::of(RoundingMode::toward_zero));
  return x;
}

// "Sum starts from largest element": the large product moves through the four positions j = 0..3.
std::vector<Example> largest_first(const char* where, double small_a, double small_b) {
  std::vector<Example> v;
  for (int j = 0; j < 4; ++j) {
    Example e{where,
              "sum starts from the largest element",
              {small_a, small_a, small_a, small_a},
              {small_b, small_b, small_b, small_b},
              p2(-24),
              1.0};
    e.a[j] = 1.0;
    e.b[j] = 1.0;
    v.push_back(e);
  }
  return v;
}

// "Extra bits for carry out": the first four cases move 2^-23 through B (all expect 4 + 2^-21), then the
// third carry bit and the round-down / round-up in normalisation.
std::vector<Example> carry_out(const char* const where[4]) {
  std::vector<Example> v;
  for (int i = 0; i < 4; ++i) {
    Example e{where[0], "carry out, 2^-23 in B moving", {1, 1, 1, 1}, {1, 1, 1, 1}, 1 + p2(-22) + p2(-23), 4 + p2(-21)};
    e.b[i] = p2(-23);
    v.push_back(e);
  }
  v.push_back({where[1], "carry out: the third bit", {1, 1, 1, 1}, {1, 1.5, 1.75, 1.875}, 1.875, 8.0});
  v.push_back(
      {where[2], "round-down in normalisation (positive)", {1, 1, 1, 1}, {1, 1, 1, 1}, 1 + p2(-22) + p2(-23), 5.0});
  v.push_back(
      {where[3], "round-up in normalisation (negative)", {1, 1, 1, 1}, {-1, -1, -1, -1}, -1 - p2(-22) - p2(-23), -5.0});
  return v;
}

void append(std::vector<Example>& to, const std::vector<Example>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

std::vector<Suite> suites() {
  std::vector<Suite> s;
  const double below1_16 = 1 - p2(-11), below1_bf16 = 1 - p2(-8), below1_32 = 1 - p2(-24);

  {  // V100
    const char* v = "tc_test_numerics-V100.cu";
    Suite f32{v, "v100", &fp16(), &fp32(), 16, {}}, f16{v, "v100", &fp16(), &fp16(), 16, {}};
    f16.examples = {
        {"V100.cu:181", "fp16 subnormal in (fp16 out)", {p2(-24)}, {4}, 0, p2(-22)},
        {"V100.cu:206", "fp16 subnormal out (fp16 out)", {p2(-14)}, {1}, -p2(-15), p2(-15), Expect::nonzero},
        {"V100.cu:249",
         "products exact (fp16 out)",
         {below1_16, below1_16},
         {below1_16, p2(-11)},
         0,
         1 - p2(-10) + p2(-11)},
        {"V100.cu:312", "accumulator rounded to nearest (fp16 out)", {p2(-24), p2(-24)}, {0.5, 0.25}, 0, p2(-24)},
    };
    f32.examples = {
        {"V100.cu:188", "fp16 subnormal in (fp32 out)", {p2(-24)}, {4}, 0, p2(-22)},
        {"V100.cu:194", "fp32 subnormal C in and out", {}, {}, p2(-149), p2(-149)},
        {"V100.cu:214", "fp16 subnormal out (fp32 out), product", {p2(-14)}, {0.5}, 0, p2(-15), Expect::nonzero},
        {"V100.cu:219", "fp16 subnormal out (fp32 out), sum", {p2(-14)}, {1}, -p2(-15), p2(-15), Expect::nonzero},
        {"V100.cu:231", "products exact", {below1_16}, {below1_16}, 0, 1 - p2(-10) + p2(-22)},
        {"V100.cu:239",
         "products exact, four",
         {below1_16, below1_16, below1_16, below1_16},
         {below1_16, below1_16, below1_16, below1_16},
         0,
         4 * (1 - p2(-10) + p2(-22))},
        {"V100.cu:261", "products accumulated in fp32", {1, 1, 1, 1}, {p2(-24), p2(-24), p2(-24), p2(-24)}, 1, 1},
        {"V100.cu:293", "round-down for positive values", {1, 1, 1, 1}, {2, p2(-23) + p2(-24)}, 0, 2},
        {"V100.cu:303", "round-up for negative values", {1, 1, 1, 1}, {-2, -p2(-23) - p2(-24)}, 0, -2},
        {"V100.cu:327", "D1 extra bits in the alignment", {1}, {1}, -below1_32, p2(-23)},
        {"V100.cu:337",
         "D2 normalisation in addition",
         {1, 1, 1, 1},
         {p2(-24), p2(-24), p2(-24), p2(-24)},
         below1_32,
         1 + p2(-23)},
        {"V100.cu:348", "D3 normalisation in subtraction", {1, 1}, {1, -p2(-24)}, -1 + p2(-24), p2(-23)},
    };
    append(f32.examples, largest_first("V100.cu:277", 1.0, p2(-24)));
    const char* carry[4] = {"V100.cu:364", "V100.cu:380", "V100.cu:390", "V100.cu:400"};
    append(f32.examples, carry_out(carry));
    s.push_back(f32);
    s.push_back(f16);
  }
  {  // T4 and A100, fp16 in: run on the A100 model (no T4 model: no recordings of it, see docs/mma.md)
    const char* t = "tc_test_numerics-T4-A100-binary16.cu";
    Suite f32{t, "a100", &fp16(), &fp32(), 16, {}}, f16{t, "a100", &fp16(), &fp16(), 16, {}};
    f16.examples = {
        {"T4-A100-binary16.cu:182", "fp16 subnormal in (fp16 out)", {p2(-24)}, {4}, 0, p2(-22)},
        {"T4-A100-binary16.cu:207",
         "fp16 subnormal out (fp16 out)",
         {p2(-14)},
         {1},
         -p2(-15),
         p2(-15),
         Expect::nonzero},
        {"T4-A100-binary16.cu:250",
         "products exact (fp16 out)",
         {below1_16, below1_16},
         {below1_16, p2(-11)},
         0,
         1 - p2(-10) + p2(-11)},
        {"T4-A100-binary16.cu:316",
         "accumulator rounded to nearest (fp16 out)",
         {p2(-24), p2(-24)},
         {0.5, 0.25},
         0,
         p2(-24)},
    };
    f32.examples = {
        {"T4-A100-binary16.cu:189", "fp16 subnormal in (fp32 out)", {p2(-24)}, {4}, 0, p2(-22)},
        {"T4-A100-binary16.cu:195", "fp32 subnormal C in and out", {}, {}, p2(-149), p2(-149)},
        {"T4-A100-binary16.cu:215",
         "fp16 subnormal out (fp32 out), product",
         {p2(-14)},
         {0.5},
         0,
         p2(-15),
         Expect::nonzero},
        {"T4-A100-binary16.cu:220",
         "fp16 subnormal out (fp32 out), sum",
         {p2(-14)},
         {1},
         -p2(-15),
         p2(-15),
         Expect::nonzero},
        {"T4-A100-binary16.cu:232", "products exact", {below1_16}, {below1_16}, 0, 1 - p2(-10) + p2(-22)},
        {"T4-A100-binary16.cu:240",
         "products exact, four",
         {below1_16, below1_16, below1_16, below1_16},
         {below1_16, below1_16, below1_16, below1_16},
         0,
         4 * (1 - p2(-10) + p2(-22))},
        {"T4-A100-binary16.cu:262",
         "products accumulated in fp32",
         {0.5, 0.5, 0.5, 0.5},
         {p2(-24), p2(-24), p2(-24), p2(-24)},
         1,
         1},
        {"T4-A100-binary16.cu:297", "round-down for positive values", {1, 1, 1, 1}, {2, p2(-23) + p2(-24)}, 0, 2},
        {"T4-A100-binary16.cu:307", "round-up for negative values", {1, 1, 1, 1}, {-2, -p2(-23) - p2(-24)}, 0, -2},
        {"T4-A100-binary16.cu:331", "D1 extra bits in the alignment", {1}, {1}, -below1_32, p2(-24)},
        {"T4-A100-binary16.cu:341",
         "D2 normalisation in addition",
         {1, 1, 1, 1},
         {p2(-24), p2(-24), p2(-24), p2(-24)},
         below1_32,
         1 + p2(-23)},
        {"T4-A100-binary16.cu:352", "D3 normalisation in subtraction", {1, 1}, {1, -p2(-24)}, -1 + p2(-24), 0.0},
    };
    append(f32.examples, largest_first("T4-A100-binary16.cu:281", 0.5, p2(-24)));
    const char* carry[4] = {"T4-A100-binary16.cu:368", "T4-A100-binary16.cu:384", "T4-A100-binary16.cu:394",
                            "T4-A100-binary16.cu:404"};
    append(f32.examples, carry_out(carry));
    s.push_back(f32);
    s.push_back(f16);
  }
  {  // A100, bf16 in
    Suite f{"tc_test_numerics-A100-bf16.cu", "a100", &bf16(), &fp32(), 16, {}};
    f.examples = {
        {"A100-bf16.cu:186", "bf16 subnormal in", {p2(-133)}, {p2(7)}, 0, p2(-126)},
        {"A100-bf16.cu:192", "fp32 subnormal C in and out", {}, {}, p2(-149), p2(-149)},
        {"A100-bf16.cu:200", "fp32 subnormal out, product", {p2(-126)}, {0.5}, 0, p2(-127)},
        {"A100-bf16.cu:205", "fp32 subnormal out, sum", {p2(-126)}, {1}, -p2(-127), p2(-127)},
        {"A100-bf16.cu:217", "products exact", {below1_bf16}, {below1_bf16}, 0, 1 - p2(-7) + p2(-16)},
        {"A100-bf16.cu:225",
         "products exact, four",
         {below1_bf16, below1_bf16, below1_bf16, below1_bf16},
         {below1_bf16, below1_bf16, below1_bf16, below1_bf16},
         0,
         4 * (1 - p2(-7) + p2(-16))},
        {"A100-bf16.cu:237",
         "products accumulated in fp32",
         {0.5, 0.5, 0.5, 0.5},
         {p2(-24), p2(-24), p2(-24), p2(-24)},
         1,
         1},
        {"A100-bf16.cu:271", "round-down for positive values", {1, 1, 1, 1}, {2, p2(-23) + p2(-24)}, 0, 2},
        {"A100-bf16.cu:281", "round-up for negative values", {1, 1, 1, 1}, {-2, -p2(-23) - p2(-24)}, 0, -2},
        {"A100-bf16.cu:295", "D1 extra bits in the alignment", {1}, {1}, -below1_32, p2(-24)},
        {"A100-bf16.cu:305",
         "D2 normalisation in addition",
         {1, 1, 1, 1},
         {p2(-24), p2(-24), p2(-24), p2(-24)},
         below1_32,
         1 + p2(-23)},
        {"A100-bf16.cu:316", "D3 normalisation in subtraction", {1, 1}, {1, -p2(-24)}, -1 + p2(-24), 0.0},
    };
    append(f.examples, largest_first("A100-bf16.cu:255", 0.5, p2(-24)));
    const char* carry[4] = {"A100-bf16.cu:332", "A100-bf16.cu:348", "A100-bf16.cu:358", "A100-bf16.cu:368"};
    append(f.examples, carry_out(carry));
    s.push_back(f);
  }
  {  // A100, tf32 in (operands given as fp32: see the header)
    Suite f{"tc_test_numerics-A100-tf32.cu", "a100", &tf32(), &fp32(), 8, {}};
    f.examples = {
        {"A100-tf32.cu:172", "tf32 subnormal in", {p2(-136)}, {p2(10)}, 0, p2(-126)},
        {"A100-tf32.cu:178", "fp32 subnormal C in and out", {}, {}, p2(-149), p2(-149)},
        {"A100-tf32.cu:185", "fp32 subnormal out, product", {p2(-126)}, {0.5}, 0, p2(-127)},
        {"A100-tf32.cu:190", "fp32 subnormal out, sum", {p2(-126)}, {1}, -p2(-127), p2(-127)},
        {"A100-tf32.cu:202",
         "products exact (fp32 1 - 2^-24 read as tf32)",
         {below1_32},
         {below1_32},
         0,
         1 - p2(-10) + p2(-22)},
        {"A100-tf32.cu:210",
         "products exact, four",
         {below1_32, below1_32, below1_32, below1_32},
         {below1_32, below1_32, below1_32, below1_32},
         0,
         4 * (1 - p2(-10) + p2(-22))},
        {"A100-tf32.cu:222",
         "products accumulated in fp32",
         {0.5, 0.5, 0.5, 0.5},
         {p2(-24), p2(-24), p2(-24), p2(-24)},
         1,
         1},
        {"A100-tf32.cu:256", "round-down for positive values", {1, 1, 1, 1}, {2, p2(-23) + p2(-24)}, 0, 2},
        {"A100-tf32.cu:266", "round-up for negative values", {1, 1, 1, 1}, {-2, -p2(-23) - p2(-24)}, 0, -2},
        {"A100-tf32.cu:280", "D1 extra bits in the alignment", {1}, {1}, -below1_32, p2(-24)},
        {"A100-tf32.cu:290",
         "D2 normalisation in addition",
         {1, 1, 1, 1},
         {p2(-24), p2(-24), p2(-24), p2(-24)},
         below1_32,
         1 + p2(-23)},
        {"A100-tf32.cu:301", "D3 normalisation in subtraction", {1, 1}, {1, -p2(-24)}, -1 + p2(-24), 0.0},
    };
    append(f.examples, largest_first("A100-tf32.cu:240", 0.5, p2(-24)));
    const char* carry[4] = {"A100-tf32.cu:317", "A100-tf32.cu:333", "A100-tf32.cu:343", "A100-tf32.cu:353"};
    append(f.examples, carry_out(carry));
    s.push_back(f);
  }
  return s;
}

double run(const mma::MatrixUnit& u, int k, const std::vector<double>& a, const std::vector<double>& b, double c) {
  std::vector<double> A(k, 0.0), B(k, 0.0);
  for (std::size_t i = 0; i < a.size(); ++i) A[i] = as_read(a[i], u.input);
  for (std::size_t i = 0; i < b.size(); ++i) B[i] = as_read(b[i], u.input);
  return mma::dot(u, A, B, c);
}

// "Monotonicity of dot product" (item D5): adding more to C gives a smaller D. Returns (D with the smaller
// C, D with the larger C).
std::pair<double, double> monotonicity(const mma::MatrixUnit& u, int k, double a0, double b_last) {
  const std::vector<double> a(4, a0), b = {p2(-24), p2(-24), p2(-24), b_last};
  return {run(u, k, a, b, 1 - p2(-24)), run(u, k, a, b, 1.0)};
}

}  // namespace

TEST_CASE("the worked examples of Fasi et al. 2021 give the results reported for the hardware", "[mma]") {
  int cases = 0, mismatches = 0;
  for (const Suite& s : suites()) {
    const mma::MatrixUnit u = mma::matrix_unit(s.gpu, *s.in, *s.out);
    int suite_cases = 0, suite_miss = 0;
    for (const Example& e : s.examples) {
      const double got = run(u, s.k, e.a, e.b, e.c);
      const bool ok = e.expect == Expect::equal ? got == e.want : (got != 0 && got == e.want);
      INFO(e.where << " " << e.what << " on " << u.name << ": got " << got << ", the suite asserts "
                   << (e.expect == Expect::equal ? "" : "!= 0, exact ") << e.want);
      CHECK(ok);
      ++suite_cases;
      suite_miss += !ok;
      if (!ok) std::printf("  MISS %s %s: got %a, want %a\n", e.where, e.what, got, e.want);
    }
    std::printf("%s on %s: %d cases, %d mismatches\n", s.file, u.name.c_str(), suite_cases, suite_miss);
    cases += suite_cases;
    mismatches += suite_miss;
  }
  // D5: V100.cu lines 405-415 (a = 1, b = 2^-24 four times); T4-A100-binary16.cu 409-423, A100-bf16.cu
  // 373-387, A100-tf32.cu 358-372 (a = 0.5, the last b = 2^-23 + 2^-24): D(C = 1) < D(C = 1 - 2^-24).
  struct Mono {
    const char* where;
    const char* gpu;
    const Format* in;
    int k;
    double a0, b_last;
  };
  const Mono mono[] = {{"V100.cu:415", "v100", &fp16(), 16, 1.0, p2(-24)},
                       {"T4-A100-binary16.cu:423", "a100", &fp16(), 16, 0.5, p2(-23) + p2(-24)},
                       {"A100-bf16.cu:387", "a100", &bf16(), 16, 0.5, p2(-23) + p2(-24)},
                       {"A100-tf32.cu:372", "a100", &tf32(), 8, 0.5, p2(-23) + p2(-24)}};
  for (const Mono& m : mono) {
    const auto [smaller_c, larger_c] = monotonicity(mma::matrix_unit(m.gpu, *m.in, fp32()), m.k, m.a0, m.b_last);
    INFO(m.where << ": D(C = 1 - 2^-24) = " << smaller_c << ", D(C = 1) = " << larger_c);
    CHECK(larger_c < smaller_c);
    std::printf("%s non-monotonic: D(C = 1 - 2^-24) = %a > D(C = 1) = %a\n", m.where, smaller_c, larger_c);
    ++cases;
    mismatches += !(larger_c < smaller_c);
  }
  std::printf("Fasi et al. 2021 test suite: %d cases, %d mismatches\n", cases, mismatches);
  CHECK(mismatches == 0);

  // The cases that tell the units apart: V100's 23 alignment bits against A100's 24 (item D1, D3), so the
  // V100 model fails the A100 suite's D1 and the A100 model the V100 suite's.
  const std::vector<double> one = {1.0}, a3 = {1.0, 1.0}, b3 = {1.0, -p2(-24)};
  const double v100_d1 = mma::dot(mma::matrix_unit("v100", fp16(), fp32()), one, one, -(1 - p2(-24)));
  const double a100_d1 = mma::dot(mma::matrix_unit("a100", fp16(), fp32()), one, one, -(1 - p2(-24)));
  const double v100_d3 = mma::dot(mma::matrix_unit("v100", fp16(), fp32()), a3, b3, -1 + p2(-24));
  const double a100_d3 = mma::dot(mma::matrix_unit("a100", fp16(), fp32()), a3, b3, -1 + p2(-24));
  std::printf("D1: v100 %a, a100 %a; D3: v100 %a, a100 %a\n", v100_d1, a100_d1, v100_d3, a100_d3);
  CHECK(v100_d1 != a100_d1);
  CHECK(v100_d3 != a100_d3);
}
