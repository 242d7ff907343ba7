// Block formats: scales per block, elements through the bulk engine (block.hpp).
#include "mpsim/format/block.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

#include <fmt/format.h>

#include "mpsim/error.hpp"
#include "mpsim/format/bulk.hpp"

namespace mpsim {

namespace {

// OCP MX v1.0 table 1 (section 5): the concrete MX formats and their element types; NVFP4's e2m1
// elements and e4m3 scales (NVIDIA, "NVFP4", 2025; torchao nvfp4_tensor.py).
struct BlockName {
  std::string_view name;
  const Format& (*element)();
  bool two_level;
};
constexpr BlockName kBlockNames[] = {
    {"mxfp8_e4m3", fp8_e4m3, false},      {"mxfp8_e5m2", fp8_e5m2, false},
    {"mxfp6_e2m3", float6_e2m3fn, false}, {"mxfp6_e3m2", float6_e3m2fn, false},
    {"mxfp4_e2m1", float4_e2m1fn, false}, {"nvfp4", float4_e2m1fn, true},
};

constexpr int kMxBlock = 32;     // OCP MX v1.0 section 5: k = 32 for every concrete MX format
constexpr int kNvfp4Block = 16;  // NVFP4: 16 elements per e4m3 scale
constexpr int kE8m0MinExp = -127, kE8m0MaxExp = 127;  // E8M0's range (OCP MX v1.0 section 5.4.1)
// nvfp4 (torchao per_tensor_amax_to_scale): T = amax / (F8E4M3_MAX * F4_E2M1_MAX); block scales are
// clamped to [finfo(float8_e4m3fn).tiny, F8E4M3_MAX] before the cast to e4m3.
constexpr float kE4m3Max = 448.0f, kE2m1Max = 6.0f, kE4m3Tiny = 0.015625f;

Format saturating(const Format& f) { return with_options(f, Subnormals::keep, Overflow::saturate); }

// Whether rounding a value below float's normal range (where the float product x * 2^-k may itself have
// been rounded, or underflowed to 0) gives the same element as rounding the exact V / X: true in the
// modes that send every magnitude below half the element's smallest subnormal (>= 2^-16 here) to 0.
bool float_scaling_exact_enough(RoundingMode m) {
  return m == RoundingMode::nearest_even || m == RoundingMode::toward_zero || m == RoundingMode::nearest_away ||
         m == RoundingMode::stochastic;
}

struct Rows {
  std::size_t row_len, rows;
};
Rows rows_of(std::size_t n, std::size_t row_len) {
  if (row_len == 0) row_len = n;
  if (row_len == 0) return {0, 0};
  if (n % row_len != 0)
    throw Error(fmt::format("block quantize: {} elements are not whole rows of {}", n, row_len));
  return {row_len, n / row_len};
}

// Calls f(begin, end) for every block, row by row (the last block of a row may be short).
template <class F>
void for_each_block(std::size_t n, std::size_t row_len, int block, F&& f) {
  const Rows rs = rows_of(n, row_len);
  for (std::size_t row = 0; row < rs.rows; ++row) {
    const std::size_t row_begin = row * rs.row_len, row_end = row_begin + rs.row_len;
    for (std::size_t b = row_begin; b < row_end; b += static_cast<std::size_t>(block))
      f(b, std::min(row_end, b + static_cast<std::size_t>(block)));
  }
}

std::size_t block_count(std::size_t n, std::size_t row_len, int block) {
  const Rows rs = rows_of(n, row_len);
  return rs.rows * ((rs.row_len + static_cast<std::size_t>(block) - 1) / static_cast<std::size_t>(block));
}

// The MX scale exponent k of a block with largest magnitude amax > 0 (finite).
int mx_scale_exponent(float amax, const BlockFormat& f) {
  int k;
  if (f.rule == BlockScaleRule::floor) {
    k = std::ilogb(amax) - f.element.emax;  // floor(log2 amax) - emax_elem (ilogb: exact, subnormals too)
  } else {
    // rceil: the smallest k with amax <= max_elem * 2^k (comparisons exact in double).
    const double a = amax, m = f.element.max_finite;
    k = std::ilogb(a) - std::ilogb(m) - 1;
    while (a > std::ldexp(m, k)) ++k;
  }
  return std::clamp(k, kE8m0MinExp, kE8m0MaxExp);
}

// 2^e as a normal float (|e| <= 126), so that multiplying by it is exact wherever the product is
// representable, also under DAZ (a subnormal multiplier would read as 0 there).
float pow2f(int e) { return std::bit_cast<float>(static_cast<std::uint32_t>(e + 127) << 23); }
bool pow2f_normal(int e) { return e >= -126 && e <= 127; }

// The largest |x[i]| over [b, end) as float bits: a NaN or inf anywhere gives bits >= 0x7f800000. Integer
// maxima of the magnitude bits order floats as their values do, and vectorize.
std::uint32_t max_magnitude_bits(std::span<const float> x, std::size_t b, std::size_t end) {
  std::uint32_t m = 0;
  for (std::size_t i = b; i < end; ++i) m = std::max(m, std::bit_cast<std::uint32_t>(x[i]) & 0x7fffffffu);
  return m;
}
constexpr std::uint32_t kInfBits = 0x7f800000u;

void count_elements(std::span<const float> x, std::span<const std::uint8_t> e, std::size_t b, std::size_t end,
                    const Format& elem, BlockStats& s) {
  for (std::size_t i = b; i < end; ++i) {
    if (!std::isfinite(x[i]) || x[i] == 0) continue;
    if (elem.is_zero_bits(e[i])) ++s.flushed;
    else if (elem.is_subnormal_bits(e[i])) ++s.subnormal;
  }
}

}  // namespace

void BlockStats::merge(const BlockStats& o) {
  count += o.count;
  nonzero += o.nonzero;
  nan_in += o.nan_in;
  inf_in += o.inf_in;
  flushed += o.flushed;
  subnormal += o.subnormal;
  saturated += o.saturated;
  blocks += o.blocks;
  nan_blocks += o.nan_blocks;
  for (const auto& [k, c] : o.scale_log2) scale_log2[k] += c;
}

const std::vector<std::string_view>& block_format_names() {
  static const std::vector<std::string_view> names = [] {
    std::vector<std::string_view> v;
    for (const auto& b : kBlockNames) v.push_back(b.name);
    return v;
  }();
  return names;
}

bool is_block_format_name(std::string_view name) {
  for (const auto& b : kBlockNames)
    if (b.name == name) return true;
  return false;
}

BlockScaleRule parse_block_scale_rule(std::string_view s) {
  if (s == "floor") return BlockScaleRule::floor;
  if (s == "rceil") return BlockScaleRule::rceil;
  throw Error("--block-scale: unknown rule '" + std::string(s) + "' (known: floor, rceil)");
}

BlockFormat parse_block_format(std::string_view name, int block, BlockScaleRule rule) {
  for (const auto& b : kBlockNames) {
    if (b.name != name) continue;
    BlockFormat f;
    f.name = std::string(name);
    f.element = saturating(b.element());
    f.two_level = b.two_level;
    f.scale = b.two_level ? fp8_e4m3() : float8_e8m0fnu();
    f.block = block > 0 ? block : (b.two_level ? kNvfp4Block : kMxBlock);
    if (block < 0) throw Error(fmt::format("--block {}: must be positive", block));
    if (b.two_level && rule == BlockScaleRule::rceil)
      throw Error("--block-scale rceil applies to the MX formats; nvfp4's scales are e4m3, not powers of two");
    f.rule = rule;
    return f;
  }
  std::string known;
  for (const auto& b : kBlockNames) known += (known.empty() ? "" : ", ") + std::string(b.name);
  throw Error("unknown block format '" + std::string(name) + "' (known: " + known + ")");
}

BlockQuantized quantize_blocks(std::span<const float> x, std::size_t row_len, const BlockFormat& f, const Rounding& r,
                               BlockStats* stats) {
  validate(r);
  const std::size_t n = x.size();
  BlockQuantized q;
  q.elements.assign(n, 0);
  q.scales.reserve(block_count(n, row_len, f.block));
  BlockStats s;
  s.count = n;
  const bool use_float = float_scaling_exact_enough(r.mode);
  std::vector<float> scaled_f(use_float ? n : 0);
  std::vector<double> scaled_d(use_float ? 0 : n);
  std::vector<std::pair<std::size_t, std::size_t>> nan_blocks;  // [begin, end) of the blocks whose scale is NaN

  if (stats)
    for (std::size_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) ++s.nan_in;
      else if (std::isinf(x[i])) ++s.inf_in;
      else if (x[i] != 0) ++s.nonzero;
    }

