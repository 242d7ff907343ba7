// Bulk rounding engine: argument checks, path choice (cpuid), threads, Stats, and the scalar path.
// The vector kernels live in detail/bulk_kernel.hpp (by topic), compiled per ISA in bulk_avx2.cpp and bulk_avx512.cpp.
// The scalar path calls round_bits() per element: it is the specification the vector paths are
// tested against bit for bit (tests/format/bulk_exhaustive_test.cpp).
#include "mpsim/format/bulk.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>  // _mm_sfence
#endif

#include "mpsim/detail/cpu_features.hpp"
#include "mpsim/error.hpp"
#include "mpsim/format/detail/bulk_params.hpp"
#include "mpsim/parallel.hpp"

namespace mpsim {

namespace bd = bulk_detail;

static_assert(static_cast<int>(bd::Mode::stochastic) == static_cast<int>(RoundingMode::stochastic) &&
              static_cast<int>(bd::Mode::to_odd) == static_cast<int>(RoundingMode::to_odd) &&
              static_cast<int>(bd::Mode::nearest_even) == static_cast<int>(RoundingMode::nearest_even));

void Stats::merge(const Stats& o) {
  count += o.count;
  zero_in += o.zero_in;
  nan += o.nan;
  inf_in += o.inf_in;
  exact += o.exact;
  rounded += o.rounded;
  underflow += o.underflow;
  subnormal += o.subnormal;
  overflow += o.overflow;
  max_abs = std::max(max_abs, o.max_abs);
  if (o.min_abs_nonzero != 0 && (min_abs_nonzero == 0 || o.min_abs_nonzero < min_abs_nonzero))
    min_abs_nonzero = o.min_abs_nonzero;
}

std::string_view to_string(Path p) {
  switch (p) {
    case Path::automatic: return "auto";
    case Path::scalar: return "scalar";
    case Path::avx2: return "avx2";
    case Path::avx512: return "avx512";
  }
  return "?";
}

namespace {

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = cpu_features().avx2_fma_f16c();
  return has;
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = bd::avx512_compiled() && cpu_features().avx512_engine();
  return has;
#else
  return false;
#endif
}

}  // namespace

bool path_available(Path p) {
  switch (p) {
    case Path::automatic:
    case Path::scalar: return true;
    case Path::avx2: return cpu_has_avx2();
    case Path::avx512: return cpu_has_avx512();
  }
  return false;
}

Path best_path() {
  if (cpu_has_avx512()) return Path::avx512;
  if (cpu_has_avx2()) return Path::avx2;
  return Path::scalar;
}

// emin + 23 - m <= 127: the float 2^(emin + 23 - m) that round_loop adds to format-subnormal lanes
// (detail/bulk_round.hpp, round_fpu) is finite; only formats whose smallest normal is above 2^(104 + m) fail it.
// The vector kernels know signed formats with a zero (the NaN-less OCP fp6 / fp4 types act as saturating
// formats there); the unsigned, zero-less e8m0 runs the scalar code.
bool vector_supported(const Format& f) {
  return f.man_bits <= 22 && f.emin >= -126 && f.emin + 23 - f.man_bits <= 127 && f.storage_bits <= 32 && f.has_sign &&
         f.has_zero;
}

int outcome_class(double x, const Format& f, const Rounding& r) {
  const std::uint64_t bits = round_bits(x, f, r, 0);
  const std::uint64_t mag = bits & ~f.sign_bit() & f.storage_mask();
  // NaN/inf tested first: in the "fnuz" formats the one NaN (0x80) has a zero magnitude field.
  if (is_nan_bits(bits, f) || is_inf_bits(bits, f)) return 3;
  if (f.is_zero_bits(bits)) return 0;
  // Without a zero, a magnitude below the smallest number is clamped to it: lost like a flush to zero.
  if (!f.has_zero && mag == 0 && std::fabs(x) < f.min_normal) return 0;
  if (f.saturates() && mag == f.max_finite_bits && std::fabs(x) > f.max_finite) return 3;
  if (f.is_subnormal_bits(bits)) return 1;
  return 2;
}

