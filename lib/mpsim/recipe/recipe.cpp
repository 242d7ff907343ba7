#include "mpsim/recipe/recipe.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <fmt/format.h>

#include "mpsim/error.hpp"
#include "mpsim/format/detail/key_values.hpp"

namespace mpsim::recipe {

namespace {

constexpr std::array<std::string_view, 6> kRoleNames{"fprop_x", "fprop_w", "dgrad_dy",
                                                     "dgrad_w", "wgrad_x", "wgrad_dy"};

Format saturating(const Format& f) { return with_options(f, Subnormals::keep, Overflow::saturate); }

// One scale per tile of tile_rows x tile_cols (clipped at the matrix's edges), tiles row-major.
struct Tiling {
  std::size_t rows = 0, cols = 0, tr = 1, tc = 1;
  std::size_t tiles_down() const { return rows == 0 ? 0 : (rows + tr - 1) / tr; }
  std::size_t tiles_across() const { return cols == 0 ? 0 : (cols + tc - 1) / tc; }
  std::size_t tile_of(std::size_t r, std::size_t c) const { return r / tr * tiles_across() + c / tc; }
};

// The largest |x| of each tile. nan_propagates: a NaN makes the tile's amax NaN (torch.amax); otherwise NaN
// is skipped as fmaxf skips it (the amax reductions of TE's cast kernels).
std::vector<float> tile_amax(std::span<const float> x, const Tiling& t, bool nan_propagates) {
  const std::size_t across = t.tiles_across();
  std::vector<float> amax(t.tiles_down() * across, 0.0f);
  for (std::size_t r = 0; r < t.rows; ++r) {
    const float* row = x.data() + r * t.cols;
    float* m = amax.data() + r / t.tr * across;
    for (std::size_t j = 0; j < across; ++j) {
      const std::size_t end = std::min(t.cols, (j + 1) * t.tc);
      float a = m[j];
      bool nan = std::isnan(a);
      for (std::size_t c = j * t.tc; c < end; ++c) {
        const float v = std::fabs(row[c]);
        nan = nan || std::isnan(v);
        a = v > a ? v : a;  // NaN never compares greater: skipped here, recorded in `nan`
      }
      m[j] = nan && nan_propagates ? std::numeric_limits<float>::quiet_NaN() : (std::isnan(a) ? m[j] : a);
    }
  }
  return amax;
}

// Calls f(begin, end, tile) over each row's runs of one tile.
template <class F>
void for_each_run(const Tiling& t, F&& f) {
  const std::size_t across = t.tiles_across();
  for (std::size_t r = 0; r < t.rows; ++r)
    for (std::size_t j = 0; j < across; ++j)
      f(r * t.cols + j * t.tc, r * t.cols + std::min(t.cols, (j + 1) * t.tc), r / t.tr * across + j);
}

// q = round(x * s) in the saturating element format (one bulk-engine pass with Stats), value = q / s:
// torchao's hp_tensor_and_scale_to_float8 (float8_training_tensor.py lines 153-154, x.float() * scale,
// to_fp8_saturated) and its dequantization (line 205, data / scale).
void scaled_round(std::span<const float> x, const Tiling& t, const std::vector<float>& scale, const Format& fmt,
                  const Rounding& r, std::uint64_t index0, QuantizedOperand& q) {
  q.values.resize(x.size());
  const bool one = scale.size() == 1;
  if (one) {
    for (std::size_t i = 0; i < x.size(); ++i) q.values[i] = x[i] * scale[0];
  } else {
    for_each_run(t, [&](std::size_t b, std::size_t e, std::size_t k) {
      for (std::size_t i = b; i < e; ++i) q.values[i] = x[i] * scale[k];
    });
  }
  BulkOptions opt;
  opt.threads = 1;
  opt.index0 = index0;
  round_array(std::span<const float>(q.values), std::span<float>(q.values), saturating(fmt), r, &q.stats, opt);
  if (one) {
    for (float& v : q.values) v /= scale[0];
  } else {
    for_each_run(t, [&](std::size_t b, std::size_t e, std::size_t k) {
      for (std::size_t i = b; i < e; ++i) q.values[i] /= scale[k];
    });
  }
  q.scales.assign(scale.begin(), scale.end());
  q.scale_rows = t.tiles_down();
  q.scale_cols = t.tiles_across();
}

// The bulk engine's Stats from a block quantization: the counts BlockStats keeps, exact / rounded by
// comparing each value with its input.
Stats stats_of_blocks(const BlockStats& b, std::span<const float> x, std::span<const float> values) {
  Stats s;
  s.count = x.size();
  s.nan = b.nan_in;
  s.inf_in = b.inf_in;
  s.underflow = b.flushed;
  s.subnormal = b.subnormal;
  s.overflow = b.saturated;
  // One pass over the bits, without branches. SSE2 four lanes at a time (signed compares suffice: every
  // magnitude is below 2^31; a compare's all-ones lane is -1, so subtracting it counts), 32-bit lane counters
  // flushed every 2^20 groups; the rest one at a time. The magnitude bits of finite floats order as their
  // values do, and a finite non-zero input equals its value exactly when the bits are equal (no ±0, no NaN
  // among them). max: of the finite magnitudes; min: of the finite non-zero ones (0x7fffffff: none).
  auto bits = [](float v) { return std::bit_cast<std::uint32_t>(v); };
  std::uint64_t zero = 0, exact = 0;
  std::uint32_t hi = 0, lo = 0x7fffffffu;
  std::size_t i = 0;
#if defined(__SSE2__)
  {
    const __m128i abs_mask = _mm_set1_epi32(0x7fffffff), inf = _mm_set1_epi32(0x7f800000), none = abs_mask;
    const __m128i zero4 = _mm_setzero_si128();
    __m128i vhi = zero4, vlo = none;
    while (i + 4 <= x.size()) {
      __m128i vzero = zero4, vexact = zero4;
      for (std::size_t g = 0; g < (std::size_t{1} << 20) && i + 4 <= x.size(); ++g, i += 4) {
        const __m128i xb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.data() + i));
        const __m128i vb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(values.data() + i));
        const __m128i m = _mm_and_si128(xb, abs_mask);
        const __m128i finite = _mm_cmpgt_epi32(inf, m);
        const __m128i is_zero = _mm_cmpeq_epi32(m, zero4);
        const __m128i nz = _mm_andnot_si128(is_zero, finite);
        vzero = _mm_sub_epi32(vzero, is_zero);
        vexact = _mm_sub_epi32(vexact, _mm_and_si128(nz, _mm_cmpeq_epi32(vb, xb)));
        const __m128i mf = _mm_and_si128(m, finite);
        const __m128i mn = _mm_or_si128(_mm_and_si128(nz, m), _mm_andnot_si128(nz, none));
        const __m128i gt = _mm_cmpgt_epi32(mf, vhi), lt = _mm_cmpgt_epi32(vlo, mn);
        vhi = _mm_or_si128(_mm_and_si128(gt, mf), _mm_andnot_si128(gt, vhi));
        vlo = _mm_or_si128(_mm_and_si128(lt, mn), _mm_andnot_si128(lt, vlo));
      }
      alignas(16) std::uint32_t z[4], e[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(z), vzero);
      _mm_store_si128(reinterpret_cast<__m128i*>(e), vexact);
      for (int l = 0; l < 4; ++l) zero += z[l], exact += e[l];
    }
    alignas(16) std::uint32_t h[4], l[4];
    _mm_store_si128(reinterpret_cast<__m128i*>(h), vhi);
    _mm_store_si128(reinterpret_cast<__m128i*>(l), vlo);
    for (int k = 0; k < 4; ++k) hi = std::max(hi, h[k]), lo = std::min(lo, l[k]);
  }
