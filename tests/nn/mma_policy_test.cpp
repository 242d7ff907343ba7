// The matrix-unit option of the precision policy (nn/policy.hpp keys mma, mma_promote*; nn/matmul.hpp
// mma_matmul): parsing and refusals naming the key, and a linear layer's three GEMMs under mma=h100 equal
// mma::gemm (lib/mpsim/mma/dot.hpp) on the same operands bit for bit, with and without promotion, and
// under an fp8 recipe with its scales taken out and put back.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/format/format.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/mma/dot.hpp"
#include "mpsim/nn/conv2d.hpp"
#include "mpsim/nn/linear.hpp"
#include "mpsim/nn/policy.hpp"
#include "mpsim/recipe/recipe.hpp"

using namespace mpsim;
using namespace mpsim::nn;

namespace {

// Random values of `fmt` (normal range, a spread of 2^-6..2^6), as floats.
std::vector<float> random_in(const Format& fmt, std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> mag(0.0, 3.0);
  std::uniform_int_distribution<int> sign(0, 1);
  std::vector<float> v(n);
  for (auto& x : v) {
    const double d = std::ldexp(1.0 + std::fabs(std::fmod(mag(gen), 1.0)), static_cast<int>(mag(gen)) % 6);
    x = static_cast<float>(round(sign(gen) ? -d : d, fmt, Rounding{}));
  }
  return v;
}

// D (M x N) = A (M x K, row-major) times B given as Bt (N x K, row-major), through mma::gemm directly.
std::vector<float> unit_gemm(const mma::MatrixUnit& u, const std::vector<float>& A, const std::vector<float>& Bt,
                             std::size_t M, std::size_t N, std::size_t K) {
  std::vector<double> a(A.begin(), A.end()), b(K * N), d(M * N);
  for (std::size_t j = 0; j < N; ++j)
    for (std::size_t k = 0; k < K; ++k) b[k * N + j] = Bt[j * K + k];
  mma::gemm(u, M, N, K, a.data(), b.data(), nullptr, d.data(), 1);
  return std::vector<float>(d.begin(), d.end());
}

std::vector<float> transpose(const std::vector<float>& x, std::size_t rows, std::size_t cols) {
  std::vector<float> t(x.size());
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

int bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  int n = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    n += std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]);
  return n;
}

void refused(const std::string& spec, const std::string& names) {
  INFO("spec " << spec);
  try {
    parse_policy(spec);
    FAIL("accepted " << spec);
  } catch (const Error& e) {
    const std::string what = e.what();
    std::printf("refused %-52s %s\n", spec.c_str(), what.c_str());
    CHECK(what.find(names) != std::string::npos);
  }
}

}  // namespace

TEST_CASE("mma policy keys parse; bad values are refused naming the key", "[mma_policy_test]") {
  const PrecisionPolicy a = parse_policy("mixed-fp16:mma=h100");
  REQUIRE(a.mma);
  CHECK(a.mma->model == "h100");
  CHECK(a.mma->input == fp16());
  CHECK(a.mma->promote_fprop == 0);
  CHECK(a.matmul_input == fp16());
  CHECK(a.name == "mixed-fp16:mma=h100");
  const PrecisionPolicy b = parse_policy("mixed-bf16:mma=b200,mma_promote=128");
  CHECK(b.mma->input == bf16());
  CHECK(b.mma->promote_fprop == 128);
  CHECK(b.mma->promote_grad == 128);
  const PrecisionPolicy c = parse_policy("custom:matmul=fp16,act_grad=fp16,mma=a100,mma_promote_grad=64");
  CHECK(c.mma->model == "a100");
  CHECK(c.mma->promote_fprop == 0);
  CHECK(c.mma->promote_grad == 64);
  // The recipe keeps its own options; the mma keys are taken out before recipe::parse_recipe sees them.
  const PrecisionPolicy d = parse_policy("fp8-tensorwise-delayed:mma=h100,margin=1,mma_promote_grad=128");
  REQUIRE(d.recipe);
  CHECK(d.recipe->margin == 1);
  CHECK(d.mma->promote_grad == 128);
  CHECK(d.mma->promote_fprop == 0);
  CHECK(d.name == d.recipe->spec + ",mma=h100,mma_promote_fprop=0,mma_promote_grad=128");
  CHECK(parse_policy(d.name).describe() == d.describe());  // the canonical name parses back to the same policy
  CHECK(parse_policy("fp8-rowwise:mma=h200").mma->model == "h200");
  CHECK(!parse_policy("mixed-fp16").mma);
  CHECK(parse_policy("mixed-fp16:mma=h100").describe().find("mma=h100") != std::string::npos);

  refused("mixed-fp16:mma=h900", "mma: unknown model 'h900'");
  refused("mixed-fp16:mma=h100,mma_promote=100", "mma_promote");  // not a multiple of the block of 16
  refused("mixed-fp16:mma=h100,mma_promote=-128", "mma_promote");
  refused("mixed-fp16:mma=h100,mma_promote_fprop=x", "mma_promote_fprop");
  refused("mixed-fp16:mma_promote=128", "mma_promote needs mma");
  refused("mixed-fp16:matmul=bf16", "'matmul'");
  refused("mixed-fp16:", "nothing after ':'");
  refused("mixed-fp16-acc16:mma=h100", "accumulate");
  refused("fp32:mma=h100", "matmul_input");
  refused("mixed-bf16:mma=v100", "mma=v100");  // V100 has no bf16 input
  refused("fp8-blockwise:mma=h100", "fp8-blockwise");
  refused("mxfp8:mma=h100", "mxfp8");
  refused("fp8-rowwise-gw-hp:mma=h100", "wgrad");
  refused("fp8-tensorwise-delayed:mma=h100,bogus=1", "bogus");
}