namespace {

void check_sizes(std::size_t in, std::size_t out, const void* ip, const void* op, const char* who) {
  if (in != out)
    throw Error(std::string(who) + ": input has " + std::to_string(in) + " elements but output has " +
                std::to_string(out));
  if (in != 0 && (ip == nullptr || op == nullptr))
    throw Error(std::string(who) + ": null pointer with non-zero length " + std::to_string(in));
}

Path check_path(const BulkOptions& opt) {
  if (!path_available(opt.path))
    throw Error(std::string("round_array: code path '") + std::string(to_string(opt.path)) +
                "' is not available on this CPU (or this build)");
  if (opt.threads < 0) throw Error("round_array: thread count must be >= 0, got " + std::to_string(opt.threads));
  return opt.path == Path::automatic ? best_path() : opt.path;
}

void check_float_fits(const Format& f) {
  if (f.exp_bits > 8 || f.man_bits > 23 || f.emax > 127 || f.emin - f.man_bits < -149)
    throw Error("round_array: format " + f.name + " does not fit in float; round into a double array instead");
}

template <class Out>
void check_storage(const Format& f) {
  if (static_cast<int>(sizeof(Out)) != f.storage_bytes())
    throw Error("round_array: format " + f.name + " is stored in " + std::to_string(f.storage_bytes()) +
                " bytes, the output array has elements of " + std::to_string(sizeof(Out)));
}

// ---- threads -----------------------------------------------------------------------------------
// Below this many elements per thread, starting threads costs more than it saves.
constexpr std::size_t kMinPerThread = std::size_t{1} << 16;

int thread_count(std::size_t n, const BulkOptions& opt) {
  std::size_t t =
      opt.threads > 0 ? static_cast<std::size_t>(opt.threads) : static_cast<std::size_t>(hardware_threads());
  t = std::min(t, n / kMinPerThread);
  return static_cast<int>(std::max<std::size_t>(t, 1));
}

// Runs work(begin, end, stats) over contiguous ranges, one per thread (each starting on a 64-element
// boundary, so a vector kernel's blocks never straddle two threads), and merges the Stats. Every
// element's result depends only on its value and its index, and the merge is a sum / max / min, so
// output and Stats are the same bits whatever the thread count.
template <class Work>
void parallel_ranges(std::size_t n, const BulkOptions& opt, Stats* stats, Work work) {
  const int t = thread_count(n, opt);
  if (t == 1) {
    Stats local;
    parallel_for(n, 1, "bulk", [&](int, std::size_t b, std::size_t e) { work(b, e, local); });
    if (stats) stats->merge(local);
    return;
  }
  std::vector<Stats> parts(static_cast<std::size_t>(t));
  parallel_for(
      n, t, "bulk", [&](int k, std::size_t b, std::size_t e) { work(b, e, parts[static_cast<std::size_t>(k)]); }, 64);
  if (stats)
    for (const Stats& s : parts) stats->merge(s);
}

// ---- the scalar path: the specification, element by element ------------------------------------

// Classifies one element into the stats.
template <class T>
inline void account(Stats& s, T x, std::uint64_t bits, const Format& f) {
  ++s.count;
  if (std::isnan(x)) {
    ++s.nan;
    return;
  }
  if (std::isinf(x)) {
    ++s.inf_in;
    return;
  }
  if (x == 0) {
    ++s.zero_in;
    return;
  }
  const double ax = std::fabs(static_cast<double>(x));
  s.max_abs = std::max(s.max_abs, ax);
  if (s.min_abs_nonzero == 0 || ax < s.min_abs_nonzero) s.min_abs_nonzero = ax;
  const std::uint64_t mag = bits & ~f.sign_bit() & f.storage_mask();
  // Without a zero (e8m0) a magnitude below the smallest number is clamped to it: counted as underflow.
  if (f.is_zero_bits(bits) || (!f.has_zero && mag == 0 && ax < f.min_normal)) {
    ++s.underflow;
    ++s.rounded;
    return;
  }
  if (is_nan_bits(bits, f) || is_inf_bits(bits, f)) {
    ++s.overflow;
    ++s.rounded;
    return;
  }
  const double y = decode(bits, f);
  if (f.is_subnormal_bits(bits)) ++s.subnormal;
  if (f.saturates() && mag == f.max_finite_bits && ax > f.max_finite) ++s.overflow;
  if (y == static_cast<double>(x)) ++s.exact;
  else ++s.rounded;
}

template <class In, class Out, class Store>
void scalar_range(const In* in, Out* out, std::size_t begin, std::size_t end, const Format& f, const Rounding& r,
                  bool want_stats, Stats& local, std::uint64_t index0, Store store) {
  const spec::FormatSpec fs = format_spec(f);  // round_bits() per element, the structs built once
  const spec::RoundingSpec rs = rounding_spec(r);
  for (std::size_t i = begin; i < end; ++i) {
    const In x = in[i];
    std::uint64_t bits;
    if constexpr (std::is_same_v<In, float>)
      bits = spec::round_float_bits(std::bit_cast<std::uint32_t>(x), fs, rs, index0 + i);
    else bits = spec::round_double_bits(std::bit_cast<std::uint64_t>(x), fs, rs, index0 + i);
    if (want_stats) account(local, x, bits, f);
    out[i] = store(bits);
  }
}

// ---- the vector paths ----------------------------------------------------------------------------

// The Stats thresholds of the F16C path (KernelParams::f16c_*) for fp16 under mode: the first |x|
// (float bits) of each class boundary, by bisection over round_bits, which is monotone in |x|.
struct F16cThresholds {
  std::int32_t zero_below[2], small_below[2], finite_upto[2];
};
F16cThresholds find_f16c_thresholds(RoundingMode mode) {
  F16cThresholds t{};
  const Rounding r = Rounding::of(mode);
  for (int s = 0; s < 2; ++s) {
    // Smallest |x| (float bits, in [1, 0x7f7fffff]) whose class reaches `rank`; 0x7f800000 if none does.
    auto first_reaching = [&](int rank) {
      auto reaches = [&](std::uint32_t a) {
        return outcome_class(std::bit_cast<float>(a | (s ? 0x80000000u : 0u)), fp16(), r) >= rank;
      };
      std::uint32_t lo = 0, hi = 0x7f800000u;  // !reaches(lo) (lo = 0 stands for "below 1"), reaches(hi) or hi = inf
      while (hi - lo > 1) {
        const std::uint32_t mid = lo + (hi - lo) / 2;
        (reaches(mid) ? hi : lo) = mid;
      }
      return static_cast<std::int32_t>(hi);
    };
    t.zero_below[s] = first_reaching(1);
    t.small_below[s] = first_reaching(2);
    t.finite_upto[s] = first_reaching(3) - 1;
  }
  return t;
}
const F16cThresholds& f16c_thresholds(RoundingMode mode) {
  // Found once per mode (about 200 round_bits calls each), on first use.
  static const F16cThresholds rne = find_f16c_thresholds(RoundingMode::nearest_even),
                              rtz = find_f16c_thresholds(RoundingMode::toward_zero),
                              ru = find_f16c_thresholds(RoundingMode::up),
                              rd = find_f16c_thresholds(RoundingMode::down),
                              rna = find_f16c_thresholds(RoundingMode::nearest_away),
                              rto = find_f16c_thresholds(RoundingMode::to_odd);
  switch (mode) {
    case RoundingMode::nearest_away: return rna;
    case RoundingMode::toward_zero: return rtz;
    case RoundingMode::up: return ru;
    case RoundingMode::down: return rd;
    case RoundingMode::to_odd: return rto;
    default: return rne;
  }
}

bd::KernelParams make_params(const Format& f, const Rounding& r, const BulkOptions& opt) {
  bd::KernelParams p;
  p.mode = static_cast<bd::Mode>(r.mode);
  const int m = f.man_bits;
  p.man_bits = m;
  p.sh0 = 23 - m;
  p.d0 = 127 + f.emin;
  p.one_m = 1 << m;
  p.max_finite_bits = static_cast<std::int32_t>(f.max_finite_bits);
  p.fmt_sign = static_cast<std::int32_t>(f.sign_bit());
  p.sign_shift = 31 - (f.exp_bits + m);
  p.mag_mask = static_cast<std::int32_t>(f.storage_mask() & ~f.sign_bit());
  // The specification's results for overflow, ±inf and NaN inputs, taken from round_bits itself.
  const float big = std::numeric_limits<float>::max();
  const float inf = std::numeric_limits<float>::infinity();
  p.inf_pos = static_cast<std::int32_t>(round_bits(inf, f, r));
  p.inf_neg = static_cast<std::int32_t>(round_bits(-inf, f, r));
  // Every format the vector path takes has max_finite below FLT_MAX or no overflow at all; where
  // FLT_MAX does not overflow, enc > max_finite_bits never happens and these are unused.
  Rounding det = r;
  if (det.mode == RoundingMode::stochastic) det.mode = RoundingMode::nearest_even;  // overflow acts as nearest
  p.ovf_pos = static_cast<std::int32_t>(round_bits(big, f, det));
  p.ovf_neg = static_cast<std::int32_t>(round_bits(-big, f, det));
  p.ieee_nan = f.nan == NanEncoding::ieee;
  p.neg_zero = f.nan == NanEncoding::neg_zero;
  p.all_ones_nan = f.nan == NanEncoding::all_ones;
  p.nan_base = static_cast<std::int32_t>(f.inf_bits | (m >= 1 ? (std::uint64_t{1} << (m - 1)) : 0));
  const float qnan = std::bit_cast<float>(0x7fc00000u);
  p.nan_pos = static_cast<std::int32_t>(round_bits(qnan, f, r));
  p.nan_neg = static_cast<std::int32_t>(round_bits(-qnan, f, r));
  p.flush = f.subnormals == Subnormals::flush;
  p.daz = r.input_subnormals == InputSubnormals::zero;
  p.saturate = f.saturates();  // a format without inf or NaN saturates in every mode
  p.max_finite_f32 = f.max_finite < static_cast<double>(big)
                         ? static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(static_cast<float>(f.max_finite)))
                         : 0x7f800000;
  auto counts = [&](std::uint64_t bits) { return is_nan_bits(bits, f) || is_inf_bits(bits, f) ? -1 : 0; };
  p.ovf_pos_counts = counts(static_cast<std::uint64_t>(static_cast<std::uint32_t>(p.ovf_pos)));
  p.ovf_neg_counts = counts(static_cast<std::uint64_t>(static_cast<std::uint32_t>(p.ovf_neg)));
  // round_loop's fast path counts overflows by mode alone where the format does not saturate (an
  // overflow gives ±inf/NaN in nearest modes and stochastic, in up above zero, in down below zero, and
  // ±max_finite otherwise): the specification must agree. Where max_finite is beyond float's range (an
  // e8 format without inf), no float input overflows and the kernel never uses the rule.
  if (!f.saturates() && p.max_finite_f32 != 0x7f800000) {
    const RoundingMode m = r.mode;
    const bool to_inf_any =
        m == RoundingMode::nearest_even || m == RoundingMode::nearest_away || m == RoundingMode::stochastic;
    const bool pos = to_inf_any || m == RoundingMode::up, neg = to_inf_any || m == RoundingMode::down;
    if ((p.ovf_pos_counts != 0) != pos || (p.ovf_neg_counts != 0) != neg)
      throw Error("round_array: internal error: overflow results of " + f.name + " in mode " +
                  std::string(short_name(m)) + " are not those the vector kernel counts");
  }
  p.sr_mask = r.sr_bits >= 32 ? 0xffffffffu : ~((1u << (32 - r.sr_bits)) - 1);
  p.sr_seed_lo = static_cast<std::uint32_t>(r.seed);
  p.sr_seed_hi = static_cast<std::uint32_t>(r.seed >> 32);
  p.sr_half = r.sr_bits <= 16;
  p.dec_add = (127 - f.bias) * (1 << 23);
  p.sub_by_shift = f.emin == -126;
  p.sub_scale = std::ldexp(1.0f, f.emin - m);
  p.inf_bits = static_cast<std::int32_t>(f.inf_bits);
  p.nan_mag = static_cast<std::int32_t>(f.nan == NanEncoding::all_ones ? f.nan_bits : f.nan_bits);
  p.float_layout = f.exp_bits == 8 && f.bias == 127;
  p.half_layout = f.exp_bits == 5 && f.man_bits == 10 && f.bias == 15 && f.nan == NanEncoding::ieee && f.has_inf;
  p.cap_pos = p.ovf_pos & p.mag_mask;
  p.cap_neg = p.ovf_neg & p.mag_mask;
  // The cap works where the overflow result is sign | magnitude >= max_finite_bits; otherwise (the
  // fnuz NaN 0x80 has magnitude 0) the kernel blends the result in.
  p.ovf_special = p.ovf_pos != p.cap_pos || p.ovf_neg != (p.cap_neg | p.fmt_sign) || p.cap_pos < p.max_finite_bits ||
                  p.cap_neg < p.max_finite_bits;
  if (p.ovf_special) p.cap_pos = p.cap_neg = p.max_finite_bits;  // the kernel blends the result in
  p.ovf_y_pos =
      static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(decode_float(static_cast<std::uint32_t>(p.ovf_pos), f)));
  p.ovf_y_neg =
      static_cast<std::int32_t>(std::bit_cast<std::uint32_t>(decode_float(static_cast<std::uint32_t>(p.ovf_neg), f)));
  p.float_layout_ovf_ok = p.float_layout && f.nan == NanEncoding::ieee;
  p.uniform = f.emin == -126;
  const bool directed = r.mode == RoundingMode::up || r.mode == RoundingMode::down;
  p.plain = !p.daz && !p.flush && !p.neg_zero && !p.ovf_special && !p.saturate &&
            (directed || p.cap_pos == p.cap_neg) && (p.uniform || f.emax + 24 - m <= 127);
  p.ek_max = p.plain ? (f.emax + 128) << 23 : 0;
  p.lut_ok = !p.uniform && static_cast<std::uint32_t>(p.cap_pos) < (1u << 15) &&
             static_cast<std::uint32_t>(p.cap_neg) < (1u << 15);
  p.float_fast = p.plain && p.float_layout && f.nan == NanEncoding::ieee && f.has_inf && !p.saturate &&
                 p.max_finite_bits + 1 == p.inf_bits && p.inf_pos == p.inf_bits;
  const bool f16c_mode = r.mode == RoundingMode::nearest_even || r.mode == RoundingMode::toward_zero ||
                         r.mode == RoundingMode::up || r.mode == RoundingMode::down ||
                         r.mode == RoundingMode::nearest_away || r.mode == RoundingMode::to_odd;
  p.f16c = opt.hardware_convert && f == fp16() && f16c_mode && r.input_subnormals == InputSubnormals::keep;
  if (p.f16c) {
    const F16cThresholds& t = f16c_thresholds(r.mode);
    for (int s = 0; s < 2; ++s) {
      p.f16c_zero_below[s] = t.zero_below[s];
      p.f16c_small_below[s] = t.small_below[s];
      p.f16c_finite_upto[s] = t.finite_upto[s];
    }
  }
  return p;
}