#endif
  for (; i < x.size(); ++i) {
    const std::uint32_t b = bits(x[i]), m = b & 0x7fffffffu;
    const bool finite = m < 0x7f800000u, nonzero = finite && m != 0;
    zero += m == 0;
    exact += nonzero && bits(values[i]) == b;
    hi = finite && m > hi ? m : hi;
    lo = nonzero && m < lo ? m : lo;
  }
  s.zero_in = zero;
  s.exact = exact;
  s.rounded = s.count - s.zero_in - s.nan - s.inf_in - s.exact;
  s.max_abs = std::bit_cast<float>(hi);
  s.min_abs_nonzero = lo == 0x7fffffffu ? 0.0 : std::bit_cast<float>(lo);
  return s;
}

double fp8_max(const Format& f) { return f.max_finite; }

// 16x16 tiles of a rows x cols matrix gathered into rows of 256 (zero padded at the edges; a zero changes
// neither a tile's amax nor the tensor's), so that nvfp4 with a block of 256 scales each tile once.
struct Gathered2d {
  std::vector<float> data;
  std::size_t tiles = 0;
};
constexpr std::size_t kTile2d = 16;
Gathered2d gather_tiles(std::span<const float> x, std::size_t rows, std::size_t cols) {
  Tiling t{rows, cols, kTile2d, kTile2d};
  Gathered2d g;
  g.tiles = t.tiles_down() * t.tiles_across();
  g.data.assign(g.tiles * kTile2d * kTile2d, 0.0f);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c = 0; c < cols; ++c)
      g.data[t.tile_of(r, c) * kTile2d * kTile2d + (r % kTile2d) * kTile2d + c % kTile2d] = x[r * cols + c];
  return g;
}

