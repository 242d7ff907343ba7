// The matrix-unit model (lib/mpsim/mma/dot.cpp, 64-bit integers) against an independent slow reference
// written here with Boost.Multiprecision rationals: exact products and addend, the truncation rule of
// unit.hpp applied by exact division, the sum rounded by the reference layer's reference_round. Random
// tiles with wide exponent ranges, ties, cancellation, subnormals, NaN and Inf, for every named unit.
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.hpp"
#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/mma/detail/block_avx2.hpp"
#include "mpsim/mma/dot.hpp"
#include "mpsim/reference/reference.hpp"

using namespace mpsim;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

Rational pow2(int e) {
  Rational r = 1;
  if (e >= 0) return Rational(BigInt(1) << e);
  return Rational(BigInt(1), BigInt(1) << -e);
}

int exponent_of(double x, int emin) {  // max(floor(log2|x|), emin), x finite non-zero
  int e = 0;
  std::frexp(x, &e);
  return std::max(e - 1, emin);
}

// Exact x rounded to `result_bits` in out's exponent range by `mode`; ±inf from 2^(emax+1) up.
double ref_round(const Rational& x, int result_bits, const Format& out, mma::FinalRounding mode) {
  if (x == 0) return 0.0;
  const Format res = make_format("result", out.exp_bits, result_bits, out.bias);
  const Rational mag = x < 0 ? Rational(-x) : x;
  const RoundingMode rm =
      mode == mma::FinalRounding::toward_zero ? RoundingMode::toward_zero : RoundingMode::nearest_even;
  double v;
  if (mag >= pow2(out.emax + 1)) v = kInf;
  else v = decode(reference_round(mag, false, res, Rounding::of(rm)), res);
  return x < 0 ? -v : v;
}

// floor(x / unit) for a signed rational (round toward minus infinity), or toward zero.
BigInt floor_div(const Rational& x, const Rational& unit, bool toward_zero) {
  const Rational q = x / unit;
  BigInt t = numerator(q) / denominator(q);  // truncates toward zero
  if (!toward_zero && q < 0 && Rational(t) != q) t -= 1;
  return t;
}