TEST_CASE("linear GEMMs under mma=h100 equal mma::gemm bit for bit", "[mma_policy_test]") {
  const int N = 24, C = 200, OC = 40;  // K = 200, 24 and 200: blocks of 16 with ragged ends
  const auto inp = random_in(fp16(), N * C, 1), weight = random_in(fp16(), OC * C, 2),
             dout = random_in(fp16(), N * OC, 3);
  for (const char* spec :
       {"mixed-fp16:mma=h100", "mixed-fp16:mma=h100,mma_promote=32", "mixed-fp16:mma=v100", "mixed-fp16:mma=mi300x"}) {
    Precision prec(parse_policy(spec));
    const MmaOptions& o = *prec.policy().mma;
    mma::MatrixUnit fprop = mma::matrix_unit(o.model, fp16(), fp32()), grad = fprop;
    fprop.promote_every = o.promote_fprop;
    grad.promote_every = o.promote_grad;
    std::vector<float> out(N * OC), dinp(N * C), dw(OC * C);
    linear_forward(out.data(), inp.data(), weight.data(), static_cast<const float*>(nullptr), N, C, OC,
                   prec.gemm("fc"));
    linear_backward(dinp.data(), dw.data(), static_cast<float*>(nullptr), dout.data(), inp.data(), weight.data(), N, C,
                    OC, prec.gemm("fc"));
    // y = x w^T; dx = dy w; dw = dy^T x (the B operand passed as its transpose, N x K).
    const int m1 = bit_mismatches(out, unit_gemm(fprop, inp, weight, N, OC, C));
    const int m2 = bit_mismatches(dinp, unit_gemm(grad, dout, transpose(weight, OC, C), N, C, OC));
    const int m3 = bit_mismatches(dw, unit_gemm(grad, transpose(dout, N, OC), transpose(inp, N, C), OC, C, N));
    // Eigen's fp32 product of the same operands, for scale: how many outputs the unit's adds changed.
    int differ = 0;
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < OC; ++j) {
        float s = 0;
        for (int k = 0; k < C; ++k) s += inp[i * C + k] * weight[j * C + k];
        differ += s != out[i * OC + j];
      }
    std::printf(
        "%-36s fprop %d, dgrad %d, wgrad %d outputs: bit mismatches %d %d %d; fprop outputs differing from a "
        "sequential fp32 sum: %d\n",
        spec, N * OC, N * C, OC * C, m1, m2, m3, differ);
    CHECK(m1 == 0);
    CHECK(m2 == 0);
    CHECK(m3 == 0);
  }
}