bool parse_bool(std::string_view spec, std::string_view key, std::string_view v) {
  if (v == "1" || v == "true") return true;
  if (v == "0" || v == "false") return false;
  throw Error(fmt::format("recipe '{}': {} takes 0 or 1, got '{}'", spec, key, v));
}

void set_fp8_format(Recipe& r, std::string_view spec, std::string_view v) {
  if (v == "HYBRID" || v == "hybrid") {
    r.fp8_format = "HYBRID";
    r.backward = fp8_e5m2();
  } else if (v == "E4M3" || v == "e4m3") {
    r.fp8_format = "E4M3";
    r.backward = fp8_e4m3();
  } else {
    throw Error(fmt::format("recipe '{}': fp8_format must be HYBRID or E4M3, got '{}'", spec, v));
  }
  r.forward = fp8_e4m3();
}

// The options each recipe takes, by the names of its source.
std::vector<std::string_view> options_of(Kind k, std::string_view name) {
  switch (k) {
    case Kind::none: return {"fp8_format"};
    case Kind::tensorwise_delayed: return {"fp8_format", "margin", "amax_history_len", "amax_compute_algo"};
    case Kind::tensorwise_current: return {"fp8_format", "power_2_scales"};
    case Kind::rowwise:
    case Kind::rowwise_gw_hp: return {};
    case Kind::blockwise: return {"fp8_format", "scales", "block"};
    case Kind::mx:
      if (name == "mxfp8") return {"scaling_mode", "fp8_format"};
      return {"scaling_mode"};
    case Kind::nvfp4: return {"rht", "sr", "2d", "seed"};
  }
  return {};
}

