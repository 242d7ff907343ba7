// Block formats: scales per block, elements through the bulk engine (block.hpp).
//
// The work is cut into contiguous ranges of whole blocks, one per thread (mpsim::parallel_for, each
// worker under the default floating-point environment), and each range into tiles of a few thousand
// elements that stay in the cache between the three steps: scale the tile, round it (round_array on the
// tile, generator index index0 + element index), and, for round_blocks, dequantize it. Every element's
// result depends only on its block and its index, and the statistics merge by sums, so the bits and the
// counts are the same whatever the thread count.
#include "mpsim/format/block.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "mpsim/error.hpp"
#include "mpsim/field_error.hpp"
#include "mpsim/parallel.hpp"

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
    {"mxfp8_e4m3", fp8_e4m3, false},      {"mxfp8_e5m2", fp8_e5m2, false},      {"mxfp6_e2m3", float6_e2m3fn, false},
    {"mxfp6_e3m2", float6_e3m2fn, false}, {"mxfp4_e2m1", float4_e2m1fn, false}, {"nvfp4", float4_e2m1fn, true},
};

constexpr int kMxBlock = 32;                          // OCP MX v1.0 section 5: k = 32 for every concrete MX format
constexpr int kNvfp4Block = 16;                       // NVFP4: 16 elements per e4m3 scale
constexpr int kE8m0MinExp = -127, kE8m0MaxExp = 127;  // E8M0's range (OCP MX v1.0 section 5.4.1)
// nvfp4 (torchao per_tensor_amax_to_scale): T = amax / (F8E4M3_MAX * F4_E2M1_MAX); block scales are
// clamped to [finfo(float8_e4m3fn).tiny, F8E4M3_MAX] before the cast to e4m3.
constexpr float kE4m3Max = 448.0f, kE2m1Max = 6.0f, kE4m3Tiny = 0.015625f;
constexpr std::uint32_t kInfBits = 0x7f800000u;
// Elements per tile: the tile's inputs, scaled copies and encodings (about 72 KiB at 8 KiB elements in the
// double case) stay in a core's L2 cache between the passes over it.
constexpr std::size_t kTile = std::size_t{1} << 13;
// Below this many elements per thread, starting a thread costs more than it saves (the bulk engine's figure).
constexpr std::size_t kMinPerThread = std::size_t{1} << 16;

Format saturating(const Format& f) { return with_options(f, Subnormals::keep, Overflow::saturate); }

// Whether rounding a value below float's normal range (where the float product x * 2^-k may itself have
// been rounded, or underflowed to 0) gives the same element as rounding the exact V / X: true in the
// modes that send every magnitude below half the element's smallest subnormal (>= 2^-16 here) to 0.
bool float_scaling_exact_enough(RoundingMode m) {
  return m == RoundingMode::nearest_even || m == RoundingMode::toward_zero || m == RoundingMode::nearest_away ||
         m == RoundingMode::stochastic;
}

// The blocks of n elements viewed as rows of row_len (0: one row): block j of the array covers
// [begin(j), end(j)), row by row, the last block of a row possibly short. The blocks of [jb, je) cover
// the contiguous elements [begin(jb), begin(je)).
struct BlockGrid {
  std::size_t row_len = 0, rows = 0, per_row = 0, block = 0;

  BlockGrid(std::size_t n, std::size_t row, int block_size) : block(static_cast<std::size_t>(block_size)) {
    row_len = row == 0 ? n : row;
    if (row_len == 0) return;
    if (n % row_len != 0) throw Error(fmt::format("block quantize: {} elements are not whole rows of {}", n, row_len));
    rows = n / row_len;
    per_row = (row_len + block - 1) / block;
  }
  std::size_t count() const { return rows * per_row; }
  std::size_t begin(std::size_t j) const { return j / per_row * row_len + j % per_row * block; }
  std::size_t end(std::size_t j) const { return std::min(j / per_row * row_len + row_len, begin(j) + block); }
};

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