TEST_CASE("the unit's truncation shows in a linear layer; promotion every 128 recovers it", "[mma_policy_test]") {
  // One product 1 * 1024 and K - 1 products 2^-8 * 2^-8 = 2^-16. H100's fp16 unit keeps 25 bits below the
  // block's largest exponent (10, the accumulator's): terms below 2^-15 are truncated to zero, so the
  // chain stays at 1024. Exactly, the sum is 1024 + 4095 * 2^-16. Promoted every 128: the first 128
  // give 1024, each of the other 31 chunks sums 128 * 2^-16 = 2^-9 exactly (all terms of one exponent),
  // and the fp32 accumulator holds 1024 + 31 * 2^-9 exactly (its ulp at 1024 is 2^-13).
  const int K = 4096;
  std::vector<float> x(K, std::ldexp(1.0f, -8)), w(K, std::ldexp(1.0f, -8));
  x[0] = 1.0f;
  w[0] = 1024.0f;
  float fast = 0, promoted = 0, plain = 0;
  Precision p_fast(parse_policy("mixed-fp16:mma=h100")), p_prom(parse_policy("mixed-fp16:mma=h100,mma_promote=128")),
      p_plain(parse_policy("mixed-fp16"));
  linear_forward(&fast, x.data(), w.data(), static_cast<const float*>(nullptr), 1, K, 1, p_fast.gemm("fc"));
  linear_forward(&promoted, x.data(), w.data(), static_cast<const float*>(nullptr), 1, K, 1, p_prom.gemm("fc"));
  linear_forward(&plain, x.data(), w.data(), static_cast<const float*>(nullptr), 1, K, 1, p_plain.gemm("fc"));
  mma::MatrixUnit u = mma::matrix_unit("h100", fp16(), fp32());
  u.promote_every = 128;
  const float own = unit_gemm(u, x, w, 1, 1, K)[0];
  std::printf(
      "K=%d: fast %.10g (expected 1024), promoted %.10g (expected %.10g, unit's own %.10g), fp32 %.10g "
      "(exact %.10g)\n",
      K, fast, promoted, 1024 + 31 * std::ldexp(1.0, -9), own, plain, 1024 + 4095 * std::ldexp(1.0, -16));
  CHECK(fast == 1024.0f);
  CHECK(promoted == static_cast<float>(1024 + 31 * std::ldexp(1.0, -9)));
  CHECK(std::bit_cast<std::uint32_t>(promoted) == std::bit_cast<std::uint32_t>(own));
  CHECK(std::fabs(plain - (1024 + 4095 * std::ldexp(1.0, -16))) < std::ldexp(1.0, -6));  // Eigen's fp32 order
  CHECK(plain != fast);
}