std::string canonical_spec(const Recipe& r) {
  std::string s = r.name;
  auto add = [&](std::string_view k, const std::string& v) {
    s += s.find(':') == std::string::npos ? ":" : ",";
    s += std::string(k) + "=" + v;
  };
  switch (r.kind) {
    case Kind::none: add("fp8_format", r.fp8_format); break;
    case Kind::tensorwise_delayed:
      add("fp8_format", r.fp8_format);
      add("margin", std::to_string(r.margin));
      add("amax_history_len", std::to_string(r.amax_history_len));
      add("amax_compute_algo", r.amax_compute_max ? "max" : "most_recent");
      break;
    case Kind::tensorwise_current:
      add("fp8_format", r.fp8_format);
      add("power_2_scales", r.power_2_scales ? "1" : "0");
      break;
    case Kind::rowwise:
    case Kind::rowwise_gw_hp: break;
    case Kind::blockwise:
      add("fp8_format", r.fp8_format);
      add("scales", r.power_2_scales ? "pow2" : "fp32");
      add("block", std::to_string(r.block));
      break;
    case Kind::mx:
      add("scaling_mode", r.block_forward.rule == BlockScaleRule::rceil ? "rceil" : "floor");
      if (r.name == "mxfp8") add("fp8_format", r.fp8_format);
      break;
    case Kind::nvfp4:
      add("rht", r.rht ? "1" : "0");
      add("sr", r.sr ? "1" : "0");
      add("2d", r.two_d ? "1" : "0");
      add("seed", std::to_string(r.seed));
      break;
  }
  return s;
}

}  // namespace

std::string_view to_string(Role r) { return kRoleNames[static_cast<std::size_t>(r)]; }

Role parse_role(std::string_view s) {
  for (std::size_t i = 0; i < kRoleNames.size(); ++i)
    if (s == kRoleNames[i]) return static_cast<Role>(i);
  throw Error(
      fmt::format("unknown GEMM operand role '{}' (known: fprop_x, fprop_w, dgrad_dy, dgrad_w, wgrad_x, "
                  "wgrad_dy)",
                  s));
}

Operand operand_of(Role r) {
  switch (r) {
    case Role::fprop_x:
    case Role::wgrad_x: return Operand::x;
    case Role::fprop_w:
    case Role::dgrad_w: return Operand::w;
    case Role::dgrad_dy:
    case Role::wgrad_dy: return Operand::dy;
  }
  return Operand::x;
}

std::string_view to_string(Operand o) { return o == Operand::x ? "x" : o == Operand::w ? "w" : "dy"; }

const std::vector<std::string_view>& recipe_names() {
  static const std::vector<std::string_view> names{"fp8-none",
                                                   "fp8-tensorwise-delayed",
                                                   "fp8-tensorwise-current",
                                                   "fp8-rowwise",
                                                   "fp8-rowwise-gw-hp",
                                                   "fp8-blockwise",
                                                   "mxfp8",
                                                   "mxfp6_e2m3",
                                                   "mxfp6_e3m2",
                                                   "mxfp4",
                                                   "nvfp4"};
  return names;
}

bool is_recipe_name(std::string_view name) {
  const auto& n = recipe_names();
  return std::find(n.begin(), n.end(), name) != n.end();
}

