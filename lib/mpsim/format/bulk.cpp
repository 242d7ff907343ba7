// Bulk rounding engine: argument checks, Stats, and the scalar path. (Vector paths and threads: issue 4.)
#include "mpsim/format/bulk.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>

#include "mpsim/error.hpp"

namespace mpsim {

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

bool path_available(Path p) { return p == Path::automatic || p == Path::scalar; }

namespace {

void check_sizes(std::size_t in, std::size_t out, const void* ip, const void* op) {
  if (in != out)
    throw Error("round_array: input has " + std::to_string(in) + " elements but output has " + std::to_string(out));
  if (in != 0 && (ip == nullptr || op == nullptr)) throw Error("round_array: null pointer with non-zero length");
}

void check_path(const BulkOptions& opt) {
  if (!path_available(opt.path))
    throw Error(std::string("round_array: code path '") + std::string(to_string(opt.path)) + "' is not available on this CPU");
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

// Classifies one element into the stats.
template <class T>
inline void account(Stats& s, T x, std::uint64_t bits, const Format& f) {
  ++s.count;
  if (std::isnan(x)) { ++s.nan; return; }
  if (std::isinf(x)) { ++s.inf_in; return; }
  if (x == 0) { ++s.zero_in; return; }
  const double ax = std::fabs(static_cast<double>(x));
  s.max_abs = std::max(s.max_abs, ax);
  if (s.min_abs_nonzero == 0 || ax < s.min_abs_nonzero) s.min_abs_nonzero = ax;
  const std::uint64_t mag = bits & ~f.sign_bit() & f.storage_mask();
  const bool is_zero = mag == 0 || (f.nan == NanEncoding::neg_zero && bits == 0);
  if (is_zero) { ++s.underflow; ++s.rounded; return; }
  if (is_nan_bits(bits, f) || is_inf_bits(bits, f)) { ++s.overflow; ++s.rounded; return; }
  const double y = decode(bits, f);
  if ((mag >> f.man_bits) == 0) ++s.subnormal;
  if (f.overflow == Overflow::saturate && mag == f.max_finite_bits && ax > f.max_finite) ++s.overflow;
  if (y == static_cast<double>(x)) ++s.exact; else ++s.rounded;
}

template <class In, class Out, class Store>
void scalar_loop(std::span<const In> in, std::span<Out> out, const Format& f, const Rounding& r, Stats* stats,
                 const BulkOptions& opt, Store store) {
  Stats local;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const In x = in[i];
    const std::uint64_t bits = round_bits(x, f, r, opt.index0 + i);
    if (stats) account(local, x, bits, f);
    out[i] = store(bits);
  }
  if (stats) stats->merge(local);
}

template <class In, class Out>
void round_packed(std::span<const In> in, std::span<Out> out, const Format& f, const Rounding& r, Stats* stats,
                  const BulkOptions& opt) {
  check_sizes(in.size(), out.size(), in.data(), out.data());
  check_path(opt);
  validate(r);
  check_storage<Out>(f);
  scalar_loop(in, out, f, r, stats, opt, [](std::uint64_t b) { return static_cast<Out>(b); });
}

template <class Out>
void decode_packed(std::span<const Out> in, std::span<float> out, const Format& f) {
  check_sizes(in.size(), out.size(), in.data(), out.data());
  check_storage<Out>(f);
  check_float_fits(f);
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint64_t bits = in[i];
    if (is_nan_bits(bits, f) && f.nan == NanEncoding::ieee) {
      const std::uint32_t man = static_cast<std::uint32_t>(bits & ((std::uint64_t{1} << f.man_bits) - 1));
      out[i] = std::bit_cast<float>(((bits & f.sign_bit()) ? 0x80000000u : 0u) | 0x7f800000u |
                                    (man << (23 - f.man_bits)));
    } else {
      out[i] = static_cast<float>(decode(bits, f));
    }
  }
}

}  // namespace

void round_array(std::span<const float> in, std::span<float> out, const Format& f, const Rounding& r, Stats* stats,
                 const BulkOptions& opt) {
  check_sizes(in.size(), out.size(), in.data(), out.data());
  check_path(opt);
  validate(r);
  check_float_fits(f);
  Stats local;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const float x = in[i];
    const std::uint64_t bits = round_bits(x, f, r, opt.index0 + i);
    if (stats) account(local, x, bits, f);
    float y;
    if (is_nan_bits(bits, f) && f.nan == NanEncoding::ieee) {
      const std::uint32_t man = static_cast<std::uint32_t>(bits & ((std::uint64_t{1} << f.man_bits) - 1));
      y = std::bit_cast<float>(((bits & f.sign_bit()) ? 0x80000000u : 0u) | 0x7f800000u | (man << (23 - f.man_bits)));
    } else {
      y = static_cast<float>(decode(bits, f));
    }
    out[i] = y;
  }
  if (stats) stats->merge(local);
}

void round_array(std::span<const double> in, std::span<double> out, const Format& f, const Rounding& r, Stats* stats,
                 const BulkOptions& opt) {
  check_sizes(in.size(), out.size(), in.data(), out.data());
  check_path(opt);
  validate(r);
  scalar_loop(in, out, f, r, stats, opt, [&f](std::uint64_t b) { return decode(b, f); });
}

void round_array(std::span<const float> in, std::span<std::uint8_t> out, const Format& f, const Rounding& r,
                 Stats* s, const BulkOptions& o) { round_packed(in, out, f, r, s, o); }
void round_array(std::span<const float> in, std::span<std::uint16_t> out, const Format& f, const Rounding& r,
                 Stats* s, const BulkOptions& o) { round_packed(in, out, f, r, s, o); }
void round_array(std::span<const float> in, std::span<std::uint32_t> out, const Format& f, const Rounding& r,
                 Stats* s, const BulkOptions& o) { round_packed(in, out, f, r, s, o); }
void round_array(std::span<const double> in, std::span<std::uint8_t> out, const Format& f, const Rounding& r,
                 Stats* s, const BulkOptions& o) { round_packed(in, out, f, r, s, o); }
void round_array(std::span<const double> in, std::span<std::uint16_t> out, const Format& f, const Rounding& r,
                 Stats* s, const BulkOptions& o) { round_packed(in, out, f, r, s, o); }

void decode_array(std::span<const std::uint8_t> in, std::span<float> out, const Format& f) { decode_packed(in, out, f); }
void decode_array(std::span<const std::uint16_t> in, std::span<float> out, const Format& f) { decode_packed(in, out, f); }
void decode_array(std::span<const std::uint32_t> in, std::span<float> out, const Format& f) { decode_packed(in, out, f); }

}  // namespace mpsim