int worker_count(std::size_t n, std::size_t blocks, const BulkOptions& opt) {
  if (opt.threads < 0) throw Error(fmt::format("block quantize: thread count must be >= 0, got {}", opt.threads));
  std::size_t t =
      opt.threads > 0 ? static_cast<std::size_t>(opt.threads) : static_cast<std::size_t>(hardware_threads());
  t = std::min({t, n / kMinPerThread, blocks});
  return static_cast<int>(std::max<std::size_t>(t, 1));
}

// Runs body(worker, jb, je) over contiguous ranges of the grid's blocks and merges the workers' stats.
template <class Body>
void for_block_ranges(const BlockGrid& g, std::size_t n, const BulkOptions& opt, BlockStats* stats, Body&& body) {
  const int t = worker_count(n, g.count(), opt);
  std::vector<BlockStats> parts(static_cast<std::size_t>(t));
  parallel_for(g.count(), t, "block",
               [&](int w, std::size_t jb, std::size_t je) { body(parts[static_cast<std::size_t>(w)], jb, je); });
  if (stats)
    for (const BlockStats& s : parts) stats->merge(s);
}

// Calls f(tb, te) over [jb, je) in runs of whole blocks of about kTile elements (at least one block).
template <class F>
void for_each_tile(const BlockGrid& g, std::size_t jb, std::size_t je, F&& f) {
  const std::size_t per_tile = std::max<std::size_t>(1, kTile / g.block);
  for (std::size_t tb = jb; tb < je; tb += per_tile) f(tb, std::min(je, tb + per_tile));
}

// The scales of a block format and the elements under them, one tile of blocks at a time.
class Quantizer {
 public:
  Quantizer(std::span<const float> x, const BlockGrid& g, const BlockFormat& f, const Rounding& r,
            const BulkOptions& opt, float tensor_scale)
      : x_(x), g_(g), f_(f), opt_(opt), t_(tensor_scale), use_float_(float_scaling_exact_enough(r.mode)) {
    er_ = r;
    er_.input_subnormals = InputSubnormals::keep;
    opt_.threads = 1;  // the caller's workers are the threads
    for (unsigned e = 0; e < 256; ++e)
      element_class_[e] = f.element.is_zero_bits(e) ? kZero : f.element.is_subnormal_bits(e) ? kSubnormal : kOther;
    if (!f.two_level)
      for (int k = kE8m0MinExp; k <= kE8m0MaxExp; ++k)  // E8M0 encodings of 2^k by round_bits (exact)
        scale_enc_[k - kE8m0MinExp] = static_cast<std::uint8_t>(round_bits(std::ldexp(1.0, k), f.scale));
  }

  // Quantizes blocks [jb, je): their scales into scales[0 ..), their elements into elements[0 ..)
  // (indexed from the tile's first element). Counts into s when stats is set.
  void tile(std::size_t jb, std::size_t je, std::span<std::uint8_t> scales, std::span<std::uint8_t> elements,
            bool stats, BlockStats& s) {
    const std::size_t e0 = g_.begin(jb), e1 = g_.begin(je), len = e1 - e0;
    if (use_float_) buf_f_.resize(len);
    else buf_d_.resize(len);
    nan_blocks_.clear();
    if (stats) count_inputs(e0, e1, s);
    for (std::size_t j = jb; j < je; ++j) {
      const std::size_t b = g_.begin(j), end = g_.end(j);
      ++s.blocks;
      const std::optional<std::uint8_t> enc =
          f_.two_level ? scale_nvfp4(b, end, e0, stats, s) : scale_mx(b, end, e0, stats, s);
      if (!enc) {
        ++s.nan_blocks;
        scales[j - jb] = static_cast<std::uint8_t>(f_.scale.nan_bits);
        nan_blocks_.push_back(j);
        fill_scaled(b - e0, end - e0, 0.0f);
      } else {
        scales[j - jb] = *enc;
      }
    }
    BulkOptions o = opt_;
    o.index0 = opt_.index0 + e0;
    const std::span<std::uint8_t> el = elements.first(len);
    if (use_float_) round_array(std::span<const float>(buf_f_), el, f_.element, er_, nullptr, o);
    else round_array(std::span<const double>(buf_d_), el, f_.element, er_, nullptr, o);
    for (const std::size_t j : nan_blocks_)
      std::fill(el.begin() + static_cast<std::ptrdiff_t>(g_.begin(j) - e0),
                el.begin() + static_cast<std::ptrdiff_t>(g_.end(j) - e0), std::uint8_t{0});
    if (stats) count_elements(jb, je, e0, el, s);
    flush_scale_counts(s);
  }