Recipe parse_recipe(std::string_view spec_in) {
  const std::string_view spec = trim_blanks(spec_in);
  const auto colon = spec.find(':');
  const std::string_view name = trim_blanks(spec.substr(0, colon));
  if (!is_recipe_name(name)) {
    std::string known;
    for (auto n : recipe_names()) known += (known.empty() ? "" : ", ") + std::string(n);
    throw Error(fmt::format("unknown recipe '{}' (known: {})", name, known));
  }
  Recipe r;
  r.name = std::string(name);
  set_fp8_format(r, spec, "HYBRID");
  if (name == "fp8-none") r.kind = Kind::none;
  else if (name == "fp8-tensorwise-delayed") r.kind = Kind::tensorwise_delayed;
  else if (name == "fp8-tensorwise-current") r.kind = Kind::tensorwise_current;
  else if (name == "fp8-rowwise" || name == "fp8-rowwise-gw-hp") {
    // torchao's rowwise recipes: e4m3 for every operand, power-of-two scales (config.py lines 334-351, 377).
    r.kind = name == "fp8-rowwise" ? Kind::rowwise : Kind::rowwise_gw_hp;
    set_fp8_format(r, spec, "E4M3");
    r.power_2_scales = true;
  } else if (name == "fp8-blockwise") {
    // TE Float8BlockScaling: E4M3 and power-of-two scales by default (__init__.py lines 429-434); the
    // 1x128 / 128x128 tiles of DeepSeek-V3 section 3.3.
    r.kind = Kind::blockwise;
    set_fp8_format(r, spec, "E4M3");
    r.power_2_scales = true;
    r.block = 128;
  } else if (name == "nvfp4") {
    r.kind = Kind::nvfp4;
    r.block_forward = r.block_backward = parse_block_format("nvfp4");
    r.block = r.block_forward.block;
  } else {
    r.kind = Kind::mx;
    const std::string_view elem = name == "mxfp8" ? "mxfp8_e4m3" : name == "mxfp4" ? "mxfp4_e2m1" : name;
    r.block_forward = r.block_backward = parse_block_format(elem);
    r.block = r.block_forward.block;
    r.fp8_format = "E4M3";  // TE MXFP8BlockScaling's default (__init__.py line 369)
  }
  const std::vector<std::string_view> allowed = options_of(r.kind, r.name);
  std::string_view rest = colon == std::string_view::npos ? std::string_view{} : spec.substr(colon + 1);
  if (colon != std::string_view::npos && trim_blanks(rest).empty())
    throw Error(fmt::format("recipe '{}': nothing after ':' (expected KEY=VALUE,...)", spec));
  const std::string context = fmt::format("recipe '{}'", spec);
  for_each_key_value(rest, context, [&](std::string_view key, std::string_view v) {
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string takes;
      for (auto a : allowed) takes += (takes.empty() ? "" : ", ") + std::string(a);
      throw Error(fmt::format("recipe '{}': {} does not take option '{}' ({})", spec, r.name, key,
                              takes.empty() ? "it takes no options" : "it takes " + takes));
    }
    if (key == "fp8_format") {
      set_fp8_format(r, spec, v);
      if (r.kind == Kind::mx)
        r.block_backward =
            parse_block_format(r.fp8_format == "HYBRID" ? "mxfp8_e5m2" : "mxfp8_e4m3", 0, r.block_forward.rule);
    } else if (key == "margin") {
      r.margin = parse_integer<int>(v, context, key);
      if (r.margin < 0 || r.margin > 126) throw Error(fmt::format("recipe '{}': margin must be 0..126", spec));
    } else if (key == "amax_history_len") {
      r.amax_history_len = parse_integer<int>(v, context, key);
      if (r.amax_history_len < 1) throw Error(fmt::format("recipe '{}': amax_history_len must be >= 1", spec));
    } else if (key == "amax_compute_algo") {
      if (v == "max") r.amax_compute_max = true;
      else if (v == "most_recent") r.amax_compute_max = false;
      else throw Error(fmt::format("recipe '{}': amax_compute_algo must be max or most_recent, got '{}'", spec, v));
    } else if (key == "power_2_scales") {
      r.power_2_scales = parse_bool(spec, key, v);
    } else if (key == "scales") {
      if (v == "pow2") r.power_2_scales = true;
      else if (v == "fp32") r.power_2_scales = false;
      else throw Error(fmt::format("recipe '{}': scales must be pow2 or fp32, got '{}'", spec, v));
    } else if (key == "block") {
      r.block = parse_integer<int>(v, context, key);
      if (r.block < 1) throw Error(fmt::format("recipe '{}': block must be >= 1", spec));
    } else if (key == "scaling_mode") {
      BlockScaleRule rule;
      try {
        rule = parse_block_scale_rule(v);
      } catch (const Error& e) {
        throw Error(fmt::format("recipe '{}': scaling_mode must be floor or rceil, got '{}'", spec, v));
      }
      r.block_forward.rule = r.block_backward.rule = rule;
    } else if (key == "rht") {
      r.rht = parse_bool(spec, key, v);
    } else if (key == "sr") {
      r.sr = parse_bool(spec, key, v);
    } else if (key == "2d") {
      r.two_d = parse_bool(spec, key, v);
    } else if (key == "seed") {
      r.seed = parse_integer<std::uint64_t>(v, context, key);
    }
  });
  r.spec = canonical_spec(r);
  return r;
}