// The CDNA structures of unit.hpp (BlockStructure), written from Generic_BFMA_TC.m's rules in rationals: the
// exact sum rounded once; fp32 roundings of products and pairwise sums; aligned groups and a late c whose
// alignment rounds toward minus infinity. Operands finite (specials handled by the caller).
double ref_cdna_block(const mma::MatrixUnit& u, const mma::BlockFma& p, std::vector<double> a, std::vector<double> b,
                      double c) {
  const double tiny_in = std::ldexp(1.0, u.input.emin), tiny_out = std::ldexp(1.0, -126);
  if (!u.input_subnormals)
    for (auto* v : {&a, &b})
      for (double& x : *v)
        if (std::fabs(x) < tiny_in) x = 0;
  if (p.structure == mma::BlockStructure::exact) {
    Rational sum = exact_value(c);
    for (std::size_t k = 0; k < a.size(); ++k) sum += exact_value(a[k]) * exact_value(b[k]);
    return ref_round(sum, 23, fp32(), p.rounding);
  }
  bool pos = false, neg = false;  // prd_limit: a product of 2^128 or more
  for (std::size_t k = 0; k < a.size(); ++k) {
    const Rational v = exact_value(a[k]) * exact_value(b[k]);
    pos = pos || v >= pow2(128);
    neg = neg || v <= -pow2(128);
  }
  if (pos && neg) return kNaN;
  if (pos || neg) return pos ? kInf : -kInf;
  if (p.structure == mma::BlockStructure::pairwise_fp32) {
    auto flush = [&](double x) { return (!u.output_subnormals && std::fabs(x) < tiny_out) ? 0.0 * x : x; };
    auto f32 = [&](const Rational& x) { return ref_round(x, 23, fp32(), mma::FinalRounding::nearest_even); };
    std::vector<double> v(static_cast<std::size_t>(p.products), 0.0);
    for (std::size_t k = 0; k < a.size(); ++k) v[k] = flush(f32(exact_value(a[k]) * exact_value(b[k])));
    while (v.size() > 1) {  // (v0 + v1) + (v2 + v3), ...
      std::vector<double> w;
      for (std::size_t k = 0; k < v.size(); k += 2) w.push_back(flush(f32(exact_value(v[k]) + exact_value(v[k + 1]))));
      v = w;
    }
    return flush(f32(exact_value(flush(c)) + exact_value(v[0])));
  }
  // late_accumulator / odd_even: groups of products aligned to their largest exponent, truncated to align_bits.
  struct Part {
    int E;
    Rational value;  // a multiple of 2^(E - align_bits)
  };
  auto group = [&](std::size_t first, std::size_t step, bool zeros_count, Part& out) {
    int E = std::numeric_limits<int>::min();
    for (std::size_t k = first; k < static_cast<std::size_t>(p.products); k += step) {
      if (k < a.size() && a[k] != 0 && b[k] != 0)
        E = std::max(E, exponent_of(a[k], u.input.emin) + exponent_of(b[k], u.input.emin));
      else if (zeros_count) E = std::max(E, -1024);
    }
    if (E == std::numeric_limits<int>::min()) return false;
    E = std::max(E, p.exponent_floor);
    Rational sum = 0;
    for (std::size_t k = first; k < a.size(); k += step) {
      const Rational v = exact_value(a[k]) * exact_value(b[k]);
      sum += Rational(floor_div(v, pow2(E - p.align_bits), true)) * pow2(E - p.align_bits);
    }
    out = {E, sum};
    return true;
  };
  // AddTwoNonNormSums: the smaller-exponent part floored onto the larger's grid (with `extra` more bits when
  // the first is the smaller; truncated instead with `exp_check` beyond 25 binades).
  auto add_two = [&](const Part& x, const Part& y, int bits, int extra, bool exp_check) {
    if (x.E < y.E) {
      const Rational unit = pow2(y.E - bits - extra);
      return Part{y.E, Rational(floor_div(x.value, unit, false)) * unit + y.value};
    }
    if (y.E < x.E) {
      const Rational unit = pow2(x.E - bits);
      return Part{x.E, x.value + Rational(floor_div(y.value, unit, exp_check && y.E < x.E - 25)) * unit};
    }
    return Part{x.E, x.value + y.value};
  };
  Part prod{0, 0};
  if (p.structure == mma::BlockStructure::odd_even) {
    Part even{0, 0}, odd{0, 0};
    group(0, 2, true, even);
    group(1, 2, true, odd);
    prod = add_two(even, odd, p.align_bits, 0, false);
  } else if (!group(0, 1, false, prod)) {
    return c;  // no non-zero product: c
  }
  const Part cp{c != 0 ? exponent_of(c, -126) : -126, exact_value(c)};
  const Part d = add_two(prod, cp, p.align_bits, 7, p.structure == mma::BlockStructure::odd_even);
  return ref_round(d.value, 23, fp32(), mma::FinalRounding::nearest_even);
}

