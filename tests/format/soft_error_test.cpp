// Tests of lib/mpsim/format/soft_error.hpp, the soft errors after rounding (chop's and CPFloat's flip): the
// draws against Random123's Philox4x32-10 (the authors' code, Debian librandom123-dev) recomputed here from
// the documented rule, element for element, on fp16, bf16 and fp8_e4m3, fraction bits and any bit; p = 0 and p = 1; the
// hit share and the bit positions against their binomial expectations; thread count and index offsets; bad
// probabilities.
#include "catch_compat.hpp"

#include <Random123/philox.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "mpsim/format/bulk.hpp"
#include "mpsim/format/options.hpp"
#include "mpsim/format/round.hpp"
#include "mpsim/format/soft_error.hpp"

using namespace mpsim;

namespace {

// The documented draw of element `index`, from Random123's philox4x32_R(10, ctr, key): counter (lo32(i),
// hi32(i), 0, 0), key seed ^ "soft_err"; hit when the top 53 bits of w1:w0 / 2^53 < p; bit
// floor(w2 * m / 2^32).
struct RefDraw {
  bool hit;
  int bit;
};
RefDraw reference_draw(double p, std::uint64_t seed, std::uint64_t index, int m) {
  const std::uint64_t key = seed ^ 0x736F66745F657272ull;  // the salt spelled out: "soft_err" in ASCII
  const r123::Philox4x32::ctr_type ctr = {
      {static_cast<std::uint32_t>(index), static_cast<std::uint32_t>(index >> 32), 0, 0}};
  const r123::Philox4x32::key_type k = {{static_cast<std::uint32_t>(key), static_cast<std::uint32_t>(key >> 32)}};
  const r123::Philox4x32::ctr_type w = philox4x32_R(10, ctr, k);
  const double u = std::ldexp(static_cast<double>(((static_cast<std::uint64_t>(w.v[1]) << 32) | w.v[0]) >> 11), -53);
  return RefDraw{u < p, static_cast<int>((static_cast<std::uint64_t>(w.v[2]) * static_cast<std::uint64_t>(m)) >> 32)};
}

// Inputs over the whole range of the formats and beyond: log-uniform magnitudes 2^-140 .. 2^130, both
// signs, with zeros, infinities and NaNs among them.
std::vector<float> sample_inputs(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(-140, 130);
  std::vector<float> x(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint64_t r = rng();
    switch (r % 64) {
      case 0: x[i] = 0.0f; break;
      case 1: x[i] = -std::numeric_limits<float>::infinity(); break;
      case 2: x[i] = std::numeric_limits<float>::quiet_NaN(); break;
      default: x[i] = static_cast<float>((r & 64 ? -1 : 1) * std::exp2(e(rng)));
    }
  }
  return x;
}

template <class Code>
struct Encoded {
  std::vector<Code> plain, flipped;
  std::vector<float> values;  // simulate mode with the same flips
  std::uint64_t hits = 0, value_hits = 0;
};

template <class Code>
Encoded<Code> encode_with_flips(const std::vector<float>& x, const Format& f, const SoftErrors& se,
                                const BulkOptions& opt = {}) {
  Encoded<Code> e;
  e.plain.resize(x.size());
  round_array(std::span<const float>(x), std::span<Code>(e.plain), f, {}, nullptr, opt);
  e.flipped = e.plain;
  e.hits = flip_bits(std::span<Code>(e.flipped), f, se, opt);
  e.values.resize(x.size());
  round_array(std::span<const float>(x), std::span<float>(e.values), f, {}, nullptr, opt);
  e.value_hits = flip_values(std::span<float>(e.values), f, se, opt);
  return e;
}

template <class Code>
void check_against_reference(const Format& f, SoftErrorBits bits, const BulkOptions& opt = {}) {
  const std::vector<float> x = sample_inputs(100000, 27);
  // The eligible bits: the fraction field, or every bit of the encoding.
  const int m = bits == SoftErrorBits::fraction ? f.man_bits : f.storage_bits;
  for (const double p : {0.0, 0.01, 0.5, 1.0}) {
    const SoftErrors se{p, 1234, bits};
    const Encoded<Code> e = encode_with_flips<Code>(x, f, se, opt);
    std::uint64_t ref_hits = 0, code_bad = 0, value_bad = 0, not_one_bit = 0, out_of_range = 0;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const RefDraw d = reference_draw(p, se.seed, i, m);
      ref_hits += d.hit;
      const Code expected = d.hit ? static_cast<Code>(e.plain[i] ^ (Code{1} << d.bit)) : e.plain[i];
      code_bad += e.flipped[i] != expected;
      // The value is the decoded flipped encoding, bit for bit (NaN payloads included).
      value_bad += std::bit_cast<std::uint32_t>(e.values[i]) != std::bit_cast<std::uint32_t>(decode_float(expected, f));
      const Code diff = static_cast<Code>(e.flipped[i] ^ e.plain[i]);
      if (d.hit) {
        not_one_bit += std::popcount(diff) != 1;
        out_of_range += std::countr_zero(diff) >= m;
      } else {
        not_one_bit += diff != 0;
      }
    }
    std::printf(
        "soft errors [%s] %s %s p=%g: %zu elements vs Random123 draws: %llu hits (library %llu, values %llu), "
        "%llu code mismatches, %llu value mismatches, %llu not exactly one bit, %llu outside the %d "
        "eligible bits\n",
        std::string(to_string(opt.path)).c_str(), f.name.c_str(), std::string(to_string(bits)).c_str(), p, x.size(),
        (unsigned long long)ref_hits, (unsigned long long)e.hits, (unsigned long long)e.value_hits,
        (unsigned long long)code_bad, (unsigned long long)value_bad, (unsigned long long)not_one_bit,
        (unsigned long long)out_of_range, m);
    CHECK(code_bad == 0);
    CHECK(value_bad == 0);
    CHECK(not_one_bit == 0);
    CHECK(out_of_range == 0);
    CHECK(e.hits == ref_hits);
    CHECK(e.value_hits == ref_hits);
    if (p == 0) {
      CHECK(ref_hits == 0);
      CHECK(e.flipped == e.plain);  // bit-identical to plain rounding
    }
    if (p == 1) CHECK(ref_hits == x.size());  // every element hit
  }
}

}  // namespace

