// Tests of lib/mpsim/recipe/recipe.hpp against short references written here from the recipes' published
// formulas, where no reference runs on the CPU (torchao's float8, MX and NVFP4 quantizers are compared in
// tests/python/test_recipes_torchao.py): TE's delayed scaling (transformer_engine/common/recipe/
// delayed_scaling.cu lines 91-153), TE's block scales (recipe_common.cuh lines 14-49) on 1x128 / 128x128 tiles
// (DeepSeek-V3 section 3.3), nvfp4's 16x16 2D tiles and the 16x16 random Hadamard transform (TE
// reference_nvfp4.py lines 335-448). Element casts go through the scalar specification round(), which
// tests/format checks against ml_dtypes and Boost.Multiprecision. Every test prints what it compared.
#include "catch_compat.hpp"

#include <bit>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>
#include <random>
#include <string_view>

#include "mpsim/error.hpp"
#include "mpsim/recipe/recipe.hpp"

using namespace mpsim;
using namespace mpsim::recipe;

namespace {

// Gaussian values times 2^U(lo, hi), an outlier, a run of zeros and float32 subnormals.
std::vector<float> operand(std::size_t rows, std::size_t cols, std::uint64_t seed, int lo = -20, int hi = 4) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d;
  std::uniform_int_distribution<int> e(lo, hi);
  std::vector<float> x(rows * cols);
  for (auto& v : x) v = std::ldexp(d(g), e(g));
  if (x.size() > 300) {
    x[7] = 3.0e4f;                                        // outlier
    for (std::size_t i = 200; i < 300; ++i) x[i] = 0.0f;  // zeros
    x[150] = std::bit_cast<float>(0x00000123u);           // float32 subnormals
    x[151] = -std::bit_cast<float>(0x00400000u);
  }
  return x;
}

bool same_bits(float a, float b) { return std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b); }

std::size_t mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  std::size_t m = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same_bits(a[i], b[i]) && !(std::isnan(a[i]) && std::isnan(b[i]))) ++m;
  return m;
}

Format sat(const Format& f) { return with_options(f, Subnormals::keep, Overflow::saturate); }

// q = sat_round(x * s) / s, the cast every fp8 recipe applies (torchao float8_training_tensor.py 153-154, 205).
float cast(float x, float s, const Format& f) { return round(x * s, sat(f)) / s; }