// One block: the rule of unit.hpp, in rationals.
double ref_block(const mma::MatrixUnit& u, const mma::BlockFma& p, const std::vector<double>& a,
                 const std::vector<double>& b, double c, const Format& out) {
  // Specials first.
  bool nan = std::isnan(c), pinf = c == kInf, ninf = c == -kInf;
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (std::isnan(a[k]) || std::isnan(b[k])) {
      nan = true;
      continue;
    }
    if (std::isinf(a[k]) || std::isinf(b[k])) {
      if (a[k] == 0 || b[k] == 0) nan = true;
      else ((std::signbit(a[k]) != std::signbit(b[k])) ? ninf : pinf) = true;
    }
  }
  if (nan || (pinf && ninf)) return kNaN;
  if (pinf) return kInf;
  if (ninf) return -kInf;
  if (p.structure != mma::BlockStructure::aligned) return ref_cdna_block(u, p, a, b, c);
  std::vector<std::pair<Rational, int>> terms;  // (exact value, alignment exponent)
  for (std::size_t k = 0; k < a.size(); ++k) {
    if (a[k] == 0 || b[k] == 0) continue;
    terms.push_back(
        {exact_value(a[k]) * exact_value(b[k]), exponent_of(a[k], u.input.emin) + exponent_of(b[k], u.input.emin)});
  }
  if (c != 0) terms.push_back({exact_value(c), exponent_of(c, -126)});
  if (terms.empty()) return 0.0;
  int E = p.exponent_floor;
  for (const auto& t : terms) E = std::max(E, t.second);
  const Rational unit = pow2(E - p.align_bits);
  BigInt S = 0;
  for (const auto& [v, e] : terms) {
    const Rational q = (v < 0 ? Rational(-v) : v) / unit;
    BigInt t = numerator(q) / denominator(q);
    if (p.sticky && Rational(t) != q) t |= 1;
    S += v < 0 ? BigInt(-t) : t;
  }
  return ref_round(Rational(S) * unit, p.result_bits, out, p.rounding);
}

double ref_add(double x, double y, const Format& out, mma::FinalRounding mode) {
  if (std::isnan(x) || std::isnan(y) || (std::isinf(x) && std::isinf(y) && x != y)) return kNaN;
  if (std::isinf(x)) return x;
  if (std::isinf(y)) return y;
  if (x == 0 && y == 0) return (std::signbit(x) && std::signbit(y)) ? -0.0 : 0.0;
  return ref_round(exact_value(x) + exact_value(y), out.man_bits, out, mode);
}

// The chain along K of unit.hpp: plain blocks with c entering first, or instructions split into groups.
double ref_chain(const mma::MatrixUnit& u, const std::vector<double>& a, const std::vector<double>& b,
                 std::size_t begin, std::size_t end, double acc) {
  const int n = u.block.products;
  if (u.instruction.k == 0) {
    for (std::size_t k0 = begin; k0 < end; k0 += static_cast<std::size_t>(n)) {
      std::vector<double> ba, bb;
      for (std::size_t k = k0; k < std::min(end, k0 + n); ++k) {
        ba.push_back(a[k]);
        bb.push_back(b[k]);
      }
      acc = ref_block(u, u.block, ba, bb, acc, u.output);
    }
    return acc;
  }
  const auto ik = static_cast<std::size_t>(u.instruction.k);
  for (std::size_t i0 = begin; i0 < end; i0 += ik) {
    double partial = 0.0;
    for (int g = 0; g < u.instruction.groups; ++g) {
      std::vector<double> ba, bb;
      for (std::size_t j = 0; j < ik; ++j)
        if (static_cast<int>(j / static_cast<std::size_t>(u.instruction.interleave)) % u.instruction.groups == g &&
            i0 + j < end) {
          ba.push_back(a[i0 + j]);
          bb.push_back(b[i0 + j]);
        }
      partial = ref_block(u, u.block, ba, bb, partial, u.instruction.block_output);
    }
    acc = ref_add(acc, partial, u.output, u.instruction.end_rounding);
  }
  return acc;
}

double ref_dot(const mma::MatrixUnit& u, const std::vector<double>& a, const std::vector<double>& b, double c) {
  if (u.promote_every == 0) return ref_chain(u, a, b, 0, a.size(), c);
  double acc = c;
  for (std::size_t k0 = 0; k0 < a.size(); k0 += static_cast<std::size_t>(u.promote_every))
    acc = ref_add(acc, ref_chain(u, a, b, k0, std::min(a.size(), k0 + u.promote_every), 0.0), u.output,
                  mma::FinalRounding::nearest_even);
  return acc;
}