TEST_CASE("soft errors: every draw equals Random123's Philox under the documented rule", "[soft_error]") {
  for (const SoftErrorBits bits : {SoftErrorBits::fraction, SoftErrorBits::any}) {
    check_against_reference<std::uint16_t>(fp16(), bits);
    check_against_reference<std::uint16_t>(bf16(), bits);
    check_against_reference<std::uint8_t>(parse_format("fp8_e4m3"), bits);
  }
}

// The code paths the flips can take on this CPU: scalar always, avx2 and avx512 where available.
std::vector<Path> available_paths() {
  std::vector<Path> paths{Path::scalar};
  for (const Path p : {Path::avx2, Path::avx512})
    if (path_available(p)) paths.push_back(p);
    else WARN("soft errors: the " << to_string(p) << " path is not available on this CPU: untested here");
  return paths;
}

TEST_CASE("soft errors: every draw equals Random123's on every code path", "[soft_error]") {
  for (const Path path : available_paths()) {
    BulkOptions opt;
    opt.path = path;
    check_against_reference<std::uint16_t>(fp16(), SoftErrorBits::fraction, opt);
    check_against_reference<std::uint16_t>(bf16(), SoftErrorBits::any, opt);
    check_against_reference<std::uint8_t>(parse_format("fp8_e4m3"), SoftErrorBits::any, opt);
  }
}