void to_stats(const bd::StatsAcc& a, std::size_t n, Stats& s) {
  s.count += n;
  s.zero_in += a.zero_in;
  s.nan += a.nan;
  s.inf_in += a.inf_in;
  s.exact += a.exact;
  s.rounded += n - a.zero_in - a.nan - a.inf_in - a.exact;
  s.underflow += a.underflow;
  s.subnormal += a.subnormal;
  s.overflow += a.overflow;
  if (a.max_a != 0) s.max_abs = std::max(s.max_abs, static_cast<double>(std::bit_cast<float>(a.max_a)));
  if (a.min_a != 0x7fffffffu) {
    const double mn = std::bit_cast<float>(a.min_a);
    if (s.min_abs_nonzero == 0 || mn < s.min_abs_nonzero) s.min_abs_nonzero = mn;
  }
}

// Runs the vector kernel of `path` over in[begin, end), splitting where the stochastic index crosses
// a multiple of 2^34 (the high word of the Philox block counter index / 4 changes there; that of the
// 16-bit stream's index / 8 at multiples of 2^35, which are among them).
void vector_range(Path path, const float* in, void* out, std::size_t out_size, bd::OutKind kind, std::size_t begin,
                  std::size_t end, std::uint64_t index0, const bd::KernelParams& p, bool want_stats, Stats& local) {
  auto* kernel = path == Path::avx512 ? bd::round_f32_avx512 : bd::round_f32_avx2;
  bd::StatsAcc acc;
  std::size_t i = begin;
  while (i < end) {
    const std::uint64_t idx = index0 + i;
    constexpr std::uint64_t kCounterSpan = std::uint64_t{1} << 34;
    const std::uint64_t to_boundary = kCounterSpan - (idx & (kCounterSpan - 1));
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(end - i, to_boundary));
    unsigned char* const dst = static_cast<unsigned char*>(out) + i * out_size;
    // Streaming: the elements before the first 64-byte boundary of the output are written with ordinary
    // stores, so that every non-temporal store of the rest is aligned to its width (at most 64 bytes).
    std::size_t head = 0;
    if (p.stream) {
      const auto addr = reinterpret_cast<std::uintptr_t>(dst);
      head = addr % out_size != 0 ? len : std::min<std::size_t>(len, (64 - addr % 64) % 64 / out_size);
    }
    if (head > 0) {
      bd::KernelParams cached = p;
      cached.stream = false;
      kernel(in + i, dst, kind, head, idx, cached, want_stats ? &acc : nullptr);
    }
    if (head < len)
      kernel(in + i + head, dst + head * out_size, kind, len - head, idx + head, p, want_stats ? &acc : nullptr);
    i += len;
  }