// Random inputs of a format: raw encodings (every binade, subnormals, NaN/Inf), or values from a narrow
// set of exponents and short significands (ties and cancellation).
struct Generator {
  std::mt19937_64 rng;
  // style 2 keeps |v| below 2^limit_exp (products that stay inside the output's range).
  double value(const Format& f, int style, int limit_exp = 1024) {
    if (style != 1) {  // any encoding: every binade and the subnormals; NaN / Inf kept 1 time in 50 (style 0)
      for (;;) {
        const double v = decode(rng() & f.storage_mask(), f);
        if (style == 2 && std::isfinite(v) && std::fabs(v) >= std::ldexp(1.0, limit_exp)) continue;
        if (std::isfinite(v) || (style == 0 && rng() % 50 == 0)) return v;
      }
    }
    const int e = static_cast<int>(rng() % 6) - 3;
    const double sig = 1.0 + static_cast<double>(rng() % 4) / 4.0;
    const double v = std::ldexp(sig, e) * ((rng() & 1) ? -1.0 : 1.0);
    return decode(round_bits(v, f), f);
  }
};

bool same(double x, double y) {
  if (std::isnan(x) || std::isnan(y)) return std::isnan(x) && std::isnan(y);
  return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
}

// The units both tests run: every GPU generation and structure, fp32 and fp16 output, with and without promotion.
struct UnitCase {
  const char* model;
  const Format* in;
  const Format* out;
  int promote;
};
const UnitCase kUnits[] = {
    {"v100", &fp16(), &fp32(), 0},
    {"v100", &fp16(), &fp16(), 0},
    {"a100", &bf16(), &fp32(), 0},
    {"a100", &tf32(), &fp32(), 0},
    {"ada", &fp8_e4m3(), &fp32(), 0},
    {"ada", &fp8_e5m2(), &fp16(), 0},
    {"l40s", &fp8_e5m2(), &fp32(), 0},
    {"h100", &fp16(), &fp32(), 0},
    {"h100", &fp16(), &fp16(), 0},
    {"h100", &bf16(), &fp32(), 64},
    {"h100", &fp8_e4m3(), &fp32(), 0},
    {"h100", &fp8_e4m3(), &fp32(), 128},
    {"h100", &fp8_e5m2(), &fp16(), 0},
    {"h200", &fp8_e5m2(), &fp16(), 0},
    {"b200", &fp8_e4m3(), &fp32(), 0},
    {"b200", &bf16(), &fp32(), 0},
    {"b200", &tf32(), &fp32(), 0},
    {"exact-fp32", &bf16(), &fp32(), 0},
    {"exact-fp32", &fp16(), &fp32(), 0},
    {"fp16-acc", &fp16(), &fp16(), 0},
    // AMD CDNA (the published models' structures): every structure and input format.
    {"mi100", &fp16(), &fp32(), 0},
    {"mi100", &bf16(), &fp32(), 0},
    {"mi250", &fp16(), &fp32(), 0},
    {"mi250", &bf16(), &fp32(), 0},
    {"mi300x", &fp16(), &fp32(), 0},
    {"mi300x", &bf16(), &fp32(), 64},
    {"mi300x", &tf32(), &fp32(), 0},
    {"mi300x", &fp8_e4m3fnuz(), &fp32(), 0},
    {"mi300x", &fp8_e5m2fnuz(), &fp32(), 0},
};

}  // namespace