// Relative error of the GEMM a (m x k) b^T (n x k) computed from quantized operands against the exact one.
double gemm_error(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& qa,
                  const std::vector<float>& qb, std::size_t m, std::size_t n, std::size_t k) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      double e = 0, q = 0;
      for (std::size_t t = 0; t < k; ++t) {
        e += static_cast<double>(a[i * k + t]) * b[j * k + t];
        q += static_cast<double>(qa[i * k + t]) * qb[j * k + t];
      }
      num += (q - e) * (q - e);
      den += e * e;
    }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("recipes parse by their sources' names and refuse the rest by name", "[recipe]") {
  for (auto name : recipe_names()) {
    const Recipe r = parse_recipe(name);
    CHECK(r.name == name);
    CHECK(parse_recipe(r.spec).spec == r.spec);  // the canonical spec round-trips
    std::printf("recipe %s\n", r.spec.c_str());
  }
  const Recipe d = parse_recipe(
      "fp8-tensorwise-delayed:fp8_format=E4M3,margin=2,amax_history_len=16,"
      "amax_compute_algo=most_recent");
  CHECK(d.backward.name == fp8_e4m3().name);
  CHECK(d.margin == 2);
  CHECK(d.amax_history_len == 16);
  CHECK(!d.amax_compute_max);
  CHECK(parse_recipe("mxfp8:scaling_mode=rceil,fp8_format=HYBRID").block_backward.name == "mxfp8_e5m2");
  CHECK(parse_recipe("mxfp8:scaling_mode=rceil,fp8_format=HYBRID").block_backward.rule == BlockScaleRule::rceil);
  auto message = [](std::string_view spec) {
    try {
      parse_recipe(spec);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string unknown = message("fp8-magic");
  CHECK(unknown.find("unknown recipe 'fp8-magic'") != std::string::npos);
  CHECK(unknown.find("fp8-tensorwise-delayed") != std::string::npos);
  CHECK(unknown.find("nvfp4") != std::string::npos);
  const std::string refused = message("fp8-rowwise:margin=1");
  CHECK(refused.find("does not take option 'margin'") != std::string::npos);
  CHECK(message("mxfp4:fp8_format=HYBRID").find("does not take option 'fp8_format'") != std::string::npos);
  CHECK(message("nvfp4:rht=2").find("rht takes 0 or 1") != std::string::npos);
  CHECK(message("fp8-tensorwise-delayed:amax_compute_algo=mean").find("max or most_recent") != std::string::npos);
  CHECK(message("fp8-blockwise:scales=e8m0").find("pow2 or fp32") != std::string::npos);
  CHECK(message("mxfp8:").find("nothing after ':'") != std::string::npos);
  std::printf("errors: %s | %s\n", unknown.c_str(), refused.c_str());
  CHECK_THROWS_AS(parse_role("fprop_y"), Error);
  CHECK(parse_role("wgrad_dy") == Role::wgrad_dy);
}

TEST_CASE("fp8-tensorwise-delayed follows TE's amax history and scale update step by step", "[recipe]") {
  for (const bool use_max : {true, false}) {
    Quantizer q(parse_recipe(std::string("fp8-tensorwise-delayed:margin=1,amax_history_len=4,amax_compute_algo=") +
                             (use_max ? "max" : "most_recent")));
    // The reference: TE's history as a deque, newest at the front (delayed_scaling.cu lines 97-111).
    std::deque<float> hist(4, 0.0f);
    float scale = 1.0f;                      // TE starts every scale at 1
    const float scaled_max = 448.0f / 2.0f;  // fp8_max * 2^-margin (line 300)
    std::size_t compared = 0, bad = 0;
    const std::size_t rows = 24, cols = 40;
    for (int step = 0; step < 9; ++step) {
      std::vector<float> x = operand(rows, cols, 100 + step, -12 + step, 2 + step);
      if (step == 3) x[5] = std::numeric_limits<float>::infinity();   // a non-finite amax: scale kept
      if (step == 5) std::fill(x.begin(), x.end(), 0.0f);             // a zero amax: scale kept
      if (step == 6) x[9] = std::numeric_limits<float>::quiet_NaN();  // NaN is skipped by the amax (fmaxf)
      const QuantizedOperand got = q.quantize("fc", Role::fprop_x, x, rows, cols);
      float amax = 0;
      for (float v : x)
        if (!std::isnan(v)) amax = std::max(amax, std::fabs(v));
      hist[0] = amax;
      REQUIRE(got.scales.size() == 1);
      CHECK(got.scales[0] == scale);
      std::vector<float> want(x.size());
      for (std::size_t i = 0; i < x.size(); ++i) want[i] = cast(x[i], scale, fp8_e4m3());
      bad += mismatches(got.values, want);
      compared += x.size();
      q.end_step();
      // Update: amax over the window (max) or the newest; then roll.
      float a = use_max ? 0.0f : hist[0];
      if (use_max)
        for (float h : hist) a = std::max(a, h);
      if (std::isfinite(a) && a > 0) scale = scaled_max / a;
      hist.push_front(0.0f);
      hist.pop_back();
      const DelayedState& st = q.delayed_state().at("fc/x");
      CHECK(st.scale == scale);
      for (std::size_t i = 1; i < 4; ++i) CHECK(st.amax_history[i] == hist[4 - i]);
      std::printf("delayed %s step %d: amax %g -> scale %g\n", use_max ? "max" : "most_recent", step, amax, scale);
    }
    std::printf("fp8-tensorwise-delayed (%s): %zu values compared with the TE-formula reference, %zu mismatches\n",
                use_max ? "max" : "most_recent", compared, bad);
    CHECK(bad == 0);
  }
  // The state restores: a second quantizer given the first's state quantizes the same bits.
  Quantizer a(parse_recipe("fp8-tensorwise-delayed:amax_history_len=3"));
  const std::vector<float> x = operand(8, 64, 9);
  a.quantize("l", Role::fprop_w, x, 8, 64);
  a.quantize("l", Role::dgrad_dy, x, 8, 64);
  a.end_step();
  Quantizer b(parse_recipe("fp8-tensorwise-delayed:amax_history_len=3"));
  b.set_delayed_state(a.delayed_state());
  CHECK(mismatches(a.quantize("l", Role::dgrad_dy, x, 8, 64).values,
                   b.quantize("l", Role::dgrad_dy, x, 8, 64).values) == 0);
  CHECK(a.delayed_state() == b.delayed_state());
  Quantizer c(parse_recipe("fp8-tensorwise-delayed:amax_history_len=5"));
  CHECK_THROWS_AS(c.set_delayed_state(a.delayed_state()), Error);
}

TEST_CASE("fp8-blockwise scales 1x128 tiles of x and dy and 128x128 blocks of w as TE does", "[recipe]") {
  // 200 x 300: the reduction axis ends in a short tile of 44, the rows in a short block of 72.
  const std::size_t rows = 200, cols = 300;
  for (const char* spec : {"fp8-blockwise", "fp8-blockwise:scales=fp32,fp8_format=HYBRID"}) {
    const Recipe r = parse_recipe(spec);
    Quantizer q(r);
    for (const Role role : {Role::fprop_x, Role::fprop_w, Role::dgrad_dy}) {
      std::vector<float> x = operand(rows, cols, 7, -30, 10);
      x[1000] = std::numeric_limits<float>::infinity();  // a tile with an inf: scale 1 (TE)
      const bool w = role == Role::fprop_w;
      const Format& f = role == Role::dgrad_dy ? r.backward : r.forward;
      const std::size_t tr = w ? 128 : 1, tc = 128;
      const std::size_t across = (cols + tc - 1) / tc;
      std::vector<float> want(x.size());
      std::vector<float> scales;
      for (std::size_t r0 = 0; r0 < rows; r0 += tr)
        for (std::size_t c0 = 0; c0 < cols; c0 += tc) {
          float amax = 0;
          for (std::size_t i = r0; i < std::min(rows, r0 + tr); ++i)
            for (std::size_t j = c0; j < std::min(cols, c0 + tc); ++j)
              amax = std::max(amax, std::fabs(x[i * cols + j]));
          // recipe_common.cuh lines 18-46 with epsilon 0.
          float s = 1.0f;
          if (!(std::isinf(amax) || amax == 0.0f)) {
            s = static_cast<float>(f.max_finite) / amax;
            if (std::isinf(s)) s = std::numeric_limits<float>::max();
            if (r.power_2_scales) s = std::exp2(std::floor(std::log2(static_cast<double>(s))));
          }
          scales.push_back(s);
          for (std::size_t i = r0; i < std::min(rows, r0 + tr); ++i)
            for (std::size_t j = c0; j < std::min(cols, c0 + tc); ++j) want[i * cols + j] = cast(x[i * cols + j], s, f);
        }
      const QuantizedOperand got = q.quantize("fc", role, x, rows, cols);
      CHECK(got.scale_cols == across);
      CHECK(got.scale_rows == (rows + tr - 1) / tr);
      std::size_t bad_scales = 0;
      for (std::size_t i = 0; i < scales.size(); ++i) bad_scales += got.scales[i] != scales[i];
      const std::size_t bad = mismatches(got.values, want);
      std::printf("%s %s: %zu values, %zu scales compared, %zu / %zu mismatches; flushed %llu, saturated %llu\n",
                  r.spec.c_str(), std::string(to_string(role)).c_str(), x.size(), scales.size(), bad, bad_scales,
                  static_cast<unsigned long long>(got.stats.underflow),
                  static_cast<unsigned long long>(got.stats.overflow));
      CHECK(bad == 0);
      CHECK(bad_scales == 0);
    }
  }
}

TEST_CASE("the 16x16 random Hadamard transform is TE's D H / 4 and leaves the wgrad product unchanged", "[recipe]") {
  // H by Sylvester's construction, as reference_nvfp4.py lines 405-418 builds it: [[H, H], [H, -H]].
  std::vector<std::vector<int>> h{{1}};
  while (h.size() < 16) {
    const std::size_t n = h.size();
    std::vector<std::vector<int>> g(2 * n, std::vector<int>(2 * n));
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < n; ++j) {
        g[i][j] = g[i][j + n] = g[i + n][j] = h[i][j];
        g[i + n][j + n] = -h[i][j];
      }
    h = g;
  }
  const std::size_t rows = 5, cols = 40;  // two groups of 16 and a tail of 8 left alone
  const std::vector<float> x = operand(rows, cols, 3, -10, 10);
  std::vector<float> got = x;
  hadamard16(got, rows, cols);
  std::vector<float> want = x;
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c0 = 0; c0 + 16 <= cols; c0 += 16)
      for (std::size_t j = 0; j < 16; ++j) {
        long double s = 0;  // (x D H)_j = sum_i x_i d_i H_ij
        for (std::size_t i = 0; i < 16; ++i)
          s += static_cast<long double>(x[r * cols + c0 + i]) * hadamard_signs()[i] * h[i][j];
        want[r * cols + c0 + j] = static_cast<float>(s / 4);
      }
  const std::size_t bad = mismatches(got, want);
  std::printf("hadamard16: %zu values compared with x (D H) / 4, %zu mismatches\n", x.size(), bad);
  CHECK(bad == 0);
  // Orthogonal: the transformed rows have the same inner products (to float rounding).
  double worst = 0;
  for (std::size_t a = 0; a < rows; ++a)
    for (std::size_t b = 0; b < rows; ++b) {
      double e = 0, t = 0, norm = 0;
      for (std::size_t k = 0; k < cols; ++k) {
        e += static_cast<double>(x[a * cols + k]) * x[b * cols + k];
        t += static_cast<double>(got[a * cols + k]) * got[b * cols + k];
        norm += std::fabs(static_cast<double>(x[a * cols + k]) * x[b * cols + k]);
      }
      worst = std::max(worst, std::fabs(t - e) / norm);
    }
  std::printf("hadamard16: worst relative change of an inner product %.3g\n", worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("nvfp4 scales 16x16 tiles of w once each under the tensor scale", "[recipe]") {
  const std::size_t rows = 40, cols = 56;  // edge tiles of 8 rows and 8 columns
  const std::vector<float> x = operand(rows, cols, 11, -8, 8);
  Quantizer q(parse_recipe("nvfp4"));
  const QuantizedOperand got = q.quantize("fc", Role::fprop_w, x, rows, cols);
  // Reference: each tile on its own as one nvfp4 block (block.hpp's quantizer, compared with torchao's in
  // tests/python/test_torchao_blocks.py) under the whole operand's tensor scale.
  TensorAmax ta;
  ta.add(x);
  const BlockFormat one = parse_block_format("nvfp4", 256);
  const float T = ta.tensor_scale(one);
  std::vector<float> want(x.size());
  std::size_t tiles = 0;
  for (std::size_t r0 = 0; r0 < rows; r0 += 16)
    for (std::size_t c0 = 0; c0 < cols; c0 += 16, ++tiles) {
      std::vector<float> tile, out;
      for (std::size_t i = r0; i < std::min(rows, r0 + 16); ++i)
        for (std::size_t j = c0; j < std::min(cols, c0 + 16); ++j) tile.push_back(x[i * cols + j]);
      out.resize(tile.size());
      round_blocks(tile, out, 0, one, {}, nullptr, {}, T);
      std::size_t k = 0;
      for (std::size_t i = r0; i < std::min(rows, r0 + 16); ++i)
        for (std::size_t j = c0; j < std::min(cols, c0 + 16); ++j) want[i * cols + j] = out[k++];
    }
  const std::size_t bad = mismatches(got.values, want);
  std::printf("nvfp4 2D: %zu values in %zu tiles compared, %zu mismatches; T = %g\n", x.size(), tiles, bad, T);
  CHECK(bad == 0);
  CHECK(got.scales.size() == tiles);
  CHECK(got.tensor_scale == T);
  // The transpose (dgrad's w) has the same tiles, so the same values.
  std::vector<float> xt(x.size());
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) xt[j * rows + i] = x[i * cols + j];
  const QuantizedOperand gt = q.quantize("fc", Role::dgrad_w, xt, cols, rows);
  std::size_t tbad = 0;
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) tbad += !same_bits(gt.values[j * rows + i], got.values[i * cols + j]);
  std::printf("nvfp4 2D: fprop w and dgrad w^T differ in %zu values\n", tbad);
  CHECK(tbad == 0);
  // 1D (2d=0): the rows' blocks of 16 as block.hpp's nvfp4.
  Quantizer q1(parse_recipe("nvfp4:2d=0"));
  std::vector<float> w1(x.size());
  round_blocks(x, w1, cols, parse_block_format("nvfp4"));
  CHECK(mismatches(q1.quantize("fc", Role::fprop_w, x, rows, cols).values, w1) == 0);
}

