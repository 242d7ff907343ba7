#include "mpsim/format/soft_error.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <vector>

#include "mpsim/error.hpp"
#include "mpsim/format/detail/bulk_params.hpp"
#include "mpsim/format/options.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/parallel.hpp"

namespace mpsim {

namespace {

std::string number_text(double p) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, p);
  return std::string(buf, r.ptr);
}

// The vector paths' form of the draw (bulk_params.hpp, SoftErrorParams): the same hits and bits as
// soft_error_draw, element for element.
bulk_detail::SoftErrorParams vector_params(const SoftErrors& se, int bits) {
  bulk_detail::SoftErrorParams p;
  const std::uint64_t key = se.seed ^ kSoftErrorKeySalt;
  p.key_lo = static_cast<std::uint32_t>(key);
  p.key_hi = static_cast<std::uint32_t>(key >> 32);
  p.all = se.p >= 1;
  if (!p.all) p.limit = static_cast<std::uint64_t>(std::ceil(se.p * 0x1p53)) << 11;
  p.bits = static_cast<std::uint32_t>(bits);
  return p;
}

// Calls hit(k, bit) for elements b .. e - 1 that are hit, in order, and returns their number: W elements
// at a time on a vector path (one Philox block per lane), the rest and the scalar path one at a time.
template <class Hit>
std::uint64_t hits_in_range(std::size_t b, std::size_t e, Path path, const SoftErrors& se, int bits,
                            const BulkOptions& opt, Hit& hit) {
  std::uint64_t c = 0;
  auto scalar = [&](std::size_t from, std::size_t to) {
    for (std::size_t k = from; k < to; ++k) {
      const SoftErrorDraw d = soft_error_draw(se, opt.index0 + k, bits);
      if (!d.hit) continue;
      hit(k, d.bit);
      ++c;
    }
  };
  if (path == Path::scalar) {
    scalar(b, e);
    return c;
  }
  auto* kernel = path == Path::avx512 ? bulk_detail::soft_error_hits_avx512 : bulk_detail::soft_error_hits_avx2;
  const bulk_detail::SoftErrorParams p = vector_params(se, bits);
  constexpr std::size_t kChunk = 4096;  // elements per kernel call: the hit bitmap stays in L1
  std::uint64_t words[kChunk / 64];
  std::uint8_t bit_of[kChunk];
  for (std::size_t k = b; k < e;) {
    const std::uint64_t index = opt.index0 + k;
    // The kernel keeps the counter's high word: a call ends where the low word would wrap.
    const std::uint64_t to_wrap = (std::uint64_t{1} << 32) - (index & 0xffffffffu);
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>({e - k, kChunk, to_wrap}));
    std::fill(std::begin(words), std::end(words), 0);
    const std::size_t done = kernel(index, len, p, words, bit_of);
    for (std::size_t w = 0; w < (done + 63) / 64; ++w)
      for (std::uint64_t m = words[w]; m != 0; m &= m - 1) {
        const std::size_t j = w * 64 + static_cast<std::size_t>(__builtin_ctzll(m));
        hit(k + j, bit_of[j]);
        ++c;
      }
    scalar(k + done, k + len);
    k += len;
  }
  return c;
}

// Calls hit(k, bit) for every hit element k of an n-element array, over the engine's thread split and
// its code path (opt.path), and returns the number of hits. Each element's draw depends only on its
// index, so the hits and the count are the same whatever the thread count and the path.
template <class Hit>
std::uint64_t for_each_hit(std::size_t n, const Format& fmt, const SoftErrors& se, const BulkOptions& opt, Hit hit) {
  if (!se.active() || n == 0) return 0;
  if (opt.threads < 0) throw Error("soft errors: thread count must be >= 0, got " + std::to_string(opt.threads));
  if (!path_available(opt.path))
    throw Error("soft errors: code path '" + std::string(to_string(opt.path)) +
                "' is not available on this CPU (or this build)");
  const Path path = opt.path == Path::automatic ? best_path() : opt.path;
  const int bits = eligible_bits(fmt, se.bits);
  const int workers = bulk_threads(n, opt);
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(workers), 0);
  parallel_for(n, workers, "soft_error", [&](int w, std::size_t b, std::size_t e) {
    counts[static_cast<std::size_t>(w)] = hits_in_range(b, e, path, se, bits, opt, hit);
  });
  std::uint64_t total = 0;
  for (const std::uint64_t c : counts) total += c;
  return total;
}