TEST_CASE("the model equals the Boost.Multiprecision reference on random tiles", "[mma]") {
  const auto& cases = kUnits;
  Generator gen{std::mt19937_64(20260533)};
  std::size_t total = 0, missed = 0;
  for (const auto& cs : cases) {
    mma::MatrixUnit u = mma::matrix_unit(cs.model, *cs.in, *cs.out);
    u.promote_every = cs.promote;
    std::size_t miss = 0, specials = 0;
    const int trials = 400;
    for (int t = 0; t < trials; ++t) {
      const int style = t % 3;  // 0: wide exponents with a few NaN/Inf, 1: ties and cancellation, 2: wide, finite
      const std::size_t K = 1 + gen.rng() % (cs.promote ? 300 : 70);
      std::vector<double> a(K), b(K);
      for (std::size_t k = 0; k < K; ++k) {
        a[k] = gen.value(*cs.in, style, cs.out->emax / 2 - 4);
        b[k] = gen.value(*cs.in, style, cs.out->emax / 2 - 4);
        if (style == 1 && k % 2 == 1 && (gen.rng() & 1)) {
          a[k] = -a[k - 1];
          b[k] = b[k - 1];
        }  // cancellation
      }
      std::vector<double> c{style != 1 ? gen.value(fp32(), style, cs.out->emax - 4) : gen.value(*cs.out, 1)};
      mma::round_to_format(c, *cs.out);
      const double got = mma::dot(u, a, b, c[0]);
      const double want = ref_dot(u, a, b, c[0]);
      if (std::isnan(want) || std::isinf(want)) ++specials;
      if (!same(got, want)) {
        if (miss == 0) std::printf("    first mismatch: K=%zu model %.17g reference %.17g\n", K, got, want);
        ++miss;
      }
    }
    std::printf("  %-28s promote %-3d %d tiles (%zu NaN/Inf results), %zu mismatches\n", u.name.c_str(), cs.promote,
                trials, specials, miss);
    total += trials;
    missed += miss;
  }
  std::printf("reference: %zu tiles, %zu mismatches\n", total, missed);
  CHECK(missed == 0);
}

TEST_CASE("gemm's integer path equals dot for every element, whatever the thread count", "[mma]") {
  const auto& cases = kUnits;
  Generator gen{std::mt19937_64(7)};
  std::size_t elements = 0, miss = 0;
  for (const auto& cs : cases) {
    mma::MatrixUnit u = mma::matrix_unit(cs.model, *cs.in, *cs.out);
    u.promote_every = cs.promote;
    for (const std::size_t K : {std::size_t{5}, std::size_t{77}, std::size_t{300}}) {
      const std::size_t M = 11, N = 7;
      std::vector<double> A(M * K), B(K * N), C(M * N);
      for (std::size_t i = 0; i < A.size(); ++i) A[i] = gen.value(*cs.in, i % 3 == 0 ? 2 : 1, cs.out->emax / 2 - 4);
      for (std::size_t i = 0; i < B.size(); ++i) B[i] = gen.value(*cs.in, i % 3 == 0 ? 2 : 1, cs.out->emax / 2 - 4);
      for (auto& v : C) v = gen.value(*cs.out, 1);
      A[3 * K + 1] = cs.in->has_inf ? kInf : kNaN;  // row 3: the scalar path for specials
      B[2 * N + 4] = kNaN;                          // column 4
      std::vector<double> D1(M * N), D3(M * N), Ds(M * N);
      mma::gemm(u, M, N, K, A.data(), B.data(), C.data(), D1.data(), 1);
      mma::gemm(u, M, N, K, A.data(), B.data(), C.data(), D3.data(), 3);
      mma::gemm_scalar(u, M, N, K, A.data(), B.data(), C.data(), Ds.data(), 2);
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < N; ++j) {
          std::vector<double> a(A.begin() + static_cast<std::ptrdiff_t>(i * K),
                                A.begin() + static_cast<std::ptrdiff_t>((i + 1) * K)),
              b(K);
          for (std::size_t k = 0; k < K; ++k) b[k] = B[k * N + j];
          const double d = mma::dot(u, a, b, C[i * N + j]);
          const std::size_t e = i * N + j;
          miss += !same(d, D1[e]) + !same(d, D3[e]) + !same(d, Ds[e]);
          ++elements;
        }
    }
  }
  std::printf(
      "gemm (integer path, 1 and 3 threads) and gemm_scalar vs dot: %zu elements over %zu units, %zu mismatches\n",
      elements, std::size(kUnits), miss);
  CHECK(miss == 0);
}