TEST_CASE("under an fp8 recipe the unit multiplies the scaled fp8 values and the scales come off after",
          "[mma_policy_test]") {
  const int N = 16, C = 96, OC = 32;
  std::mt19937 gen(5);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::vector<float> inp(N * C), weight(OC * C), dout(N * OC);
  for (auto* v : {&inp, &weight, &dout})
    for (auto& x : *v) x = nd(gen);
  for (const char* spec : {"fp8-tensorwise-current:mma=h100", "fp8-rowwise:mma=h100,mma_promote=64"}) {
    Precision prec(parse_policy(spec));
    std::vector<float> out(N * OC), dinp(N * C);
    linear_forward(out.data(), inp.data(), weight.data(), static_cast<const float*>(nullptr), N, C, OC,
                   prec.gemm("fc"));
    linear_backward(dinp.data(), static_cast<float*>(nullptr), static_cast<float*>(nullptr), dout.data(), inp.data(),
                    weight.data(), N, C, OC, prec.gemm("fc"));
    // Independently: a fresh Quantizer of the same recipe gives the scales; q = round(x * scale) in the
    // saturating fp8 format (recipe.hpp: the values multiplied), computed here from the unquantized
    // operands; the unit adds the q, and d / (scale_a * scale_b) is the output. e4m3 x e5m2 (HYBRID's dgrad)
    // runs on the e4m3 unit reading both through e5m3, which holds both exactly (nn/mma_gemm.cpp).
    recipe::Quantizer qz(*prec.policy().recipe);
    const int promote_f = prec.policy().mma->promote_fprop, promote_g = prec.policy().mma->promote_grad;
    int needed_rounding = 0;  // q whose value q / scale, times scale, is not q again (rounded back by the GEMM)
    auto reference = [&](recipe::Role ra, recipe::Role rb, const std::vector<float>& A, const std::vector<float>& Bt,
                         std::size_t M, std::size_t Nn, std::size_t K, int promote) {
      const auto qa = qz.quantize("fc", ra, A, M, K), qb = qz.quantize("fc", rb, Bt, Nn, K);
      const Format& fa = recipe::operand_of(ra) == recipe::Operand::dy ? qz.recipe().backward : qz.recipe().forward;
      const Format& fb = recipe::operand_of(rb) == recipe::Operand::dy ? qz.recipe().backward : qz.recipe().forward;
      auto sc = [](const recipe::QuantizedOperand& q, std::size_t r) {
        return q.scales.size() == 1 ? q.scales[0] : q.scales[r];
      };
      auto q_of = [&](float x, double s, const Format& f) {
        return round(static_cast<double>(x * static_cast<float>(s)),
                     with_options(f, Subnormals::keep, Overflow::saturate), Rounding{});
      };
      std::vector<double> a(M * K), b(K * Nn), d(M * Nn);
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t k = 0; k < K; ++k) {
          a[i * K + k] = q_of(A[i * K + k], sc(qa, i), fa);
          needed_rounding += double(qa.values[i * K + k]) * sc(qa, i) != a[i * K + k];
        }
      for (std::size_t j = 0; j < Nn; ++j)
        for (std::size_t k = 0; k < K; ++k) {
          b[k * Nn + j] = q_of(Bt[j * K + k], sc(qb, j), fb);
          needed_rounding += double(qb.values[j * K + k]) * sc(qb, j) != b[k * Nn + j];
        }
      mma::MatrixUnit u = mma::matrix_unit("h100", fp8_e4m3(), fp32());
      if (!(fa == fb)) u.input = make_format("e5m3", 5, 3, 15);
      else u = mma::matrix_unit("h100", fa, fp32());
      u.promote_every = promote;
      mma::gemm(u, M, Nn, K, a.data(), b.data(), nullptr, d.data(), 1);
      std::vector<float> out(M * Nn);
      for (std::size_t i = 0; i < M; ++i)
        for (std::size_t j = 0; j < Nn; ++j)
          out[i * Nn + j] = static_cast<float>(d[i * Nn + j] / (sc(qa, i) * sc(qb, j)));
      return out;
    };
    const int m1 =
        bit_mismatches(out, reference(recipe::Role::fprop_x, recipe::Role::fprop_w, inp, weight, N, OC, C, promote_f));
    const int m2 = bit_mismatches(dinp, reference(recipe::Role::dgrad_dy, recipe::Role::dgrad_w, dout,
                                                  transpose(weight, OC, C), N, C, OC, promote_g));
    double worst = 0;  // how far the fp8 GEMM is from the fp32 product of the unquantized operands, for scale
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < OC; ++j) {
        double s = 0;
        for (int k = 0; k < C; ++k) s += double(inp[i * C + k]) * weight[j * C + k];
        worst = std::max(worst, std::fabs(out[i * OC + j] - s));
      }
    std::printf(
        "%-40s fprop %d outputs, %d bit mismatches; dgrad (%s x %s) %d outputs, %d mismatches; q not "
        "recovered by value * scale alone: %d; worst |fp8 unit - fp64 unquantized| %.3g\n",
        spec, N * OC, m1, qz.recipe().backward.name.c_str(), qz.recipe().forward.name.c_str(), N * C, m2,
        needed_rounding, worst);
    CHECK(m1 == 0);
    CHECK(m2 == 0);
  }
}