 private:
  // On the magnitude bits, without branches (the loop vectorizes): NaN above the infinity's pattern.
  void count_inputs(std::size_t b, std::size_t end, BlockStats& s) const {
    s.count += end - b;
    std::uint64_t nan = 0, inf = 0, nonzero = 0;
    for (std::size_t i = b; i < end; ++i) {
      const std::uint32_t m = std::bit_cast<std::uint32_t>(x_[i]) & 0x7fffffffu;
      nan += m > kInfBits;
      inf += m == kInfBits;
      nonzero += (m != 0) & (m < kInfBits);
    }
    s.nan_in += nan;
    s.inf_in += inf;
    s.nonzero += nonzero;
  }

  // Elements of NaN blocks are stored as 0 but are not "flushed": they are NaN (nan_blocks).
  void count_elements(std::size_t jb, std::size_t je, std::size_t e0, std::span<const std::uint8_t> el,
                      BlockStats& s) const {
    std::size_t next_nan = 0;
    for (std::size_t j = jb; j < je; ++j) {
      if (next_nan < nan_blocks_.size() && nan_blocks_[next_nan] == j) {
        ++next_nan;
        continue;
      }
      std::uint64_t flushed = 0, subnormal = 0;
      for (std::size_t i = g_.begin(j); i < g_.end(j); ++i) {
        const std::uint32_t m = std::bit_cast<std::uint32_t>(x_[i]) & 0x7fffffffu;
        const bool counted = (m != 0) & (m < kInfBits);  // finite non-zero input
        const std::uint8_t c = element_class_[el[i - e0]];
        flushed += counted & (c == kZero);
        subnormal += counted & (c == kSubnormal);
      }
      s.flushed += flushed;
      s.subnormal += subnormal;
    }
  }

  // The scales' log2 histogram, counted per tile in an array and added to BlockStats::scale_log2 (a map)
  // once per tile: a map increment per block of 16 or 32 elements was a visible part of the quantizer's
  // time (docs/performance.md, bench_recipes).
  void count_scale(int k) {
    const int i = k - kScaleLog2Min;
    ++scale_counts_[i];
    scale_lo_ = std::min(scale_lo_, i);
    scale_hi_ = std::max(scale_hi_, i);
  }
  void flush_scale_counts(BlockStats& s) {
    for (int i = scale_lo_; i <= scale_hi_; ++i)
      if (scale_counts_[i] != 0) {
        s.scale_log2[i + kScaleLog2Min] += scale_counts_[i];
        scale_counts_[i] = 0;
      }
    scale_lo_ = kScaleLog2Size;
    scale_hi_ = -1;
  }

  void fill_scaled(std::size_t b, std::size_t end, float v) {
    if (use_float_)
      std::fill(buf_f_.begin() + static_cast<std::ptrdiff_t>(b), buf_f_.begin() + static_cast<std::ptrdiff_t>(end), v);
    else
      std::fill(buf_d_.begin() + static_cast<std::ptrdiff_t>(b), buf_d_.begin() + static_cast<std::ptrdiff_t>(end), v);
  }

  // The MX scale exponent k of a block with largest magnitude amax > 0 (finite).
  int mx_scale_exponent(float amax) const {
    int k;
    if (f_.rule == BlockScaleRule::floor) {
      k = std::ilogb(amax) - f_.element.emax;  // floor(log2 amax) - emax_elem (ilogb: exact, subnormals too)
    } else {
      // rceil: the smallest k with amax <= max_elem * 2^k (comparisons exact in double).
      const double a = amax, m = f_.element.max_finite;
      k = std::ilogb(a) - std::ilogb(m) - 1;
      while (a > std::ldexp(m, k)) ++k;
    }
    return std::clamp(k, kE8m0MinExp, kE8m0MaxExp);
  }