  if (!f.two_level) {
    const std::uint64_t nan_scale = f.scale.nan_bits;
    // The E8M0 encoding of every scale 2^k, k = -127..127, by round_bits (exact: powers of two).
    std::uint8_t scale_enc[kE8m0MaxExp - kE8m0MinExp + 1];
    for (int k = kE8m0MinExp; k <= kE8m0MaxExp; ++k)
      scale_enc[k - kE8m0MinExp] = static_cast<std::uint8_t>(round_bits(std::ldexp(1.0, k), f.scale));
    for_each_block(n, row_len, f.block, [&](std::size_t b, std::size_t end) {
      ++s.blocks;
      const std::uint32_t amax_bits = max_magnitude_bits(x, b, end);
      const float amax = std::bit_cast<float>(amax_bits);
      if (amax_bits >= kInfBits) {
        ++s.nan_blocks;
        q.scales.push_back(static_cast<std::uint8_t>(nan_scale));
        nan_blocks.emplace_back(b, end);
        return;  // scaled values stay 0
      }
      // An all-zero block takes the smallest scale (as gfloat's compute_scale_amax does).
      const int k = amax == 0 ? kE8m0MinExp : mx_scale_exponent(amax, f);
      q.scales.push_back(scale_enc[static_cast<std::size_t>(k - kE8m0MinExp)]);
      ++s.scale_log2[k];
      // |V| / X above the element's largest value, compared exactly: |V| > max_elem * 2^k.
      const double sat_above = std::ldexp(f.element.max_finite, k);
      if (stats)
        for (std::size_t i = b; i < end; ++i) s.saturated += std::fabs(x[i]) > sat_above;
      if (use_float && pow2f_normal(-k)) {
        const float inv = pow2f(-k);
        for (std::size_t i = b; i < end; ++i) scaled_f[i] = x[i] * inv;
      } else if (use_float) {
        for (std::size_t i = b; i < end; ++i) scaled_f[i] = std::ldexp(x[i], -k);
      } else {
        for (std::size_t i = b; i < end; ++i) scaled_d[i] = std::ldexp(static_cast<double>(x[i]), -k);  // exact
      }
    });
  } else {
    // nvfp4, torchao's float arithmetic step by step.
    const std::uint32_t tensor_amax_bits = max_magnitude_bits(x, 0, n);
    const bool finite = tensor_amax_bits < kInfBits;
    const float tensor_amax = std::bit_cast<float>(tensor_amax_bits);
    // An all-zero tensor gets T = 1 (Transformer Engine's convention; torchao would divide 0 by 0).
    const float t = !finite ? std::numeric_limits<float>::quiet_NaN()
                    : tensor_amax == 0 ? 1.0f
                                       : tensor_amax / (kE4m3Max * kE2m1Max);
    q.tensor_scale = t;
    for_each_block(n, row_len, f.block, [&](std::size_t b, std::size_t end) {
      ++s.blocks;
      if (!finite) {
        ++s.nan_blocks;
        q.scales.push_back(static_cast<std::uint8_t>(f.scale.nan_bits));
        nan_blocks.emplace_back(b, end);
        return;
      }
      const float amax = std::bit_cast<float>(max_magnitude_bits(x, b, end));
      const float block_scale = std::clamp(amax / kE2m1Max / t, kE4m3Tiny, kE4m3Max);
      const auto s8 = round_bits(block_scale, f.scale);
      q.scales.push_back(static_cast<std::uint8_t>(s8));
      const float total = t * decode_float(s8, f.scale);
      ++s.scale_log2[std::ilogb(total)];
      for (std::size_t i = b; i < end; ++i) {
        const float v = x[i] / total;
        s.saturated += std::fabs(v) > kE2m1Max;
        const float c = std::clamp(v, -kE2m1Max, kE2m1Max);
        if (use_float) scaled_f[i] = c;
        else scaled_d[i] = c;
      }
    });
  }