TEST_CASE("soft errors: the vector paths flip what the scalar path flips, tails and counter wraps included",
          "[soft_error]") {
  // Random fp16 codes (every pattern is a code to flip); the vector paths evaluate 8 (avx2) or 16
  // (avx512) blocks at a time and leave the rest to the scalar loop, and split where the counter's low
  // word wraps (index0 near 2^32) or the index itself wraps (near 2^64).
  std::mt19937_64 rng(99);
  std::vector<std::uint16_t> codes(100003);
  for (auto& c : codes) c = static_cast<std::uint16_t>(rng());
  const Format f = fp16();
  const std::uint64_t starts[] = {0, 5, (std::uint64_t{1} << 32) - 50003, ~std::uint64_t{0} - 40000};
  for (const Path path : available_paths()) {
    if (path == Path::scalar) continue;
    BulkOptions vec, sca;
    vec.path = path;
    sca.path = Path::scalar;
    std::uint64_t compared = 0, mismatches = 0, count_mismatches = 0, hits = 0;
    for (const SoftErrorBits bits : {SoftErrorBits::fraction, SoftErrorBits::any})
      for (const double p : {1e-300, 0.01, 1.0 / 3, 0.5, 1.0 - 0x1p-53, 1.0})
        for (const std::uint64_t start : starts) {
          const SoftErrors se{p, 0x0123456789abcdefull, bits};
          vec.index0 = sca.index0 = start;
          std::vector<std::uint16_t> a = codes, b = codes;
          const std::uint64_t ha = flip_bits(std::span<std::uint16_t>(a), f, se, vec);
          const std::uint64_t hb = flip_bits(std::span<std::uint16_t>(b), f, se, sca);
          count_mismatches += ha != hb;
          hits += hb;
          for (std::size_t i = 0; i < a.size(); ++i) mismatches += a[i] != b[i];
          compared += a.size();
          // Every length 0 .. 17 (past one AVX-512 vector) at offsets 0 .. 3 of the stream.
          for (std::size_t len = 0; len <= 17; ++len)
            for (std::size_t off = 0; off < 4; ++off) {
              vec.index0 = sca.index0 = start + off;
              std::vector<std::uint16_t> ta(codes.begin(), codes.begin() + static_cast<std::ptrdiff_t>(len)), tb = ta;
              count_mismatches += flip_bits(std::span<std::uint16_t>(ta), f, se, vec) !=
                                  flip_bits(std::span<std::uint16_t>(tb), f, se, sca);
              for (std::size_t i = 0; i < len; ++i) mismatches += ta[i] != tb[i];
              compared += len;
            }
        }
    std::printf(
        "soft errors %s vs scalar: %llu codes compared (fp16, fraction/any, 6 p, 4 index offsets, lengths "
        "100003 and 0..17), %llu scalar hits, %llu code mismatches, %llu count mismatches\n",
        std::string(to_string(path)).c_str(), (unsigned long long)compared, (unsigned long long)hits,
        (unsigned long long)mismatches, (unsigned long long)count_mismatches);
    CHECK(hits > 0);
    CHECK(mismatches == 0);
    CHECK(count_mismatches == 0);
  }
}

TEST_CASE("soft errors: hit share and bit positions match their binomial expectations", "[soft_error]") {
  // 10^6 elements at p = 0.1: hits ~ Binomial(n, p); within a hit, each of the m fraction bits ~
  // Binomial(hits, 1/m). Every count within 5 standard deviations of its mean (a false alarm about once
  // in 1.7 million per count).
  constexpr std::size_t kN = 1000000;
  constexpr double kP = 0.1;
  const std::vector<float> x(kN, 1.0f);
  for (const char* name : {"fp16", "bf16", "fp8_e4m3"}) {
    const Format f = parse_format(name);
    std::vector<std::uint16_t> c16;
    std::vector<std::uint8_t> c8;
    std::vector<std::uint64_t> per_bit(static_cast<std::size_t>(f.man_bits), 0);
    std::uint64_t hits = 0;
    const SoftErrors se{kP, 99};
    auto tally = [&](auto& codes) {
      using Code = typename std::remove_reference_t<decltype(codes)>::value_type;
      codes.resize(kN);
      round_array(std::span<const float>(x), std::span<Code>(codes), f);
      const Code one = codes[0];
      hits = flip_bits(std::span<Code>(codes), f, se);
      for (const Code c : codes)
        if (c != one) ++per_bit[static_cast<std::size_t>(std::countr_zero(static_cast<Code>(c ^ one)))];
    };
    if (f.storage_bytes() == 1) tally(c8);
    else tally(c16);
    const double hit_sigma = std::sqrt(kN * kP * (1 - kP));
    const double hit_z = (static_cast<double>(hits) - kN * kP) / hit_sigma;
    const double q = 1.0 / f.man_bits;
    const double bit_sigma = std::sqrt(static_cast<double>(hits) * q * (1 - q));
    double worst_bit_z = 0;
    std::uint64_t total = 0;
    for (const std::uint64_t c : per_bit) {
      total += c;
      worst_bit_z = std::max(worst_bit_z, std::fabs((static_cast<double>(c) - hits * q) / bit_sigma));
    }
    std::printf("soft errors %s: %zu elements at p=%g: %llu hit (z = %.2f); %d bit positions, worst |z| = %.2f\n", name,
                kN, kP, (unsigned long long)hits, hit_z, f.man_bits, worst_bit_z);
    CHECK(std::fabs(hit_z) < 5);
    CHECK(worst_bit_z < 5);
    CHECK(total == hits);
  }
}