TEST_CASE("nvfp4 rounds gradients stochastically, reproducibly and without bias", "[recipe]") {
  const std::size_t rows = 4, cols = 64;
  std::vector<float> x(rows * cols);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] = 1.0f + 0.3f * static_cast<float>(i % 7) / 7.0f;  // between e2m1 steps
  Quantizer a(parse_recipe("nvfp4:seed=5")), b(parse_recipe("nvfp4:seed=5")), rne(parse_recipe("nvfp4:sr=0"));
  const auto qa = a.quantize("fc", Role::dgrad_dy, x, rows, cols);
  CHECK(mismatches(qa.values, b.quantize("fc", Role::dgrad_dy, x, rows, cols).values) == 0);
  CHECK(a.sr_offset() == x.size());
  // x (w) stays nearest-even; the mean of many stochastic roundings approaches x, nearest-even's does not.
  const auto fx = a.quantize("fc", Role::fprop_x, x, rows, cols);
  CHECK(mismatches(fx.values, rne.quantize("fc", Role::fprop_x, x, rows, cols).values) == 0);
  double sr_bias = 0, rne_bias = 0;
  const int reps = 200;
  std::vector<double> mean(x.size(), 0);
  for (int k = 0; k < reps; ++k) {
    const auto v = a.quantize("fc", Role::dgrad_dy, x, rows, cols).values;
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += v[i] / reps;
  }
  const auto vr = rne.quantize("fc", Role::dgrad_dy, x, rows, cols).values;
  for (std::size_t i = 0; i < x.size(); ++i) {
    sr_bias += std::fabs(mean[i] - x[i]) / x.size();
    rne_bias += std::fabs(static_cast<double>(vr[i]) - x[i]) / x.size();
  }
  std::printf("nvfp4 gradients: mean |bias| over %d stochastic roundings %.4g, nearest-even %.4g\n", reps, sr_bias,
              rne_bias);
  CHECK(sr_bias < rne_bias / 4);
}