TEST_CASE("unknown models and unsupported formats are errors naming them", "[mma]") {
  CHECK_THROWS_WITH(mma::matrix_unit("h900", fp16(), fp32()), Catch::Contains("known: v100"));
  CHECK_THROWS_WITH(mma::matrix_unit("a100", fp8_e4m3(), fp32()), Catch::Contains("a100"));
  CHECK_THROWS_WITH(mma::matrix_unit("h100", bf16(), fp16()), Catch::Contains("fp16 out only"));
  CHECK_THROWS(mma::matrix_unit("h100", fp32(), fp32()));
  CHECK_THROWS_WITH(mma::matrix_unit("mi300x", fp8_e4m3(), fp32()), Catch::Contains("fp8_e4m3fnuz"));
  CHECK_THROWS_WITH(mma::matrix_unit("mi250", fp16(), fp16()), Catch::Contains("fp32 out only"));
  mma::MatrixUnit pw = mma::matrix_unit("mi250", fp16(), fp32());
  pw.block.products = 6;
  CHECK_THROWS_WITH(mma::validate(pw), Catch::Contains("power of two"));
  // Values outside the input format are refused by dot and gemm (the CLI and Python round them first).
  const mma::MatrixUnit u = mma::matrix_unit("h100", fp8_e4m3(), fp32());
  const std::vector<double> one{1.0};
  CHECK_THROWS_WITH(mma::dot(u, std::vector<double>{1.0625}, one, 0.0), Catch::Contains("not a fp8_e4m3 value"));
  CHECK_THROWS_WITH(mma::dot(u, std::vector<double>{512.0}, one, 0.0), Catch::Contains("512"));
  CHECK_THROWS_WITH(mma::dot(u, std::vector<double>{kInf}, one, 0.0), Catch::Contains("inf"));
  double d = 0;
  const double a2[2] = {1.0, 1.0 + 1.0 / 4096}, b2[2] = {1.0, 1.0};
  CHECK_THROWS_WITH(mma::gemm(mma::matrix_unit("a100", fp16(), fp32()), 1, 1, 2, a2, b2, nullptr, &d),
                    Catch::Contains("not a fp16 value"));
}