const std::array<float, 16>& hadamard_signs() {
  // transformer_engine/pytorch/custom_recipes/reference_nvfp4.py line 338 (get_wgrad_sign_vector).
  static const std::array<float, 16> d{1, 1, 1, -1, 1, -1, -1, -1, -1, -1, -1, 1, -1, 1, -1, -1};
  return d;
}

void hadamard16(std::span<float> x, std::size_t rows, std::size_t cols) {
  if (x.size() != rows * cols) throw Error(fmt::format("hadamard16: {} values are not {} x {}", x.size(), rows, cols));
  const auto& d = hadamard_signs();
  double v[16];
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t c0 = 0; c0 + 16 <= cols; c0 += 16) {
      float* seg = x.data() + r * cols + c0;
      for (int i = 0; i < 16; ++i) v[i] = static_cast<double>(seg[i]) * d[static_cast<std::size_t>(i)];
      // Sylvester's H = [[H, H], [H, -H]] as four butterfly stages (the fast Walsh-Hadamard transform).
      for (int h = 1; h < 16; h *= 2)
        for (int i = 0; i < 16; i += 2 * h)
          for (int j = i; j < i + h; ++j) {
            const double a = v[j], b = v[j + h];
            v[j] = a + b;
            v[j + h] = a - b;
          }
      for (int j = 0; j < 16; ++j) seg[j] = static_cast<float>(v[j] * 0.25);
    }
}

float torchao_scale(float amax, double fp8_max_v, bool power_2) {
  // torchao/float8/float8_utils.py lines 45-52: EPS = 1e-12 (line 20); the division in float64.
  const double a = std::isnan(amax) ? static_cast<double>(amax) : std::max(static_cast<double>(amax), 1e-12);
  float s = static_cast<float>(fp8_max_v / a);
  if (power_2 && std::isfinite(s) && s > 0) s = std::bit_cast<float>(std::bit_cast<std::uint32_t>(s) & 0xFF800000u);
  return s;
}

float te_scale(float amax, float fp8_max_v, bool power_2) {
  if (std::isinf(amax) || amax == 0.0f || std::isnan(amax)) return 1.0f;
  float s = fp8_max_v / amax;
  if (std::isinf(s)) s = std::numeric_limits<float>::max();
  if (power_2) s = std::bit_cast<float>(std::bit_cast<std::uint32_t>(s) & 0xFF800000u);
  return s;
}

Quantizer::Quantizer(Recipe r) : recipe_(std::move(r)) {}