  // One MX block [b, end): its scaled values V / 2^k into the tile buffer (at b - e0); the scale's encoding,
  // or nothing for a block holding NaN or inf.
  std::optional<std::uint8_t> scale_mx(std::size_t b, std::size_t end, std::size_t e0, bool stats, BlockStats& s) {
    const std::uint32_t amax_bits = max_magnitude_bits(x_, b, end);
    if (amax_bits >= kInfBits) return std::nullopt;
    const float amax = std::bit_cast<float>(amax_bits);
    // An all-zero block takes the smallest scale (as gfloat's compute_scale_amax does).
    const int k = amax == 0 ? kE8m0MinExp : mx_scale_exponent(amax);
    count_scale(k);
    if (stats) {
      // |V| / X above the element's largest value, compared exactly: |V| > max_elem * 2^k.
      const double sat_above = std::ldexp(f_.element.max_finite, k);
      std::uint64_t saturated = 0;
      for (std::size_t i = b; i < end; ++i) saturated += std::fabs(static_cast<double>(x_[i])) > sat_above;
      s.saturated += saturated;
    }
    if (use_float_ && pow2f_normal(-k)) {
      const float inv = pow2f(-k);
      for (std::size_t i = b; i < end; ++i) buf_f_[i - e0] = x_[i] * inv;
    } else if (use_float_) {
      for (std::size_t i = b; i < end; ++i) buf_f_[i - e0] = std::ldexp(x_[i], -k);
    } else {
      for (std::size_t i = b; i < end; ++i) buf_d_[i - e0] = std::ldexp(static_cast<double>(x_[i]), -k);  // exact
    }
    return scale_enc_[static_cast<std::size_t>(k - kE8m0MinExp)];
  }

  // One nvfp4 block, torchao's float arithmetic step by step.
  std::optional<std::uint8_t> scale_nvfp4(std::size_t b, std::size_t end, std::size_t e0, bool stats, BlockStats& s) {
    if (std::isnan(t_)) return std::nullopt;
    const float amax = std::bit_cast<float>(max_magnitude_bits(x_, b, end));
    const float block_scale = std::clamp(amax / kE2m1Max / t_, kE4m3Tiny, kE4m3Max);
    const auto s8 = round_bits(block_scale, f_.scale);
    const float total = t_ * decode_float(s8, f_.scale);
    count_scale(std::ilogb(total));
    if (stats) {
      std::uint64_t saturated = 0;
      for (std::size_t i = b; i < end; ++i) saturated += std::fabs(x_[i] / total) > kE2m1Max;
      s.saturated += saturated;
    }
    // One loop per buffer type, without the tests inside, so that each vectorises (the division stays a
    // division: torchao divides, and x / total is not x * (1 / total) in float).
    if (use_float_) {
      float* const out = buf_f_.data() + (b - e0);
      for (std::size_t i = b; i < end; ++i) out[i - b] = std::clamp(x_[i] / total, -kE2m1Max, kE2m1Max);
    } else {
      double* const out = buf_d_.data() + (b - e0);
      for (std::size_t i = b; i < end; ++i) out[i - b] = std::clamp(x_[i] / total, -kE2m1Max, kE2m1Max);
    }
    return static_cast<std::uint8_t>(s8);
  }

  std::span<const float> x_;
  const BlockGrid& g_;
  const BlockFormat& f_;
  Rounding er_;
  BulkOptions opt_;
  float t_;
  bool use_float_;
  std::uint8_t scale_enc_[kE8m0MaxExp - kE8m0MinExp + 1] = {};
  // What each element encoding is, for the telemetry: zero, a subnormal of the element type, or neither.
  static constexpr std::uint8_t kOther = 0, kZero = 1, kSubnormal = 2;
  std::uint8_t element_class_[256] = {};
  std::vector<float> buf_f_;
  std::vector<double> buf_d_;
  std::vector<std::size_t> nan_blocks_;
  // log2 of a scale: MX k in [-127, 127], nvfp4 ilogb of a float in [-149, 127].
  static constexpr int kScaleLog2Min = -149, kScaleLog2Size = 127 - kScaleLog2Min + 1;
  std::uint64_t scale_counts_[kScaleLog2Size] = {};
  int scale_lo_ = kScaleLog2Size, scale_hi_ = -1;
};