#if defined(__x86_64__) || defined(__i386__)
  // Non-temporal stores are weakly ordered: make them visible before the call returns (or the thread
  // that made them is joined).
  if (p.stream) _mm_sfence();
#endif
  if (want_stats) to_stats(acc, end - begin, local);
}

template <class Out>
constexpr bd::OutKind out_kind() {
  if constexpr (std::is_same_v<Out, float>) return bd::OutKind::f32;
  if constexpr (std::is_same_v<Out, std::uint8_t>) return bd::OutKind::u8;
  if constexpr (std::is_same_v<Out, std::uint16_t>) return bd::OutKind::u16;
  return bd::OutKind::u32;
}

// Float input into Out (float: simulate; unsigned: packed), any path, any thread count.
template <class Out>
void round_float(std::span<const float> in, std::span<Out> out, const Format& f, const Rounding& r, Stats* stats,
                 const BulkOptions& opt) {
  const Path path = check_path(opt);
  const bool want = stats != nullptr;
  if (path != Path::scalar && vector_supported(f)) {
    const DefaultFpEnv env;  // make_params bisects the F16C Stats thresholds over float subnormals too
    bd::KernelParams p = make_params(f, r, opt);
    p.stream = opt.streaming_stores;
    parallel_ranges(in.size(), opt, stats, [&](std::size_t b, std::size_t e, Stats& local) {
      vector_range(path, in.data(), out.data(), sizeof(Out), out_kind<Out>(), b, e, opt.index0, p, want, local);
    });
    return;
  }
  parallel_ranges(in.size(), opt, stats, [&](std::size_t b, std::size_t e, Stats& local) {
    if constexpr (std::is_same_v<Out, float>)
      scalar_range(in.data(), out.data(), b, e, f, r, want, local, opt.index0,
                   [&f](std::uint64_t bits) { return decode_float(bits, f); });
    else
      scalar_range(in.data(), out.data(), b, e, f, r, want, local, opt.index0,
                   [](std::uint64_t bits) { return static_cast<Out>(bits); });
  });
}