TEST_CASE("conv2d's im2col GEMM under mma=a100 equals mma::gemm bit for bit", "[mma_policy_test]") {
  // Forward: w (OC, C*K*K) times im2col(x) (C*K*K, B*OH*OW); K = 4 * 9 = 36 (blocks of 8, a ragged end).
  const Conv2dShape s{2, 4, 6, 6, 5, 3, 1, 1};
  const auto x = random_in(bf16(), static_cast<std::size_t>(s.in_size()), 7);
  const auto w = random_in(bf16(), static_cast<std::size_t>(s.weight_size()), 8);
  Precision prec(parse_policy("mixed-bf16:mma=a100"));
  std::vector<float> out(static_cast<std::size_t>(s.out_size()));
  conv2d_forward(out.data(), x.data(), w.data(), static_cast<const float*>(nullptr), s, prec.gemm("conv"));
  const int krows = s.C * s.K * s.K, ncols = s.B * s.OH() * s.OW(), P = s.OH() * s.OW();
  std::vector<float> col(static_cast<std::size_t>(krows) * ncols);
  im2col(col.data(), x.data(), s);
  const auto prod =
      unit_gemm(mma::matrix_unit("a100", bf16(), fp32()), w, transpose(col, krows, ncols), s.OC, ncols, krows);
  std::vector<float> ref(out.size());
  for (int b = 0; b < s.B; ++b)
    for (int oc = 0; oc < s.OC; ++oc)
      for (int p = 0; p < P; ++p) ref[(b * s.OC + oc) * P + p] = prod[oc * ncols + b * P + p];
  const int m = bit_mismatches(out, ref);
  std::printf("conv2d under mixed-bf16:mma=a100: %zu outputs, %d bit mismatches\n", out.size(), m);
  CHECK(m == 0);
}

TEST_CASE("a reused B decoding gives the bits of a fresh one, and a changed B is decoded again", "[mma_policy_test]") {
  // mma_matmul keeps the decoding of recent B operands (the lstm's recurrent weight at every time step, keyed by
  // the bits). Time steps: the same Bt with a new A each call; then Bt changed in place (an optimiser step on the
  // same buffer), then the promotion changed. Every output against mma::gemm on the same operands, with the reuse
  // on and off.
  const std::size_t M = 16, N = 64, K = 48;
  MmaOptions o;
  o.model = "h100";
  o.input = fp16();
  o.promote_grad = 16;
  OperandScales s;
  s.format = fp16();
  std::vector<float> Bt = random_in(fp16(), N * K, 7);
  int calls = 0, mismatches = 0;
  for (const bool reuse : {true, false}) {
    set_mma_operand_reuse(reuse);
    for (int step = 0; step < 3; ++step) {
      if (step == 1) Bt[5] = -Bt[5];  // the weight changes where it lies
      const bool grad = step == 2;    // a unit with promotion every 16: another decoding key
      mma::MatrixUnit u = mma::matrix_unit("h100", fp16(), fp32());
      u.promote_every = grad ? 16 : 0;
      for (int t = 0; t < 4; ++t) {
        const auto A = random_in(fp16(), M * K, static_cast<std::uint32_t>(100 + 10 * step + t));
        std::vector<float> D(M * N);
        mma_matmul(D.data(), A.data(), Bt.data(), M, N, K, o, grad, s, s);
        mismatches += bit_mismatches(D, unit_gemm(u, A, Bt, M, N, K));
        ++calls;
      }
    }
  }
  set_mma_operand_reuse(true);
  std::printf("reused and fresh B decodings: %d calls of %zu outputs, %d mismatches against mma::gemm\n", calls, M * N,
              mismatches);
  CHECK(mismatches == 0);
  // Operands not in the format are rounded to nearest-even first (the bulk engine inside mma_matmul): the same
  // bits as mma::gemm on values rounded one by one with the scalar round().
  std::mt19937 gen(3);
  std::normal_distribution<float> nd(0.0f, 2.0f);
  std::vector<float> A(M * K), Braw(N * K), Ar(M * K), Br(N * K);
  int changed = 0;
  for (std::size_t i = 0; i < A.size(); ++i) {
    A[i] = nd(gen);
    Ar[i] = static_cast<float>(round(static_cast<double>(A[i]), fp16(), Rounding{}));
    changed += Ar[i] != A[i];
  }
  for (std::size_t i = 0; i < Braw.size(); ++i)
    Br[i] = static_cast<float>(round(static_cast<double>(Braw[i] = nd(gen)), fp16(), Rounding{}));
  std::vector<float> D(M * N);
  mma_matmul(D.data(), A.data(), Braw.data(), M, N, K, o, false, s, s);
  const int raw_miss = bit_mismatches(D, unit_gemm(mma::matrix_unit("h100", fp16(), fp32()), Ar, Br, M, N, K));
  std::printf("operands rounded inside mma_matmul (%d of %zu A values changed): %d mismatches of %zu outputs\n",
              changed, A.size(), raw_miss, M * N);
  CHECK(changed > 0);
  CHECK(raw_miss == 0);
}