  Rounding er = r;
  er.input_subnormals = InputSubnormals::keep;
  if (use_float) round_array(std::span<const float>(scaled_f), std::span<std::uint8_t>(q.elements), f.element, er);
  else round_array(std::span<const double>(scaled_d), std::span<std::uint8_t>(q.elements), f.element, er);
  for (const auto& [b, end] : nan_blocks)
    std::fill(q.elements.begin() + static_cast<std::ptrdiff_t>(b), q.elements.begin() + static_cast<std::ptrdiff_t>(end), 0);

  if (stats) {
    // Elements of NaN blocks are stored as 0 but are not "flushed": they are NaN (nan_blocks).
    std::size_t next_nan = 0;
    for_each_block(n, row_len, f.block, [&](std::size_t b, std::size_t end) {
      if (next_nan < nan_blocks.size() && nan_blocks[next_nan].first == b) {
        ++next_nan;
        return;
      }
      count_elements(x, q.elements, b, end, f.element, s);
    });
    stats->merge(s);
  }
  return q;
}

void dequantize_blocks(const BlockQuantized& q, std::size_t row_len, const BlockFormat& f, std::span<float> out) {
  const std::size_t n = q.elements.size();
  if (out.size() != n)
    throw Error(fmt::format("block dequantize: {} elements but an output of {}", n, out.size()));
  if (q.scales.size() != block_count(n, row_len, f.block))
    throw Error(fmt::format("block dequantize: {} scales for {} blocks", q.scales.size(), block_count(n, row_len, f.block)));
  decode_array(std::span<const std::uint8_t>(q.elements), out, f.element);
  std::size_t blk = 0;
  for_each_block(n, row_len, f.block, [&](std::size_t b, std::size_t end) {
    const std::uint64_t sb = q.scales[blk++];
    if (is_nan_bits(sb, f.scale) || std::isnan(q.tensor_scale)) {
      std::fill(out.begin() + static_cast<std::ptrdiff_t>(b), out.begin() + static_cast<std::ptrdiff_t>(end),
                std::numeric_limits<float>::quiet_NaN());
      return;
    }
    if (f.two_level) {
      const float total = q.tensor_scale * decode_float(sb, f.scale);
      for (std::size_t i = b; i < end; ++i) out[i] *= total;
    } else {
      const int k = static_cast<int>(std::ilogb(decode(sb, f.scale)));
      // Exact where element * 2^k fits in float, always under the floor rule (it stays below 2^128); an rceil
      // block near float's top can round an element up to 2^128, which overflows to inf.
      if (pow2f_normal(k)) {
        const float m = pow2f(k);
        for (std::size_t i = b; i < end; ++i) out[i] *= m;
      } else {
        for (std::size_t i = b; i < end; ++i) out[i] = std::ldexp(out[i], k);
      }
    }
  });
}

void round_blocks(std::span<const float> x, std::span<float> out, std::size_t row_len, const BlockFormat& f,
                  const Rounding& r, BlockStats* stats) {
  if (out.size() != x.size())
    throw Error(fmt::format("block round: input has {} elements but output has {}", x.size(), out.size()));
  const BlockQuantized q = quantize_blocks(x, row_len, f, r, stats);
  dequantize_blocks(q, row_len, f, out);
}

}  // namespace mpsim