// nvfp4's per-tensor scale T from the bits of the tensor's largest magnitude (max_magnitude_bits).
float scale_of_amax(std::uint32_t amax_bits) {
  if (amax_bits >= kInfBits) return std::numeric_limits<float>::quiet_NaN();
  const float amax = std::bit_cast<float>(amax_bits);
  // An all-zero tensor gets T = 1 (Transformer Engine's convention; torchao would divide 0 by 0).
  const DefaultFpEnv env;  // T may be a float subnormal, which FTZ would flush
  return amax == 0 ? 1.0f : amax / (kE4m3Max * kE2m1Max);
}

// nvfp4's per-tensor scale T from the tensor's amax (a max over the workers' ranges: the same whatever
// their number); NaN when the tensor holds NaN or inf. 1 for MX.
float tensor_scale(std::span<const float> x, const BlockFormat& f, const BulkOptions& opt) {
  if (!f.two_level) return 1.0f;
  const int t = worker_count(x.size(), x.size(), opt);
  std::vector<std::uint32_t> part(static_cast<std::size_t>(t), 0);
  parallel_for(x.size(), t, "block", [&](int w, std::size_t b, std::size_t e) {
    part[static_cast<std::size_t>(w)] = max_magnitude_bits(x, b, e);
  });
  return scale_of_amax(*std::max_element(part.begin(), part.end()));
}

// The tensor scale a quantization runs under: the caller's (x a run of rows of a larger tensor) or x's own.
float tensor_scale(std::span<const float> x, const BlockFormat& f, const BulkOptions& opt, std::optional<float> given) {
  if (!f.two_level) return 1.0f;
  return given ? *given : tensor_scale(x, f, opt);
}

// Dequantizes blocks [jb, je) (elements indexed from the range's first element) into out[0 ..).
void dequantize_tile(const BlockGrid& g, const BlockFormat& f, float tensor_scale, std::size_t jb, std::size_t je,
                     std::span<const std::uint8_t> scales, std::span<const std::uint8_t> elements,
                     std::span<float> out) {
  const std::size_t e0 = g.begin(jb), len = g.begin(je) - e0;
  decode_array(elements.first(len), out.first(len), f.element);
  for (std::size_t j = jb; j < je; ++j) {
    const std::uint64_t sb = scales[j - jb];
    const auto b = out.begin() + static_cast<std::ptrdiff_t>(g.begin(j) - e0);
    const auto end = out.begin() + static_cast<std::ptrdiff_t>(g.end(j) - e0);
    if (is_nan_bits(sb, f.scale) || std::isnan(tensor_scale)) {
      std::fill(b, end, std::numeric_limits<float>::quiet_NaN());
    } else if (f.two_level) {
      const float total = tensor_scale * decode_float(sb, f.scale);
      for (auto i = b; i != end; ++i) *i *= total;
    } else {
      const int k = static_cast<int>(std::ilogb(decode(sb, f.scale)));
      // Exact where element * 2^k fits in float, always under the floor rule (it stays below 2^128); an rceil
      // block near float's top can round an element up to 2^128, which overflows to inf.
      if (pow2f_normal(k)) {
        const float m = pow2f(k);
        for (auto i = b; i != end; ++i) *i *= m;
      } else {
        for (auto i = b; i != end; ++i) *i = std::ldexp(*i, k);
      }
    }
  }
}

}  // namespace

void TensorAmax::add(std::span<const float> x) {
  amax_bits_ = std::max(amax_bits_, max_magnitude_bits(x, 0, x.size()));
}

float TensorAmax::tensor_scale(const BlockFormat& fmt) const {
  return fmt.two_level ? scale_of_amax(amax_bits_) : 1.0f;
}

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
  throw FieldError("block_scale", "'" + std::string(s) + "'", "unknown rule (known: floor, rceil)");
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
    if (block < 0) throw FieldError("block", std::to_string(block), "must be positive");
    if (b.two_level && rule == BlockScaleRule::rceil)
      throw FieldError("block_scale", "'rceil'",
                       "applies to the MX formats; nvfp4's scales are e4m3, not powers of two");
    f.rule = rule;
    return f;
  }
  std::string known;
  for (const auto& b : kBlockNames) known += (known.empty() ? "" : ", ") + std::string(b.name);
  throw Error("unknown block format '" + std::string(name) + "' (known: " + known + ")");
}