TEST_CASE("each recipe's scaling rescues a constructed operand its unscaled cast loses", "[recipe]") {
  // fp8: values ~2^-14 vanish below e4m3's smallest subnormal 2^-9 at scale 1; any scale keeps them.
  {
    std::vector<float> x(64 * 64);
    std::mt19937_64 g(1);
    std::normal_distribution<float> d;
    for (auto& v : x) v = std::ldexp(d(g), -14);
    const auto none = Quantizer(parse_recipe("fp8-none")).quantize("l", Role::fprop_x, x, 64, 64);
    std::printf("fp8-none on 2^-14 values: %llu of %zu flushed\n",
                static_cast<unsigned long long>(none.stats.underflow), x.size());
    CHECK(none.stats.underflow > x.size() * 9 / 10);
    for (const char* spec : {"fp8-tensorwise-current", "fp8-rowwise", "fp8-blockwise", "mxfp8"}) {
      const auto s = Quantizer(parse_recipe(spec)).quantize("l", Role::fprop_x, x, 64, 64);
      std::printf("%s on 2^-14 values: %llu flushed\n", spec, static_cast<unsigned long long>(s.stats.underflow));
      CHECK(s.stats.underflow < x.size() / 100);
    }
  }
  // Rows 10^4 apart: one scale per tensor flushes the small rows, per row / per tile / per block does not.
  {
    const std::size_t rows = 8, cols = 256;
    std::vector<float> x(rows * cols);
    std::mt19937_64 g(2);
    std::normal_distribution<float> d;
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = d(g) * (i / cols == 0 ? 1e4f : 1e-3f);
    const auto t = Quantizer(parse_recipe("fp8-tensorwise-current")).quantize("l", Role::fprop_x, x, rows, cols);
    std::printf("rows 1e4 vs 1e-3: tensorwise flushes %llu\n", static_cast<unsigned long long>(t.stats.underflow));
    CHECK(t.stats.underflow > (rows - 1) * cols / 2);
    for (const char* spec : {"fp8-rowwise", "fp8-blockwise", "mxfp8"}) {
      const auto s = Quantizer(parse_recipe(spec)).quantize("l", Role::fprop_x, x, rows, cols);
      std::printf("rows 1e4 vs 1e-3: %s flushes %llu\n", spec, static_cast<unsigned long long>(s.stats.underflow));
      CHECK(s.stats.underflow < (rows - 1) * cols / 10);
    }
  }
  // Delayed scaling needs one step to learn the scale: step 0 at scale 1 flushes, step 1 does not.
  {
    std::vector<float> x(32 * 32, std::ldexp(1.0f, -14));
    Quantizer q(parse_recipe("fp8-tensorwise-delayed"));
    const auto s0 = q.quantize("l", Role::fprop_x, x, 32, 32);
    q.end_step();
    const auto s1 = q.quantize("l", Role::fprop_x, x, 32, 32);
    std::printf("delayed on 2^-14: step 0 flushes %llu, step 1 flushes %llu (scale %g)\n",
                static_cast<unsigned long long>(s0.stats.underflow),
                static_cast<unsigned long long>(s1.stats.underflow), s1.scales[0]);
    CHECK(s0.stats.underflow == x.size());
    CHECK(s1.stats.underflow == 0);
  }
  // MX fp6 / fp4: a block 2^20 below its neighbour keeps its values under its own scale; nvfp4's e4m3 block
  // scales span 2^-6 .. 448 under the tensor scale (block.hpp), so its blocks lie 2^12 apart here.
  for (const char* spec : {"mxfp6_e2m3", "mxfp6_e3m2", "mxfp4", "nvfp4:2d=0,rht=0,sr=0"}) {
    const int apart = std::string_view(spec).starts_with("nvfp4") ? -12 : -20;
    std::vector<float> x(64);
    for (std::size_t i = 0; i < 64; ++i) x[i] = (i < 32 ? 1.0f : std::ldexp(1.0f, apart)) * (1.0f + (i % 3) * 0.5f);
    const auto s = Quantizer(parse_recipe(spec)).quantize("l", Role::fprop_x, x, 1, 64);
    double worst = 0;
    for (std::size_t i = 0; i < 64; ++i)
      worst = std::max(worst, std::fabs(static_cast<double>(s.values[i]) - x[i]) / x[i]);
    std::printf("%s: worst relative error over blocks 2^20 apart %.3g\n", spec, worst);
    CHECK(worst <= 0.25);
  }
  // nvfp4's Hadamard transform on the wgrad operands: the product of the transformed, quantized operands still
  // approximates the exact one (the transform cancels). It is not always the smaller error: on these i.i.d.
  // heavy-tailed operands it is larger (docs/recipes.md gives the figures); the test prints both.
  {
    const std::size_t m = 16, n = 16, k = 256;
    std::vector<float> a(m * k), b(n * k);
    std::mt19937_64 g(4);
    std::normal_distribution<float> d;
    // Heavy-tailed operands: N(0, 1) * 2^U(-6, 6), most blocks of 16 dominated by one element.
    std::uniform_real_distribution<float> u(-6, 6);
    for (auto& v : a) v = d(g) * std::exp2(u(g));
    for (auto& v : b) v = d(g) * std::exp2(u(g));
    double err[2];
    for (int rht = 0; rht < 2; ++rht) {
      Quantizer q(parse_recipe(std::string("nvfp4:sr=0,rht=") + (rht ? "1" : "0")));
      const auto qa = q.quantize("l", Role::wgrad_dy, a, m, k);
      const auto qb = q.quantize("l", Role::wgrad_x, b, n, k);
      CHECK(qa.hadamard == (rht == 1));
      err[rht] = gemm_error(a, b, qa.values, qb.values, m, n, k);
    }
    std::printf("nvfp4 wgrad, heavy-tailed operands: relative GEMM error without RHT %.4f, with %.4f\n", err[0],
                err[1]);
    CHECK(err[0] < 0.3);
    CHECK(err[1] < 0.3);
  }
  // rowwise-gw-hp keeps wgrad in high precision and dgrad's w per tensor.
  {
    const std::vector<float> x = operand(16, 64, 5);
    Quantizer q(parse_recipe("fp8-rowwise-gw-hp"));
    const auto wx = q.quantize("l", Role::wgrad_x, x, 16, 64);
    CHECK(!wx.quantized);
    CHECK(mismatches(wx.values, x) == 0);
    CHECK(q.quantize("l", Role::dgrad_w, x, 16, 64).scales.size() == 1);
    CHECK(q.quantize("l", Role::fprop_w, x, 16, 64).scales.size() == 16);
  }
}