template <class Out>
void round_double_packed(std::span<const double> in, std::span<Out> out, const Format& f, const Rounding& r,
                         Stats* stats, const BulkOptions& opt) {
  check_sizes(in.size(), out.size(), in.data(), out.data(), "round_array");
  check_path(opt);
  validate(r);
  check_storage<Out>(f);
  parallel_ranges(in.size(), opt, stats, [&](std::size_t b, std::size_t e, Stats& local) {
    scalar_range(in.data(), out.data(), b, e, f, r, stats != nullptr, local, opt.index0,
                 [](std::uint64_t bits) { return static_cast<Out>(bits); });
  });
}

template <class Out>
void round_float_packed(std::span<const float> in, std::span<Out> out, const Format& f, const Rounding& r, Stats* stats,
                        const BulkOptions& opt) {
  check_sizes(in.size(), out.size(), in.data(), out.data(), "round_array");
  validate(r);
  check_storage<Out>(f);
  round_float(in, out, f, r, stats, opt);
}

template <class Out>
void decode_packed(std::span<const Out> in, std::span<float> out, const Format& f) {
  check_sizes(in.size(), out.size(), in.data(), out.data(), "decode_array");
  check_storage<Out>(f);
  check_float_fits(f);
  const DefaultFpEnv env;
  const Path path = best_path();
  if (path != Path::scalar && vector_supported(f) && !in.empty()) {
    const bd::KernelParams p = make_params(f, Rounding{}, BulkOptions{});
    (path == Path::avx512 ? bd::decode_avx512 : bd::decode_avx2)(in.data(), out_kind<Out>(), out.data(), in.size(), p);
    return;
  }
  for (std::size_t i = 0; i < in.size(); ++i) out[i] = decode_float(in[i], f);
}

}  // namespace