BlockQuantized quantize_blocks(std::span<const float> x, std::size_t row_len, const BlockFormat& f, const Rounding& r,
                               BlockStats* stats, const BulkOptions& opt, std::optional<float> given_tensor_scale) {
  validate(r);
  const BlockGrid g(x.size(), row_len, f.block);
  BlockQuantized q;
  q.elements.assign(x.size(), 0);
  q.scales.assign(g.count(), 0);
  q.tensor_scale = tensor_scale(x, f, opt, given_tensor_scale);
  for_block_ranges(g, x.size(), opt, stats, [&](BlockStats& s, std::size_t jb, std::size_t je) {
    Quantizer qz(x, g, f, r, opt, q.tensor_scale);
    for_each_tile(g, jb, je, [&](std::size_t tb, std::size_t te) {
      qz.tile(tb, te, std::span<std::uint8_t>(q.scales).subspan(tb),
              std::span<std::uint8_t>(q.elements).subspan(g.begin(tb)), stats != nullptr, s);
    });
  });
  return q;
}

void dequantize_blocks(const BlockQuantized& q, std::size_t row_len, const BlockFormat& f, std::span<float> out,
                       const BulkOptions& opt) {
  const std::size_t n = q.elements.size();
  if (out.size() != n) throw Error(fmt::format("block dequantize: {} elements but an output of {}", n, out.size()));
  const BlockGrid g(n, row_len, f.block);
  if (q.scales.size() != g.count())
    throw Error(fmt::format("block dequantize: {} scales for {} blocks", q.scales.size(), g.count()));
  for_block_ranges(g, n, opt, nullptr, [&](BlockStats&, std::size_t jb, std::size_t je) {
    for_each_tile(g, jb, je, [&](std::size_t tb, std::size_t te) {
      const std::size_t e0 = g.begin(tb);
      dequantize_tile(g, f, q.tensor_scale, tb, te, std::span<const std::uint8_t>(q.scales).subspan(tb),
                      std::span<const std::uint8_t>(q.elements).subspan(e0), out.subspan(e0));
    });
  });
}

std::vector<double> block_scale_factors(const BlockQuantized& q, const BlockFormat& f) {
  std::vector<double> factors(q.scales.size());
  for (std::size_t j = 0; j < factors.size(); ++j) {
    const std::uint64_t sb = q.scales[j];
    if (is_nan_bits(sb, f.scale) || std::isnan(q.tensor_scale)) factors[j] = std::numeric_limits<double>::quiet_NaN();
    else if (f.two_level) factors[j] = q.tensor_scale * decode_float(sb, f.scale);  // in float, as dequantize_tile
    else factors[j] = decode(sb, f.scale);                                          // 2^k, exact
  }
  return factors;
}

void round_blocks(std::span<const float> x, std::span<float> out, std::size_t row_len, const BlockFormat& f,
                  const Rounding& r, BlockStats* stats, const BulkOptions& opt,
                  std::optional<float> given_tensor_scale) {
  if (out.size() != x.size())
    throw Error(fmt::format("block round: input has {} elements but output has {}", x.size(), out.size()));
  validate(r);
  const BlockGrid g(x.size(), row_len, f.block);
  const float t = tensor_scale(x, f, opt, given_tensor_scale);
  // Each tile is quantized (reading x) before it is dequantized (writing out), so out may alias x.
  for_block_ranges(g, x.size(), opt, stats, [&](BlockStats& s, std::size_t jb, std::size_t je) {
    Quantizer qz(x, g, f, r, opt, t);
    std::vector<std::uint8_t> scales, elements;
    for_each_tile(g, jb, je, [&](std::size_t tb, std::size_t te) {
      scales.resize(te - tb);
      elements.resize(g.begin(te) - g.begin(tb));
      qz.tile(tb, te, scales, elements, stats != nullptr, s);
      dequantize_tile(g, f, t, tb, te, scales, elements, out.subspan(g.begin(tb)));
    });
  });
}

}  // namespace mpsim