QuantizedOperand Quantizer::quantize(std::string_view tensor, Role role, std::span<const float> x, std::size_t rows,
                                     std::size_t cols) {
  if (x.size() != rows * cols)
    throw Error(fmt::format("recipe {}: operand {} of '{}' has {} values, not {} x {}", recipe_.name, to_string(role),
                            tensor, x.size(), rows, cols));
  const Recipe& R = recipe_;
  const Operand op = operand_of(role);
  const bool grad = op == Operand::dy;
  const Format& f8 = grad ? R.backward : R.forward;
  const std::uint64_t index0 = sr_offset_;
  QuantizedOperand q;
  switch (R.kind) {
    case Kind::none: {
      scaled_round(x, Tiling{rows, cols, std::max<std::size_t>(rows, 1), std::max<std::size_t>(cols, 1)},
                   std::vector<float>(1, 1.0f), f8, Rounding{}, index0, q);
      break;
    }
    case Kind::tensorwise_current: {
      const Tiling t{rows, cols, std::max<std::size_t>(rows, 1), std::max<std::size_t>(cols, 1)};
      const float amax = tile_amax(x, t, true).at(0);
      scaled_round(x, t, {torchao_scale(amax, fp8_max(f8), R.power_2_scales)}, f8, Rounding{}, index0, q);
      break;
    }
    case Kind::tensorwise_delayed: {
      const Tiling t{rows, cols, std::max<std::size_t>(rows, 1), std::max<std::size_t>(cols, 1)};
      DelayedState& st = delayed_[std::string(tensor) + "/" + std::string(to_string(op))];
      if (st.amax_history.empty()) st.amax_history.assign(static_cast<std::size_t>(R.amax_history_len), 0.0f);
      // This step's amax goes into history[0] (the max over the step's calls); the scale is last step's.
      const float amax = x.empty() ? 0.0f : tile_amax(x, t, false).at(0);
      st.amax_history[0] = std::fmax(st.amax_history[0], amax);
      scaled_round(x, t, {st.scale}, f8, Rounding{}, index0, q);
      break;
    }
    case Kind::rowwise:
    case Kind::rowwise_gw_hp: {
      if (R.kind == Kind::rowwise_gw_hp && (role == Role::wgrad_x || role == Role::wgrad_dy)) {
        // grad_weight_hp = input_t_hp @ grad_output_hp (torchao config.py lines 364-370).
        q.values.assign(x.begin(), x.end());
        q.quantized = false;
        break;
      }
      const bool per_tensor = R.kind == Kind::rowwise_gw_hp && role == Role::dgrad_w;  // config.py line 362
      const Tiling t{rows, cols, per_tensor ? std::max<std::size_t>(rows, 1) : 1, std::max<std::size_t>(cols, 1)};
      const std::vector<float> amax = tile_amax(x, t, true);
      std::vector<float> s(amax.size());
      for (std::size_t i = 0; i < s.size(); ++i) s[i] = torchao_scale(amax[i], fp8_max(f8), true);
      scaled_round(x, t, s, f8, Rounding{}, index0, q);
      break;
    }
    case Kind::blockwise: {
      const auto b = static_cast<std::size_t>(R.block);
      const Tiling t{rows, cols, op == Operand::w ? b : 1, b};
      const std::vector<float> amax = tile_amax(x, t, false);
      std::vector<float> s(amax.size());
      for (std::size_t i = 0; i < s.size(); ++i)
        s[i] = te_scale(amax[i], static_cast<float>(fp8_max(f8)), R.power_2_scales);
      scaled_round(x, t, s, f8, Rounding{}, index0, q);
      break;
    }
    case Kind::mx:
    case Kind::nvfp4: {
      const BlockFormat& bf = grad ? R.block_backward : R.block_forward;
      Rounding rr;
      if (R.kind == Kind::nvfp4 && R.sr && grad) rr = Rounding::stochastic(R.seed);
      std::span<const float> src = x;
      std::vector<float> transformed;
      if (R.kind == Kind::nvfp4 && R.rht && (role == Role::wgrad_x || role == Role::wgrad_dy)) {
        transformed.assign(x.begin(), x.end());
        hadamard16(transformed, rows, cols);
        src = transformed;
        q.hadamard = true;
      }
      BlockStats bs;
      BulkOptions opt;
      opt.threads = 1;
      opt.index0 = index0;
      if (R.kind == Kind::nvfp4 && R.two_d && op == Operand::w) {
        const Gathered2d g = gather_tiles(src, rows, cols);
        const BlockFormat tile = parse_block_format("nvfp4", static_cast<int>(kTile2d * kTile2d));
        const BlockQuantized bq = quantize_blocks(g.data, g.data.size(), tile, rr, &bs, opt);
        std::vector<float> deq(g.data.size());
        dequantize_blocks(bq, g.data.size(), tile, deq, opt);
        q.values.resize(x.size());
        const Tiling t{rows, cols, kTile2d, kTile2d};
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t c = 0; c < cols; ++c)
            q.values[r * cols + c] = deq[t.tile_of(r, c) * kTile2d * kTile2d + (r % kTile2d) * kTile2d + c % kTile2d];
        q.scales = block_scale_factors(bq, tile);
        q.scale_rows = t.tiles_down();
        q.scale_cols = t.tiles_across();
        q.tensor_scale = bq.tensor_scale;
        // The padding zeros were counted as elements and blocks; the Stats below count the operand only.
      } else {
        q.values.resize(x.size());
        if (keep_scales_) {
          const BlockQuantized bq = quantize_blocks(src, cols, bf, rr, &bs, opt);
          dequantize_blocks(bq, cols, bf, q.values, opt);
          q.scales = block_scale_factors(bq, bf);
          q.scale_rows = rows;
          q.scale_cols =
              cols == 0 ? 0 : (cols + static_cast<std::size_t>(bf.block) - 1) / static_cast<std::size_t>(bf.block);
          q.tensor_scale = bq.tensor_scale;
        } else {
          round_blocks(src, q.values, cols, bf, rr, &bs, opt);  // the same values in one fused pass
        }
      }
      q.stats = stats_of_blocks(bs, src, q.values);
      break;
    }
  }
  if (R.kind == Kind::nvfp4 && R.sr && grad) sr_offset_ += x.size();
  return q;
}

