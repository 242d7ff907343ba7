// Tests of the scaling recipes as precision policies (lib/mpsim/nn/policy.hpp, matmul.hpp): parse_policy takes
// a recipe spec; the layers' GEMMs under it equal, bit for bit, the plain fp32 product of operands quantized
// here by a separate recipe::Quantizer in the roles the layer gives them (linear: fprop x / w, dgrad dy / w,
// wgrad dy / x; conv2d through im2col; lstm's two weights); Stats land at "<layer>/<role>" sites.
#include "catch_compat.hpp"

#include <bit>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/nn/conv2d.hpp"
#include "mpsim/nn/linear.hpp"
#include "mpsim/nn/lstm.hpp"
#include "mpsim/nn/policy.hpp"

using namespace mpsim;
using namespace mpsim::nn;

namespace {

std::vector<float> randn(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (auto& x : v) x = d(g) * scale;
  return v;
}

std::vector<float> transpose(const std::vector<float>& a, std::size_t rows, std::size_t cols) {
  std::vector<float> t(a.size());
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  return t;
}

std::size_t differ(const std::vector<float>& a, const std::vector<float>& b) {
  std::size_t m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    m += std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i]);
  return m;
}

// out (M, N) = a (M, K) b (N, K)^T in fp32 through the layers' own plain product.
std::vector<float> product(const std::vector<float>& a, const std::vector<float>& b, int M, int N, int K) {
  std::vector<float> out(static_cast<std::size_t>(M) * N);
  matmul(MatMap<float>(out.data(), M, N), CMatMap<float>(a.data(), M, K), CMatMap<float>(b.data(), N, K).transpose(),
         static_cast<const Format*>(nullptr));
  return out;
}

}  // namespace

TEST_CASE("recipe policies parse, describe themselves and refuse bad options by name", "[recipe_policy]") {
  const PrecisionPolicy p = parse_policy("fp8-tensorwise-delayed:amax_history_len=16");
  REQUIRE(p.recipe);
  CHECK(p.name == p.recipe->spec);
  CHECK(!p.matmul_input);  // operands are quantized inside the GEMMs; everything else stays fp32
  CHECK(!p.activation_grad);
  CHECK(p.describe().find("recipe=fp8-tensorwise-delayed:fp8_format=HYBRID") != std::string::npos);
  try {
    parse_policy("mxfp4:amax_history_len=3");
    FAIL("accepted an option mxfp4 does not take");
  } catch (const Error& e) {
    std::printf("refused: %s\n", e.what());
    CHECK(std::string(e.what()).find("does not take option 'amax_history_len'") != std::string::npos);
  }
  try {
    parse_policy("fp9-rowwise");
    FAIL("accepted an unknown policy");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("fp8-rowwise") != std::string::npos);  // the recipes are listed
  }
}

TEST_CASE("a linear layer's three GEMMs under a recipe quantize their operands by role", "[recipe_policy]") {
  const int N = 24, C = 40, OC = 36;  // C and OC not multiples of 32 / 16 / 128: short last blocks
  const auto x = randn(static_cast<std::size_t>(N) * C, 1), w = randn(static_cast<std::size_t>(OC) * C, 2, 0.1f);
  const auto dy = randn(static_cast<std::size_t>(N) * OC, 3, 1e-6f);
  for (const char* spec : {"fp8-tensorwise-current", "fp8-rowwise", "fp8-rowwise-gw-hp", "fp8-blockwise:block=16",
                           "mxfp8", "mxfp4", "nvfp4", "fp8-none"}) {
    Precision prec(parse_policy(spec));
    std::vector<float> y(static_cast<std::size_t>(N) * OC), dx(static_cast<std::size_t>(N) * C), dw(w.size()), db(OC);
    linear_forward(y.data(), x.data(), w.data(), static_cast<const float*>(nullptr), N, C, OC, prec.gemm("fc"));
    linear_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), N, C, OC, prec.gemm("fc"));
    // The reference: the same recipe, its own quantizer, the operands laid out as rows along K by hand.
    recipe::Quantizer q(recipe::parse_recipe(spec));
    using recipe::Role;
    auto quant = [&](Role r, const std::vector<float>& a, std::size_t rows, std::size_t cols) {
      return q.quantize("fc", r, a, rows, cols).values;
    };
    const auto y_ref = product(quant(Role::fprop_x, x, N, C), quant(Role::fprop_w, w, OC, C), N, OC, C);
    const auto dx_ref =
        product(quant(Role::dgrad_dy, dy, N, OC), quant(Role::dgrad_w, transpose(w, OC, C), C, OC), N, C, OC);
    const auto dw_ref = product(quant(Role::wgrad_dy, transpose(dy, N, OC), OC, N),
                                quant(Role::wgrad_x, transpose(x, N, C), C, N), OC, C, N);
    const std::size_t bad = differ(y, y_ref) + differ(dx, dx_ref) + differ(dw, dw_ref);
    const Stats& s = prec.site_stats().at("fc/dgrad_dy");
    std::printf("%s: %zu outputs of fprop, dgrad and wgrad compared, %zu differ; fc/dgrad_dy %llu of %llu flushed\n",
                prec.policy().name.c_str(), y.size() + dx.size() + dw.size(), bad,
                static_cast<unsigned long long>(s.underflow), static_cast<unsigned long long>(s.count));
    CHECK(bad == 0);
    CHECK(s.count == dy.size());
    CHECK(prec.site_stats().count("fc/wgrad_x") == (std::string(spec) != "fp8-rowwise-gw-hp"));
  }
}