TEST_CASE("soft errors: the same flips whatever the thread count and the split into pieces", "[soft_error]") {
  // 3 * 2^16 elements: enough for the engine to run two threads (bulk.cpp kMinPerThread = 2^16 per thread).
  const std::vector<float> x = sample_inputs(3 << 16, 5);
  const Format f = fp16();
  const SoftErrors se{0.3, 7};
  BulkOptions one, two;
  one.threads = 1;
  two.threads = 2;
  const Encoded<std::uint16_t> a = encode_with_flips<std::uint16_t>(x, f, se, one);
  const Encoded<std::uint16_t> b = encode_with_flips<std::uint16_t>(x, f, se, two);
  // Pieces of 1000 elements, each with index0 = its offset, as the command line streams its chunks.
  std::vector<std::uint16_t> pieces = a.plain;
  std::uint64_t piece_hits = 0;
  for (std::size_t off = 0; off < pieces.size(); off += 1000) {
    BulkOptions opt;
    opt.index0 = off;
    const std::size_t len = std::min<std::size_t>(1000, pieces.size() - off);
    piece_hits += flip_bits(std::span<std::uint16_t>(pieces).subspan(off, len), f, se, opt);
  }
  std::printf("soft errors fp16 p=0.3: %zu elements, %llu hits; threads 2 vs 1: %s; pieces of 1000 vs whole: %s\n",
              x.size(), (unsigned long long)a.hits, a.flipped == b.flipped ? "same" : "DIFFERENT",
              pieces == a.flipped ? "same" : "DIFFERENT");
  CHECK(a.hits > 0);
  CHECK(a.flipped == b.flipped);
  CHECK(a.hits == b.hits);
  bool same_values = a.values.size() == b.values.size();
  for (std::size_t i = 0; same_values && i < a.values.size(); ++i)
    same_values = std::bit_cast<std::uint32_t>(a.values[i]) == std::bit_cast<std::uint32_t>(b.values[i]);
  CHECK(same_values);
  CHECK(pieces == a.flipped);
  CHECK(piece_hits == a.hits);
}

TEST_CASE("soft errors: a probability outside [0, 1] or not a number is an OptionError naming flip", "[soft_error]") {
  for (const double p :
       {-0.1, 1.5, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    try {
      (void)soft_errors_with_options(p, 0);
      FAIL("accepted " << p);
    } catch (const OptionError& e) {
      CHECK(e.key == OptionKey::flip);
      CHECK_THAT(std::string(e.what()), Catch::Contains("flip"));
    }
  }
  for (const char* text : {"abc", "", "0.5x", "-1", "2", "nan"}) {
    try {
      (void)soft_errors_with_options(std::string_view(text), 0);
      FAIL("accepted '" << text << "'");
    } catch (const OptionError& e) {
      CHECK(e.key == OptionKey::flip);
      CHECK(e.value == text);
    }
  }
  CHECK(soft_errors_with_options(std::string_view("0.25"), 3).p == 0.25);
  CHECK(soft_errors_with_options(std::string_view("1"), 3).p == 1.0);
  CHECK(soft_errors_with_options(0.5, 3, "any").bits == SoftErrorBits::any);
  try {
    (void)soft_errors_with_options(0.5, 3, "sign");
    FAIL("accepted flip bits 'sign'");
  } catch (const OptionError& e) {
    CHECK(e.key == OptionKey::flip_bits);
    CHECK(e.value == "sign");
  }
  // A format without fraction bits has no fraction bit to flip; any of its 8 bits can.
  std::vector<std::uint8_t> codes(4, 0);
  CHECK_THROWS_AS(flip_bits(std::span<std::uint8_t>(codes), float8_e8m0fnu(), SoftErrors{0.5, 0}), Error);
  CHECK(flip_bits(std::span<std::uint8_t>(codes), float8_e8m0fnu(), SoftErrors{1, 0, SoftErrorBits::any}) == 4);
}