void round_array(std::span<const float> in, std::span<float> out, const Format& f, const Rounding& r, Stats* stats,
                 const BulkOptions& opt) {
  check_sizes(in.size(), out.size(), in.data(), out.data(), "round_array");
  validate(r);
  check_float_fits(f);
  round_float(in, out, f, r, stats, opt);
}

void round_array(std::span<const double> in, std::span<double> out, const Format& f, const Rounding& r, Stats* stats,
                 const BulkOptions& opt) {
  check_sizes(in.size(), out.size(), in.data(), out.data(), "round_array");
  check_path(opt);
  validate(r);
  parallel_ranges(in.size(), opt, stats, [&](std::size_t b, std::size_t e, Stats& local) {
    scalar_range(in.data(), out.data(), b, e, f, r, stats != nullptr, local, opt.index0,
                 [&f](std::uint64_t bits) { return decode(bits, f); });
  });
}

void round_array(std::span<const float> in, std::span<std::uint8_t> out, const Format& f, const Rounding& r, Stats* s,
                 const BulkOptions& o) {
  round_float_packed(in, out, f, r, s, o);
}
void round_array(std::span<const float> in, std::span<std::uint16_t> out, const Format& f, const Rounding& r, Stats* s,
                 const BulkOptions& o) {
  round_float_packed(in, out, f, r, s, o);
}
void round_array(std::span<const float> in, std::span<std::uint32_t> out, const Format& f, const Rounding& r, Stats* s,
                 const BulkOptions& o) {
  round_float_packed(in, out, f, r, s, o);
}
void round_array(std::span<const double> in, std::span<std::uint8_t> out, const Format& f, const Rounding& r, Stats* s,
                 const BulkOptions& o) {
  round_double_packed(in, out, f, r, s, o);
}
void round_array(std::span<const double> in, std::span<std::uint16_t> out, const Format& f, const Rounding& r, Stats* s,
                 const BulkOptions& o) {
  round_double_packed(in, out, f, r, s, o);
}

void decode_array(std::span<const std::uint8_t> in, std::span<float> out, const Format& f) {
  decode_packed(in, out, f);
}
void decode_array(std::span<const std::uint16_t> in, std::span<float> out, const Format& f) {
  decode_packed(in, out, f);
}
void decode_array(std::span<const std::uint32_t> in, std::span<float> out, const Format& f) {
  decode_packed(in, out, f);
}

int bulk_threads(std::size_t n, const BulkOptions& opt) { return thread_count(n, opt); }

}  // namespace mpsim