TEST_CASE("the published exceptional cases give the published results", "[mma]") {
  // model_validation/ExceptionalCasesTest.m (MATLAB-tensor-core): CustomTC with fma 16, neab 1 (24 alignment
  // bits), final rounding RNE; inputs rounded toward zero (CPFloat round = 4) to the input format.
  auto custom = [](const Format& in, const Format& out) {
    mma::MatrixUnit u = mma::matrix_unit("ada", in, out);  // a unit taking these formats, then the test's parameters
    u.instruction = {};
    u.block.products = 16;
    u.block.align_bits = 24;
    u.block.rounding = mma::FinalRounding::nearest_even;
    u.block.result_bits = out.man_bits;
    return u;
  };
  auto rz = [](double x, const Format& f) {
    return decode(round_bits(x, f, Rounding::of(RoundingMode::toward_zero)), f);
  };
  const double c127 = std::ldexp(1.0, 127);  // 0x7F000000
  const double c113 = std::ldexp(1.0, 113);  // 0x78000000
  struct Case {
    const char* what;
    mma::MatrixUnit unit;
    std::vector<double> a, b;
    double c, want;
  };
  const Case cases[] = {
      {"1: c + a1 b1 overflows to +Inf (bf16 in)", custom(bf16(), fp32()), {rz(c127, bf16())}, {1.0}, c127, kInf},
      {"2: +Inf x -Inf is -Inf, not NaN", custom(bf16(), fp32()), {kInf}, {-kInf}, 0.0, -kInf},
      {"3: +Inf + -Inf is NaN", custom(tf32(), fp32()), {-kInf, kInf}, {1.0, 1.0}, 0.0, kNaN},
      {"4: fp16 accumulation overflows to +Inf",
       custom(fp16(), fp16()),
       {rz(c113, fp16()), rz(c113, fp16())},
       {1.0, 1.0},
       0.0,
       kInf},
      {"5: fp16 accumulation overflows to -Inf",
       custom(fp16(), fp16()),
       {rz(-c113, fp16()), rz(-c113, fp16())},
       {1.0, 1.0},
       0.0,
       -kInf},
      {"6: fp8 e5m2 in, fp16 out overflows to +Inf",
       custom(fp8_e5m2(), fp16()),
       {rz(c113, fp8_e5m2()), rz(c113, fp8_e5m2())},
       {1.0, 1.0},
       0.0,
       kInf},
      {"7: fp8 e5m2 in, fp16 out overflows to -Inf",
       custom(fp8_e5m2(), fp16()),
       {rz(c113, fp8_e5m2()), rz(c113, fp8_e5m2())},
       {-1.0, -1.0},
       0.0,
       -kInf},
  };
  int passed = 0;
  for (const auto& cs : cases) {
    const double got = mma::dot(cs.unit, cs.a, cs.b, cs.c);
    INFO(cs.what << ": got " << got);
    CHECK(same(got, cs.want));
    // The named units give the same answers (H100 fp8 with fp16 output through its two-block structure).
    passed += same(got, cs.want);
  }
  CHECK(same(mma::dot(mma::matrix_unit("h100", fp8_e5m2(), fp16()), std::vector<double>{57344.0, 57344.0},
                      std::vector<double>{1.0, 1.0}, 0.0),
             kInf));
  std::printf("ExceptionalCasesTest.m: %d of 7 cases as published\n", passed);
}

TEST_CASE("the AVX2 block kernel equals the scalar lanes", "[mma]") {
  if (!mpsim::cpu_features().avx2) {
    WARN("no AVX2 on this machine: the AVX2 kernel is not run");
    return;
  }
  std::mt19937_64 rng(11);
  std::size_t blocks = 0, miss = 0;
  for (int t = 0; t < 20000; ++t) {
    const int n = 8 * static_cast<int>(1 + rng() % 4);
    const int lshift = static_cast<int>(rng() % 20);  // used % 4: 32 lanes of (2^22 << 3) stay inside int32
    std::int32_t sa[32], ea[32], sb[32], eb[32];
    for (int j = 0; j < n; ++j) {
      // significands up to 11 bits with signs and zeros; exponents spread so that shifts pass 31
      sa[j] = static_cast<std::int32_t>(rng() % 2048) * ((rng() & 1) ? -1 : 1) * (rng() % 8 != 0);
      sb[j] = static_cast<std::int32_t>(rng() % 2048) * ((rng() & 1) ? -1 : 1);
      ea[j] = rng() % 16 == 0 ? -(1 << 20) : static_cast<std::int32_t>(rng() % 80) - 40;
      eb[j] = static_cast<std::int32_t>(rng() % 80) - 40;
    }
    const auto E0 = static_cast<std::int32_t>(rng() % 200) - 150;
    std::int32_t s1 = 0, s2 = 0;
    const std::int32_t e1 = mma::detail::block_lanes_avx2(sa, ea, sb, eb, n, E0, lshift % 4, &s1);
    const std::int32_t e2 = mma::detail::block_lanes_scalar(sa, ea, sb, eb, n, E0, lshift % 4, &s2);
    miss += e1 != e2 || s1 != s2;
    ++blocks;
  }
  std::printf("AVX2 block kernel vs scalar lanes: %zu blocks, %zu mismatches\n", blocks, miss);
  CHECK(miss == 0);
}