// The Stats of a block recipe's operand (lib/mpsim/recipe/recipe.cpp stats_of_blocks, a vectorized pass over
// the bits) against a plain count here over the input and the returned values: zeros, NaN, ±inf, float32
// subnormals, an outlier, and sizes that leave a tail after the four-lane loop.
TEST_CASE("block recipes' operand statistics equal a plain count", "[recipe]") {
  for (const char* spec : {"mxfp8", "mxfp4", "nvfp4"})
    for (std::size_t cols : {std::size_t{64}, std::size_t{96}, std::size_t{37}}) {
      const std::size_t rows = 9;
      std::vector<float> x = operand(rows, cols, 11);
      x[3] = -0.0f;
      x[5] = std::bit_cast<float>(0x00000001u);  // the smallest subnormal: the minimum below
      x[rows * cols - 1] = std::numeric_limits<float>::infinity();
      x[rows * cols - 2] = -std::numeric_limits<float>::infinity();
      x[cols + 1] = std::numeric_limits<float>::quiet_NaN();
      for (std::size_t c = 0; c < cols; ++c) x[4 * cols + c] = static_cast<float>(c % 8) * 0.25f;  // some exact
      const auto q = Quantizer(parse_recipe(spec)).quantize("l", Role::fprop_x, x, rows, cols);
      REQUIRE(q.values.size() == x.size());
      std::uint64_t zero = 0, exact = 0, nan = 0, inf = 0;
      double hi = 0, lo = INFINITY;
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double a = std::fabs(static_cast<double>(x[i]));
        if (std::isnan(x[i])) ++nan;
        else if (std::isinf(x[i])) ++inf;
        else if (a == 0) ++zero;
        else {
          exact += q.values[i] == x[i];
          hi = std::max(hi, a);
          lo = std::min(lo, a);
        }
      }
      std::printf("%s, %zu x %zu: zero %llu exact %llu max %g min %g; got %llu %llu %g %g\n", spec, rows, cols,
                  static_cast<unsigned long long>(zero), static_cast<unsigned long long>(exact), hi, lo,
                  static_cast<unsigned long long>(q.stats.zero_in), static_cast<unsigned long long>(q.stats.exact),
                  q.stats.max_abs, q.stats.min_abs_nonzero);
      CHECK(q.stats.count == x.size());
      CHECK(q.stats.zero_in == zero);
      CHECK(q.stats.exact == exact);
      CHECK(q.stats.nan == nan);
      CHECK(q.stats.inf_in == inf);
      CHECK(q.stats.rounded == x.size() - zero - nan - inf - exact);
      CHECK(q.stats.max_abs == hi);
      CHECK(q.stats.min_abs_nonzero == lo);
      CHECK(lo == std::bit_cast<float>(0x00000001u));
      // nvfp4: the NaN makes the tensor scale NaN and every block NaN (so nothing is exact there).
      if (std::string_view(spec).starts_with("mx")) CHECK(exact > 0);
    }
  // All zeros: no extremes.
  const std::vector<float> z(64, 0.0f);
  const auto q = Quantizer(parse_recipe("mxfp8")).quantize("l", Role::fprop_x, z, 1, 64);
  CHECK(q.stats.zero_in == 64);
  CHECK(q.stats.max_abs == 0);
  CHECK(q.stats.min_abs_nonzero == 0);
}