void Quantizer::end_step() {
  if (recipe_.kind != Kind::tensorwise_delayed) return;
  for (auto& [key, st] : delayed_) {
    const Format& f8 = key.ends_with("/dy") ? recipe_.backward : recipe_.forward;
    // delayed_scaling.cu lines 91-111: roll the history (entry 0 moves to the end, a fresh 0 at the
    // front), amax = max over it with fmaxf (NaN skipped) or the most recent entry.
    std::vector<float>& h = st.amax_history;
    const float last = h[0];
    float amax = 0.0f;
    for (float a : h) amax = std::fmax(amax, a);
    std::rotate(h.begin(), h.begin() + 1, h.end());
    h[0] = 0.0f;
    if (!recipe_.amax_compute_max) amax = last;
    // Lines 136-152: scaled_max = fp8_max * 2^-margin (line 300).
    const float scaled_max = static_cast<float>(f8.max_finite) * std::pow(2.0f, static_cast<float>(-recipe_.margin));
    float s = (std::isfinite(amax) && amax > 0) ? scaled_max / amax : st.scale;
    if (std::isinf(s)) s = std::numeric_limits<float>::max();
    st.scale = s;
  }
}

nlohmann::json Quantizer::state_json() const {
  nlohmann::json d = nlohmann::json::object();
  for (const auto& [key, st] : delayed_) {
    std::vector<std::uint32_t> bits;
    for (float a : st.amax_history) bits.push_back(std::bit_cast<std::uint32_t>(a));
    d[key] = {{"amax_history_bits", bits}, {"scale_bits", std::bit_cast<std::uint32_t>(st.scale)}};
  }
  return {{"recipe", recipe_.spec}, {"sr_offset", sr_offset_}, {"delayed", d}};
}

void Quantizer::load_state(const nlohmann::json& j) {
  if (j.at("recipe").get<std::string>() != recipe_.spec)
    throw Error(fmt::format("recipe state of '{}', not of '{}'", j.at("recipe").get<std::string>(), recipe_.spec));
  std::map<std::string, DelayedState> s;
  for (const auto& [key, v] : j.at("delayed").items()) {
    DelayedState st;
    for (auto b : v.at("amax_history_bits").get<std::vector<std::uint32_t>>())
      st.amax_history.push_back(std::bit_cast<float>(b));
    st.scale = std::bit_cast<float>(v.at("scale_bits").get<std::uint32_t>());
    s[key] = std::move(st);
  }
  set_delayed_state(std::move(s));
  sr_offset_ = j.at("sr_offset").get<std::uint64_t>();
}

void Quantizer::set_delayed_state(std::map<std::string, DelayedState> s) {
  for (const auto& [key, st] : s)
    if (st.amax_history.size() != static_cast<std::size_t>(recipe_.amax_history_len))
      throw Error(fmt::format("recipe {}: saved amax history of '{}' has {} entries, the recipe keeps {}", recipe_.name,
                              key, st.amax_history.size(), recipe_.amax_history_len));
  delayed_ = std::move(s);
}

}  // namespace mpsim::recipe