TEST_CASE("conv2d and lstm GEMMs under a recipe see their operands by role", "[recipe_policy]") {
  // conv2d's forward GEMM: w (OC, C*K*K) as fprop_w, im2col(x)^T as fprop_x.
  const Conv2dShape s{2, 3, 6, 6, 5, 3, 1, 1};
  const auto x = randn(static_cast<std::size_t>(s.in_size()), 4),
             w = randn(static_cast<std::size_t>(s.weight_size()), 5);
  Precision prec(parse_policy("mxfp8"));
  std::vector<float> out(static_cast<std::size_t>(s.out_size()));
  conv2d_forward(out.data(), x.data(), w.data(), static_cast<const float*>(nullptr), s, prec.gemm("conv"));
  const int krows = s.C * s.K * s.K, ncols = s.B * s.OH() * s.OW();
  std::vector<float> col(static_cast<std::size_t>(krows) * ncols);
  im2col(col.data(), x.data(), s);
  recipe::Quantizer q(recipe::parse_recipe("mxfp8"));
  const auto prod = product(
      q.quantize("conv", recipe::Role::fprop_w, w, s.OC, krows).values,
      q.quantize("conv", recipe::Role::fprop_x, transpose(col, krows, ncols), ncols, krows).values, s.OC, ncols, krows);
  std::vector<float> ref(out.size());
  const int P = s.OH() * s.OW();
  for (int b = 0; b < s.B; ++b)
    for (int oc = 0; oc < s.OC; ++oc)
      for (int p = 0; p < P; ++p) ref[(static_cast<std::size_t>(b) * s.OC + oc) * P + p] = prod[oc * ncols + b * P + p];
  std::printf("conv2d under mxfp8: %zu outputs compared, %zu differ\n", out.size(), differ(out, ref));
  CHECK(differ(out, ref) == 0);
  // lstm: the input and recurrent weights are separate layers "lstm/ih" and "lstm/hh" with their own sites.
  const LstmShape ls{3, 2, 8, 4};
  const auto lx = randn(static_cast<std::size_t>(ls.T * ls.B * ls.I), 6),
             wih = randn(static_cast<std::size_t>(16 * ls.I), 7), whh = randn(static_cast<std::size_t>(16 * ls.H), 8),
             bias = randn(16, 9);
  LstmCache<float> cache;
  std::vector<float> h(static_cast<std::size_t>(ls.T * ls.B * ls.H));
  Precision lp(parse_policy("fp8-tensorwise-delayed"));
  lstm_forward(h.data(), cache, lx.data(), wih.data(), whh.data(), bias.data(), ls, NoHook{}, lp.gemm("lstm"));
  CHECK(lp.site_stats().at("lstm/ih/fprop_x").count == lx.size());
  CHECK(lp.site_stats().at("lstm/hh/fprop_w").count == whh.size() * ls.T);  // once per time step
  CHECK(lp.quantizer()->delayed_state().count("lstm/hh/w") == 1);
}