template <class Code>
std::uint64_t flip_codes(std::span<Code> codes, const Format& fmt, const SoftErrors& se, const BulkOptions& opt) {
  if (static_cast<int>(sizeof(Code)) != fmt.storage_bytes())
    throw Error("flip_bits: format " + fmt.name + " is stored in " + std::to_string(fmt.storage_bytes()) +
                " bytes, the array has elements of " + std::to_string(sizeof(Code)));
  return for_each_hit(codes.size(), fmt, se, opt,
                      [&](std::size_t k, int bit) { codes[k] = static_cast<Code>(codes[k] ^ (Code{1} << bit)); });
}

}  // namespace

std::string_view to_string(SoftErrorBits b) { return b == SoftErrorBits::any ? "any" : "fraction"; }

SoftErrorBits parse_soft_error_bits(std::string_view word) {
  for (const SoftErrorBits b : {SoftErrorBits::fraction, SoftErrorBits::any})
    if (word == to_string(b)) return b;
  throw OptionError(OptionKey::flip_bits, std::string(word),
                    "flip_bits: unknown value '" + std::string(word) +
                        "' (known: " + std::string(option_words(OptionKey::flip_bits)) + ")");
}

int eligible_bits(const Format& fmt, SoftErrorBits bits) {
  if (bits == SoftErrorBits::any) return fmt.storage_bits;
  if (fmt.man_bits < 1) throw Error("soft errors flip a fraction bit, and " + fmt.name + " has no fraction bits");
  return fmt.man_bits;
}

SoftErrors soft_errors_with_options(double p, std::uint64_t seed, std::string_view bits) {
  const SoftErrorBits b = parse_soft_error_bits(bits);
  if (!(p >= 0 && p <= 1))
    throw OptionError(OptionKey::flip, number_text(p),
                      "flip: the probability must be a number in [0, 1], got " + number_text(p));
  return SoftErrors{p, seed, b};
}

SoftErrors soft_errors_with_options(std::string_view p_text, std::uint64_t seed, std::string_view bits) {
  double p = 0;
  const char* end = p_text.data() + p_text.size();
  const auto r = std::from_chars(p_text.data(), end, p);
  if (p_text.empty() || r.ec != std::errc() || r.ptr != end)
    throw OptionError(OptionKey::flip, std::string(p_text),
                      "flip: the probability must be a number in [0, 1], got '" + std::string(p_text) + "'");
  const SoftErrorBits b = parse_soft_error_bits(bits);
  try {
    return soft_errors_with_options(p, seed, to_string(b));
  } catch (const OptionError&) {  // name it as it was written
    throw OptionError(OptionKey::flip, std::string(p_text),
                      "flip: the probability must be a number in [0, 1], got '" + std::string(p_text) + "'");
  }
}

std::uint64_t flip_bits(std::span<std::uint8_t> codes, const Format& fmt, const SoftErrors& se,
                        const BulkOptions& opt) {
  return flip_codes(codes, fmt, se, opt);
}
std::uint64_t flip_bits(std::span<std::uint16_t> codes, const Format& fmt, const SoftErrors& se,
                        const BulkOptions& opt) {
  return flip_codes(codes, fmt, se, opt);
}
std::uint64_t flip_bits(std::span<std::uint32_t> codes, const Format& fmt, const SoftErrors& se,
                        const BulkOptions& opt) {
  return flip_codes(codes, fmt, se, opt);
}

// The value's encoding is round_bits of the value itself: exact, as every value of the array is one of fmt
// (nearest-even leaves a representable value as it is).
std::uint64_t flip_values(std::span<float> values, const Format& fmt, const SoftErrors& se, const BulkOptions& opt) {
  if (fmt.exp_bits > 8 || fmt.man_bits > 23)
    throw Error("flip_values: format " + fmt.name + " does not fit in float; use a double array");
  return for_each_hit(values.size(), fmt, se, opt, [&](std::size_t k, int bit) {
    values[k] = decode_float(round_bits(values[k], fmt) ^ (std::uint64_t{1} << bit), fmt);
  });
}
std::uint64_t flip_values(std::span<double> values, const Format& fmt, const SoftErrors& se, const BulkOptions& opt) {
  return for_each_hit(values.size(), fmt, se, opt, [&](std::size_t k, int bit) {
    values[k] = decode(round_bits(values[k], fmt) ^ (std::uint64_t{1} << bit), fmt);
  });
}

}  // namespace mpsim
